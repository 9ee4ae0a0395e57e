//! Compute an expression's value from variables, step outputs and the
//! functions. A value that waits on an output not yet known is `None`
//! ("known after apply"); whether it carries a secret is tracked beside it.

use std::path::Path;

use serde_json::{Map, Value};

use super::ast::{BinaryOp, EachField, Expr, ExprKind, RefTarget, Reference, UnaryOp};
pub use super::error::EvalError;
use super::error::{bad, bad_reference};
use super::functions::{self, CallContext, same};
use super::interp::{Mode, Piece, split};
use super::ops::{arith, boolean, index_into, kind, number, strings_in};
use super::parse::{Names, parse};
use crate::lang::var_values::VarValues;
use flow_providers::Workdir;
use flow_providers::suggest::closest;

/// What a step output is when a reference asks for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Known now.
    Known(Value),
    /// Known now, and carrying a secret (an output made from one during
    /// this apply): what uses it is sensitive too.
    Secret(Value),
    /// Not known until the step is applied.
    Unknown,
    /// The step is applied but has no such output; the keys it has.
    Missing(Vec<String>),
}

/// Gives `inputs.NAME` inside a module: the call's value for it.
pub type InputLookup<'a> = dyn Fn(&str, &mut Taint) -> Result<Option<Value>, EvalError> + 'a;

/// Gives `modules.NAME.outputs.KEY`.
pub type ModuleLookup<'a> = dyn Fn(&str, &str, &mut Taint) -> Result<Option<Value>, EvalError> + 'a;

/// Where an expression's names get their values.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    /// The variables.
    pub vars: &'a VarValues,
    /// Earlier steps' outputs.
    pub outputs: &'a dyn Fn(&str, &str) -> Lookup,
    /// The folder `file` and `templatefile` paths resolve against, and the
    /// folders they may read.
    pub dir: &'a Workdir,
    /// The names a template file was given (`templatefile`), if inside one.
    pub locals: Option<&'a Map<String, Value>>,
    /// `each.key` and `each.value`, inside an instance of a step with
    /// `for_each`.
    pub each: Option<(&'a str, &'a Value)>,
    /// `inputs.NAME`, inside a module.
    pub inputs: Option<&'a InputLookup<'a>>,
    /// `modules.NAME.outputs.KEY`.
    pub modules: Option<&'a ModuleLookup<'a>>,
    /// The instances of a step with `for_each`, in key order, for
    /// `steps.STEP[*]`; `None` while they are not known.
    pub instances: Option<&'a InstanceLookup<'a>>,
}

/// The addresses of a step's instances (`None`: not known yet).
pub type InstanceLookup<'a> = dyn Fn(&str) -> Option<Vec<String>> + 'a;

impl<'a> Scope<'a> {
    /// A scope of variables and step outputs only.
    pub fn new(
        vars: &'a VarValues,
        outputs: &'a dyn Fn(&str, &str) -> Lookup,
        dir: &'a Workdir,
    ) -> Self {
        Scope {
            vars,
            outputs,
            dir,
            locals: None,
            each: None,
            inputs: None,
            modules: None,
            instances: None,
        }
    }
}

/// Whether secrets went into a value, and the text that functions made
/// from them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Taint {
    /// A secret went into the value.
    pub sensitive: bool,
    /// Text a function made from a secret (`upper(vars.token)`), to be
    /// masked like the secret itself: nothing else knows it is one.
    pub derived: Vec<String>,
}

/// The value of `expr`, `None` when it waits on something not yet known.
/// Marks `taint` when a secret went into it.
pub fn eval(expr: &Expr, scope: &Scope, taint: &mut Taint) -> Result<Option<Value>, EvalError> {
    let ev = |e: &Expr, taint: &mut Taint| eval(e, scope, taint);
    Ok(match &expr.kind {
        ExprKind::Literal(v) => Some(v.clone()),
        ExprKind::Ref(r) => return lookup(r, scope, taint),
        ExprKind::List(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut known = true;
            for item in items {
                match ev(item, taint)? {
                    Some(v) => out.push(v),
                    None => known = false,
                }
            }
            known.then_some(Value::Array(out))
        }
        ExprKind::Table(entries) => {
            let mut out = Map::new();
            let mut known = true;
            for (k, e) in entries {
                match ev(e, taint)? {
                    Some(v) => {
                        out.insert(k.clone(), v);
                    }
                    None => known = false,
                }
            }
            known.then_some(Value::Object(out))
        }
        ExprKind::Attr(base, key) => match ev(base, taint)? {
            None => None,
            Some(Value::Object(m)) => match m.get(key) {
                Some(v) => Some(v.clone()),
                None => {
                    let mut keys: Vec<&str> = m.keys().map(String::as_str).collect();
                    keys.sort();
                    let help = match closest(key, keys.iter().copied()) {
                        // The keys of a secret table are not shown.
                        _ if taint.sensitive => "check the key".to_string(),
                        Some(k) => format!("did you mean `{k}`?"),
                        None => format!("its keys are: {}", keys.join(", ")),
                    };
                    return Err(bad(
                        format!("the table has no key `{key}`"),
                        &expr.span,
                        &help,
                    ));
                }
            },
            Some(other) => {
                return Err(bad(
                    format!(
                        "`.{key}` reads a key of a table, but the value is {}",
                        kind(&other)
                    ),
                    &expr.span,
                    "use `.KEY` on tables only; a list takes `[INDEX]`",
                ));
            }
        },
        ExprKind::Index(base, index) => {
            let (b, i) = (ev(base, taint)?, ev(index, taint)?);
            match (b, i) {
                (Some(b), Some(i)) => Some(index_into(&b, &i, expr, index).map_err(|mut e| {
                    // The index or the keys may be a secret's.
                    if taint.sensitive {
                        e.message = "the index does not fit the value (it involves a secret, so neither is shown)".into();
                    }
                    e
                })?),
                _ => None,
            }
        }
        ExprKind::Call(call) => {
            let Some(f) = functions::find(&call.name) else {
                return Err(bad(
                    format!("unknown function `{}`", call.name),
                    &call.name_span,
                    "see \"Functions\" in docs/workflow-language.md",
                ));
            };
            if let Some(p) = super::types::arity_problem(f, call.args.len(), &expr.span) {
                return Err(bad(p.message, &p.span, &p.help));
            }
            let mut args = Vec::with_capacity(call.args.len());
            let mut known = true;
            let outer = std::mem::take(&mut taint.sensitive);
            for a in &call.args {
                match ev(a, taint)? {
                    Some(v) => args.push(v),
                    None => known = false,
                }
            }
            let secret_args = taint.sensitive;
            taint.sensitive |= outer;
            if !known {
                return Ok(None);
            }
            for (i, (v, e)) in args.iter().zip(&call.args).enumerate() {
                let accepted = f.accepts(i);
                if !super::ty::Ty::of(v).fits(accepted) {
                    return Err(bad(
                        format!(
                            "argument {} of `{}` must be {}, found {}",
                            i + 1,
                            f.name,
                            accepted
                                .iter()
                                .map(|a| a.phrase())
                                .collect::<Vec<_>>()
                                .join(" or "),
                            kind(v)
                        ),
                        &e.span,
                        &format!("`{}`", f.signature),
                    ));
                }
            }
            let render = |path: &Path, body: &str, names: &Map<String, Value>| {
                render_template(path, body, names, scope.vars, scope.dir)
            };
            let cx = CallContext {
                dir: scope.dir,
                render: &render,
            };
            match (f.run)(&args, &cx) {
                Ok(v) => {
                    if secret_args {
                        strings_in(&v, &mut taint.derived);
                    }
                    Some(v)
                }
                Err(message) => {
                    // A function's message may quote its arguments: not a
                    // secret one.
                    let message = if secret_args {
                        "it failed on a secret argument (the details would show it)".to_string()
                    } else {
                        message
                    };
                    return Err(bad(
                        format!("`{}`: {message}", f.name),
                        &expr.span,
                        &format!("`{}`", f.signature),
                    ));
                }
            }
        }
        ExprKind::Unary(op, operand) => match ev(operand, taint)? {
            None => None,
            Some(v) => Some(match (op, &v) {
                (UnaryOp::Not, Value::Bool(b)) => Value::Bool(!b),
                (UnaryOp::Neg, Value::Number(_)) => {
                    arith(BinaryOp::Sub, &Value::from(0), &v, expr)?
                }
                (UnaryOp::Not, _) => {
                    return Err(bad(
                        format!("`!` negates a boolean, but the value is {}", kind(&v)),
                        &operand.span,
                        "compare it first",
                    ));
                }
                (UnaryOp::Neg, _) => {
                    return Err(bad(
                        format!("`-` negates a number, but the value is {}", kind(&v)),
                        &operand.span,
                        "use a number",
                    ));
                }
            }),
        },
        ExprKind::Binary(op, a, b) => {
            let left = ev(a, taint)?;
            if let (BinaryOp::And | BinaryOp::Or, Some(l)) = (op, &left) {
                let l = boolean(l, *op, a)?;
                if (*op == BinaryOp::And && !l) || (*op == BinaryOp::Or && l) {
                    return Ok(Some(Value::Bool(l)));
                }
            }
            let right = ev(b, taint)?;
            let (l, r) = match (left, right) {
                (Some(l), Some(r)) => (l, r),
                (None, Some(r)) if matches!(op, BinaryOp::And | BinaryOp::Or) => {
                    let r = boolean(&r, *op, b)?;
                    let decided = (*op == BinaryOp::And && !r) || (*op == BinaryOp::Or && r);
                    return Ok(decided.then_some(Value::Bool(r)));
                }
                _ => return Ok(None),
            };
            Some(match op {
                BinaryOp::And | BinaryOp::Or => Value::Bool(boolean(&r, *op, b)?),
                BinaryOp::Eq => Value::Bool(same(&l, &r)),
                BinaryOp::Ne => Value::Bool(!same(&l, &r)),
                BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
                    let (x, y) = (number(&l, *op, a)?, number(&r, *op, b)?);
                    Value::Bool(match op {
                        BinaryOp::Lt => x < y,
                        BinaryOp::Le => x <= y,
                        BinaryOp::Gt => x > y,
                        _ => x >= y,
                    })
                }
                _ => {
                    number(&l, *op, a)?;
                    number(&r, *op, b)?;
                    arith(*op, &l, &r, expr)?
                }
            })
        }
        ExprKind::Cond(c, then, otherwise) => match ev(c, taint)? {
            Some(Value::Bool(true)) => ev(then, taint)?,
            Some(Value::Bool(false)) => ev(otherwise, taint)?,
            Some(other) => {
                return Err(bad(
                    format!(
                        "the condition of `? :` must be a boolean, but the value is {}",
                        kind(&other)
                    ),
                    &c.span,
                    "compare it: `vars.n > 0 ? … : …`",
                ));
            }
            None => {
                ev(then, taint)?;
                ev(otherwise, taint)?;
                None
            }
        },
    })
}

fn lookup(r: &Reference, scope: &Scope, taint: &mut Taint) -> Result<Option<Value>, EvalError> {
    match &r.target {
        RefTarget::Var(name) => match scope.vars.get(name) {
            Some(v) => {
                taint.sensitive |= v.sensitive;
                Ok(Some(v.value.clone()))
            }
            None => Err(bad_reference(
                format!("variable `{name}` has no value"),
                &r.span,
            )),
        },
        RefTarget::Each(field) => match (scope.each, field) {
            (Some((key, _)), EachField::Key) => Ok(Some(Value::from(key))),
            (Some((_, value)), EachField::Value) => Ok(Some(value.clone())),
            (None, _) => Err(bad_reference(
                format!("`{}` is only known inside a step with `for_each`", r.target),
                &r.span,
            )),
        },
        RefTarget::Input(name) => match scope.inputs {
            Some(inputs) => inputs(name, taint),
            None => Err(bad_reference(
                format!("`inputs.{name}` is only known inside a module"),
                &r.span,
            )),
        },
        RefTarget::ModuleOutput { module, key } => match scope.modules {
            Some(modules) => modules(module, key, taint),
            None => Err(bad_reference(
                format!("`modules.{module}.outputs.{key}` cannot be read here"),
                &r.span,
            )),
        },
        RefTarget::Local(name) => {
            let names = scope.locals.into_iter().flatten().map(|(k, _)| k.as_str());
            match scope.locals.and_then(|m| m.get(name)) {
                Some(v) => Ok(Some(v.clone())),
                None => {
                    let given: Vec<&str> = names.collect();
                    let mut e =
                        bad_reference(format!("the template was given no name `{name}`"), &r.span);
                    e.help = Some(match closest(name, given.iter().copied()) {
                        Some(s) => format!("did you mean `{s}`?"),
                        None if given.is_empty() => {
                            "pass it in templatefile's table; write `$${` for a literal `${`".into()
                        }
                        None => format!(
                            "it was given: {}; write `$${{` for a literal `${{`",
                            given.join(", ")
                        ),
                    });
                    Err(e)
                }
            }
        }
        RefTarget::Output { step, key } if r.all => {
            let Some(names) = scope.instances.and_then(|all| all(step)) else {
                return Ok(None);
            };
            let mut values = Vec::with_capacity(names.len());
            for name in &names {
                match output(r, name, key, scope, taint)? {
                    Some(v) => values.push(v),
                    None => return Ok(None),
                }
            }
            Ok(Some(Value::Array(values)))
        }
        RefTarget::Output { step, key } => {
            let instance = match &r.index {
                // A key that is an expression: `lang::expand` wrote the
                // instance into every step input; elsewhere (what a module
                // call passes) it is worked out here, in the same scope.
                Some(index) => Some(instance_key(step, index, scope)?),
                None => None,
            };
            output(r, instance.as_deref().unwrap_or(step), key, scope, taint)
        }
    }
}

/// The address of the instance of `step` that `index` names.
fn instance_key(step: &str, index: &Expr, scope: &Scope) -> Result<String, EvalError> {
    let mut taint = Taint::default();
    let value = eval(index, scope, &mut taint)?;
    match key_text(value, taint.sensitive) {
        Ok(key) => Ok(super::ast::instance_name(step, &key)),
        Err((message, help)) => Err(bad(message, &index.span, help)),
    }
}

/// The text of an instance's key worked out from an expression (its
/// value, and whether a secret went into it), or why it cannot be one:
/// the message and what to do.
pub fn key_text(value: Option<Value>, sensitive: bool) -> Result<String, (String, &'static str)> {
    match value {
        Some(v @ (Value::String(_) | Value::Number(_))) if !sensitive => Ok(functions::text(&v)),
        Some(v) if !sensitive => Err((
            format!(
                "an instance's key must be text or a number, found {}",
                kind(&v)
            ),
            "keys are the items or table keys of the step's for_each",
        )),
        _ => Err((
            "an instance's key must be known before any step runs, and not secret".to_string(),
            "use a variable that is not sensitive, `each.key` or a literal",
        )),
    }
}

/// Output `key` of step `step` (an instance's address when indexed).
fn output(
    r: &Reference,
    step: &str,
    key: &str,
    scope: &Scope,
    taint: &mut Taint,
) -> Result<Option<Value>, EvalError> {
    match (scope.outputs)(step, key) {
        Lookup::Secret(v) => {
            taint.sensitive = true;
            Ok(Some(v))
        }
        Lookup::Known(v) => {
            if crate::secrets::is_sensitive_marker(&v) {
                return Err(bad_reference(
                    format!(
                        "output `{key}` of step `{step}` is sensitive and was not kept in state"
                    ),
                    &r.span,
                ));
            }
            Ok(Some(v))
        }
        Lookup::Unknown => Ok(None),
        Lookup::Missing(keys) => Err(bad_reference(
            if keys.is_empty() {
                format!("step `{step}` has no output `{key}` (it has no outputs)")
            } else {
                format!(
                    "step `{step}` has no output `{key}`; its outputs are: {}",
                    keys.join(", ")
                )
            },
            &r.span,
        )),
    }
}

/// Render a template file's `body` (read from `path`) with `names`: every
/// `${…}` is an expression over those names and the functions. A problem
/// names the file, line and column.
pub fn render_template(
    path: &Path,
    body: &str,
    names: &Map<String, Value>,
    vars: &VarValues,
    files: &Workdir,
) -> Result<String, String> {
    thread_local! {
        static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    /// Templates may render templates; one that renders itself would not end.
    const MAX_DEPTH: usize = 16;
    let depth = DEPTH.with(|d| d.get());
    if depth >= MAX_DEPTH {
        return Err(format!(
            "{}: templates nest more than {MAX_DEPTH} deep; does one render itself?",
            path.display()
        ));
    }
    DEPTH.with(|d| d.set(depth + 1));
    let rendered = render_template_once(path, body, names, vars, files);
    DEPTH.with(|d| d.set(depth));
    rendered
}

fn render_template_once(
    path: &Path,
    body: &str,
    names: &Map<String, Value>,
    vars: &VarValues,
    files: &Workdir,
) -> Result<String, String> {
    let place = |offset: usize| {
        let before = &body[..offset.min(body.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!("{}:{line}:{col}", path.display())
    };
    let pieces = split(body, Mode::Template).map_err(|u| {
        format!(
            "{}: unterminated `${{`; write `$${{` for a literal `${{`",
            place(u.range.start)
        )
    })?;
    let no_outputs = |_: &str, _: &str| Lookup::Unknown;
    let dir = files.rebased(path.parent().unwrap_or(Path::new(".")));
    let scope = Scope {
        locals: Some(names),
        ..Scope::new(vars, &no_outputs, &dir)
    };
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Lit(s) => out.push_str(&s),
            Piece::Expr { body: range, .. } => {
                let base = range.start;
                let at = |r: std::ops::Range<usize>| base + r.start..base + r.end;
                let expr = parse(&body[range], &at, Names::Template)
                    .map_err(|e| format!("{}: {} ({})", place(e.span.start), e.message, e.help))?;
                let value = eval(&expr, &scope, &mut Taint::default()).map_err(|e| {
                    let help = e.help.map(|h| format!(" ({h})")).unwrap_or_default();
                    format!("{}: {}{help}", place(e.span.start), e.message)
                })?;
                match value {
                    Some(Value::String(s)) => out.push_str(&s),
                    Some(other) => out.push_str(&other.to_string()),
                    None => return Err(format!("{}: a value is not known yet", place(base))),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::var_values::{Origin, VarValue};
    use serde_json::json;

    fn vars() -> VarValues {
        let mut v = VarValues::new();
        for (k, val, s) in [
            ("azs", json!(["a", "b"]), false),
            ("n", json!(3), false),
            ("token", json!("hf_secret_token"), true),
            ("cfg", json!({"name": "x"}), false),
            ("on", json!(true), false),
        ] {
            v.insert(
                k.into(),
                VarValue {
                    value: val,
                    sensitive: s,
                    origin: Origin::Default,
                },
            );
        }
        v
    }

    fn outs(step: &str, key: &str) -> Lookup {
        match (step, key) {
            ("vpc", "PrivateSubnets") => Lookup::Known(json!("subnet-1,subnet-2")),
            ("new", _) => Lookup::Unknown,
            _ => Lookup::Missing(vec!["PrivateSubnets".into()]),
        }
    }

    /// The value of `text` and what secrets went into it.
    fn run_tainted(text: &str) -> (Result<Option<Value>, EvalError>, Taint) {
        let e = parse(text, &|r| r, Names::Workflow).unwrap();
        let vars = vars();
        let dir = Workdir::new(std::env::temp_dir());
        let mut taint = Taint::default();
        let value = eval(&e, &Scope::new(&vars, &outs, &dir), &mut taint);
        (value, taint)
    }

    fn run(text: &str) -> Result<(Option<Value>, bool), EvalError> {
        let (value, taint) = run_tainted(text);
        value.map(|v| (v, taint.sensitive))
    }

    fn value(text: &str) -> Value {
        run(text).unwrap().0.unwrap()
    }

    #[test]
    fn the_upstream_subnet_list_becomes_a_list() {
        assert_eq!(
            value(r#"split(",", steps.vpc.outputs.PrivateSubnets)"#),
            json!(["subnet-1", "subnet-2"])
        );
        assert_eq!(
            value(r#"split(",", steps.vpc.outputs.PrivateSubnets)[1]"#),
            json!("subnet-2")
        );
    }

    #[test]
    fn arithmetic_comparison_and_conditions() {
        assert_eq!(value("vars.n * 8 + 1"), json!(25));
        assert_eq!(value("vars.n / 2"), json!(1.5));
        assert_eq!(value("vars.n % 2"), json!(1));
        assert_eq!(value("-vars.n"), json!(-3));
        assert_eq!(value("vars.n >= 3 && vars.on"), json!(true));
        assert_eq!(
            value(r#"vars.n == 3.0 ? "three" : "other""#),
            json!("three")
        );
        assert_eq!(value(r#"vars.cfg.name != "x" || !vars.on"#), json!(false));
        assert!(
            run("vars.n / 0")
                .unwrap_err()
                .message
                .contains("division by zero")
        );
    }

    #[test]
    fn unknown_stays_unknown_unless_it_cannot_matter() {
        assert_eq!(
            run("length(split(\",\", steps.new.outputs.X))").unwrap().0,
            None
        );
        assert_eq!(run("steps.new.outputs.X == 1").unwrap().0, None);
        assert_eq!(value("false && steps.new.outputs.X"), json!(false));
        assert_eq!(value("steps.new.outputs.X || true"), json!(true));
        assert_eq!(value("vars.on ? 1 : steps.new.outputs.X"), json!(1));
        assert_eq!(run("steps.new.outputs.X ? 1 : 2").unwrap().0, None);
    }

    #[test]
    fn secrets_stay_sensitive_through_functions() {
        let (v, sensitive) = run("base64encode(vars.token)").unwrap();
        assert_eq!(v, Some(json!("aGZfc2VjcmV0X3Rva2Vu")));
        assert!(sensitive);
        assert!(run("length(vars.token) > 3").unwrap().1);
        assert!(!run("length(vars.azs)").unwrap().1);
    }

    #[test]
    fn indexing_with_a_secret_does_not_show_it() {
        let e = run("vars.azs[vars.token]").unwrap_err();
        assert!(!e.message.contains("hf_secret_token"), "{}", e.message);
    }

    #[test]
    fn a_function_failing_on_a_secret_does_not_quote_it() {
        let e = run(r#"format("%d", vars.token)"#).unwrap_err();
        assert!(!e.message.contains("hf_secret_token"), "{}", e.message);
        assert!(e.message.contains("secret argument"), "{}", e.message);
        let e = run(r#"format("%d", "plain")"#).unwrap_err();
        assert!(e.message.contains("plain"), "{}", e.message);
    }

    #[test]
    fn text_made_from_a_secret_is_remembered_for_masking() {
        let (value, taint) = run_tainted(r#"format("Bearer %s", upper(vars.token))"#);
        value.unwrap();
        assert!(taint.sensitive);
        assert_eq!(taint.derived, ["HF_SECRET_TOKEN", "Bearer HF_SECRET_TOKEN"]);
        let (value, taint) = run_tainted("upper(vars.cfg.name)");
        value.unwrap();
        assert!(!taint.sensitive && taint.derived.is_empty());
    }

    #[test]
    fn errors_point_at_their_part() {
        let e = run("vars.azs[5]").unwrap_err();
        assert!(
            e.message
                .contains("index 5 is past the end of the list, which has 2 items"),
            "{e:?}"
        );
        assert_eq!(e.span, 9..10);
        let e = run("vars.cfg.nmae").unwrap_err();
        assert_eq!(e.help.as_deref(), Some("did you mean `name`?"));
        let e = run("steps.vpc.outputs.Nope").unwrap_err();
        assert_eq!(e.code, "flow::bad-reference");
        assert!(e.message.contains("its outputs are: PrivateSubnets"));
        let e = run("join(\",\", vars.n)").unwrap_err();
        assert!(
            e.message
                .contains("argument 2 of `join` must be a list, found a number"),
            "{e:?}"
        );
        let e = run("element(vars.azs, -1)").unwrap_err();
        assert!(e.message.starts_with("`element`: "), "{e:?}");
        assert_eq!(e.span, 0..21);
    }

    #[test]
    fn template_files_render_with_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.sh.tpl");
        let body = "#!/bin/sh\nnodes=${nodes}\nname=${upper(name)}\nhome=$${HOME}\n";
        let names: Map<String, Value> =
            serde_json::from_value(json!({"nodes": 4, "name": "p5"})).unwrap();
        let out = render_template(&path, body, &names, &vars(), &dir.path().into()).unwrap();
        assert_eq!(out, "#!/bin/sh\nnodes=4\nname=P5\nhome=${HOME}\n");
        let e = render_template(&path, "a\n  ${nodez}", &names, &vars(), &dir.path().into())
            .unwrap_err();
        std::fs::write(&path, "x${templatefile(\"job.sh.tpl\", {})}").unwrap();
        let looping = std::fs::read_to_string(&path).unwrap();
        let e2 =
            render_template(&path, &looping, &Map::new(), &vars(), &dir.path().into()).unwrap_err();
        assert!(e2.contains("nest more than 16 deep"), "{e2}");
        assert!(
            e.contains(
                "job.sh.tpl:2:5: the template was given no name `nodez` (did you mean `nodes`?)"
            ),
            "{e}"
        );
    }
}
