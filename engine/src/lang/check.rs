//! Static checks of a parsed workflow: references, providers, inputs, types
//! and cycles. Needs no variable values and no state.

use std::collections::{BTreeMap, BTreeSet};

use flow_providers::InputType;

use super::ast::{Node, NodeKind, ProviderKind, RefTarget, StepDecl, VarType, Workflow, base_name};
use super::expr::types::{self, Ty};
use super::modules::outputs_read;
use super::parse::var_type_phrase;
use super::toml_nodes::type_name;
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
        check_step_refs(wf, step, &step_names, &var_names, &mut edges, &mut diags);
        check_inputs(wf, step, &mut diags);
        let written = step.inputs.iter().map(|i| &i.value);
        for node in written.chain(&step.region_node).chain(&step.import_node) {
            check_expressions(at, node, &mut diags);
            check_each(at, step.for_each.is_some(), node, &mut diags);
        }
        if let Some(node) = &step.for_each {
            check_expressions(at, node, &mut diags);
            check_each(at, false, node, &mut diags);
            check_for_each_type(at, node, &mut diags);
        }
    }
    if let Some(node) = &wf.region_node {
        check_expressions(At::workflow(wf), node, &mut diags);
        check_each(At::workflow(wf), false, node, &mut diags);
    }
    check_module_values(wf, &step_names, &var_names, &mut diags);
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

fn check_step_refs(
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

/// What module calls pass and what modules give back, checked as a step's
/// inputs are: every expression against the functions' signatures, and in
/// a call the workflow makes, every reference against its variables, steps
/// and module calls (a module's own references were checked when it was
/// expanded).
fn check_module_values(
    wf: &Workflow,
    step_names: &BTreeSet<&str>,
    var_names: &[&str],
    diags: &mut Diagnostics,
) {
    let mut frames: Vec<&super::ast::ModuleFrame> = Vec::new();
    let mut seen = BTreeSet::new();
    let calls = wf
        .steps
        .iter()
        .filter_map(|s| s.module.as_deref())
        .chain(wf.module_outputs.values().map(|o| &*o.frame));
    for frame in calls {
        let mut next = Some(frame);
        while let Some(f) = next {
            if seen.insert(f.address.as_str()) {
                frames.push(f);
            }
            next = f.parent.as_deref();
        }
    }
    for frame in frames {
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
                let d = diag(
                    at,
                    "flow::unknown-var",
                    format!("unknown variable `{v}`"),
                    r.span.clone(),
                    "not declared",
                );
                diags.push(match closest(v, var_names.iter().copied()) {
                    Some(s) => d.help(format!("did you mean `{s}`?")),
                    None => d.help(format!("declare it with [vars.{v}]")),
                });
            }
            RefTarget::Output { step, .. } if !step_names.contains(base_name(step)) => {
                let d = diag(
                    at,
                    "flow::unknown-step",
                    format!("unknown step `{}`", base_name(step)),
                    r.span.clone(),
                    "no step of that name",
                );
                diags.push(match closest(base_name(step), step_names.iter().copied()) {
                    Some(s) => d.help(format!("did you mean `{s}`?")),
                    None => d.help("declare it as [steps.NAME] or fix the name"),
                });
            }
            RefTarget::Output { .. } if r.index.is_some() => check_index(at, r, diags),
            RefTarget::ModuleOutput { module, key } => {
                if let Some(d) = check_module_output(at, module, key, &r.span) {
                    diags.push(d);
                }
            }
            RefTarget::Input(name) => diags.push(
                diag(
                    at,
                    "flow::bad-reference",
                    format!("`inputs.{name}` is only known inside a module"),
                    r.span.clone(),
                    "not in a module",
                )
                .help("a workflow's own values are variables: `vars.NAME`"),
            ),
            _ => {}
        }
    }
}

/// `modules.MODULE.outputs.KEY` against the modules the workflow calls.
fn check_module_output(at: At, module: &str, key: &str, span: &Span) -> Option<Diag> {
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

/// A `for_each` that is certainly not a list or a table.
fn check_for_each_type(at: At, node: &Node, diags: &mut Diagnostics) {
    let found = match &node.kind {
        NodeKind::Array(_) | NodeKind::Table(_) => return,
        NodeKind::Str(t) => match t.single_expr() {
            Some(e) => types::check(e, &|name| var_ty(at.wf, name), &mut Vec::new()),
            None => Ty::String,
        },
        NodeKind::Int(_) | NodeKind::Float(_) => Ty::Number,
        NodeKind::Bool(_) => Ty::Bool,
        NodeKind::Datetime(_) => Ty::String,
    };
    if !found.fits(&[Ty::List, Ty::Table]) {
        diags.push(
            diag(
                at,
                "flow::bad-for-each",
                format!(
                    "`for_each` must be a list or a table, found {}",
                    found.phrase()
                ),
                node.span.clone(),
                "not a collection",
            )
            .help("write a list (for_each = [2, 4, 8]), a table, or a variable that holds one"),
        );
    }
}

/// Whether a value of type `t` can be given where `ty` is wanted (after
/// the coercions inputs make: numbers and booleans become text).
fn ty_fits(t: Ty, ty: &InputType) -> bool {
    matches!(
        (t, ty),
        (Ty::Any, _)
            | (_, InputType::Any)
            | (
                Ty::String,
                InputType::String | InputType::LocalFile | InputType::Duration
            )
            | (
                Ty::Number,
                InputType::Integer | InputType::Number | InputType::String
            )
            | (Ty::Bool, InputType::Bool | InputType::String)
            | (Ty::List, InputType::List(_))
            | (Ty::Table, InputType::Map(_))
    )
}

/// Each input against the step's provider schema: known names, types.
/// A step whose provider is unknown was reported by `resolve_providers`.
fn check_inputs(wf: &Workflow, step: &StepDecl, diags: &mut Diagnostics) {
    let at = At::step(wf, step);
    let Some(ProviderKind(provider)) = &step.kind else {
        return;
    };
    let schema = provider.schema();
    for input in &step.inputs {
        match schema.input(&input.key) {
            Some(spec) => check_type(
                at,
                &input.value,
                &spec.ty,
                &format!("`{}`", input.key),
                diags,
            ),
            None if schema.open_inputs => {}
            None => {
                let known: Vec<&str> = schema.inputs.iter().map(|i| i.name).collect();
                let help = match closest(&input.key, known.iter().copied()) {
                    Some(s) => format!(
                        "did you mean `{s}`? `{}` accepts: {}",
                        step.provider,
                        known.join(", ")
                    ),
                    None => format!("`{}` accepts: {}", step.provider, known.join(", ")),
                };
                diags.push(
                    diag(
                        at,
                        "flow::unknown-input",
                        format!("`{}` has no input `{}`", step.provider, input.key),
                        input.key_span.clone(),
                        "unknown input",
                    )
                    .help(help),
                );
            }
        }
    }
    if step.broken {
        return;
    }
    for spec in schema.inputs.iter().filter(|s| s.required) {
        if !step.inputs.iter().any(|i| i.key == spec.name) {
            diags.push(
                diag(
                    at,
                    "flow::missing-input",
                    format!(
                        "step `{}` is missing the required input `{}`",
                        step.name, spec.name
                    ),
                    step.inputs_span.clone(),
                    &format!("`{}` needs `{}`", step.provider, spec.name),
                )
                .help(format!(
                    "add `{} = ...` ({}: {}) under [steps.{}.inputs]",
                    spec.name,
                    spec.ty.describe(),
                    spec.description,
                    step.name
                )),
            );
        }
    }
}

/// Check a written value against an input type. References are checked where
/// their type is known (a whole-value variable reference with a declared type).
fn check_type(at: At, node: &Node, ty: &InputType, what: &str, diags: &mut Diagnostics) {
    let mismatch = |found: &str| {
        diag(
            at,
            "flow::wrong-type",
            format!("{what} must be {}, found {found}", ty.describe()),
            node.span.clone(),
            &format!("expected {}", ty.describe()),
        )
    };
    match (&node.kind, ty) {
        (_, InputType::Any) => {}
        (NodeKind::Str(t), _) => {
            if let Some(r) = t.single_ref() {
                if let RefTarget::Var(v) = &r.target
                    && let Some(var) = at.wf.var(v)
                    && !var_fits(var.ty, ty)
                {
                    diags.push(
                        mismatch(&format!("variable `{v}` of type {}", var.ty.name())).help(
                            format!(
                                "declare `{v}` as {} or pass a different value",
                                var_type_phrase_for(ty)
                            ),
                        ),
                    );
                }
                return;
            }
            if let Some(e) = t.single_expr() {
                let found = types::check(e, &|name| var_ty(at.wf, name), &mut Vec::new());
                if !ty_fits(found, ty) {
                    diags.push(mismatch(found.phrase()).help(
                        "the expression's value has the wrong type for this input".to_string(),
                    ));
                }
                return;
            }
            if !matches!(
                ty,
                InputType::String | InputType::LocalFile | InputType::Duration
            ) {
                diags.push(mismatch("a string"));
            }
        }
        (NodeKind::Array(items), InputType::List(inner)) => {
            for item in items {
                check_type(at, item, inner, &format!("each item of {what}"), diags);
            }
        }
        (NodeKind::Table(entries), InputType::Map(inner)) => {
            for e in entries {
                check_type(
                    at,
                    &e.value,
                    inner,
                    &format!("`{}` in {what}", e.key),
                    diags,
                );
            }
        }
        (NodeKind::Int(_), InputType::Integer | InputType::Number) => {}
        (NodeKind::Float(_), InputType::Number) => {}
        (NodeKind::Bool(_), InputType::Bool) => {}
        _ => diags.push(mismatch(type_name(node))),
    }
}

fn var_fits(var: super::ast::VarType, ty: &InputType) -> bool {
    use super::ast::VarType as V;
    matches!(
        (var, ty),
        (V::Any, _)
            | (_, InputType::Any)
            // Numbers and booleans referenced inside a quoted string are text.
            | (
                V::String | V::Integer | V::Number | V::Bool,
                InputType::String | InputType::LocalFile | InputType::Duration
            )
            | (V::Integer, InputType::Integer | InputType::Number)
            | (V::Number, InputType::Number)
            | (V::Bool, InputType::Bool)
            | (V::List, InputType::List(_))
            | (V::Table, InputType::Map(_))
    )
}

fn var_type_phrase_for(ty: &InputType) -> &'static str {
    use super::ast::VarType as V;
    var_type_phrase(match ty {
        InputType::Integer => V::Integer,
        InputType::Number => V::Number,
        InputType::Bool => V::Bool,
        InputType::List(_) => V::List,
        InputType::Map(_) => V::Table,
        InputType::Any => V::Any,
        _ => V::String,
    })
}

/// The first dependency cycle, naming every step on it in order.
pub fn find_cycle(wf: &Workflow, edges: &[Edge]) -> Option<Diag> {
    let mut succ: BTreeMap<&str, Vec<&Edge>> = BTreeMap::new();
    for e in edges {
        succ.entry(e.from.as_str()).or_default().push(e);
    }
    // Iterative DFS with colours; the stack of edges gives the cycle's path.
    let mut colour: BTreeMap<&str, u8> = BTreeMap::new();
    for start in wf.steps.iter().map(|s| s.name.as_str()) {
        if colour.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<&Edge> = Vec::new();
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        colour.insert(start, 1);
        while let Some((node, idx)) = stack.last().cloned() {
            let next = succ.get(node).and_then(|v| v.get(idx)).copied();
            stack.last_mut().expect("non-empty").1 += 1;
            match next {
                None => {
                    colour.insert(node, 2);
                    stack.pop();
                    path.pop();
                }
                Some(edge) => match colour.get(edge.to.as_str()).copied().unwrap_or(0) {
                    0 => {
                        colour.insert(edge.to.as_str(), 1);
                        path.push(edge);
                        stack.push((edge.to.as_str(), 0));
                    }
                    1 => {
                        path.push(edge);
                        let begin = path.iter().position(|e| e.from == edge.to).unwrap_or(0);
                        return Some(cycle_diag(wf, &path[begin..]));
                    }
                    _ => {}
                },
            }
        }
    }
    None
}

fn cycle_diag(wf: &Workflow, cycle: &[&Edge]) -> Diag {
    // Edges run from a dependency to its dependent; people read a cycle as
    // "a needs b needs c needs a", so walk it backwards.
    let mut names: Vec<&str> = cycle.iter().rev().map(|e| e.to.as_str()).collect();
    names.push(names[0]);
    // Each edge's span is in the file of the step that needs: a module's
    // for its steps. The first edge's file carries the diagnostic; edges in
    // other files are shown there too.
    let source_of = |e: &Edge| match wf.step(&e.to) {
        Some(step) => wf.source_of(step),
        None => &wf.source,
    };
    let main = source_of(cycle[cycle.len() - 1]);
    let mut d = Diag::new(
        "flow::cycle",
        format!("dependency cycle: {}", names.join(" → ")),
    )
    .in_source(main);
    for e in cycle.iter().rev() {
        let text = format!("`{}` needs `{}`", e.to, e.from);
        let source = source_of(e);
        d = if source.name == main.name {
            d.label(e.span.clone(), text)
        } else {
            d.see_also(source, e.span.clone(), text)
        };
    }
    d.help("break the cycle by removing one of these references or dependencies")
}
