//! References of a step: to steps (and their instances), variables, module
//! inputs and outputs; each one a dependency edge or a problem.

use std::collections::BTreeSet;

use super::modules::check_module_output;
use super::{At, Edge, check_index, diag};
use crate::diag::{Diagnostics, Span};
use crate::lang::ast::{RefTarget, StepDecl, Workflow, base_name};
use crate::lang::modules::outputs_read;
use flow_providers::suggest::closest;

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
            let mut d = diag(
                at,
                "flow::unknown-step",
                format!("unknown step `{base}`"),
                span.clone(),
                "no step of that name",
            );
            d = match closest(base, step_names.iter().copied()) {
                Some(s) => d.help(format!("did you mean `{s}`?")),
                None => d.help("declare it as [steps.NAME] or fix the name"),
            };
            diags.push(d);
        } else if indexed && !for_each(base) {
            diags.push(
                diag(
                    at,
                    "flow::not-for-each",
                    format!("step `{base}` has no `for_each`, so it has no instance `{target}`"),
                    span.clone(),
                    "no instances",
                )
                .help(format!("write steps.{base}.outputs.KEY")),
            );
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
                    None => diags.push(
                        diag(
                            at,
                            "flow::bad-reference",
                            format!("`inputs.{name}` is only known inside a module"),
                            r.span.clone(),
                            "not in a module",
                        )
                        .help("a workflow's own values are variables: `vars.NAME`"),
                    ),
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
                        let mut d = diag(
                            at,
                            "flow::unknown-var",
                            format!("unknown variable `{v}`"),
                            r.span.clone(),
                            "not declared",
                        );
                        d = match closest(v, var_names.iter().copied()) {
                            Some(s) => d.help(format!("did you mean `{s}`?")),
                            None => d.help(format!("declare it with [vars.{v}]")),
                        };
                        diags.push(d);
                    }
                }
            }
        }
    }
}
