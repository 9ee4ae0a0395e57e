//! What module calls pass and what modules give back, and references to
//! a module call's outputs.

use std::collections::BTreeSet;

use super::{
    At, check_each, check_expressions, check_index, diag, input_outside_module, not_for_each,
    unknown_step, unknown_var,
};
use crate::diag::{Diag, Diagnostics, Span};
use crate::lang::ast::{Node, RefTarget, Workflow, base_name};
use flow_providers::suggest::closest;

/// What module calls pass and what modules give back, checked as a step's
/// inputs are: every expression against the functions' signatures, and in
/// a call the workflow makes, every reference against its variables, steps
/// and module calls (a module's own references were checked when it was
/// expanded).
pub(super) fn check_module_values(
    wf: &Workflow,
    step_names: &BTreeSet<&str>,
    var_names: &[&str],
    diags: &mut Diagnostics,
) {
    for frame in wf.call_frames() {
        let at = At {
            wf,
            src: &frame.call_source,
            frame: frame.parent.as_deref(),
        };
        for entry in &frame.inputs {
            check_expressions(at, &entry.value, diags);
            check_each(at, false, &entry.value, diags);
            if frame.parent.is_none() {
                check_call_refs(at, &entry.value, step_names, var_names, diags);
            }
        }
    }
    for outputs in wf.module_outputs.values() {
        for (entry, source) in &outputs.entries {
            let at = At {
                wf,
                src: source,
                frame: Some(&outputs.frame),
            };
            check_expressions(at, &entry.value, diags);
            check_each(at, false, &entry.value, diags);
        }
    }
}

/// The references in a value that the workflow passes to a module call:
/// its variables, steps and other calls' outputs.
fn check_call_refs(
    at: At,
    node: &Node,
    step_names: &BTreeSet<&str>,
    var_names: &[&str],
    diags: &mut Diagnostics,
) {
    for r in node.refs() {
        match &r.target {
            RefTarget::Var(v) if !var_names.contains(&v.as_str()) => {
                diags.push(unknown_var(at, v, r.span.clone(), var_names));
            }
            RefTarget::Output { step, .. } if !step_names.contains(base_name(step)) => {
                diags.push(unknown_step(
                    at,
                    base_name(step),
                    r.span.clone(),
                    step_names,
                ));
            }
            RefTarget::Output { .. } if r.index.is_some() => check_index(at, r, diags),
            RefTarget::Output { step, .. }
                if r.all && at.wf.step(step).is_none_or(|s| s.for_each.is_none()) =>
            {
                let target = format!("{step}[*]");
                diags.push(not_for_each(at, step, &target, r.span.clone()));
            }
            RefTarget::ModuleOutput { module, key } => {
                if let Some(d) = check_module_output(at, module, key, &r.span) {
                    diags.push(d);
                }
            }
            RefTarget::Input(name) => diags.push(input_outside_module(at, name, r.span.clone())),
            _ => {}
        }
    }
}

/// `modules.MODULE.outputs.KEY` against the modules the workflow calls.
pub(super) fn check_module_output(at: At, module: &str, key: &str, span: &Span) -> Option<Diag> {
    let Some(outputs) = at.wf.module_outputs.get(module) else {
        let calls = at.wf.module_outputs.keys().map(String::as_str);
        let d = diag(
            at,
            "flow::unknown-module",
            format!("there is no module `{module}`"),
            span.clone(),
            "no module call of that name",
        );
        return Some(match closest(module, calls) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => d.help("call it with [modules.NAME] source = \"FOLDER\""),
        });
    };
    if outputs.get(key).is_some() {
        return None;
    }
    let keys: Vec<&str> = outputs.keys().collect();
    let d = diag(
        at,
        "flow::unknown-output",
        format!("module `{module}` has no output `{key}`"),
        span.clone(),
        "no such output",
    );
    Some(match closest(key, keys.iter().copied()) {
        Some(s) => d.help(format!(
            "did you mean `{s}`? Its outputs are: {}",
            keys.join(", ")
        )),
        None if keys.is_empty() => d.help("the module declares no [outputs]"),
        None => d.help(format!(
            "its outputs are: {}; declare more under [outputs] in the module",
            keys.join(", ")
        )),
    })
}
