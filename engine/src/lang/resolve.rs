//! Evaluate written values against variable values and step outputs.

use serde_json::Value;

use super::ast::{Node, NodeKind, Part, RefTarget, Reference};
use super::vars::VarValues;
use crate::diag::Span;

/// What a step output is when a reference asks for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Known now.
    Known(Value),
    /// Not known until the step is applied.
    Unknown,
    /// The step is applied but has no such output; the keys it has.
    Missing(Vec<String>),
}

/// A value after interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    /// The value, or `None` when it depends on something not yet known.
    pub value: Option<Value>,
    /// Whether it contains a secret.
    pub sensitive: bool,
}

/// A reference that cannot be resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveError {
    /// What is wrong.
    pub message: String,
    /// The reference's span.
    pub span: Span,
}

/// Evaluate `node`. A string that is exactly one reference keeps the referenced
/// value's type; references inside longer strings are rendered as text.
pub fn evaluate(
    node: &Node,
    vars: &VarValues,
    outputs: &dyn Fn(&str, &str) -> Lookup,
) -> Result<Evaluated, ResolveError> {
    let mut sensitive = false;
    let value = eval_inner(node, vars, outputs, &mut sensitive)?;
    Ok(Evaluated { value, sensitive })
}

fn eval_inner(
    node: &Node,
    vars: &VarValues,
    outputs: &dyn Fn(&str, &str) -> Lookup,
    sensitive: &mut bool,
) -> Result<Option<Value>, ResolveError> {
    Ok(match &node.kind {
        NodeKind::Str(t) => {
            if let Some(r) = t.single_ref() {
                return lookup(r, vars, outputs, sensitive);
            }
            let mut out = String::new();
            let mut known = true;
            for part in &t.parts {
                match part {
                    Part::Lit(s) => out.push_str(s),
                    Part::Ref(r) => match lookup(r, vars, outputs, sensitive)? {
                        Some(Value::String(s)) => out.push_str(&s),
                        Some(other) => out.push_str(&other.to_string()),
                        None => known = false,
                    },
                }
            }
            known.then_some(Value::String(out))
        }
        NodeKind::Int(i) => Some(Value::from(*i)),
        NodeKind::Float(f) => Some(
            serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
        ),
        NodeKind::Bool(b) => Some(Value::Bool(*b)),
        NodeKind::Datetime(d) => Some(Value::String(d.clone())),
        NodeKind::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut known = true;
            for item in items {
                match eval_inner(item, vars, outputs, sensitive)? {
                    Some(v) => out.push(v),
                    None => known = false,
                }
            }
            known.then_some(Value::Array(out))
        }
        NodeKind::Table(entries) => {
            let mut out = serde_json::Map::new();
            let mut known = true;
            for e in entries {
                match eval_inner(&e.value, vars, outputs, sensitive)? {
                    Some(v) => {
                        out.insert(e.key.clone(), v);
                    }
                    None => known = false,
                }
            }
            known.then_some(Value::Object(out))
        }
    })
}

fn lookup(
    r: &Reference,
    vars: &VarValues,
    outputs: &dyn Fn(&str, &str) -> Lookup,
    sensitive: &mut bool,
) -> Result<Option<Value>, ResolveError> {
    match &r.target {
        RefTarget::Var(name) => match vars.get(name) {
            Some(v) => {
                *sensitive |= v.sensitive;
                Ok(Some(v.value.clone()))
            }
            None => Err(ResolveError {
                message: format!("variable `{name}` has no value"),
                span: r.span.clone(),
            }),
        },
        RefTarget::Output { step, key } => match outputs(step, key) {
            Lookup::Known(v) => {
                if crate::secrets::is_sensitive_marker(&v) {
                    return Err(ResolveError {
                        message: format!(
                            "output `{key}` of step `{step}` is sensitive and was not kept in state"
                        ),
                        span: r.span.clone(),
                    });
                }
                Ok(Some(v))
            }
            Lookup::Unknown => Ok(None),
            Lookup::Missing(keys) => Err(ResolveError {
                message: if keys.is_empty() {
                    format!("step `{step}` has no output `{key}` (it has no outputs)")
                } else {
                    format!(
                        "step `{step}` has no output `{key}`; its outputs are: {}",
                        keys.join(", ")
                    )
                },
                span: r.span.clone(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Source;
    use crate::lang::toml_nodes::parse_document;
    use crate::lang::vars::{Origin, VarValue};
    use serde_json::json;

    fn node(text: &str) -> Node {
        let src = Source::new("t", format!("v = {text}"));
        parse_document(&src).0.remove(0).value
    }

    fn vars() -> VarValues {
        let mut v = VarValues::new();
        let put = |v: &mut VarValues, k: &str, val: Value, s: bool| {
            v.insert(
                k.into(),
                VarValue {
                    value: val,
                    sensitive: s,
                    origin: Origin::Default,
                },
            );
        };
        put(&mut v, "azs", json!(["a", "b"]), false);
        put(&mut v, "n", json!(2), false);
        put(&mut v, "token", json!("hunter22"), true);
        v
    }

    fn outs(step: &str, key: &str) -> Lookup {
        match (step, key) {
            ("vpc", "Id") => Lookup::Known(json!("vpc-1")),
            ("new", _) => Lookup::Unknown,
            _ => Lookup::Missing(vec!["Id".into()]),
        }
    }

    #[test]
    fn single_reference_keeps_its_type() {
        let e = evaluate(&node("\"${vars.azs}\""), &vars(), &outs).unwrap();
        assert_eq!(e.value, Some(json!(["a", "b"])));
        let e = evaluate(&node("\"${vars.n}\""), &vars(), &outs).unwrap();
        assert_eq!(e.value, Some(json!(2)));
    }

    #[test]
    fn longer_strings_render_text() {
        let e = evaluate(
            &node("\"${steps.vpc.outputs.Id}/${vars.n}\""),
            &vars(),
            &outs,
        )
        .unwrap();
        assert_eq!(e.value, Some(json!("vpc-1/2")));
        assert!(!e.sensitive);
    }

    #[test]
    fn unknown_and_sensitive_propagate() {
        let e = evaluate(&node("[\"${steps.new.outputs.X}\", 1]"), &vars(), &outs).unwrap();
        assert_eq!(e.value, None);
        let e = evaluate(&node("{ t = \"Bearer ${vars.token}\" }"), &vars(), &outs).unwrap();
        assert!(e.sensitive);
        assert_eq!(e.value, Some(json!({"t": "Bearer hunter22"})));
    }

    #[test]
    fn missing_output_names_the_keys() {
        let err = evaluate(&node("\"${steps.vpc.outputs.Nope}\""), &vars(), &outs).unwrap_err();
        assert!(
            err.message.contains("its outputs are: Id"),
            "{}",
            err.message
        );
        assert_eq!(err.span, 5..30);
    }
}
