//! A large workflow file parsed in pieces, at once on several threads.
//!
//! The TOML parser keeps every token of the text it is given, and then
//! every table: a file of 100,000 steps (17 MB) took 0.7 s and over 600 MB
//! in one piece. Cut where a step's own table begins (`[steps.NAME]`), the
//! pieces parse apart, each piece's tokens freed before the next, on as many
//! threads as there are cores, into the same [`Entry`] tree with the same
//! spans.
//!
//! Only a file whose pieces cannot mean anything else is cut: after the
//! first cut, every table header is a step's (`[steps.…`); no step is
//! written in two pieces; `steps` is not written inline. Whatever fails one
//! of these, and any piece with a syntax error or a diagnostic of its own,
//! is parsed again whole by the caller, so its diagnostics are exactly
//! those of one parse.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use toml::de::DeTable;

use super::ast::{Entry, NodeKind};
use crate::diag::{Diagnostics, Source};

/// A file shorter than this is parsed whole.
const SMALLEST_TO_CUT: usize = 512 * 1024;
/// About how much text a piece holds.
const PIECE_LEN: usize = 256 * 1024;

/// The file's top-level entries parsed in pieces; `None` when the file is
/// not cut (small, or not safely cut) or a piece needs the whole file's
/// diagnostics.
pub(super) fn parse_in_pieces(source: &Source, convert: Convert) -> Option<Vec<Entry>> {
    parse_cut(source, convert, SMALLEST_TO_CUT, PIECE_LEN)
}

/// How a parsed table becomes entries (`toml_nodes`'s), its spans moved by
/// the offset of the piece's text.
pub(super) type Convert = fn(&Source, &DeTable<'_>, usize, &mut Diagnostics) -> Vec<Entry>;

/// [`parse_in_pieces`] with the sizes given.
fn parse_cut(
    source: &Source,
    convert: Convert,
    smallest: usize,
    every: usize,
) -> Option<Vec<Entry>> {
    let text = source.text.as_str();
    if text.len() < smallest {
        return None;
    }
    let cuts = cut_points(text, every)?;
    let bounds: Vec<(usize, usize)> = std::iter::once(0)
        .chain(cuts.iter().copied())
        .zip(cuts.iter().copied().chain(std::iter::once(text.len())))
        .collect();
    let parsed = parse_all(source, &bounds, convert);
    merge(source, parsed.into_iter().collect::<Option<Vec<_>>>()?)
}

/// Each piece parsed and converted, in order, by up to as many threads as
/// there are cores taking the next piece in turn.
fn parse_all(
    source: &Source,
    bounds: &[(usize, usize)],
    convert: Convert,
) -> Vec<Option<Vec<Entry>>> {
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(bounds.len());
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(start, end)) = bounds.get(i) else {
                return done;
            };
            done.push((i, parse_piece(source, start, end, convert)));
        }
    };
    let mut all: Vec<(usize, Option<Vec<Entry>>)> = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut all = work();
        for t in others {
            all.extend(t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, piece)| piece).collect()
}

/// One piece's entries, its spans in the whole file's offsets; `None` when
/// it has anything to say.
fn parse_piece(source: &Source, start: usize, end: usize, convert: Convert) -> Option<Vec<Entry>> {
    let (table, errors) = DeTable::parse_recoverable(&source.text[start..end]);
    if !errors.is_empty() {
        return None;
    }
    let mut diags = Diagnostics::default();
    let entries = convert(source, table.get_ref(), start, &mut diags);
    diags.is_empty().then_some(entries)
}

/// The first piece's entries with every later piece's steps added to its
/// `steps`; `None` when a later piece holds anything but steps, a step is
/// in two pieces, or `steps` is not a table of headers.
fn merge(source: &Source, pieces: Vec<Vec<Entry>>) -> Option<Vec<Entry>> {
    let mut pieces = pieces.into_iter();
    let mut entries = pieces.next()?;
    let mut names: HashSet<String> = HashSet::new();
    let mut at = entries.iter().position(|e| e.key == "steps");
    if let Some(i) = at {
        let steps = &entries[i].value;
        let inline = source.text[steps.span.clone()].starts_with('{');
        let NodeKind::Table(children) = &steps.kind else {
            return None;
        };
        if inline {
            return None;
        }
        names.extend(children.iter().map(|c| c.key.clone()));
    }
    for piece in pieces {
        let [steps] = <[Entry; 1]>::try_from(piece).ok()?;
        if steps.key != "steps" {
            return None;
        }
        let NodeKind::Table(children) = &steps.value.kind else {
            return None;
        };
        if !children.iter().all(|c| names.insert(c.key.clone())) {
            return None;
        }
        match at {
            None => {
                at = Some(entries.len());
                entries.push(steps);
            }
            Some(i) => {
                let NodeKind::Table(mine) = &mut entries[i].value.kind else {
                    return None;
                };
                let NodeKind::Table(children) = steps.value.kind else {
                    return None;
                };
                mine.extend(children);
            }
        }
    }
    Some(entries)
}

/// Offsets of the lines where `text` may be cut, about `every` bytes apart:
/// each opens a step's table (`[steps.NAME]`, NAME a bare key, at the start
/// of a line, outside any string, array or inline table). `None` when there
/// is no such line past the first `every` bytes, or when, after the first
/// cut, a table header is not a step's (`[steps.` at its start).
fn cut_points(text: &str, every: usize) -> Option<Vec<usize>> {
    let bytes = text.as_bytes();
    let mut cuts: Vec<usize> = Vec::new();
    let mut scan = Scanner::default();
    let mut i = 0;
    while i < bytes.len() {
        if scan.at_line_start(bytes, i) {
            let line = &bytes[i..];
            let lead = line
                .iter()
                .take_while(|b| **b == b' ' || **b == b'\t')
                .count();
            if line.get(lead) == Some(&b'[') {
                let step_table = lead == 0 && opens_a_step(line);
                let last = cuts.last().copied().unwrap_or(0);
                if step_table && i - last >= every {
                    cuts.push(i);
                } else if !cuts.is_empty() && !line[lead..].starts_with(b"[steps.") {
                    return None;
                }
            }
        }
        i = scan.step(bytes, i);
    }
    (!cuts.is_empty()).then_some(cuts)
}

/// Whether `line` starts with `[steps.NAME]`, NAME a bare key, and nothing
/// but blanks or a comment after it.
fn opens_a_step(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(b"[steps.") else {
        return false;
    };
    let name = rest
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'-')
        .count();
    if name == 0 || rest.get(name) != Some(&b']') {
        return false;
    }
    let after = &rest[name + 1..];
    let end = after
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(after.len());
    let tail = after[..end].trim_ascii();
    tail.is_empty() || tail.starts_with(b"#")
}

/// Where the scan is: in a string of some kind, a comment, or neither, and
/// how deep in arrays and inline tables.
#[derive(Default)]
struct Scanner {
    state: State,
    depth: usize,
}

#[derive(Default, Clone, Copy, PartialEq)]
enum State {
    #[default]
    Plain,
    Comment,
    Basic,
    Literal,
    MultiBasic,
    MultiLiteral,
}

impl Scanner {
    /// Whether offset `i` starts a line of plain text at the top level.
    fn at_line_start(&self, bytes: &[u8], i: usize) -> bool {
        (i == 0 || bytes[i - 1] == b'\n') && self.state == State::Plain && self.depth == 0
    }

    /// Reads what starts at `i`; returns where the next thing starts.
    fn step(&mut self, bytes: &[u8], i: usize) -> usize {
        let b = bytes[i];
        let rest = &bytes[i..];
        match self.state {
            State::Plain => match b {
                b'#' => self.state = State::Comment,
                b'"' if rest.starts_with(b"\"\"\"") => {
                    self.state = State::MultiBasic;
                    return i + 3;
                }
                b'\'' if rest.starts_with(b"'''") => {
                    self.state = State::MultiLiteral;
                    return i + 3;
                }
                b'"' => self.state = State::Basic,
                b'\'' => self.state = State::Literal,
                b'[' | b'{' => self.depth += 1,
                b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            },
            State::Comment => {
                if b == b'\n' {
                    self.state = State::Plain;
                }
            }
            State::Basic => match b {
                b'\\' => return (i + 2).min(bytes.len()),
                b'"' | b'\n' => self.state = State::Plain,
                _ => {}
            },
            State::Literal => {
                if b == b'\'' || b == b'\n' {
                    self.state = State::Plain;
                }
            }
            State::MultiBasic => match b {
                b'\\' => return (i + 2).min(bytes.len()),
                b'"' => return self.close_multi(rest, i, b'"'),
                _ => {}
            },
            State::MultiLiteral => {
                if b == b'\'' {
                    return self.close_multi(rest, i, b'\'');
                }
            }
        }
        i + 1
    }

    /// A run of quotes in a multi-line string: three or more close it (up
    /// to two more are its last characters).
    fn close_multi(&mut self, rest: &[u8], i: usize, quote: u8) -> usize {
        let run = rest.iter().take_while(|b| **b == quote).count();
        if run >= 3 {
            self.state = State::Plain;
        }
        i + run
    }
}

#[cfg(test)]
#[path = "toml_pieces_tests.rs"]
mod tests;
