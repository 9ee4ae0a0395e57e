//! The check of an expression before anything runs: the type of each part
//! as far as it is known, against the functions' signatures and the
//! operators' operands.

use super::ast::{BinaryOp, Expr, ExprKind, RefTarget, UnaryOp};
use super::functions::{self, Function};
pub use super::ty::Ty;
use crate::diag::Span;
use flow_providers::suggest::closest;

/// A problem found by [`check`].
#[derive(Debug, Clone, PartialEq)]
pub struct TypeProblem {
    /// What is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
    /// How to fix it.
    pub help: String,
}

/// The type of `expr`, with every problem that is certain before anything
/// runs pushed onto `problems`: an unknown function (with the closest
/// name), a wrong number of arguments, an argument or operand of a type
/// the function or operator refuses. `var_type` gives a variable's type
/// when it is declared.
pub fn check(
    expr: &Expr,
    var_type: &dyn Fn(&str) -> Option<Ty>,
    problems: &mut Vec<TypeProblem>,
) -> Ty {
    let ty = |e: &Expr, problems: &mut Vec<TypeProblem>| check(e, var_type, problems);
    match &expr.kind {
        ExprKind::Literal(v) => Ty::of(v),
        ExprKind::Ref(r) => match &r.target {
            RefTarget::Var(name) => var_type(name).unwrap_or(Ty::Any),
            RefTarget::Each(super::ast::EachField::Key) => Ty::String,
            RefTarget::Output { .. }
            | RefTarget::Local(_)
            | RefTarget::Each(_)
            | RefTarget::Input(_)
            | RefTarget::ModuleOutput { .. } => Ty::Any,
        },
        ExprKind::List(items) => {
            items.iter().for_each(|e| {
                ty(e, problems);
            });
            Ty::List
        }
        ExprKind::Table(entries) => {
            entries.iter().for_each(|(_, e)| {
                ty(e, problems);
            });
            Ty::Table
        }
        ExprKind::Attr(e, key) => {
            let t = ty(e, problems);
            if !t.fits(&[Ty::Table]) {
                problems.push(TypeProblem {
                    message: format!(
                        "`.{key}` reads a key of a table, but this is {}",
                        t.phrase()
                    ),
                    span: expr.span.clone(),
                    help: "use `.KEY` on tables only; a list takes `[INDEX]`".into(),
                });
            }
            Ty::Any
        }
        ExprKind::Index(e, i) => {
            let t = ty(e, problems);
            let it = ty(i, problems);
            if !t.fits(&[Ty::List, Ty::Table]) {
                problems.push(TypeProblem {
                    message: format!("`[…]` reads a list or a table, but this is {}", t.phrase()),
                    span: expr.span.clone(),
                    help: "index lists and tables only".into(),
                });
            } else if t == Ty::List && !it.fits(&[Ty::Number]) {
                problems.push(TypeProblem {
                    message: format!("a list's index must be a number, found {}", it.phrase()),
                    span: i.span.clone(),
                    help: "lists are indexed from 0: `[0]`".into(),
                });
            }
            Ty::Any
        }
        ExprKind::Unary(op, e) => {
            let t = ty(e, problems);
            let (want, what, help) = match op {
                UnaryOp::Not => (
                    Ty::Bool,
                    "`!` negates a boolean",
                    "compare it first: `!(vars.n > 0)`",
                ),
                UnaryOp::Neg => (
                    Ty::Number,
                    "`-` negates a number",
                    "use a number, or a variable of type number",
                ),
            };
            if t != Ty::Any && t != want {
                problems.push(TypeProblem {
                    message: format!("{what}, but this is {}", t.phrase()),
                    span: e.span.clone(),
                    help: help.into(),
                });
            }
            want
        }
        ExprKind::Binary(op, a, b) => {
            let (ta, tb) = (ty(a, problems), ty(b, problems));
            let want = match op {
                BinaryOp::Or | BinaryOp::And => Some(Ty::Bool),
                BinaryOp::Eq | BinaryOp::Ne => None,
                _ => Some(Ty::Number),
            };
            if let Some(want) = want {
                for (t, e) in [(ta, a), (tb, b)] {
                    if t != Ty::Any && t != want {
                        problems.push(operand_problem(*op, want, t, &e.span));
                    }
                }
            }
            match op {
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
                    Ty::Number
                }
                _ => Ty::Bool,
            }
        }
        ExprKind::Cond(c, a, b) => {
            let tc = ty(c, problems);
            if tc != Ty::Any && tc != Ty::Bool {
                problems.push(TypeProblem {
                    message: format!(
                        "the condition of `? :` must be a boolean, found {}",
                        tc.phrase()
                    ),
                    span: c.span.clone(),
                    help: "compare it: `vars.n > 0 ? … : …`".into(),
                });
            }
            let (ta, tb) = (ty(a, problems), ty(b, problems));
            if ta == tb { ta } else { Ty::Any }
        }
        ExprKind::Call(call) => {
            let arg_types: Vec<Ty> = call.args.iter().map(|e| ty(e, problems)).collect();
            let Some(f) = functions::find(&call.name) else {
                let help = match closest(&call.name, functions::names()) {
                    Some(name) => format!(
                        "did you mean `{name}`? see \"Functions\" in docs/workflow-language.md"
                    ),
                    None => format!(
                        "the functions are: {}",
                        functions::names().collect::<Vec<_>>().join(", ")
                    ),
                };
                problems.push(TypeProblem {
                    message: format!("unknown function `{}`", call.name),
                    span: call.name_span.clone(),
                    help,
                });
                return Ty::Any;
            };
            if let Some(p) = arity_problem(f, call.args.len(), &expr.span) {
                problems.push(p);
                return f.result;
            }
            for (i, (t, e)) in arg_types.iter().zip(&call.args).enumerate() {
                let accepted = f.accepts(i);
                if !t.fits(accepted) {
                    problems.push(TypeProblem {
                        message: format!(
                            "argument {} of `{}` must be {}, found {}",
                            i + 1,
                            f.name,
                            accepted
                                .iter()
                                .map(|a| a.phrase())
                                .collect::<Vec<_>>()
                                .join(" or "),
                            t.phrase()
                        ),
                        span: e.span.clone(),
                        help: format!("`{}`", f.signature),
                    });
                }
            }
            f.result
        }
    }
}

fn operand_problem(op: BinaryOp, want: Ty, found: Ty, span: &Span) -> TypeProblem {
    let help = match (op, found) {
        (BinaryOp::Add, Ty::String) => {
            "to join text, write both in one string (\"${a}${b}\") or use format()"
        }
        (_, _) if want == Ty::Bool => "compare it first: `vars.n > 0 && …`",
        _ => "convert it, or use a number",
    };
    TypeProblem {
        message: format!(
            "`{}` takes {}s, found {}",
            op.symbol(),
            want.phrase().trim_start_matches("a "),
            found.phrase()
        ),
        span: span.clone(),
        help: help.into(),
    }
}

/// The problem with calling `f` with `n` arguments, if any.
pub fn arity_problem(f: &Function, n: usize, span: &Span) -> Option<TypeProblem> {
    if n >= f.min && (f.variadic || n <= f.params.len()) {
        return None;
    }
    let wanted = match (f.variadic, f.min == f.params.len()) {
        (true, _) => format!("at least {}", f.min),
        (false, true) => f.min.to_string(),
        (false, false) => format!("{} to {}", f.min, f.params.len()),
    };
    Some(TypeProblem {
        message: format!(
            "`{}` takes {wanted} argument{}, given {n}",
            f.name,
            if wanted == "1" { "" } else { "s" }
        ),
        span: span.clone(),
        help: format!("`{}`", f.signature),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::expr::parse::{Names, parse};

    fn problems(text: &str) -> Vec<TypeProblem> {
        let e = parse(text, &|r| r, Names::Workflow).unwrap();
        let mut out = Vec::new();
        let var_type = |name: &str| match name {
            "n" => Some(Ty::Number),
            "s" => Some(Ty::String),
            "l" => Some(Ty::List),
            _ => None,
        };
        check(&e, &var_type, &mut out);
        out
    }

    #[test]
    fn good_expressions_have_no_problems() {
        for text in [
            r#"split(",", steps.vpc.outputs.Subnets)"#,
            r#"join("-", vars.l)"#,
            r#"vars.n > 2 ? "big" : "small""#,
            r#"format("%s-%d", vars.s, vars.n + 1)"#,
            "length(vars.l) * 2",
            r#"lookup({ a = 1 }, "a", 0)"#,
            "upper(vars.n)",
        ] {
            assert_eq!(problems(text), vec![], "{text}");
        }
    }

    #[test]
    fn unknown_functions_suggest_the_closest() {
        let p = problems("splti(\",\", vars.s)");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].message, "unknown function `splti`");
        assert!(p[0].help.contains("did you mean `split`?"));
        assert_eq!(p[0].span, 0..5);
    }

    #[test]
    fn arity_and_argument_types() {
        let p = problems("split(vars.s)");
        assert_eq!(p[0].message, "`split` takes 2 arguments, given 1");
        assert!(p[0].help.contains("split(separator, text)"));
        let p = problems("range(1, 2, 3, 4)");
        assert_eq!(p[0].message, "`range` takes 1 to 3 arguments, given 4");
        let p = problems("join(\",\", vars.s)");
        assert_eq!(
            p[0].message,
            "argument 2 of `join` must be a list, found a string"
        );
        assert_eq!(p[0].span, 10..16);
    }

    #[test]
    fn operators_check_their_operands() {
        assert!(
            problems("vars.s + 1")[0]
                .message
                .contains("`+` takes numbers, found a string")
        );
        assert!(
            problems("vars.n && true")[0]
                .message
                .contains("`&&` takes booleans")
        );
        assert!(problems("vars.s ? 1 : 2")[0].message.contains("condition"));
        assert!(
            problems("!vars.n")[0]
                .message
                .contains("`!` negates a boolean")
        );
        assert!(
            problems("vars.s[0]")[0]
                .message
                .contains("reads a list or a table")
        );
    }
}
