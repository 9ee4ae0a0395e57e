//! References to outputs a step cannot have: `steps.vpc.outputs.VpcId`
//! where the step's provider knows its outputs from its inputs before apply
//! (a CloudFormation template's `Outputs`, `DeclaredOutputs`). Refused at
//! validate, where the reference is written, with the nearest key; a key
//! that may be absent (under a template `Condition`) is accepted.

use std::collections::BTreeMap;

use flow_providers::DeclaredOutputs;
use flow_providers::suggest::closest;

use super::{At, diag};
use crate::diag::Diagnostics;
use crate::lang::ast::{RefTarget, Workflow};

/// A problem for each reference, in any step's inputs, to a key outside
/// what `declared` (by step address) says that step will output.
pub fn check_output_keys(
    wf: &Workflow,
    declared: &BTreeMap<String, DeclaredOutputs>,
) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for step in &wf.steps {
        let at = At::step(wf, step);
        for input in &step.inputs {
            for r in input.value.refs() {
                let RefTarget::Output { step: target, key } = &r.target else {
                    continue;
                };
                if r.all || r.index.is_some() {
                    continue;
                }
                let Some(outputs) = declared.get(target) else {
                    continue;
                };
                // Providers name nested outputs with dots (`Subnet.Id`).
                let head = key.split('.').next().unwrap_or(key);
                if outputs.keys.iter().any(|k| k == head) {
                    continue;
                }
                let keys = outputs.keys.iter().map(String::as_str);
                let listed = outputs.keys.join(", ");
                let help = match closest(head, keys) {
                    Some(near) => format!(
                        "did you mean `{near}`? step `{target}` outputs {listed} ({})",
                        outputs.source
                    ),
                    None => format!("step `{target}` outputs {listed} ({})", outputs.source),
                };
                diags.push(
                    diag(
                        at,
                        "flow::unknown-output",
                        format!("step `{target}` has no output `{key}`"),
                        r.span.clone(),
                        "not among its outputs",
                    )
                    .help(help),
                );
            }
        }
    }
    diags
}
