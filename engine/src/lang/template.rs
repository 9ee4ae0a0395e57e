//! `${...}` interpolation inside strings: split a string into literal text
//! and expressions (`expr`), with spans in the workflow file.

use super::ast::{Part, Template};
use super::expr::ast::{Expr, ExprKind};
use super::expr::interp::{Mode, Piece, split};
use super::expr::parse::{Names, ParseErrorKind, parse as parse_expr};
use crate::diag::Span;

/// A malformed `${...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateError {
    /// The diagnostic code: `flow::bad-reference` for something that is not
    /// a reference or is not closed, `flow::bad-expression` for the rest.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
    /// How to fix it.
    pub help: String,
}

/// Where the decoded text sits in the file: `exact` when byte `i` of the text
/// is byte `start + i` of the file (no escapes), else only the whole string's span.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The whole string value's span (with quotes).
    pub whole: Span,
    /// The file offset of the text's first byte, when offsets map one to one.
    pub exact: Option<usize>,
    /// Otherwise, when the string has escapes (`\"`, `\n`): the file offset
    /// of each byte of the text, and one past its end.
    pub offsets: Option<std::sync::Arc<Vec<usize>>>,
}

impl Placement {
    /// The file span of `range` of the text.
    pub fn span(&self, range: std::ops::Range<usize>) -> Span {
        match (self.exact, &self.offsets) {
            (Some(base), _) => base + range.start..base + range.end,
            (None, Some(map)) if range.end < map.len() => map[range.start]..map[range.end],
            _ => self.whole.clone(),
        }
    }
}

const HELP: &str =
    "a reference is `${vars.NAME}` or `${steps.STEP.outputs.KEY}`; write `$${` for a literal `${`";

/// Split `text` into literal parts and expressions. `$${` is a literal `${`;
/// any other `$` is kept. A `${...}` whose body does not start with a name
/// and a dot or a parenthesis (`${HOME}`, `${#ARGS}`, `${VAR:-x}`) is shell
/// syntax and kept as written; one that does (`${vars.x}`,
/// `${join(",", vars.azs)}`, and typos such as `${var.x}`) is an expression.
pub fn parse(text: &str, at: &Placement) -> Result<Template, TemplateError> {
    let pieces = split(text, Mode::Workflow).map_err(|u| TemplateError {
        code: "flow::bad-reference",
        message: "unterminated `${` in string".into(),
        span: at.span(u.range),
        help: "close the reference with `}`, or write `$${` for a literal `${`".into(),
    })?;
    let mut parts = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match piece {
            Piece::Lit(s) => parts.push(Part::Lit(s)),
            Piece::Expr { body, whole } => {
                let base = body.start;
                let map = |r: std::ops::Range<usize>| at.span(base + r.start..base + r.end);
                let expr =
                    parse_expr(&text[body], &map, Names::Workflow).map_err(|e| match e.kind {
                        ParseErrorKind::NotAReference => TemplateError {
                            code: "flow::bad-reference",
                            message: format!("`{}` is not a reference", &text[whole.clone()]),
                            span: at.span(whole.clone()),
                            help: if e.help.contains("did you mean")
                                || e.help.contains("write `outputs`")
                            {
                                format!("{}; write `$${{` for a literal `${{`", e.help)
                            } else {
                                HELP.into()
                            },
                        },
                        ParseErrorKind::Syntax => TemplateError {
                            code: "flow::bad-expression",
                            message: e.message,
                            span: e.span,
                            help: e.help,
                        },
                    })?;
                parts.push(Part::Expr(widen_plain_reference(expr, at.span(whole))));
            }
        }
    }
    Ok(Template { parts })
}

/// A `${…}` that is one plain reference points at the whole `${…}`, as
/// references always have; an expression's parts keep their own spans.
fn widen_plain_reference(mut expr: Expr, whole: Span) -> Expr {
    if let ExprKind::Ref(r) = &mut expr.kind {
        r.span = whole.clone();
        expr.span = whole;
    }
    expr
}

/// Whether `s` is a valid step or variable name.
pub fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::ast::RefTarget;

    fn exact(text: &str) -> Result<Template, TemplateError> {
        parse(
            text,
            &Placement {
                whole: 0..text.len() + 2,
                exact: Some(1),
                offsets: None,
            },
        )
    }

    #[test]
    fn plain_text_and_shell_dollars_stay() {
        let t = exact("echo $HOME and $1").unwrap();
        assert_eq!(t.as_literal().unwrap(), "echo $HOME and $1");
    }

    #[test]
    fn shell_braces_stay() {
        for text in [
            "echo ${HOME}",
            "n=${#ARGS}",
            "x=${VAR:-default.txt}",
            "${1}",
        ] {
            let t = exact(text).unwrap();
            assert_eq!(t.as_literal().unwrap(), text);
        }
        assert!(exact("${var.x}").is_err());
    }

    #[test]
    fn escaped_reference_is_literal() {
        let t = exact("echo $${vars.x}").unwrap();
        assert_eq!(t.as_literal().unwrap(), "echo ${vars.x}");
    }

    #[test]
    fn references_split_with_spans() {
        let t = exact("${vars.name}-vpc/${steps.vpc.outputs.Subnet.Id}").unwrap();
        assert_eq!(t.parts.len(), 3);
        let refs: Vec<_> = t.refs().collect();
        assert_eq!(refs[0].target, RefTarget::Var("name".into()));
        assert_eq!(refs[0].span, 1..13);
        assert_eq!(
            refs[1].target,
            RefTarget::Output {
                step: "vpc".into(),
                key: "Subnet.Id".into()
            }
        );
        assert!(exact("${vars.x}").unwrap().single_ref().is_some());
        assert!(exact("a${vars.x}").unwrap().single_ref().is_none());
    }

    #[test]
    fn bad_references_are_errors() {
        let e = exact("x ${env.HOME}").unwrap_err();
        assert!(e.message.contains("not a reference"), "{e:?}");
        assert_eq!(e.span, 3..14);
        assert!(
            exact("x ${vars.a")
                .unwrap_err()
                .message
                .contains("unterminated")
        );
        assert!(exact("${steps.a.out.b}").is_err());
        assert!(exact("${vars.}").is_err());
    }

    #[test]
    fn inexact_placement_points_at_whole_string() {
        let e = parse(
            "\\t${oops.x}",
            &Placement {
                whole: 10..22,
                exact: None,
                offsets: None,
            },
        )
        .unwrap_err();
        assert_eq!(e.span, 10..22);
    }

    #[test]
    fn names() {
        assert!(is_name("vpc_1-a"));
        assert!(!is_name("1vpc"));
        assert!(!is_name("a.b"));
        assert!(!is_name(""));
    }
}
