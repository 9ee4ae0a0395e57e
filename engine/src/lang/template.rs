//! `${...}` interpolation inside strings: split a string into literal text
//! and references.

use super::ast::{Part, RefTarget, Reference, Template};
use crate::diag::Span;

/// A malformed `${...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateError {
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
}

impl Placement {
    fn span(&self, range: std::ops::Range<usize>) -> Span {
        match self.exact {
            Some(base) => base + range.start..base + range.end,
            None => self.whole.clone(),
        }
    }
}

const HELP: &str =
    "a reference is `${vars.NAME}` or `${steps.STEP.outputs.KEY}`; write `$${` for a literal `${`";

/// Split `text` into parts. `$${` is a literal `${`; any other `$` is kept.
/// A `${...}` whose body does not start with a name and a dot (`${HOME}`,
/// `${#ARGS}`, `${VAR:-x}`) is shell syntax and kept as written; one that does
/// (`${vars.x}`, `${steps.a.outputs.b}`, and typos such as `${var.x}`) is a
/// reference.
pub fn parse(text: &str, at: &Placement) -> Result<Template, TemplateError> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if text[i..].starts_with("$${") {
            lit.push_str("${");
            i += 3;
        } else if text[i..].starts_with("${") {
            let Some(close) = text[i + 2..].find('}') else {
                return Err(TemplateError {
                    message: "unterminated `${` in string".into(),
                    span: at.span(i..text.len()),
                    help: "close the reference with `}`, or write `$${` for a literal `${`".into(),
                });
            };
            let body_range = i + 2..i + 2 + close;
            if !looks_like_reference(&text[body_range.clone()]) {
                lit.push_str(&text[i..body_range.end + 1]);
                i = body_range.end + 1;
                continue;
            }
            let span = at.span(i..body_range.end + 1);
            let target = parse_target(text[body_range].trim()).ok_or_else(|| TemplateError {
                message: format!("`{}` is not a reference", &text[i..i + 3 + close]),
                span: span.clone(),
                help: HELP.into(),
            })?;
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(Part::Ref(Reference { target, span }));
            i += 3 + close;
        } else {
            let ch = text[i..].chars().next().unwrap_or('\0');
            lit.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    if !lit.is_empty() || parts.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(Template { parts })
}

/// Whether `s` is a valid step or variable name.
pub fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether a `${...}` body is meant as a reference: a name followed by a dot.
fn looks_like_reference(body: &str) -> bool {
    let body = body.trim_start();
    let name_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(body.len());
    name_len > 0 && body[name_len..].starts_with('.')
}

fn parse_target(body: &str) -> Option<RefTarget> {
    if let Some(name) = body.strip_prefix("vars.") {
        return is_name(name).then(|| RefTarget::Var(name.to_string()));
    }
    let rest = body.strip_prefix("steps.")?;
    let (step, rest) = rest.split_once('.')?;
    let key = rest.strip_prefix("outputs.")?;
    (is_name(step) && !key.is_empty() && !key.contains(char::is_whitespace)).then(|| {
        RefTarget::Output {
            step: step.to_string(),
            key: key.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(text: &str) -> Result<Template, TemplateError> {
        parse(
            text,
            &Placement {
                whole: 0..text.len() + 2,
                exact: Some(1),
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
