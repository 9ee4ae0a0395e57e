//! A step's `lifecycle` against what its provider can do: a replacement
//! made before the old object is deleted needs a provider that can make it
//! under another name while the old one exists.

use super::{At, diag};
use crate::diag::Diagnostics;
use crate::lang::ast::{ProviderKind, StepDecl, Workflow};

/// `create_before_destroy = true` on a step whose provider cannot name a
/// replacement.
pub(super) fn check_lifecycle(wf: &Workflow, step: &StepDecl, diags: &mut Diagnostics) {
    let (Some((true, span)), Some(ProviderKind(provider))) =
        (&step.create_before_destroy, &step.kind)
    else {
        return;
    };
    if provider.replacement_name().is_some() {
        return;
    }
    diags.push(
        diag(
            At::step(wf, step),
            "flow::create-before-destroy",
            format!(
                "step `{}` asks for create_before_destroy, but `{}` cannot make a replacement under another name while the old object exists",
                step.name, step.provider
            ),
            span.clone(),
            "not possible for this provider",
        )
        .help(format!(
            "remove `create_before_destroy` from [steps.{}.lifecycle]: a replacement then deletes the old object first",
            step.name
        )),
    );
}
