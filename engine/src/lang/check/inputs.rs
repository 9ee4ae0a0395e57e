//! Inputs against the step's provider schema (names, types), and a
//! `for_each` that is certainly not a collection.

use flow_providers::InputType;

use super::{At, diag, var_ty};
use crate::diag::Diagnostics;
use crate::lang::ast::{Node, NodeKind, ProviderKind, RefTarget, StepDecl, VarType, Workflow};
use crate::lang::expr::types::{self, Ty};
use crate::lang::parse::var_type_phrase;
use crate::lang::toml_nodes::type_name;
use flow_providers::suggest::closest;

/// A `for_each` that is certainly not a list or a table.
pub(super) fn check_for_each_type(at: At, node: &Node, diags: &mut Diagnostics) {
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
pub(super) fn check_inputs(wf: &Workflow, step: &StepDecl, diags: &mut Diagnostics) {
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

fn var_fits(var: VarType, ty: &InputType) -> bool {
    use VarType as V;
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
    use VarType as V;
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
