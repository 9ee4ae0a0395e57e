//! Find the `${…}` expressions in a piece of text: literal text and the
//! ranges of the expressions' bodies, before any of them is parsed.

use std::ops::Range;

/// One piece of a text.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Literal text (`$${` already turned into `${`).
    Lit(String),
    /// An expression: the range of its body (inside `${` and `}`) and of
    /// the whole `${…}`.
    Expr {
        /// Inside the braces.
        body: Range<usize>,
        /// With `${` and `}`.
        whole: Range<usize>,
    },
}

/// Which `${…}` are expressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In a workflow's strings, which often hold shell scripts: only a body
    /// that starts with a name and a dot or a parenthesis (`${vars.x}`,
    /// `${join(…)}`, after any `!`, `-`, `(` or `[`) is an expression. Shell
    /// syntax such as `${HOME}`, `${#ARGS}` or `${VAR:-x}` stays as written.
    Workflow,
    /// In a template file: every `${…}` is an expression.
    Template,
}

/// A `${` without its `}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unterminated {
    /// From the `${` to the end of the text.
    pub range: Range<usize>,
}

/// Split `text` into pieces. `$${` is a literal `${`; any other `$` is kept.
pub fn split(text: &str, mode: Mode) -> Result<Vec<Piece>, Unterminated> {
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if rest.starts_with("$${") {
            lit.push_str("${");
            i += 3;
        } else if rest.starts_with("${") {
            let body_start = i + 2;
            let expression = mode == Mode::Template || looks_like_expression(&text[body_start..]);
            let close = if expression {
                matching_brace(&text[body_start..])
            } else {
                text[body_start..].find('}')
            };
            let Some(close) = close else {
                return Err(Unterminated {
                    range: i..text.len(),
                });
            };
            let body = body_start..body_start + close;
            if expression {
                if !lit.is_empty() {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(Piece::Expr {
                    body: body.clone(),
                    whole: i..body.end + 1,
                });
            } else {
                lit.push_str(&text[i..body.end + 1]);
            }
            i = body.end + 1;
        } else {
            let ch = rest.chars().next().unwrap_or('\0');
            lit.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    if !lit.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Lit(lit));
    }
    Ok(pieces)
}

/// Whether a `${` body is an expression rather than shell syntax.
fn looks_like_expression(body: &str) -> bool {
    let body =
        body.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '!' | '(' | '-' | '['));
    let name_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(body.len());
    name_len > 0
        && body.as_bytes()[0].is_ascii_alphabetic()
        && matches!(body.as_bytes().get(name_len), Some(b'.' | b'('))
}

/// The offset of the `}` that closes an expression body, skipping braces
/// inside nested tables and quoted strings.
fn matching_brace(body: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bodies(text: &str, mode: Mode) -> Vec<&str> {
        split(text, mode)
            .unwrap()
            .into_iter()
            .filter_map(|p| match p {
                Piece::Expr { body, .. } => Some(&text[body]),
                Piece::Lit(_) => None,
            })
            .collect()
    }

    #[test]
    fn shell_syntax_stays_literal_in_workflows() {
        for text in [
            "echo ${HOME}",
            "n=${#ARGS}",
            "x=${VAR:-default.txt}",
            "${1}",
            "${AWS::StackName}",
        ] {
            assert_eq!(
                split(text, Mode::Workflow).unwrap(),
                vec![Piece::Lit(text.into())]
            );
        }
    }

    #[test]
    fn expressions_are_found_with_nested_braces_and_strings() {
        assert_eq!(
            bodies(
                r#"a ${merge(vars.t, { x = "}" })} b ${vars.y}"#,
                Mode::Workflow
            ),
            vec![r#"merge(vars.t, { x = "}" })"#, "vars.y"]
        );
        assert_eq!(
            bodies("${!vars.on ? 1 : 2}", Mode::Workflow),
            vec!["!vars.on ? 1 : 2"]
        );
        assert_eq!(bodies("${var.x}", Mode::Workflow), vec!["var.x"]);
        assert_eq!(
            bodies("${[vars.a, vars.b]}", Mode::Workflow),
            vec!["[vars.a, vars.b]"]
        );
        assert_eq!(
            bodies("${name} and ${HOME}", Mode::Template),
            vec!["name", "HOME"]
        );
    }

    #[test]
    fn escapes_and_unterminated() {
        assert_eq!(
            split("$${vars.x}", Mode::Workflow).unwrap(),
            vec![Piece::Lit("${vars.x}".into())]
        );
        assert_eq!(
            split("x ${vars.a", Mode::Workflow).unwrap_err().range,
            2..10
        );
        assert_eq!(
            split("${join(\"}\"", Mode::Workflow).unwrap_err().range,
            0..10
        );
    }
}
