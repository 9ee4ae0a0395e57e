//! Long values on screen: `flow output`'s tables and `flow state show` cut
//! a value that would run on for lines at a character boundary (never in
//! the middle of a UTF-8 character or of an escape such as `\n`), and
//! summarize a long nested table, each time naming the command that prints
//! the whole (`flow output FILE STEP.KEY --json`, `flow state show FILE
//! STEP --full`). The same text goes to a terminal and to a pipe.

use serde_json::Value;

/// How many characters of a value `flow output`'s tables show.
pub const VALUE_LIMIT: usize = 200;
/// How many rows a table of `flow output` shows before it summarizes.
pub const ROW_LIMIT: usize = 40;
/// How many characters of a string `flow state show` shows.
pub const SHOW_LIMIT: usize = 1000;

/// `text` as one line: control characters escaped (`\n`, `\t`, `\r`,
/// `\u{1b}`), each character or escape one unit.
fn units(text: &str) -> impl Iterator<Item = String> + '_ {
    text.chars().map(|c| match c {
        '\n' => "\\n".to_string(),
        '\t' => "\\t".to_string(),
        '\r' => "\\r".to_string(),
        c if c.is_control() => c.escape_unicode().to_string(),
        c => c.to_string(),
    })
}

/// `text` on one line, and whether it was cut: at most `limit` characters,
/// whole characters and whole escapes only.
pub fn one_line(text: &str, limit: usize) -> (String, bool) {
    let mut out = String::new();
    let mut shown = 0;
    for unit in units(text) {
        let n = unit.chars().count();
        if shown + n > limit {
            return (out, true);
        }
        shown += n;
        out.push_str(&unit);
    }
    (out, false)
}

/// `text` cut to `limit` characters, or as it is when shorter (for JSON:
/// cut before serializing, so no escape is split).
pub fn cut_raw(text: &str, limit: usize) -> Option<String> {
    let end = text.char_indices().nth(limit)?.0;
    Some(text[..end].to_string())
}

/// A shell word for a selector (`nccl["2"].busbw` in single quotes).
pub fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/:=@,+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What a table's rows are, for the command that prints one whole.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    /// Steps (or a `for_each` step's instances, `Some` naming the step):
    /// a row is selected by its key.
    Steps(Option<&'a str>),
    /// The outputs of what this selects: a row is `SELECTOR.KEY`.
    Keys(&'a str),
    /// Parts of the value this selects: no row is selected on its own.
    Within(&'a str),
}

/// Lines of a `flow output` table: `key = value`, values cut and nested
/// tables summarized, each with the command that prints the whole.
pub struct Table<'a> {
    /// The workflow file as the user named it.
    pub file: &'a str,
    /// The lines so far.
    pub lines: Vec<String>,
}

impl Table<'_> {
    /// The command that prints `selector` whole (everything for None).
    fn whole(&self, selector: Option<&str>) -> String {
        match selector {
            Some(s) => format!(
                "flow output {} {} --json",
                shell_word(self.file),
                shell_word(s)
            ),
            None => format!("flow output {} --json", shell_word(self.file)),
        }
    }

    /// Adds `map`'s rows at `indent`; `expand`: nested tables are shown as
    /// tables (one level), not summarized.
    pub fn add(
        &mut self,
        map: &serde_json::Map<String, Value>,
        indent: usize,
        rows: Rows,
        expand: bool,
    ) {
        let width = map.keys().map(|k| k.chars().count()).max().unwrap_or(0);
        let row = |k: &str| match rows {
            Rows::Steps(_) => k.to_string(),
            Rows::Keys(s) => format!("{s}.{k}"),
            Rows::Within(s) => s.to_string(),
        };
        let own = match rows {
            Rows::Steps(s) => s,
            Rows::Keys(s) | Rows::Within(s) => Some(s),
        };
        for (i, (k, v)) in map.iter().enumerate() {
            if i == ROW_LIMIT && map.len() > ROW_LIMIT + 1 {
                self.lines.push(format!(
                    "{:indent$}… and {} more of {} (`{}` for the whole)",
                    "",
                    map.len() - ROW_LIMIT,
                    map.len(),
                    self.whole(own)
                ));
                return;
            }
            let pad = width - k.chars().count();
            let key = format!("{:indent$}{k}{:pad$}", "", "");
            let sel = row(k);
            match v {
                Value::Object(inner) if expand => {
                    self.lines.push(format!("{:indent$}{k}:", ""));
                    let inner_rows = match rows {
                        Rows::Steps(_) => Rows::Keys(&sel),
                        Rows::Keys(_) | Rows::Within(_) => Rows::Within(&sel),
                    };
                    self.add(inner, indent + 2, inner_rows, false);
                }
                Value::String(s) => {
                    let (shown, cut) = one_line(s, VALUE_LIMIT);
                    let note = if cut {
                        format!(
                            "… ({} characters: `{}` for the whole)",
                            s.chars().count(),
                            self.whole(Some(&sel))
                        )
                    } else {
                        String::new()
                    };
                    self.lines.push(format!("{key} = {shown}{note}"));
                }
                other => {
                    let text = other.to_string();
                    if text.chars().count() <= VALUE_LIMIT {
                        self.lines.push(format!("{key} = {text}"));
                    } else {
                        let what = match other {
                            Value::Object(m) => format!("a table of {} entries", m.len()),
                            Value::Array(a) => format!("a list of {} items", a.len()),
                            _ => format!("{} characters", text.chars().count()),
                        };
                        self.lines.push(format!(
                            "{key} = ({what}: `{}` for the whole)",
                            self.whole(Some(&sel))
                        ));
                    }
                }
            }
        }
    }
}

/// `value` with every string longer than `limit` characters cut, saying
/// how long it was and `whole` (the command that prints it whole).
pub fn cut_strings(value: &Value, limit: usize, whole: &str) -> Value {
    match value {
        Value::String(s) => match cut_raw(s, limit) {
            Some(shown) => Value::String(format!(
                "{shown}… ({} characters: `{whole}` for the whole)",
                s.chars().count()
            )),
            None => value.clone(),
        },
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), cut_strings(v, limit, whole)))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| cut_strings(v, limit, whole)).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cuts_fall_between_characters_and_escapes() {
        // 'é' is two bytes, '\n' shows as two characters: a cut at every
        // limit lands between whole ones.
        let text = "aé\nb€\u{1b}c".repeat(5);
        for limit in 0..60 {
            let (shown, cut) = one_line(&text, limit);
            assert!(shown.chars().count() <= limit, "{limit}: {shown}");
            assert!(!shown.ends_with('\\'), "{limit}: {shown}");
            assert!(!shown.contains('\n'), "{shown}");
            let full = one_line(&text, usize::MAX).0;
            assert!(full.starts_with(&shown), "{limit}: {shown}");
            assert_eq!(cut, shown != full);
            // What follows the cut starts a unit of the full text.
            let rest = &full[shown.len()..];
            assert!(
                rest.is_empty() || units(&text).any(|u| rest.starts_with(&u)),
                "{limit}: {rest}"
            );
        }
        assert_eq!(one_line("a\u{1b}b", 3), ("a".to_string(), true));
        assert_eq!(one_line("a\u{1b}b", 7), ("a\\u{1b}".to_string(), true));
        assert_eq!(one_line("a\u{1b}b", 6), ("a".to_string(), true));
        assert_eq!(cut_raw("ééé", 2).as_deref(), Some("éé"));
        assert_eq!(cut_raw("ééé", 3), None);
    }

    #[test]
    fn long_values_and_tables_name_the_command_for_the_whole() {
        let arn = format!("arn:aws:iam::123456789012:role/{}", "é".repeat(300));
        let sizes: serde_json::Map<String, Value> = (0..50)
            .map(|i| (format!("{i}"), json!({"busbw": i})))
            .collect();
        let outputs = json!({"role": arn, "sizes": sizes, "short": "ok"});
        let mut t = Table {
            file: "wf.toml",
            lines: Vec::new(),
        };
        t.add(
            outputs.as_object().unwrap(),
            0,
            Rows::Keys("nccl[\"2\"]"),
            false,
        );
        assert_eq!(t.lines.len(), 3, "{:?}", t.lines);
        assert!(
            t.lines[0].starts_with("role  = arn:aws:iam::123456789012:role/éé")
                && t.lines[0].ends_with(
                    "… (331 characters: `flow output wf.toml 'nccl[\"2\"].role' --json` for the whole)"
                ),
            "{}",
            t.lines[0]
        );
        assert_eq!(
            t.lines[2],
            "sizes = (a table of 50 entries: `flow output wf.toml 'nccl[\"2\"].sizes' --json` for the whole)"
        );
        // A selected table of many rows: the first ROW_LIMIT, then how many more.
        let mut t = Table {
            file: "wf.toml",
            lines: Vec::new(),
        };
        t.add(&sizes, 0, Rows::Within("nccl.sizes"), true);
        let last = t.lines.last().unwrap();
        assert_eq!(
            last,
            "… and 10 more of 50 (`flow output wf.toml nccl.sizes --json` for the whole)"
        );
        let whole = cut_strings(&json!({"a": ["x".repeat(12)]}), 10, "W");
        assert_eq!(
            whole,
            json!({"a": ["xxxxxxxxxx… (12 characters: `W` for the whole)"]})
        );
    }
}
