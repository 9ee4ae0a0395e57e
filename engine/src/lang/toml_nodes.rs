//! TOML text → spanned [`Node`]s, with every syntax error as a diagnostic.

use toml::de::{DeTable, DeValue};

use super::ast::{Entry, Node, NodeKind, Template};
use super::template::{self, Placement};
use crate::diag::{Diag, Diagnostics, Source};

/// Parse a whole TOML document into its top-level entries. Syntax errors and
/// malformed `${...}` references are reported together.
pub fn parse_document(source: &Source) -> (Vec<Entry>, Diagnostics) {
    let mut diags = Diagnostics::default();
    let (table, errors) = DeTable::parse_recoverable(&source.text);
    for err in &errors {
        diags.push(syntax_diag(source, err));
    }
    if !diags.is_empty() {
        return (Vec::new(), diags);
    }
    let entries = convert_table(source, table.get_ref(), &mut diags);
    (entries, diags)
}

fn syntax_diag(source: &Source, err: &toml::de::Error) -> Diag {
    let span = err.span().unwrap_or(0..0);
    let message = err.message().trim().to_string();
    if message.starts_with("duplicate key") {
        let key = source
            .text
            .get(span.clone())
            .unwrap_or("")
            .trim()
            .to_string();
        return Diag::new("flow::duplicate-name", format!("`{key}` is defined twice"))
            .in_source(source)
            .label(span, "defined again here")
            .help("every table and key may appear once; rename or merge the two definitions");
    }
    Diag::new("flow::toml-syntax", format!("invalid TOML: {message}"))
        .in_source(source)
        .label(span, message)
        .help("see https://toml.io for the syntax")
}

fn convert_table(source: &Source, table: &DeTable<'_>, diags: &mut Diagnostics) -> Vec<Entry> {
    table
        .iter()
        .map(|(k, v)| Entry {
            key: k.get_ref().to_string(),
            key_span: k.span(),
            value: convert_value(source, v.get_ref(), v.span(), diags),
        })
        .collect()
}

fn convert_value(
    source: &Source,
    value: &DeValue<'_>,
    span: std::ops::Range<usize>,
    diags: &mut Diagnostics,
) -> Node {
    let kind = match value {
        DeValue::String(s) => {
            let placement = placement(&source.text, span.clone(), s);
            match template::parse(s, &placement) {
                Ok(t) => NodeKind::Str(t),
                Err(e) => {
                    diags.push(
                        Diag::new("flow::bad-reference", e.message)
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
                        .label(span.clone(), "does not fit in 64 bits"),
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
                .map(|v| convert_value(source, v.get_ref(), v.span(), diags))
                .collect(),
        ),
        DeValue::Table(t) => NodeKind::Table(convert_table(source, t, diags)),
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
    Placement {
        whole: span,
        exact: (inner == decoded).then_some(start),
    }
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
    fn escapes_fall_back_to_the_whole_string() {
        let src = Source::new("w.toml", "a = \"\\t${vars.y}\"\n");
        let (entries, _) = parse_document(&src);
        let NodeKind::Str(t) = &entries[0].value.kind else {
            panic!()
        };
        assert_eq!(t.refs().next().unwrap().span, entries[0].value.span);
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
    fn bad_reference_is_reported() {
        let src = Source::new("w.toml", "a = \"${nope}\"\n");
        let (_, diags) = parse_document(&src);
        assert_eq!(diags.items[0].code, "flow::bad-reference");
        assert_eq!(diags.items[0].labels[0].0, 4..11);
    }
}
