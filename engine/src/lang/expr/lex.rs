//! Split the text of an expression into tokens, each with its byte range in
//! that text.

use std::ops::Range;

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    /// A name: letters, digits, `_` and `-`, not starting with a digit or `-`
    /// (as in HCL, so `a-b` is one name; write `a - b` to subtract).
    Ident(String),
    /// A whole number.
    Int(i64),
    /// A number with a fraction or exponent.
    Float(f64),
    /// A quoted string, escapes decoded.
    Str(String),
    /// An operator or punctuation, as written.
    Punct(&'static str),
}

impl Token {
    /// How the token reads in a message.
    pub fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("`{s}`"),
            Token::Int(i) => format!("`{i}`"),
            Token::Float(f) => format!("`{f}`"),
            Token::Str(s) => format!("\"{s}\""),
            Token::Punct(p) => format!("`{p}`"),
        }
    }
}

/// A malformed token.
#[derive(Debug, Clone, PartialEq)]
pub struct LexError {
    /// What is wrong.
    pub message: String,
    /// Where, in the expression's text.
    pub range: Range<usize>,
}

/// Longest first, so that `==` wins over `=`.
const PUNCTS: &[&str] = &[
    "==", "!=", "<=", ">=", "&&", "||", "(", ")", "[", "]", "{", "}", ",", ".", "?", ":", "=", "<",
    ">", "+", "-", "*", "/", "%", "!",
];

/// The tokens of `text`, each with its range.
pub fn tokens(text: &str) -> Result<Vec<(Token, Range<usize>)>, LexError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'-')
            {
                i += 1;
            }
            out.push((Token::Ident(text[start..i].to_string()), start..i));
        } else if c.is_ascii_digit() {
            let (token, end) = number(text, i)?;
            out.push((token, i..end));
            i = end;
        } else if c == b'"' {
            let (s, end) = string(text, i)?;
            out.push((Token::Str(s), i..end));
            i = end;
        } else if let Some(p) = PUNCTS.iter().find(|p| text[i..].starts_with(**p)) {
            out.push((Token::Punct(p), i..i + p.len()));
            i += p.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(LexError {
                message: format!("`{ch}` cannot appear in an expression"),
                range: i..i + ch.len_utf8(),
            });
        }
    }
    Ok(out)
}

fn number(text: &str, start: usize) -> Result<(Token, usize), LexError> {
    let bytes = text.as_bytes();
    let mut i = start;
    let digits = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    let mut float = false;
    if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
        float = true;
        i += 1;
        digits(&mut i);
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        if j < bytes.len() && bytes[j].is_ascii_digit() {
            float = true;
            i = j;
            digits(&mut i);
        }
    }
    let written = &text[start..i];
    let bad = |what: &str| LexError {
        message: format!("`{written}` is {what}"),
        range: start..i,
    };
    let token = if float {
        Token::Float(written.parse().map_err(|_| bad("not a number"))?)
    } else {
        Token::Int(
            written
                .parse()
                .map_err(|_| bad("too large for a whole number"))?,
        )
    };
    Ok((token, i))
}

fn string(text: &str, start: usize) -> Result<(String, usize), LexError> {
    let mut out = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((off, ch)) = chars.next() {
        let at = start + 1 + off;
        match ch {
            '"' => return Ok((out, at + 1)),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, 'r')) => out.push('\r'),
                Some((_, '"')) => out.push('"'),
                Some((_, '\\')) => out.push('\\'),
                Some((off2, other)) => {
                    return Err(LexError {
                        message: format!("`\\{other}` is not an escape a string knows"),
                        range: at..start + 1 + off2 + other.len_utf8(),
                    });
                }
                None => break,
            },
            _ => out.push(ch),
        }
    }
    Err(LexError {
        message: "unterminated string in expression".into(),
        range: start..text.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Token> {
        tokens(text).unwrap().into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn names_numbers_strings_and_operators() {
        assert_eq!(
            kinds(r#"split(",", vars.my-subnets)[0] >= 2.5e1 && !x"#),
            vec![
                Token::Ident("split".into()),
                Token::Punct("("),
                Token::Str(",".into()),
                Token::Punct(","),
                Token::Ident("vars".into()),
                Token::Punct("."),
                Token::Ident("my-subnets".into()),
                Token::Punct(")"),
                Token::Punct("["),
                Token::Int(0),
                Token::Punct("]"),
                Token::Punct(">="),
                Token::Float(25.0),
                Token::Punct("&&"),
                Token::Punct("!"),
                Token::Ident("x".into()),
            ]
        );
    }

    #[test]
    fn ranges_point_into_the_text() {
        let t = tokens(r#"a == "b\"c""#).unwrap();
        assert_eq!(t[1].1, 2..4);
        assert_eq!(t[2], (Token::Str("b\"c".into()), 5..11));
    }

    #[test]
    fn subtraction_needs_spaces_around_the_minus() {
        assert_eq!(kinds("a-b").len(), 1);
        assert_eq!(kinds("a - b").len(), 3);
        assert_eq!(
            kinds("2-1"),
            vec![Token::Int(2), Token::Punct("-"), Token::Int(1)]
        );
    }

    #[test]
    fn bad_tokens_are_errors() {
        assert_eq!(tokens("a @ b").unwrap_err().range, 2..3);
        assert!(
            tokens(r#""open"#)
                .unwrap_err()
                .message
                .contains("unterminated")
        );
        assert!(tokens(r#""\q""#).unwrap_err().message.contains("`\\q`"));
        assert!(tokens("99999999999999999999").is_err());
    }
}
