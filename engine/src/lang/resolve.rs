//! Evaluate written values against variable values and step outputs: a
//! TOML value with `${…}` expressions in its strings becomes JSON.

use serde_json::Value;

use super::ast::{Node, NodeKind, Part};
pub use super::expr::eval::{EvalError as ResolveError, Lookup, Scope};
use super::expr::eval::{Taint, eval};
use crate::diag::Diag;

/// A value after interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    /// The value, or `None` when it depends on something not yet known.
    pub value: Option<Value>,
    /// Whether it contains a secret.
    pub sensitive: bool,
    /// Text that functions made from secrets, to mask like them.
    pub derived: Vec<String>,
}

impl ResolveError {
    /// The problem as a diagnostic in `source`.
    pub fn to_diag(&self, source: &crate::diag::Source) -> Diag {
        let d = Diag::new(self.code, self.message.clone())
            .in_source(source)
            .label(self.span.clone(), "here");
        match &self.help {
            Some(h) => d.help(h.clone()),
            None => d,
        }
    }
}

/// Evaluate `node`. A string that is exactly one `${…}` keeps the value's
/// type; expressions inside longer strings are rendered as text.
pub fn evaluate(node: &Node, scope: &Scope) -> Result<Evaluated, ResolveError> {
    let mut taint = Taint::default();
    let value = eval_inner(node, scope, &mut taint)?;
    Ok(Evaluated {
        value,
        sensitive: taint.sensitive,
        derived: taint.derived,
    })
}

fn eval_inner(
    node: &Node,
    scope: &Scope,
    taint: &mut Taint,
) -> Result<Option<Value>, ResolveError> {
    Ok(match &node.kind {
        NodeKind::Str(t) => {
            if let Some(e) = t.single_expr() {
                return eval(e, scope, taint);
            }
            let mut out = String::new();
            let mut known = true;
            for part in &t.parts {
                match part {
                    Part::Lit(s) => out.push_str(s),
                    Part::Expr(e) => match eval(e, scope, taint)? {
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
                match eval_inner(item, scope, taint)? {
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
                match eval_inner(&e.value, scope, taint)? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Source;
    use crate::lang::toml_nodes::parse_document;
    use crate::lang::vars::{Origin, VarValue, VarValues};
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

    fn ev(n: &Node) -> Result<Evaluated, ResolveError> {
        let vars = vars();
        let dir = std::path::PathBuf::from(".");
        evaluate(
            n,
            &Scope {
                vars: &vars,
                outputs: &outs,
                dir: &dir,
                locals: None,
                each: None,
            },
        )
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
        let e = ev(&node("\"${vars.azs}\"")).unwrap();
        assert_eq!(e.value, Some(json!(["a", "b"])));
        let e = ev(&node("\"${vars.n}\"")).unwrap();
        assert_eq!(e.value, Some(json!(2)));
    }

    #[test]
    fn longer_strings_render_text() {
        let e = ev(&node("\"${steps.vpc.outputs.Id}/${vars.n}\"")).unwrap();
        assert_eq!(e.value, Some(json!("vpc-1/2")));
        assert!(!e.sensitive);
    }

    #[test]
    fn unknown_and_sensitive_propagate() {
        let e = ev(&node("[\"${steps.new.outputs.X}\", 1]")).unwrap();
        assert_eq!(e.value, None);
        let e = ev(&node("{ t = \"Bearer ${vars.token}\" }")).unwrap();
        assert!(e.sensitive);
        assert_eq!(e.value, Some(json!({"t": "Bearer hunter22"})));
    }

    #[test]
    fn missing_output_names_the_keys() {
        let err = ev(&node("\"${steps.vpc.outputs.Nope}\"")).unwrap_err();
        assert!(
            err.message.contains("its outputs are: Id"),
            "{}",
            err.message
        );
        assert_eq!(err.span, 5..30);
    }
}
