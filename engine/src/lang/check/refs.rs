//! References of a step: to steps (and their instances), variables, module
//! inputs and outputs; each one a dependency edge or a problem.

use std::collections::BTreeSet;

use super::modules::check_module_output;
use super::{
    At, Edge, check_index, diag, input_outside_module, not_for_each, unknown_step, unknown_var,
};
use crate::diag::{Diagnostics, Span};
use crate::lang::ast::{RefTarget, StepDecl, Workflow, base_name};
use crate::lang::modules::outputs_read;

pub(super) fn check_step_refs(
    wf: &Workflow,
    step: &StepDecl,
    step_names: &BTreeSet<&str>,
    var_names: &[&str],
    edges: &mut Vec<Edge>,
    diags: &mut Diagnostics,
) {
    let at = At::step(wf, step);
    let for_each = |name: &str| wf.step(name).is_some_and(|s| s.for_each.is_some());
    let mut depend = |target: &str, span: &Span, diags: &mut Diagnostics, via: &str| {
        let base = base_name(target);
        let indexed = base != target;
        if base == step.name {
            diags.push(
                diag(
                    at,
                    "flow::self-dependency",
                    format!("step `{}` depends on itself", step.name),
                    span.clone(),
                    &format!("{via} of `{}` itself", step.name),
                )
                .help("a step cannot use its own outputs or wait for itself; remove this"),
            );
        } else if !step_names.contains(base) {
            if step.module.is_some() {
                // A module's step naming no step of its module: reported
                // where the module was expanded.
                return;
            }
            diags.push(unknown_step(at, base, span.clone(), step_names));
        } else if indexed && !for_each(base) {
            diags.push(not_for_each(at, base, target, span.clone()));
        } else if !indexed && via == "an output" && for_each(base) {
            diags.push(
                diag(at,
                    "flow::instance-needed",
                    format!("step `{base}` has one instance per key of its `for_each`; name one"),
                    span.clone(),
                    "which instance?",
                )
                .help(format!(
                    "write steps.{base}[\"KEY\"].outputs.NAME; `depends_on = [\"{base}\"]` waits for all of them"
                )),
            );
        } else {
            edges.push(Edge {
                from: base.to_string(),
                to: step.name.clone(),
                span: span.clone(),
            });
        }
    };
    for (dep, span) in &step.depends_on {
        depend(dep, span, diags, "a dependency");
    }
    for input in &step.inputs {
        for r in input.value.refs() {
            match &r.target {
                RefTarget::Output { step: s, .. } if r.index.is_some() => {
                    depend(&format!("{s}[…]"), &r.span, diags, "an output");
                    check_index(at, r, diags);
                }
                RefTarget::Output { step: s, .. } if r.all => {
                    depend(&format!("{s}[*]"), &r.span, diags, "every instance")
                }
                RefTarget::Output { step: s, .. } => depend(s, &r.span, diags, "an output"),
                // Only template files have bare names; `each` is checked by
                // `check_each`.
                RefTarget::Local(_) | RefTarget::Each(_) => {}
                RefTarget::Input(name) => match step.module.as_deref() {
                    // What the call passes may read other steps' outputs.
                    Some(frame) => {
                        let mut read = Vec::new();
                        outputs_read(wf, Some(frame), vec![r], &mut read, 0);
                        for (s, _) in read {
                            depend(s, &r.span, diags, "an input");
                        }
                    }
                    None => diags.push(input_outside_module(at, name, r.span.clone())),
                },
                RefTarget::ModuleOutput { module, key } => {
                    if let Some(d) = check_module_output(at, module, key, &r.span) {
                        diags.push(d);
                        continue;
                    }
                    let mut read = Vec::new();
                    outputs_read(wf, step.module.as_deref(), vec![r], &mut read, 0);
                    for (s, _) in read {
                        depend(s, &r.span, diags, "a module output");
                    }
                }
                // A module's steps cannot read variables (`modules` says so).
                RefTarget::Var(_) if step.module.is_some() => {}
                RefTarget::Var(v) => {
                    if !var_names.contains(&v.as_str()) {
                        diags.push(unknown_var(at, v, r.span.clone(), var_names));
                    }
                }
            }
        }
    }
}
