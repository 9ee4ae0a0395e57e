//! The items of a step's `files`: a local path or an https URL as text, or
//! a table for a URL with its fetch rules,
//! `{ url = "https://…", sha256 = "…", insecure = true }`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::fetch::{self, Rules};
use crate::contract::Problem;

/// The keys a table item may have.
const KEYS: &[&str] = &["url", "sha256", "insecure"];

/// What `files` names: the paths and URLs in order, and the rules of each
/// URL a table item gives (one written as text has the default rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    /// Paths and URLs, in order.
    pub names: Vec<String>,
    /// The fetch rules of each URL a table item gives.
    pub rules: BTreeMap<String, Rules>,
}

/// The entries of a `files` input, or every problem with them (each at its
/// item, or the key inside it): an item neither text nor a table, a table
/// without a URL or with an unknown key, a pin that is not 64 hex digits,
/// and plain http without `insecure = true`.
pub fn parse(files: Option<&Value>) -> Result<Entries, Vec<Problem>> {
    let items: Vec<&Value> = match files {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one @ Value::String(_)) => vec![one],
        Some(_) => {
            return Err(vec![Problem::at(
                "files",
                "`files` must be a list of paths, URLs or { url = … } tables",
            )]);
        }
    };
    let mut entries = Entries::default();
    let mut problems = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = i.to_string();
        match item {
            Value::String(s) => {
                if fetch::is_url(s)
                    && let Some(why) = fetch::refusal(s, &Rules::default())
                {
                    problems.push(Problem::at_path(&["files", &at], why));
                }
                entries.names.push(s.clone());
            }
            Value::Object(table) => match table_entry(table, &at) {
                Ok((url, rules)) => {
                    entries.names.push(url.clone());
                    entries.rules.insert(url, rules);
                }
                Err(p) => problems.extend(p),
            },
            _ => problems.push(Problem::at_path(
                &["files", &at],
                "each item of `files` is a path or URL, or a table { url = \"https://…\", sha256 = \"…\" }",
            )),
        }
    }
    if problems.is_empty() {
        Ok(entries)
    } else {
        Err(problems)
    }
}

/// The URL and rules of the table item `files[at]`.
fn table_entry(
    table: &serde_json::Map<String, Value>,
    at: &str,
) -> Result<(String, Rules), Vec<Problem>> {
    let mut problems = Vec::new();
    for key in table.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        let mut p = Problem::at_path(
            &["files", at, key],
            format!("unknown key `{key}` in an item of `files`"),
        )
        .on_key()
        .with_help(format!("the keys are {}", KEYS.join(", ")));
        if let Some(close) = crate::suggest::closest(key, KEYS.iter().copied()) {
            p.help = Some(format!("did you mean `{close}`?"));
        }
        problems.push(p);
    }
    let url = match table.get("url") {
        Some(Value::String(u)) if fetch::is_url(u) => Some(u.clone()),
        Some(_) => {
            problems.push(Problem::at_path(
                &["files", at, "url"],
                "`url` must be an https:// URL (local files are named by their path, as text)",
            ));
            None
        }
        None => {
            problems.push(Problem::at_path(
                &["files", at],
                "a table item of `files` needs `url = \"https://…\"`",
            ));
            None
        }
    };
    let insecure = match table.get("insecure") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            problems.push(Problem::at_path(
                &["files", at, "insecure"],
                "`insecure` must be true or false",
            ));
            false
        }
    };
    let sha256 = match table.get("sha256") {
        None => None,
        Some(Value::String(s)) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(s.to_ascii_lowercase())
        }
        Some(_) => {
            problems.push(
                Problem::at_path(
                    &["files", at, "sha256"],
                    "`sha256` must be the file's SHA-256 as 64 hex digits",
                )
                .with_help("compute it with `sha256sum` on the file you reviewed"),
            );
            None
        }
    };
    let rules = Rules { sha256, insecure };
    if let Some(url) = &url
        && let Some(why) = fetch::refusal(url, &rules)
    {
        problems.push(Problem::at_path(&["files", at, "url"], why));
    }
    match url {
        Some(url) if problems.is_empty() => Ok((url, rules)),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(|p| p.path.join(".")).collect()
    }

    #[test]
    fn text_and_tables_give_names_in_order_and_rules_by_url() {
        let pin = "AB".repeat(32);
        let e = parse(Some(&json!([
            "manifests/a.yaml",
            "https://example.com/b.yaml",
            {"url": "http://127.0.0.1:8080/c.yaml", "insecure": true, "sha256": pin},
        ])))
        .unwrap();
        assert_eq!(
            e.names,
            [
                "manifests/a.yaml",
                "https://example.com/b.yaml",
                "http://127.0.0.1:8080/c.yaml"
            ]
        );
        assert_eq!(e.rules.get("https://example.com/b.yaml"), None);
        assert_eq!(
            e.rules.get("http://127.0.0.1:8080/c.yaml"),
            Some(&Rules {
                sha256: Some("ab".repeat(32)),
                insecure: true
            })
        );
    }

    #[test]
    fn each_bad_item_is_a_problem_at_its_place() {
        let problems = parse(Some(&json!([
            "http://example.com/a.yaml",
            {"url": "http://example.com/b.yaml"},
            {"url": "https://example.com/c.yaml", "sha256": "abc"},
            {"url": "https://example.com/d.yaml", "insecure": "yes", "sha": "x"},
            {"sha256": "0".repeat(64)},
            3,
        ])))
        .unwrap_err();
        assert_eq!(
            paths(&problems),
            [
                "files.0",
                "files.1.url",
                "files.2.sha256",
                "files.3.sha",
                "files.3.insecure",
                "files.4",
                "files.5"
            ]
        );
        assert!(
            problems[0].message.contains("plain http"),
            "{}",
            problems[0].message
        );
        assert!(
            problems[0].message.contains("insecure = true"),
            "{}",
            problems[0].message
        );
        assert_eq!(problems[3].help.as_deref(), Some("did you mean `sha256`?"));
    }
}
