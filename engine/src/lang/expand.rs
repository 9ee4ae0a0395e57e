//! Expand each step with `for_each` into one instance per key, once the
//! variables are known: `nccl` with `for_each = [2, 8]` becomes `nccl["2"]`
//! and `nccl["8"]`, each with its own `each.key` and `each.value`. Then the
//! dependency edges between the instances.
//!
//! A `for_each` that reads step outputs not yet known (the step is still to
//! be created or changed) leaves its step unexpanded and *deferred*
//! ([`Workflow::deferred`]): the plan names it, and apply expands it in a
//! later round, once the steps it waits on have applied.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::ast::{Deferral, Instance, StepDecl, Workflow, base_name, instance_name};
use super::check::{Edge, find_cycle};
use super::expr::eval::{Taint, eval, key_text};
use super::expr::functions::text;
use super::modules::outputs_read;
use super::resolve::{Context, Lookup};
use super::var_values::VarValues;
use crate::diag::{Diag, Diagnostics, Span};
use flow_providers::suggest::closest;

/// The instances of each step that had `for_each`, by the step's name.
pub type Instances = BTreeMap<String, Vec<String>>;

/// Replace every step with `for_each` by its instances, in place and in
/// order, reading step outputs through `outputs` (what state holds of steps
/// the plan leaves alone). Returns the instances made, and every problem: a
/// `for_each` that is not a list or a table, a duplicate key, a list item
/// that cannot be a key, a secret. A `for_each` over outputs not known yet
/// is deferred, not a problem.
pub fn expand(
    wf: &mut Workflow,
    vars: &VarValues,
    outputs: &dyn Fn(&str, &str) -> Lookup,
) -> (Instances, Diagnostics) {
    let mut diags = Diagnostics::default();
    let mut instances = Instances::new();
    let indexed = |s: &StepDecl| {
        s.inputs
            .iter()
            .any(|i| i.value.refs().iter().any(|r| r.index.is_some()))
    };
    if wf.steps.iter().all(|s| s.for_each.is_none() && !indexed(s)) {
        return (instances, diags);
    }
    let snapshot = wf.clone();
    let cx = Context {
        wf: &snapshot,
        vars,
        outputs,
    };
    let mut deferred = std::collections::BTreeMap::new();
    let mut steps = Vec::with_capacity(wf.steps.len());
    for step in &wf.steps {
        let Some(node) = &step.for_each else {
            steps.push(step.clone());
            continue;
        };
        let source = wf.source_of(step);
        let problem = |msg: String, help: &str| {
            Diag::new("flow::bad-for-each", msg)
                .in_source(source)
                .label(node.span.clone(), "for_each")
                .help(help.to_string())
        };
        let evaluated = match cx.evaluate(step, node) {
            Ok(e) => e,
            Err(e) => {
                diags.push(e.to_diag(source));
                continue;
            }
        };
        if evaluated.sensitive {
            diags.push(problem(
                format!("the `for_each` of step `{}` uses a secret", step.name),
                "its keys become instance addresses, shown in plans, state and logs: use a value that is not sensitive",
            ));
            continue;
        }
        // The steps whose outputs make the keys come first, as any step
        // whose input reads them.
        let waits_on = outputs_waited_on(&snapshot, step, node);
        let mut step = step.clone();
        step.depends_on
            .extend(waits_on.iter().map(|w| (w.clone(), node.span.clone())));
        let Some(value) = evaluated.value else {
            deferred.insert(step.name.clone(), Deferral { waits_on });
            steps.push(step);
            continue;
        };
        let pairs = match keyed(value) {
            Ok(pairs) => pairs,
            Err((msg, help)) => {
                diags.push(problem(format!("step `{}`: {msg}", step.name), help));
                continue;
            }
        };
        let names = instances.entry(step.name.clone()).or_default();
        for (key, value) in pairs {
            let mut instance = step.clone();
            instance.name = instance_name(&step.name, &key);
            instance.for_each = None;
            instance.instance = Some(Instance {
                base: step.name.clone(),
                key,
                value,
            });
            names.push(instance.name.clone());
            steps.push(instance);
        }
    }
    for step in steps.iter_mut().filter(|s| !deferred.contains_key(&s.name)) {
        let source = wf.source_of(step).clone();
        resolve_instance_keys(step, &cx, &source, &mut diags);
    }
    wf.steps = steps;
    wf.deferred = deferred;
    wf.index_steps();
    check_call_instance_keys(wf, &cx, &mut diags);
    (instances, diags)
}

/// What the workflow's module calls pass may name an instance by a key
/// worked out when it is read (`steps.nccl[vars.n]`): a key the `for_each`
/// does not make is reported here, before anything runs.
fn check_call_instance_keys(wf: &Workflow, cx: &Context, diags: &mut Diagnostics) {
    for frame in wf.call_frames().into_iter().filter(|f| f.parent.is_none()) {
        for entry in &frame.inputs {
            for r in entry.value.refs() {
                let (Some(index), super::ast::RefTarget::Output { step, .. }) =
                    (&r.index, &r.target)
                else {
                    continue;
                };
                if wf.is_deferred(step) {
                    continue;
                }
                let mut taint = Taint::default();
                let key = cx.with_scope(None, None, |scope| eval(index, scope, &mut taint));
                // Other problems with the key are reported where it is read.
                let Ok(Some(key @ (Value::String(_) | Value::Number(_)))) = key else {
                    continue;
                };
                let address = instance_name(step, &text(&key));
                if wf.step(&address).is_some() {
                    continue;
                }
                let keys: Vec<&str> = addresses_of(wf, step)
                    .iter()
                    .filter_map(|s| s.instance.as_ref().map(|i| i.key.as_str()))
                    .collect();
                diags.push(
                    Diag::new(
                        "flow::unknown-instance",
                        format!("step `{step}` has no instance `{address}`"),
                    )
                    .in_source(&frame.call_source)
                    .label(r.span.clone(), "no such key")
                    .help(match keys.is_empty() {
                        true => "its `for_each` makes no instances".to_string(),
                        false => format!("its keys are: {}", keys.join(", ")),
                    }),
                );
            }
        }
    }
}

/// The steps whose outputs `node` (the `for_each` of `step`) reads, through
/// module inputs and outputs too, each once.
fn outputs_waited_on(wf: &Workflow, step: &StepDecl, node: &super::ast::Node) -> Vec<String> {
    let mut read = Vec::new();
    outputs_read(wf, step.module.as_deref(), node.refs(), &mut read, 0);
    let mut names: Vec<String> = read.into_iter().map(|(s, _)| s.to_string()).collect();
    names.sort();
    names.dedup();
    names
}

/// Put the instance's address into every reference of `step` whose key is
/// an expression (`steps.nccl[vars.n]`, `steps.nodes[each.key]`).
fn resolve_instance_keys(
    step: &mut StepDecl,
    cx: &Context,
    source: &crate::diag::Source,
    diags: &mut Diagnostics,
) {
    let frame = step.module.clone();
    let each = step.instance.clone();
    let each = each.as_ref().map(|i| (i.key.as_str(), &i.value));
    for input in &mut step.inputs {
        let mut refs = Vec::new();
        collect_indexed(&mut input.value, &mut refs);
        for r in refs {
            let index = r.index.take().expect("collected for its index");
            let mut taint = Taint::default();
            let result = cx.with_scope(frame.as_deref(), each, |scope| {
                eval(&index, scope, &mut taint)
            });
            let key = match result.map(|value| key_text(value, taint.sensitive)) {
                Ok(Ok(key)) => key,
                Ok(Err((message, help))) => {
                    diags.push(
                        Diag::new("flow::bad-expression", message)
                            .in_source(source)
                            .label(index.span.clone(), "this key")
                            .help(help),
                    );
                    continue;
                }
                Err(e) => {
                    diags.push(e.to_diag(source));
                    continue;
                }
            };
            if let super::ast::RefTarget::Output { step: base, .. } = &mut r.target {
                *base = instance_name(base, &key);
            }
        }
    }
}

/// The references under `node` whose instance key is an expression.
fn collect_indexed<'a>(
    node: &'a mut super::ast::Node,
    out: &mut Vec<&'a mut super::ast::Reference>,
) {
    use super::ast::{NodeKind, Part};
    match &mut node.kind {
        NodeKind::Str(t) => {
            for part in &mut t.parts {
                if let Part::Expr(e) = part {
                    e.indexed_refs_mut(out);
                }
            }
        }
        NodeKind::Array(items) => items.iter_mut().for_each(|n| collect_indexed(n, out)),
        NodeKind::Table(entries) => entries
            .iter_mut()
            .for_each(|e| collect_indexed(&mut e.value, out)),
        _ => {}
    }
}

/// The keys and values of a `for_each` value: a list's items are their own
/// keys (text or numbers, each once), a table's keys are its keys.
fn keyed(value: Value) -> Result<Vec<(String, Value)>, (String, &'static str)> {
    match value {
        Value::Object(m) => Ok(m.into_iter().collect()),
        Value::Array(items) => {
            let mut seen = BTreeSet::new();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                if !matches!(item, Value::String(_) | Value::Number(_)) {
                    return Err((
                        format!(
                            "item {i} of `for_each` is {}, and a list's items are its keys",
                            kind(&item)
                        ),
                        "list text or numbers, or use a table to give each key a value: { a = {…}, b = {…} }",
                    ));
                }
                let key = text(&item);
                if key.is_empty() {
                    return Err((
                        format!("item {i} of `for_each` is empty text"),
                        "a key needs at least one character",
                    ));
                }
                if !seen.insert(key.clone()) {
                    return Err((
                        format!("`for_each` has the key `{key}` twice"),
                        "each key names one instance: list each once",
                    ));
                }
                out.push((key, item));
            }
            Ok(out)
        }
        other => Err((
            format!(
                "`for_each` must be a list or a table, found {}",
                kind(&other)
            ),
            "write a list (for_each = [2, 4, 8]), a table, or a variable that holds one",
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    super::expr::ty::Ty::of(v).phrase()
}

/// The dependency edges of an expanded workflow: a reference to an
/// instance depends on that instance, `depends_on` naming a step with
/// `for_each` on every instance of it. A reference to an instance that the
/// `for_each` did not make is a problem that lists the keys it did make.
pub fn instance_edges(wf: &Workflow, instances: &Instances) -> (Vec<Edge>, Diagnostics) {
    let mut diags = Diagnostics::default();
    let mut edges = Vec::new();
    for step in &wf.steps {
        let mut targets: Vec<(&str, &Span)> = step
            .depends_on
            .iter()
            .map(|(d, s)| (d.as_str(), s))
            .collect();
        let refs: Vec<_> = step.inputs.iter().flat_map(|i| i.value.refs()).collect();
        // Through module inputs and outputs too, pointing at the reference.
        let mut read = Vec::new();
        for r in &refs {
            let mut through = Vec::new();
            outputs_read(wf, step.module.as_deref(), vec![r], &mut through, 0);
            read.extend(through.into_iter().map(|(s, _)| (s, &r.span)));
        }
        targets.extend(read);
        for (target, span) in targets {
            let from: Vec<&str> = if wf.step(target).is_some() {
                vec![target]
            } else if wf.is_deferred(base_name(target)) {
                // Its instances are not known yet: wait for the whole step.
                vec![base_name(target)]
            } else if let Some(names) = instances.get(target) {
                names.iter().map(String::as_str).collect()
            } else if let Some(names) = instances.get(base_name(target)) {
                let keys: Vec<&str> = names
                    .iter()
                    .filter_map(|n| {
                        wf.step(n)
                            .and_then(|s| s.instance.as_ref())
                            .map(|i| i.key.as_str())
                    })
                    .collect();
                let wanted = target[base_name(target).len()..].trim_matches(['[', ']', '"']);
                let help = match closest(wanted, keys.iter().copied()) {
                    Some(k) => format!("did you mean `{}`?", instance_name(base_name(target), k)),
                    None if keys.is_empty() => {
                        "its `for_each` is empty, so it has no instances".into()
                    }
                    None => format!("its keys are: {}", keys.join(", ")),
                };
                diags.push(
                    Diag::new(
                        "flow::unknown-instance",
                        format!("step `{}` has no instance `{target}`", base_name(target)),
                    )
                    .in_source(wf.source_of(step))
                    .label(span.clone(), "no such key")
                    .help(help),
                );
                continue;
            } else {
                // Reported by `check` already.
                continue;
            };
            for f in from {
                if f != step.name {
                    edges.push(Edge {
                        from: f.to_string(),
                        to: step.name.clone(),
                        span: span.clone(),
                    });
                }
            }
        }
    }
    edges.sort_by(|a, b| (&a.to, &a.from).cmp(&(&b.to, &b.from)));
    edges.dedup_by(|a, b| a.from == b.from && a.to == b.to);
    if diags.is_empty()
        && let Some(cycle) = find_cycle(wf, &edges)
    {
        diags.push(cycle);
    }
    (edges, diags)
}

/// Every step of `wf` that is an instance of `base`, or `base` itself.
pub fn addresses_of<'w>(wf: &'w Workflow, base: &str) -> Vec<&'w StepDecl> {
    wf.steps
        .iter()
        .filter(|s| s.name == base || s.instance.as_ref().is_some_and(|i| i.base == base))
        .collect()
}
