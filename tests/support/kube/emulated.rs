//! The fill of the local cloud's emulated outputs
//! (`scripts/local-cloud/outputs/*.txt`), as `scripts/local-cloud/outputs/README`
//! gives it: `${NAME}` from the container's environment or the program's
//! own arguments (`ARG1` …), integer arithmetic (`${ARG1 - 1}`), and
//! `${for E in A..B}` / `${if A == B}` … `${end}` blocks. The Batch compute
//! emulator (`scripts/local-cloud/batch_compute.py`, `fill`) is the same
//! rule in Python; a test here holds the two to each other.

use std::collections::BTreeMap;

/// The names a file is filled from: the container's environment, and
/// `ARG1`, `ARG2` … for the words after the first word naming `program`
/// in `text` (its command, then its environment's values).
pub fn names_for(
    program: &str,
    text: &str,
    env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut names = env.clone();
    let words: Vec<&str> = text.split_whitespace().collect();
    if let Some(at) = words.iter().position(|w| w.contains(program)) {
        for (n, arg) in words[at + 1..].iter().enumerate() {
            names
                .entry(format!("ARG{}", n + 1))
                .or_insert_with(|| arg.to_string());
        }
    }
    names
}

/// A template filled from `names` (the README's rule).
pub fn fill(template: &str, names: &BTreeMap<String, String>) -> String {
    let lines: Vec<&str> = template.split('\n').collect();
    let (tree, _) = parse(&lines, 0, false);
    let mut out = Vec::new();
    render(&tree, names, &mut out);
    out.join("\n")
}

/// A line, or a `${for …}` / `${if …}` block.
enum Node<'a> {
    Line(&'a str),
    Block {
        kind: &'a str,
        expr: &'a str,
        header: &'a str,
        body: Vec<Node<'a>>,
        end: Option<&'a str>,
    },
}

/// `${for X}`, `${if X}` or `${end}` as a whole line: (kind, X).
fn block_line(line: &str) -> Option<(&str, &str)> {
    let inner = line.strip_prefix("${")?.strip_suffix('}')?;
    if inner.contains(['{', '}']) {
        return None;
    }
    for kind in ["for", "if", "end"] {
        if let Some(rest) = inner.strip_prefix(kind)
            && (rest.is_empty() || rest.starts_with(char::is_whitespace))
        {
            return Some((kind, rest.trim()));
        }
    }
    None
}

fn parse<'a>(lines: &[&'a str], mut i: usize, nested: bool) -> (Vec<Node<'a>>, usize) {
    let mut out = Vec::new();
    while i < lines.len() {
        match block_line(lines[i]) {
            Some(("end", _)) if nested => return (out, i),
            Some((kind, expr)) if kind != "end" => {
                let (body, j) = parse(lines, i + 1, true);
                out.push(Node::Block {
                    kind,
                    expr,
                    header: lines[i],
                    body,
                    end: lines.get(j).copied(),
                });
                i = j + 1;
            }
            _ => {
                out.push(Node::Line(lines[i]));
                i += 1;
            }
        }
    }
    (out, i)
}

fn render(tree: &[Node], names: &BTreeMap<String, String>, out: &mut Vec<String>) {
    for node in tree {
        let Node::Block {
            kind,
            expr,
            header,
            body,
            end,
        } = node
        else {
            if let Node::Line(line) = node {
                out.push(fill_line(line, names));
            }
            continue;
        };
        if *kind == "for" {
            if let Some((var, lo, hi)) = for_range(expr, names) {
                for i in lo..hi {
                    let mut inner = names.clone();
                    inner.insert(var.to_string(), i.to_string());
                    render(body, &inner, out);
                }
                continue;
            }
        } else if let Some(keep) = holds(expr, names) {
            if keep {
                render(body, names, out);
            }
            continue;
        }
        // No value to repeat or judge by: the block as written, once.
        out.push(fill_line(header, names));
        render(body, names, out);
        if let Some(end) = end {
            out.push(end.to_string());
        }
    }
}

/// `E in FROM..TO` → (E, FROM, TO).
fn for_range<'a>(expr: &'a str, names: &BTreeMap<String, String>) -> Option<(&'a str, i64, i64)> {
    let (var, range) = expr.split_once(char::is_whitespace)?;
    let range = range.trim_start().strip_prefix("in")?;
    if !range.starts_with(char::is_whitespace) || !is_name(var) {
        return None;
    }
    let (lo, hi) = range.trim().split_once("..")?;
    let lo = integer(&evaluate(lo, names)?)?;
    let hi = integer(&evaluate(hi, names)?)?;
    Some((var, lo, hi))
}

/// Whether `A OP B` holds, or None when either side has no value.
fn holds(expr: &str, names: &BTreeMap<String, String>) -> Option<bool> {
    // The first operator, two-character ones before their prefixes.
    let (at, op) = ["==", "!=", "<=", ">=", "<", ">"]
        .iter()
        .filter_map(|op| expr.find(op).map(|at| (at, *op)))
        .min_by_key(|(at, op)| (*at, std::cmp::Reverse(op.len())))?;
    let a = integer(&evaluate(&expr[..at], names)?)?;
    let b = integer(&evaluate(&expr[at + op.len()..], names)?)?;
    Some(match op {
        "==" => a == b,
        "!=" => a != b,
        "<=" => a <= b,
        ">=" => a >= b,
        "<" => a < b,
        _ => a > b,
    })
}

/// `value` as an integer when it is a whole number (`-?[0-9]+`).
fn integer(value: &str) -> Option<i64> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// `a / b` rounded down (Python's `//`); None for `b == 0`.
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A placeholder's value: a name's as it is, or integer arithmetic on
/// names and whole numbers; None when something has no value.
fn evaluate(expr: &str, names: &BTreeMap<String, String>) -> Option<String> {
    let expr = expr.trim();
    if is_name(expr) {
        return names.get(expr).cloned();
    }
    // Words and operators, alternating, starting and ending with a word.
    let mut items: Vec<&str> = Vec::new();
    let mut rest = expr;
    while !rest.is_empty() {
        let len = if rest.starts_with(['+', '-', '*', '/', '%']) {
            1
        } else {
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        };
        if len == 0 {
            return None;
        }
        items.push(&rest[..len]);
        rest = rest[len..].trim_start();
    }
    if items.len().is_multiple_of(2) {
        return None;
    }
    let mut numbers = Vec::new();
    for word in items.iter().step_by(2) {
        let value = if word.chars().all(|c| c.is_ascii_digit()) {
            word.to_string()
        } else if is_name(word) {
            names.get(*word)?.clone()
        } else {
            return None;
        };
        numbers.push(integer(&value)?);
    }
    let ops: Vec<&str> = items.iter().skip(1).step_by(2).copied().collect();
    let mut terms = vec![numbers[0]];
    let mut adds = Vec::new();
    for (op, n) in ops.iter().zip(&numbers[1..]) {
        let last = terms.last_mut()?;
        match *op {
            "*" => *last = last.checked_mul(*n)?,
            "/" => *last = floor_div(*last, *n)?,
            "%" => *last = last.checked_sub(floor_div(*last, *n)?.checked_mul(*n)?)?,
            "+" | "-" => {
                adds.push(*op);
                terms.push(*n);
            }
            _ => return None,
        }
    }
    let mut total = terms[0];
    for (op, n) in adds.iter().zip(&terms[1..]) {
        total = if *op == "+" {
            total.checked_add(*n)?
        } else {
            total.checked_sub(*n)?
        };
    }
    Some(total.to_string())
}

/// `line` with each `${…}` that has a value replaced by it.
fn fill_line(line: &str, names: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        match tail.find(['{', '}']) {
            Some(close) if tail.as_bytes()[close] == b'}' => {
                let whole = &rest[at..at + 2 + close + 1];
                match evaluate(&tail[..close], names) {
                    Some(v) => out.push_str(&v),
                    None => out.push_str(whole),
                }
                rest = &rest[at + whole.len()..];
            }
            _ => {
                out.push_str("${");
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[path = "emulated_tests.rs"]
mod tests;
