//! Filling placeholders in a YAML text so that every value enters as (part
//! of) one YAML scalar and never changes the document's structure: a value
//! `"x\n  hostNetwork: true"` for `name: ${NAME}` gives the one string
//! `name: "x\n  hostNetwork: true"`, not a second key.
//!
//! How: each placeholder (a "hole") is first replaced by a marker character
//! and the text parsed, which tells for each hole the scalar it is in and
//! that scalar's style. Then:
//! - the values go in as text, as a plain `sed` would; if the result parses
//!   to the same structure and every scalar with a hole has exactly the
//!   value meant, that text is the result, so ordinary values give the
//!   bytes they always gave (`replicas: 2` stays a number);
//! - otherwise each hole is written for its place: escaped inside a
//!   double-quoted scalar (`\"`, `\n`), `'` doubled inside a single-quoted
//!   one, each further line indented as the block inside a literal block
//!   (`|`), and a plain scalar that would not hold its value is written
//!   whole as a double-quoted scalar. The result is parsed again and must
//!   have the same structure and values.
//!
//! What cannot be placed is refused with its line: a line break into a
//! folded block (`>`), a comment, a tag or an anchor. A text that is not
//! YAML even with the holes neutral is filled as text (its parse reports it).

use std::collections::BTreeMap;
use std::ops::Range;

use saphyr_parser::{Event, Parser, ScalarStyle};

/// One placeholder in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole<'a> {
    /// Its bytes in the text.
    pub range: Range<usize>,
    /// The name shown in errors (`${IMAGE}`, `<account>`).
    pub name: &'a str,
    /// What replaces it.
    pub value: &'a str,
}

/// A value that cannot be placed: where, and why (with what to do).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct Misfit {
    /// The 1-based line of the placeholder.
    pub line: usize,
    /// Which hole (its index in the holes given).
    pub hole: usize,
    /// What is wrong and what to do.
    pub message: String,
}

/// The first marker character: hole `k` is `FIRST_MARKER + k`, from the
/// private use area, which YAML allows anywhere in a scalar and no file
/// flow fills holds.
const FIRST_MARKER: u32 = 0xE000;
/// How many holes one text may have (the size of the private use area).
const MAX_HOLES: usize = 6400;

/// `text` with every hole filled as described in the module's doc; the
/// holes are in order and do not overlap. `Err` says which value could not
/// be placed, where, and what to do.
pub fn fill(text: &str, holes: &[Hole]) -> Result<String, Misfit> {
    if holes.is_empty() {
        return Ok(text.to_string());
    }
    let as_text = textual(text, holes);
    if holes.len() > MAX_HOLES || text.chars().any(is_marker) {
        return Ok(as_text);
    }
    let neutral = neutral(text, holes);
    let Some(shape) = read(&neutral) else {
        return Ok(as_text);
    };
    let places = place_holes(&neutral, &shape, holes)?;
    if matches(&as_text, &shape, holes) {
        return Ok(as_text);
    }
    let placed = write(&neutral, &shape, &places, holes);
    if matches(&placed, &shape, holes) {
        return Ok(placed);
    }
    let k = places.keys().next().copied().unwrap_or(0);
    let first = &holes[k];
    Err(Misfit {
        line: line_of(text, first.range.start),
        hole: k,
        message: format!(
            "the value of `{}` would change the YAML's structure here even quoted; put the placeholder where a whole value goes (`key: {}`)",
            first.name, first.name,
        ),
    })
}

/// `text` with the values pasted in as they are.
fn textual(text: &str, holes: &[Hole]) -> String {
    splice(
        text,
        holes.iter().map(|h| (h.range.clone(), h.value.to_string())),
    )
}

/// `text` with each range replaced, in order.
fn splice(text: &str, edits: impl IntoIterator<Item = (Range<usize>, String)>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, with) in edits {
        out.push_str(&text[at..range.start]);
        out.push_str(&with);
        at = range.end;
    }
    out.push_str(&text[at..]);
    out
}

fn marker(k: usize) -> char {
    char::from_u32(FIRST_MARKER + k as u32).expect("a private use character")
}

fn is_marker(c: char) -> bool {
    (FIRST_MARKER..FIRST_MARKER + MAX_HOLES as u32).contains(&(c as u32))
}

/// `text` with hole `k` replaced by marker `k`.
fn neutral(text: &str, holes: &[Hole]) -> String {
    splice(
        text,
        holes
            .iter()
            .enumerate()
            .map(|(k, h)| (h.range.clone(), marker(k).to_string())),
    )
}

/// What the parser saw of a text.
#[derive(Debug, Clone)]
struct Shape {
    /// Each event's kind, in order.
    kinds: Vec<Kind>,
    /// The scalars: their index in `kinds`, value, style, and bytes in the text.
    scalars: Vec<Scalar>,
    /// How many flow collections (`[…]`, `{…}`) each scalar is inside.
    flow_depth_at: Vec<usize>,
}

/// An event's kind, for comparing structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Document,
    DocumentEnd,
    Sequence,
    SequenceEnd,
    Mapping,
    MappingEnd,
    Scalar,
    Alias,
}

#[derive(Debug, Clone)]
struct Scalar {
    value: String,
    style: ScalarStyle,
    bytes: Range<usize>,
    /// The column its first character is at (for a literal block: the
    /// block's indentation).
    col: usize,
}

/// The events of `text`, or `None` when it is not YAML.
fn read(text: &str) -> Option<Shape> {
    let byte_at: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let mut shape = Shape {
        kinds: Vec::new(),
        scalars: Vec::new(),
        flow_depth_at: Vec::new(),
    };
    let mut flow = Vec::new();
    for item in Parser::new_from_str(text) {
        let (event, span) = item.ok()?;
        let starts_flow =
            text[byte_at[span.start.index().min(byte_at.len() - 1)]..].starts_with(['[', '{']);
        let kind = match event {
            Event::DocumentStart(_) => Kind::Document,
            Event::DocumentEnd => Kind::DocumentEnd,
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                flow.push(starts_flow);
                if matches!(event, Event::SequenceStart(..)) {
                    Kind::Sequence
                } else {
                    Kind::Mapping
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                flow.pop();
                if matches!(event, Event::SequenceEnd) {
                    Kind::SequenceEnd
                } else {
                    Kind::MappingEnd
                }
            }
            Event::Alias(_) => Kind::Alias,
            Event::Scalar(value, style, _, _) => {
                shape.scalars.push(Scalar {
                    value: value.into_owned(),
                    style,
                    bytes: byte_at[span.start.index()]..byte_at[span.end.index()],
                    col: span.start.col(),
                });
                shape
                    .flow_depth_at
                    .push(flow.iter().filter(|f| **f).count());
                Kind::Scalar
            }
            Event::StreamStart | Event::StreamEnd | Event::Nothing => continue,
        };
        shape.kinds.push(kind);
    }
    Some(shape)
}

/// The scalar (index in `shape.scalars`) each hole is in, by hole; a hole
/// in no scalar (a comment, a tag) is checked here and filled as text.
fn place_holes(
    neutral: &str,
    shape: &Shape,
    holes: &[Hole],
) -> Result<BTreeMap<usize, usize>, Misfit> {
    let mut places = BTreeMap::new();
    for (i, s) in shape.scalars.iter().enumerate() {
        for c in s.value.chars().filter(|c| is_marker(*c)) {
            places.insert(c as usize - FIRST_MARKER as usize, i);
        }
        if s.style == ScalarStyle::Folded
            && let Some(k) = s
                .value
                .chars()
                .filter(|c| is_marker(*c))
                .map(|c| c as usize - FIRST_MARKER as usize)
                .find(|&k| holes[k].value.contains(['\n', '\r']))
        {
            return Err(Misfit {
                line: line_of_neutral(neutral, k),
                hole: k,
                message: format!(
                    "the value of `{}` has a line break, which a folded block (`>`) would turn into a space; use a literal block (`|`) there",
                    holes[k].name
                ),
            });
        }
    }
    for (k, hole) in holes.iter().enumerate() {
        if !places.contains_key(&k) && hole.value.contains(['\n', '\r']) {
            return Err(Misfit {
                line: line_of_neutral(neutral, k),
                hole: k,
                message: format!(
                    "the value of `{}` has a line break, and its place is not a value (a comment, a tag, an anchor), where the break would start new YAML; remove the break, or move the placeholder into a value",
                    hole.name
                ),
            });
        }
    }
    Ok(places)
}

/// Whether `text` parses to `shape`'s structure with every scalar holding
/// exactly the value meant (its holes' values in place of their markers).
fn matches(text: &str, shape: &Shape, holes: &[Hole]) -> bool {
    let Some(got) = read(text) else {
        return false;
    };
    got.kinds == shape.kinds
        && shape
            .scalars
            .iter()
            .zip(&got.scalars)
            .all(|(meant, got)| got.value == expected(&meant.value, holes))
}

/// A scalar's value with its markers replaced by the holes' values.
fn expected(value: &str, holes: &[Hole]) -> String {
    value
        .chars()
        .map(|c| {
            if is_marker(c) {
                holes[c as usize - FIRST_MARKER as usize].value.to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `neutral` with every hole written for its place (see the module's doc).
fn write(neutral: &str, shape: &Shape, places: &BTreeMap<usize, usize>, holes: &[Hole]) -> String {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut whole: Vec<usize> = Vec::new();
    for (i, s) in shape.scalars.iter().enumerate() {
        let mine: Vec<usize> = places
            .iter()
            .filter(|(_, at)| **at == i)
            .map(|(k, _)| *k)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let quote_whole = match s.style {
            ScalarStyle::Plain => {
                let flow = shape.flow_depth_at[i] > 0;
                let text = &neutral[s.bytes.clone()];
                mine.iter().any(|&k| {
                    let at = text.find(marker(k)).unwrap_or(0);
                    let starts = at == 0;
                    let ends = at + marker(k).len_utf8() == text.len();
                    !plain_safe(holes[k].value, starts, ends, flow)
                })
            }
            ScalarStyle::SingleQuoted => {
                mine.iter().any(|&k| holes[k].value.contains(['\n', '\r']))
            }
            _ => false,
        };
        if quote_whole {
            whole.push(i);
            edits.push((s.bytes.clone(), double_quoted(&expected(&s.value, holes))));
        }
    }
    // Holes in scalars not written whole, and holes outside scalars.
    for (k, _) in holes.iter().enumerate() {
        let scalar = places.get(&k).map(|&i| (i, &shape.scalars[i]));
        if scalar.is_some_and(|(i, _)| whole.contains(&i)) {
            continue;
        }
        let m = marker(k);
        let Some(at) = neutral.find(m) else { continue };
        let value = holes[k].value;
        let with = match scalar.map(|(_, s)| s.style) {
            Some(ScalarStyle::DoubleQuoted) => escape_double(value),
            Some(ScalarStyle::SingleQuoted) => value.replace('\'', "''"),
            Some(ScalarStyle::Literal) => {
                let indent = " ".repeat(scalar.map_or(0, |(_, s)| s.col));
                value.replace('\n', &format!("\n{indent}"))
            }
            _ => value.to_string(),
        };
        edits.push((at..at + m.len_utf8(), with));
    }
    edits.sort_by_key(|(r, _)| r.start);
    splice(neutral, edits)
}

/// Whether `value` stays one plain scalar holding exactly itself when
/// pasted into a plain scalar (at its start, at its end, in a flow
/// collection).
fn plain_safe(value: &str, starts: bool, ends: bool, flow: bool) -> bool {
    if value.is_empty() {
        return !(starts && ends);
    }
    let bad_anywhere = value.contains(['\n', '\r', '\t'])
        || value.contains(": ")
        || value.contains(" #")
        || (flow && value.contains([',', '[', ']', '{', '}']));
    let mut chars = value.chars();
    let first = chars.next().unwrap_or(' ');
    // `-`, `?` and `:` start a plain scalar unless a space follows (`-5`,
    // `--nodes`); the other indicators never do.
    let spaced = chars.next().is_none_or(|c| c == ' ');
    let bad_start = starts
        && (first == ' '
            || ",[]{}#&*!|>'\"%@`".contains(first)
            || ("-?:".contains(first) && spaced));
    let bad_end = ends && (value.ends_with(' ') || value.ends_with(':'));
    !(bad_anywhere || bad_start || bad_end)
}

/// `value` as a double-quoted YAML scalar.
fn double_quoted(value: &str) -> String {
    format!("\"{}\"", escape_double(value))
}

/// `value` escaped for the inside of a double-quoted YAML scalar.
fn escape_double(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The 1-based line of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// [`line_of`] hole `k` in the neutral text.
fn line_of_neutral(neutral: &str, k: usize) -> usize {
    line_of(neutral, neutral.find(marker(k)).unwrap_or(0))
}

#[cfg(test)]
mod tests;
