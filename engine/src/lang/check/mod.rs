//! Static checks of a parsed workflow: references, providers, inputs, types
//! and cycles. Needs no variable values and no state. This module walks the
//! steps and holds what the checks share (where a problem is, expressions,
//! `each`); `refs` checks references, `modules` what module calls pass and
//! give back, `inputs` inputs against provider schemas, `lifecycle` a
//! step's lifecycle against its provider, `cycle` cycles, `outputs`
//! references to outputs a step's provider says it will not have.

mod cycle;
mod inputs;
mod lifecycle;
mod modules;
mod outputs;
mod refs;

pub use cycle::find_cycle;
pub use outputs::check_output_keys;

use std::collections::BTreeSet;

use super::ast::{Node, RefTarget, StepDecl, VarType, Workflow};
use super::expr::types::{self, Ty};
use crate::diag::{Diag, Diagnostics, Source, Span};
use flow_providers::suggest::closest;

/// One dependency edge and the place that creates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The step that must come first.
    pub from: String,
    /// The step that depends on it.
    pub to: String,
    /// The reference or `depends_on` entry.
    pub span: Span,
}

/// Every static problem in `wf`, plus the dependency edges found (for the DAG).
pub fn check_workflow(wf: &Workflow) -> (Vec<Edge>, Diagnostics) {
    let mut diags = Diagnostics::default();
    let step_names: BTreeSet<&str> = wf.steps.iter().map(|s| s.name.as_str()).collect();
    let var_names: Vec<&str> = wf.vars.iter().map(|v| v.name.as_str()).collect();
    let mut edges = Vec::new();
    for step in &wf.steps {
        let at = At::step(wf, step);
        refs::check_step_refs(wf, step, &step_names, &var_names, &mut edges, &mut diags);
        inputs::check_inputs(wf, step, &mut diags);
        lifecycle::check_lifecycle(wf, step, &mut diags);
        let written = step.inputs.iter().map(|i| &i.value);
        for node in written.chain(&step.region_node).chain(&step.import_node) {
            check_expressions(at, node, &mut diags);
            check_each(at, step.for_each.is_some(), node, &mut diags);
        }
        if let Some(node) = &step.for_each {
            check_expressions(at, node, &mut diags);
            check_each(at, false, node, &mut diags);
            inputs::check_for_each_type(at, node, &mut diags);
        }
    }
    if let Some(node) = &wf.region_node {
        check_expressions(At::workflow(wf), node, &mut diags);
        check_each(At::workflow(wf), false, node, &mut diags);
    }
    modules::check_module_values(wf, &step_names, &var_names, &mut diags);
    edges.sort_by(|a, b| (&a.to, &a.from).cmp(&(&b.to, &b.from)));
    edges.dedup_by(|a, b| a.from == b.from && a.to == b.to);
    if let Some(cycle) = find_cycle(wf, &edges) {
        diags.push(cycle);
    }
    (edges, diags)
}

/// The workflow, and the file the problems being checked are in (a
/// module's for a module's step).
#[derive(Clone, Copy)]
struct At<'a> {
    wf: &'a Workflow,
    src: &'a Source,
    /// The module call, for a module's step.
    frame: Option<&'a super::ast::ModuleFrame>,
}

impl<'a> At<'a> {
    fn step(wf: &'a Workflow, step: &'a StepDecl) -> Self {
        At {
            wf,
            src: wf.source_of(step),
            frame: step.module.as_deref(),
        }
    }

    fn workflow(wf: &'a Workflow) -> Self {
        At {
            wf,
            src: &wf.source,
            frame: None,
        }
    }
}

fn diag(at: At, code: &'static str, msg: String, span: Span, label: &str) -> Diag {
    let d = Diag::new(code, msg).in_source(at.src).label(span, label);
    match at.frame {
        Some(frame) => super::modules::called_here(d, frame),
        None => d,
    }
}

/// `vars.NAME` where the workflow declares no `NAME`.
fn unknown_var(at: At, name: &str, span: Span, var_names: &[&str]) -> Diag {
    let d = diag(
        at,
        "flow::unknown-var",
        format!("unknown variable `{name}`"),
        span,
        "not declared",
    );
    match closest(name, var_names.iter().copied()) {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None => d.help(format!("declare it with [vars.{name}]")),
    }
}

/// `steps.NAME` where the workflow has no step `NAME`.
fn unknown_step(at: At, base: &str, span: Span, step_names: &BTreeSet<&str>) -> Diag {
    let d = diag(
        at,
        "flow::unknown-step",
        format!("unknown step `{base}`"),
        span,
        "no step of that name",
    );
    match closest(base, step_names.iter().copied()) {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None => d.help("declare it as [steps.NAME] or fix the name"),
    }
}

/// An instance (`target`: `vpc["a"]`, `vpc[…]`, `vpc[*]`) of a step
/// without `for_each`.
fn not_for_each(at: At, base: &str, target: &str, span: Span) -> Diag {
    diag(
        at,
        "flow::not-for-each",
        format!("step `{base}` has no `for_each`, so it has no instance `{target}`"),
        span,
        "no instances",
    )
    .help(format!("write steps.{base}.outputs.KEY"))
}

/// `inputs.NAME` outside a module.
fn input_outside_module(at: At, name: &str, span: Span) -> Diag {
    diag(
        at,
        "flow::bad-reference",
        format!("`inputs.{name}` is only known inside a module"),
        span,
        "not in a module",
    )
    .help("a workflow's own values are variables: `vars.NAME`")
}

/// The type of a declared variable, for the checks of expressions.
fn var_ty(wf: &Workflow, name: &str) -> Option<Ty> {
    let var = wf.var(name).filter(|v| !v.broken)?;
    Some(match var.ty {
        VarType::String => Ty::String,
        VarType::Integer | VarType::Number => Ty::Number,
        VarType::Bool => Ty::Bool,
        VarType::List => Ty::List,
        VarType::Table => Ty::Table,
        VarType::Any => Ty::Any,
    })
}

/// Every expression in `node` against the functions' signatures and the
/// operators' operand types.
fn check_expressions(at: At, node: &Node, diags: &mut Diagnostics) {
    let var_type = |name: &str| var_ty(at.wf, name);
    for expr in node.exprs() {
        let mut problems = Vec::new();
        types::check(expr, &var_type, &mut problems);
        for p in problems {
            diags.push(diag(at, "flow::bad-expression", p.message, p.span, "here").help(p.help));
        }
    }
}

/// An instance key written as an expression is worked out before any step
/// runs: it may use variables and `each`, not step outputs.
fn check_index(at: At, r: &super::ast::Reference, diags: &mut Diagnostics) {
    let Some(index) = &r.index else { return };
    let mut inner = Vec::new();
    index.refs(&mut inner);
    for used in inner {
        if let RefTarget::Output { .. } = used.target {
            diags.push(
                diag(at,
                    "flow::reference-not-allowed",
                    "an instance's key cannot use step outputs".into(),
                    used.span.clone(),
                    "a step output",
                )
                .help("the key is needed to plan, before any step runs: use a variable, `each.key` or a literal"),
            );
        }
    }
}

/// `each.key` and `each.value` where there is no `each`: outside a step
/// with `for_each`, or inside the `for_each` itself.
fn check_each(at: At, allowed: bool, node: &Node, diags: &mut Diagnostics) {
    if allowed {
        return;
    }
    for r in node.refs() {
        if let RefTarget::Each(_) = r.target {
            diags.push(
                diag(
                    at,
                    "flow::each-outside-for-each",
                    format!("`{}` is only known inside a step with `for_each`", r.target),
                    r.span.clone(),
                    "no `each` here",
                )
                .help("add `for_each = …` to the step, or use a variable"),
            );
        }
    }
}
