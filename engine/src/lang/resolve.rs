//! Evaluate written values against variable values and step outputs: a
//! TOML value with `${…}` expressions in its strings becomes JSON.

use serde_json::Value;

use super::ast::{ModuleFrame, Node, NodeKind, Part, StepDecl, Workflow};
pub use super::expr::eval::{EvalError as ResolveError, Lookup, Scope};
use super::expr::eval::{InputLookup, InstanceLookup, ModuleLookup, Taint, eval};
use super::expr::ops::strings_in;
use super::var_values::VarValues;
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
    /// The problem as a diagnostic in `source` (or the file it names).
    pub fn to_diag(&self, source: &crate::diag::Source) -> Diag {
        let d = Diag::new(self.code, self.message.clone())
            .in_source(self.source.as_ref().unwrap_or(source))
            .label(self.span.clone(), "here");
        match &self.help {
            Some(h) => d.help(h.clone()),
            None => d,
        }
    }
}

/// Where a workflow's values come from: its variables, and earlier steps'
/// outputs. Gives each step's expressions their scope: a module's steps
/// read their module's inputs (written at the call) instead of the
/// workflow's variables, and any step can read a module's outputs.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The expanded workflow (module outputs, folders).
    pub wf: &'a Workflow,
    /// The workflow's variables.
    pub vars: &'a VarValues,
    /// Earlier steps' outputs.
    pub outputs: &'a dyn Fn(&str, &str) -> Lookup,
}

impl<'a> Context<'a> {
    /// Run `f` with the scope of `step`'s expressions.
    pub fn with_step_scope<R>(&self, step: &StepDecl, f: impl FnOnce(&Scope) -> R) -> R {
        let each = step.instance.as_ref().map(|i| (i.key.as_str(), &i.value));
        self.with_scope(step.module.as_deref(), each, f)
    }

    /// Run `f` with the scope of expressions written in `frame`'s module
    /// (the workflow's own when `None`).
    pub fn with_scope<R>(
        &self,
        frame: Option<&ModuleFrame>,
        each: Option<(&str, &serde_json::Value)>,
        f: impl FnOnce(&Scope) -> R,
    ) -> R {
        let none = VarValues::new();
        let inputs = |name: &str, taint: &mut Taint| match frame {
            Some(frame) => self.input(frame, name, taint),
            None => Ok(None),
        };
        let modules =
            |module: &str, key: &str, taint: &mut Taint| self.module_output(module, key, taint);
        let instances = |base: &str| self.instances(base);
        let scope = Scope {
            // A module sees its inputs, never the workflow's variables.
            vars: if frame.is_some() { &none } else { self.vars },
            outputs: self.outputs,
            // Relative paths are the workflow's, in modules too (`dir_of`).
            dir: &self.wf.dir,
            locals: None,
            each,
            inputs: frame.map(|_| &inputs as &InputLookup),
            modules: Some(&modules as &ModuleLookup),
            instances: Some(&instances as &InstanceLookup),
        };
        f(&scope)
    }

    /// The addresses of `base`'s instances, in key order, once its
    /// `for_each` is expanded (an empty list when it makes none).
    fn instances(&self, base: &str) -> Option<Vec<String>> {
        let unexpanded = self.wf.is_deferred(base)
            || self
                .wf
                .step(base)
                .is_some_and(|s| s.for_each.is_some() && s.instance.is_none());
        if unexpanded {
            return None;
        }
        Some(
            self.wf
                .steps
                .iter()
                .filter(|s| s.instance.as_ref().is_some_and(|i| i.base == base))
                .map(|s| s.name.clone())
                .collect(),
        )
    }

    /// Evaluate `node`, written in `step`'s file.
    pub fn evaluate(&self, step: &StepDecl, node: &Node) -> Result<Evaluated, ResolveError> {
        self.with_step_scope(step, |scope| evaluate(node, scope))
    }

    /// `inputs.NAME` in `frame`'s module: the call's value, evaluated where
    /// the call is written, or the declared default.
    fn input(
        &self,
        frame: &ModuleFrame,
        name: &str,
        taint: &mut Taint,
    ) -> Result<Option<serde_json::Value>, ResolveError> {
        let _guard = Nesting::enter(&frame.call_source, &frame.call_span)?;
        let decl = frame.decls.iter().find(|d| d.name == name);
        taint.sensitive |= decl.is_some_and(|d| d.sensitive);
        let given = frame.inputs.iter().find(|e| e.key == name);
        let evaluated = match (given, decl.and_then(|d| d.default.as_ref())) {
            (Some(entry), _) => self
                .with_scope(frame.parent.as_deref(), None, |scope| {
                    evaluate(&entry.value, scope)
                })
                .map_err(|mut e| {
                    e.source.get_or_insert_with(|| frame.call_source.clone());
                    e
                })?,
            (None, Some(default)) => Evaluated {
                value: Some(super::vars::node_to_json(default)),
                sensitive: false,
                derived: Vec::new(),
            },
            (None, None) => {
                return Err(ResolveError {
                    code: "flow::module-input",
                    message: format!("module `{}` was given no input `{name}`", frame.address),
                    span: frame.call_span.clone(),
                    help: Some(format!("add `{name} = …` to the call's inputs")),
                    source: Some(frame.call_source.clone()),
                });
            }
        };
        if let (Some(decl), Some(entry), Some(value)) = (decl, given, &evaluated.value)
            && !fits(decl.ty, value)
        {
            return Err(ResolveError {
                code: "flow::wrong-type",
                message: format!(
                    "module `{}`'s input `{name}` must be {}, found {}",
                    frame.address,
                    super::parse::var_type_phrase(decl.ty),
                    super::expr::ty::Ty::of(value).phrase()
                ),
                span: entry.value.span.clone(),
                help: Some(format!(
                    "the module declares [inputs.{name}] type = \"{}\"",
                    decl.ty.name()
                )),
                source: Some(frame.call_source.clone()),
            });
        }
        taint.sensitive |= evaluated.sensitive;
        taint.derived.extend(evaluated.derived);
        // A value the module declares secret is masked like a secret
        // variable, even when the call writes it plainly.
        if decl.is_some_and(|d| d.sensitive)
            && let Some(value) = &evaluated.value
        {
            strings_in(value, &mut taint.derived);
        }
        Ok(evaluated.value)
    }

    /// `modules.MODULE.outputs.KEY` as `flow output` reads it: its value
    /// (`None` while a step it reads is not applied) and whether a secret
    /// went into it.
    pub fn module_output_value(
        &self,
        module: &str,
        key: &str,
    ) -> Result<(Option<serde_json::Value>, bool), ResolveError> {
        let mut taint = Taint::default();
        let value = self.module_output(module, key, &mut taint)?;
        Ok((value, taint.sensitive || !taint.derived.is_empty()))
    }

    /// `modules.MODULE.outputs.KEY`: the output's value, evaluated in the
    /// module.
    fn module_output(
        &self,
        module: &str,
        key: &str,
        taint: &mut Taint,
    ) -> Result<Option<serde_json::Value>, ResolveError> {
        let _guard = Nesting::enter(&self.wf.source, &(0..0))?;
        let Some(outputs) = self.wf.module_outputs.get(module) else {
            return Err(ResolveError {
                code: "flow::bad-reference",
                message: format!("there is no module `{module}`"),
                span: 0..0,
                help: None,
                source: None,
            });
        };
        let Some((entry, source)) = outputs.get(key) else {
            return Err(ResolveError {
                code: "flow::bad-reference",
                message: format!("module `{module}` has no output `{key}`"),
                span: 0..0,
                help: None,
                source: None,
            });
        };
        let evaluated = self
            .with_scope(Some(&outputs.frame), None, |scope| {
                evaluate(&entry.value, scope)
            })
            .map_err(|mut e| {
                e.source.get_or_insert_with(|| source.clone());
                e
            })?;
        taint.sensitive |= evaluated.sensitive;
        taint.derived.extend(evaluated.derived);
        Ok(evaluated.value)
    }
}

/// Whether a value fits a declared input type. Text is refused only where
/// a number, boolean, list or table is declared; a number or boolean is
/// text where text is declared, as in inputs.
fn fits(ty: super::ast::VarType, v: &serde_json::Value) -> bool {
    use super::ast::VarType as T;
    use serde_json::Value as V;
    matches!(
        (ty, v),
        (T::Any, _)
            | (T::String, V::String(_) | V::Number(_) | V::Bool(_))
            | (T::Integer, V::Number(_))
            | (T::Number, V::Number(_))
            | (T::Bool, V::Bool(_))
            | (T::List, V::Array(_))
            | (T::Table, V::Object(_))
    ) && !(ty == T::Integer && v.as_f64().is_some_and(|f| f.fract() != 0.0))
}

/// How deep module inputs and outputs are being evaluated through each
/// other: a module whose input reads its own output would never end.
struct Nesting;

thread_local! {
    static NESTING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Nesting {
    /// The deepest chain of module inputs and outputs evaluated.
    const MAX: usize = 32;

    fn enter(
        source: &crate::diag::Source,
        span: &crate::diag::Span,
    ) -> Result<Nesting, ResolveError> {
        let depth = NESTING.with(|n| n.get());
        if depth >= Self::MAX {
            return Err(ResolveError {
                code: "flow::module-cycle",
                message: "module inputs and outputs read each other in a loop".into(),
                span: span.clone(),
                help: Some(
                    "an input of a module cannot be computed from that module's own outputs".into(),
                ),
                source: Some(source.clone()),
            });
        }
        NESTING.with(|n| n.set(depth + 1));
        Ok(Nesting)
    }
}

impl Drop for Nesting {
    fn drop(&mut self) {
        NESTING.with(|n| n.set(n.get().saturating_sub(1)));
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
        let dir = flow_providers::Workdir::new(".");
        evaluate(n, &Scope::new(&vars, &outs, &dir))
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
