//! TOML text → spanned [`Node`]s, with every syntax error as a diagnostic.

use toml::de::{DeTable, DeValue};

use super::ast::{Entry, Node, NodeKind, Template};
use super::template::{self, Placement};
use crate::diag::{Diag, Diagnostics, Source};

/// Parse a whole TOML document into its top-level entries. Syntax errors and
/// malformed `${...}` references are reported together. A large file is
/// parsed in pieces at once where that cannot change what it means
/// ([`super::toml_pieces`]).
pub fn parse_document(source: &Source) -> (Vec<Entry>, Diagnostics) {
    if let Some(entries) = super::toml_pieces::parse_in_pieces(source, convert_table) {
        return (entries, Diagnostics::default());
    }
    parse_whole(source)
}

/// [`parse_document`] in one piece.
pub(super) fn parse_whole(source: &Source) -> (Vec<Entry>, Diagnostics) {
    let mut diags = Diagnostics::default();
    let (table, errors) = DeTable::parse_recoverable(&source.text);
    for d in syntax_diags(source, &errors) {
        diags.push(d);
    }
    if !diags.is_empty() {
        return (Vec::new(), diags);
    }
    let entries = convert_table(source, table.get_ref(), 0, &mut diags);
    (entries, diags)
}

/// One diagnostic per TOML error, in file order. A table defined twice is
/// reported once (not again for every key inside it), pointing at both
/// definitions; a bare word where a value belongs gets a plain explanation.
fn syntax_diags(source: &Source, errors: &[toml::de::Error]) -> Vec<Diag> {
    let text = source.text.as_str();
    let mut errors: Vec<&toml::de::Error> = errors.iter().collect();
    errors.sort_by_key(|e| e.span().map_or(0, |s| s.start));
    let mut skip_until = 0;
    let mut out = Vec::new();
    for err in errors {
        let span = err.span().unwrap_or(0..0);
        let message = err.message().trim().to_string();
        if message.starts_with("duplicate key") {
            if span.start < skip_until {
                continue;
            }
            let (line_start, line) = line_at(text, span.start);
            let key = text.get(span.clone()).unwrap_or("").trim().to_string();
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                // Everything up to the next table header belongs to the duplicate.
                skip_until = next_header(text, line_start + line.len());
                let name = trimmed.trim_matches(|c| c == '[' || c == ']').trim();
                let mut d = Diag::new("flow::duplicate-name", format!("`{name}` is defined twice"))
                    .in_source(source)
                    .label(span, "defined again here");
                if let Some(first) = find_line(text, trimmed, line_start) {
                    d = d.label(first, "first defined here");
                }
                out.push(
                    d.help("every table may appear once; rename one of them or merge the two"),
                );
            } else {
                let mut d = Diag::new(
                    "flow::duplicate-name",
                    format!("`{key}` is set twice in the same table"),
                )
                .in_source(source)
                .label(span, "set again here");
                if let Some(first) = find_key_before(text, &key, line_start) {
                    d = d.label(first, "first set here");
                }
                out.push(d.help("every key may appear once in a table; remove one of them"));
            }
            continue;
        }
        if let Some(word) = bare_word(text, span.start) {
            out.push(
                Diag::new("flow::toml-syntax", format!("`{word}` is not a TOML value"))
                    .in_source(source)
                    .label(span.start..span.start + word.len(), "a bare word")
                    .help(format!(
                        "strings need quotes: \"{word}\"; booleans are true and false"
                    )),
            );
            continue;
        }
        out.push(
            Diag::new("flow::toml-syntax", format!("invalid TOML: {message}"))
                .in_source(source)
                .label(span, message)
                .help("see https://toml.io for the syntax"),
        );
    }
    out
}

/// The start offset and text (without newline) of the line holding `offset`.
fn line_at(text: &str, offset: usize) -> (usize, &str) {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    (start, &text[start..end])
}

/// The offset of the next line starting with `[` at or after `from`.
fn next_header(text: &str, from: usize) -> usize {
    let mut pos = from;
    for line in text[from.min(text.len())..].split_inclusive('\n') {
        if line.trim_start().starts_with('[') {
            return pos;
        }
        pos += line.len();
    }
    text.len()
}

/// The span of the first line before `before` whose trimmed text is `wanted`.
fn find_line(text: &str, wanted: &str, before: usize) -> Option<Span> {
    let mut pos = 0;
    for line in text[..before].split_inclusive('\n') {
        if line.trim() == wanted {
            let lead = line.len() - line.trim_start().len();
            return Some(pos + lead..pos + lead + wanted.len());
        }
        pos += line.len();
    }
    None
}

/// The span of `key` set earlier in the same table as the line at `before`.
fn find_key_before(text: &str, key: &str, before: usize) -> Option<Span> {
    let head = &text[..before];
    let table_start = head
        .rmatch_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| text[i..].trim_start().starts_with('['))
        .unwrap_or(0);
    let mut pos = table_start;
    for line in text[table_start..before].split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            let lead = line.len() - trimmed.len();
            return Some(pos + lead..pos + lead + key.len());
        }
        pos += line.len();
    }
    None
}

/// The word at `offset` when it is a bare word where a value belongs (after
/// the `=` of its line).
fn bare_word(text: &str, offset: usize) -> Option<&str> {
    let rest = text.get(offset..)?;
    let len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(rest.len());
    let word = &rest[..len];
    let (line_start, line) = line_at(text, offset);
    let after_equals = line.find('=').is_some_and(|i| line_start + i < offset);
    (after_equals
        && word.starts_with(|c: char| c.is_ascii_alphabetic())
        && !matches!(word, "true" | "false" | "inf" | "nan"))
    .then_some(word)
}

type Span = std::ops::Range<usize>;

/// `table`'s entries, parsed from the text of `source` that starts at
/// offset `base` (0 for the whole file; a piece's start otherwise).
pub(super) fn convert_table(
    source: &Source,
    table: &DeTable<'_>,
    base: usize,
    diags: &mut Diagnostics,
) -> Vec<Entry> {
    table
        .iter()
        .map(|(k, v)| Entry {
            key: k.get_ref().to_string(),
            key_span: shifted(k.span(), base),
            value: convert_value(source, v.get_ref(), shifted(v.span(), base), base, diags),
        })
        .collect()
}

fn shifted(span: Span, base: usize) -> Span {
    span.start + base..span.end + base
}

fn convert_value(
    source: &Source,
    value: &DeValue<'_>,
    span: std::ops::Range<usize>,
    base: usize,
    diags: &mut Diagnostics,
) -> Node {
    let kind = match value {
        DeValue::String(s) => {
            let placement = placement(&source.text, span.clone(), s);
            match template::parse(s, &placement) {
                Ok(t) => NodeKind::Str(t),
                Err(e) => {
                    diags.push(
                        Diag::new(e.code, e.message)
                            .in_source(source)
                            .label(e.span, "here")
                            .help(e.help),
                    );
                    NodeKind::Str(Template::literal(s))
                }
            }
        }
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => NodeKind::Int(n),
            Err(_) => {
                diags.push(
                    Diag::new("flow::toml-syntax", "integer out of range")
                        .in_source(source)
                        .label(span.clone(), "does not fit in 64 bits")
                        .help("integers range from -9223372036854775808 to 9223372036854775807"),
                );
                NodeKind::Int(0)
            }
        },
        DeValue::Float(f) => {
            NodeKind::Float(f.as_str().replace('_', "").parse().unwrap_or(f64::NAN))
        }
        DeValue::Boolean(b) => NodeKind::Bool(*b),
        DeValue::Datetime(d) => NodeKind::Datetime(d.to_string()),
        DeValue::Array(items) => NodeKind::Array(
            items
                .iter()
                .map(|v| convert_value(source, v.get_ref(), shifted(v.span(), base), base, diags))
                .collect(),
        ),
        DeValue::Table(t) => NodeKind::Table(convert_table(source, t, base, diags)),
    };
    Node { span, kind }
}

/// Where a decoded string's bytes sit in the file.
fn placement(text: &str, span: std::ops::Range<usize>, decoded: &str) -> Placement {
    let raw = text.get(span.clone()).unwrap_or("");
    let (open, close) = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
        (3, 3)
    } else {
        (1, 1)
    };
    let mut start = span.start + open;
    let end = span.end.saturating_sub(close).max(start);
    let mut inner = text.get(start..end).unwrap_or("");
    if open == 3 {
        if let Some(rest) = inner.strip_prefix("\r\n") {
            inner = rest;
            start += 2;
        } else if let Some(rest) = inner.strip_prefix('\n') {
            inner = rest;
            start += 1;
        }
    }
    let exact = (inner == decoded).then_some(start);
    let offsets = match exact {
        None if open == 1 && raw.starts_with('"') => escaped_offsets(inner, start, decoded),
        _ => None,
    };
    Placement {
        whole: span,
        exact,
        offsets: offsets.map(std::sync::Arc::new),
    }
}

/// For a one-line basic string whose raw text `inner` (at file offset
/// `start`) has escapes: the file offset of each byte of `decoded`, and one
/// past the end. `None` when decoding here does not give `decoded`.
fn escaped_offsets(inner: &str, start: usize, decoded: &str) -> Option<Vec<usize>> {
    let mut text = String::with_capacity(decoded.len());
    let mut offsets = Vec::with_capacity(decoded.len() + 1);
    let mut chars = inner.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let ch = if c == '\\' {
            let (_, e) = chars.next()?;
            match e {
                'b' => '\u{8}',
                't' => '\t',
                'n' => '\n',
                'f' => '\u{c}',
                'r' => '\r',
                'e' => '\u{1b}',
                '"' => '"',
                '\\' => '\\',
                'x' | 'u' | 'U' => {
                    let digits = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let mut hex = String::new();
                    for _ in 0..digits {
                        hex.push(chars.next()?.1);
                    }
                    char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
                }
                _ => return None,
            }
        } else {
            c
        };
        for _ in 0..ch.len_utf8() {
            offsets.push(start + at);
        }
        text.push(ch);
    }
    offsets.push(start + inner.len());
    (text == decoded).then_some(offsets)
}

/// A short description of a node's type, for "expected X, found Y".
pub fn type_name(node: &Node) -> &'static str {
    match node.kind {
        NodeKind::Str(_) => "a string",
        NodeKind::Int(_) => "an integer",
        NodeKind::Float(_) => "a float",
        NodeKind::Bool(_) => "a boolean",
        NodeKind::Datetime(_) => "a date-time",
        NodeKind::Array(_) => "an array",
        NodeKind::Table(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_references_point_into_the_file() {
        let src = Source::new("w.toml", "a = \"x-${vars.y}\"\nb = '${vars.z}'\n");
        let (entries, diags) = parse_document(&src);
        assert!(diags.is_empty());
        let NodeKind::Str(t) = &entries[0].value.kind else {
            panic!()
        };
        let r = t.refs().next().unwrap();
        assert_eq!(&src.text[r.span.clone()], "${vars.y}");
        let NodeKind::Str(t) = &entries[1].value.kind else {
            panic!()
        };
        assert_eq!(
            &src.text[t.refs().next().unwrap().span.clone()],
            "${vars.z}"
        );
    }

    #[test]
    fn escapes_still_give_exact_spans() {
        let text = "a = \"\\t\\u00e9\\\"${vars.y}\"\nb = \"\"\"\n\\t${vars.z}\"\"\"\n";
        let src = Source::new("w.toml", text);
        let (entries, _) = parse_document(&src);
        let NodeKind::Str(t) = &entries[0].value.kind else {
            panic!()
        };
        assert_eq!(&text[t.refs().next().unwrap().span.clone()], "${vars.y}");
        // Multi-line strings with escapes still point at the whole string.
        let NodeKind::Str(t) = &entries[1].value.kind else {
            panic!()
        };
        assert_eq!(t.refs().next().unwrap().span, entries[1].value.span);
    }

    #[test]
    fn syntax_errors_and_duplicates_are_all_reported() {
        let src = Source::new("w.toml", "[a]\nx = 1\n[a]\ny = 2\nz = = 3\n");
        let (_, diags) = parse_document(&src);
        let codes: Vec<_> = diags.items.iter().map(|d| d.code).collect();
        assert!(codes.contains(&"flow::toml-syntax"), "{codes:?}");
        assert!(codes.contains(&"flow::duplicate-name"), "{codes:?}");
    }

    #[test]
    fn a_duplicate_table_is_reported_once_with_both_places() {
        let src = Source::new(
            "w.toml",
            "[steps.a]\nprovider = \"null\"\n\n[steps.a]\nprovider = \"exec\"\n",
        );
        let (_, diags) = parse_document(&src);
        assert_eq!(diags.items.len(), 1, "{:?}", diags.items);
        assert_eq!(diags.items[0].message, "`steps.a` is defined twice");
        assert_eq!(diags.items[0].labels[1].0, 0..9);
    }

    #[test]
    fn a_duplicate_key_points_at_the_first_one() {
        let src = Source::new("w.toml", "[a]\nx = 1\ny = 2\nx = 3\n");
        let (_, diags) = parse_document(&src);
        assert_eq!(diags.items[0].message, "`x` is set twice in the same table");
        assert_eq!(diags.items[0].labels[1].0, 4..5);
    }

    #[test]
    fn bare_words_are_explained() {
        let src = Source::new("w.toml", "[a]\nprovider = null\n");
        let (_, diags) = parse_document(&src);
        assert_eq!(diags.items[0].message, "`null` is not a TOML value");
        assert!(diags.items[0].help.as_deref().unwrap().contains("\"null\""));
    }

    #[test]
    fn bad_reference_is_reported() {
        let src = Source::new("w.toml", "a = \"${nope.x}\"\n");
        let (_, diags) = parse_document(&src);
        assert_eq!(diags.items[0].code, "flow::bad-reference");
        assert_eq!(diags.items[0].labels[0].0, 5..14);
    }
}
