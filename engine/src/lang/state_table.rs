//! `[workflow.state]`: where a workflow's state is kept.
//!
//! ```toml
//! [workflow.state]
//! backend = "s3"            # or "local" (the default)
//! bucket  = "team-flow-state"
//! key     = "training/eks-p4d.json"
//! region  = "us-east-1"     # the bucket's region
//! profile = "team"          # optional
//! lease   = "60s"           # how long the lock lasts without renewal
//! keep_backups     = 20     # backups kept at most (at least 3), either backend
//! keep_backups_for = "30d"  # none older than this, beyond the newest 3
//! ```
//!
//! The table is read before variables and steps, by commands that need no
//! more of the workflow (`destroy`, `state …`), so its values are plain
//! strings: references are refused with a span.

use std::path::Path;
use std::time::Duration;

use super::ast::{Entry, Node, NodeKind, StateSettings};
use super::toml_nodes::{parse_document, type_name};
use crate::diag::{Diag, Diagnostics, Source, Span};

const KEYS: &[&str] = &[
    "backend",
    "bucket",
    "key",
    "region",
    "profile",
    "lease",
    "keep_backups",
    "keep_backups_for",
];

/// Reads the `[workflow.state]` table `node` (the value of `state` under
/// `[workflow]`), reporting every problem into `diags`.
pub fn parse_state_table(
    source: &Source,
    diags: &mut Diagnostics,
    node: &Node,
) -> Option<StateSettings> {
    let mut r = Reader { source, diags };
    let NodeKind::Table(entries) = &node.kind else {
        r.err(
            node.span.clone(),
            format!("workflow.state must be a table, found {}", type_name(node)),
            "expected a table",
            Some("write it as [workflow.state] with backend, bucket, key and region".to_string()),
        );
        return None;
    };
    let mut backend: Option<(String, Span)> = None;
    let (mut bucket, mut key, mut region, mut profile, mut lease) = (None, None, None, None, None);
    let mut backups = flow_state::Retention::default();
    for e in entries {
        match e.key.as_str() {
            "keep_backups" => {
                if let Some(n) = r.keep_count(e) {
                    backups.keep = n;
                }
            }
            "keep_backups_for" => {
                if let Some(d) = r.keep_for(e) {
                    backups.max_age = d;
                }
            }
            "backend" => backend = r.string(e).map(|s| (s, e.value.span.clone())),
            "bucket" => bucket = r.string(e),
            "key" => key = r.string(e),
            "region" => region = r.string(e),
            "profile" => profile = r.string(e),
            "lease" => {
                lease = r
                    .string(e)
                    .and_then(|text| match humantime::parse_duration(&text) {
                        Ok(d) if d >= Duration::from_secs(3) => Some(d),
                        Ok(_) => {
                            r.err(
                                e.value.span.clone(),
                                "workflow.state.lease must be at least 3s".into(),
                                "too short",
                                None,
                            );
                            None
                        }
                        Err(err) => {
                            r.err(
                                e.value.span.clone(),
                                format!("workflow.state.lease is not a duration: {err}"),
                                "not a duration",
                                Some("write it like \"60s\" or \"5m\"".into()),
                            );
                            None
                        }
                    })
            }
            other => {
                let help = match flow_providers::suggest::closest(other, KEYS.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`? Known keys here: {}", KEYS.join(", ")),
                    None => format!("known keys here: {}", KEYS.join(", ")),
                };
                r.err(
                    e.key_span.clone(),
                    format!("unknown key `{other}` in [workflow.state]"),
                    "not recognised",
                    Some(help),
                );
            }
        }
    }
    match backend.as_ref().map(|(b, s)| (b.as_str(), s.clone())) {
        None | Some(("local", _)) => {
            if let Some(e) = entries
                .iter()
                .find(|e| matches!(e.key.as_str(), "bucket" | "key"))
            {
                r.err(
                    e.key_span.clone(),
                    format!("`{}` is for backend = \"s3\"", e.key),
                    "the local backend keeps its state in .flow beside the workflow",
                    Some("add backend = \"s3\", or remove this key".into()),
                );
                return None;
            }
            Some(StateSettings::Local { backups })
        }
        Some(("s3", span)) => {
            let missing: Vec<&str> = [("bucket", &bucket), ("key", &key)]
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| *k)
                .collect();
            if !missing.is_empty() {
                r.err(
                    span,
                    format!("backend = \"s3\" needs {}", missing.join(" and ")),
                    "S3 backend",
                    Some("add bucket = \"…\" and key = \"…\" (the state object's key)".into()),
                );
                return None;
            }
            let key = key?;
            if key.ends_with('/') || key.is_empty() {
                let e = entries.iter().find(|e| e.key == "key")?;
                r.err(
                    e.value.span.clone(),
                    "workflow.state.key must name an object, not a folder".into(),
                    "ends with /",
                    None,
                );
                return None;
            }
            Some(StateSettings::S3 {
                bucket: bucket?,
                key,
                region,
                profile,
                lease,
                backups,
            })
        }
        Some((other, span)) => {
            r.err(
                span,
                format!("unknown state backend `{other}`"),
                "not a backend",
                Some("backends: \"local\" (the default), \"s3\"".into()),
            );
            None
        }
    }
}

/// The `[workflow.state]` of the workflow file at `path`, read on its own
/// (the rest of the file is not checked). `Ok(None)` when the file has no
/// such table or does not exist.
pub fn read_state_settings(path: &Path) -> Result<Option<StateSettings>, Diagnostics> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let source = Source::new(path.display().to_string(), text);
    let (entries, diags) = parse_document(&source);
    if !diags.is_empty() {
        return Err(diags);
    }
    let Some(node) = find(&entries, "workflow").and_then(|wf| match &wf.value.kind {
        NodeKind::Table(inner) => find(inner, "state").map(|e| &e.value),
        _ => None,
    }) else {
        return Ok(None);
    };
    let mut diags = Diagnostics::default();
    let settings = parse_state_table(&source, &mut diags, node);
    if diags.is_empty() {
        Ok(settings)
    } else {
        Err(diags)
    }
}

fn find<'e>(entries: &'e [Entry], key: &str) -> Option<&'e Entry> {
    entries.iter().find(|e| e.key == key)
}

struct Reader<'a> {
    source: &'a Source,
    diags: &'a mut Diagnostics,
}

impl Reader<'_> {
    fn err(&mut self, span: Span, msg: String, label: &str, help: Option<String>) {
        let mut d = Diag::new("flow::bad-state-setting", msg)
            .in_source(self.source)
            .label(span, label);
        if let Some(h) = help {
            d = d.help(h);
        }
        self.diags.push(d);
    }

    /// `keep_backups`: a whole number from 3 (the newest 3 are always kept).
    fn keep_count(&mut self, e: &Entry) -> Option<usize> {
        match &e.value.kind {
            NodeKind::Int(n) if *n >= flow_state::KEEP_NEWEST as i64 => usize::try_from(*n).ok(),
            NodeKind::Int(n) => {
                self.err(
                    e.value.span.clone(),
                    format!(
                        "workflow.state.keep_backups must be at least {}, found {n}",
                        flow_state::KEEP_NEWEST
                    ),
                    "too few",
                    Some(format!(
                        "the newest {} backups are always kept; write keep_backups = {} or more",
                        flow_state::KEEP_NEWEST,
                        flow_state::KEEP_NEWEST
                    )),
                );
                None
            }
            _ => {
                self.err(
                    e.value.span.clone(),
                    format!(
                        "workflow.state.keep_backups must be a whole number, found {}",
                        type_name(&e.value)
                    ),
                    "expected a number",
                    Some(format!(
                        "write it like keep_backups = {}",
                        flow_state::KEEP_BACKUPS
                    )),
                );
                None
            }
        }
    }

    /// `keep_backups_for`: a duration of at least an hour.
    fn keep_for(&mut self, e: &Entry) -> Option<Duration> {
        let text = self.string(e)?;
        match humantime::parse_duration(&text) {
            Ok(d) if d >= Duration::from_secs(3600) => Some(d),
            Ok(_) => {
                self.err(
                    e.value.span.clone(),
                    "workflow.state.keep_backups_for must be at least 1h".into(),
                    "too short",
                    Some(
                        "backups are taken once per apply; write it like \"30d\" or \"12h\"".into(),
                    ),
                );
                None
            }
            Err(err) => {
                self.err(
                    e.value.span.clone(),
                    format!("workflow.state.keep_backups_for is not a duration: {err}"),
                    "not a duration",
                    Some("write it like \"30d\" or \"12h\"".into()),
                );
                None
            }
        }
    }

    fn string(&mut self, e: &Entry) -> Option<String> {
        match &e.value.kind {
            NodeKind::Str(t) => match t.as_literal() {
                Some(s) => Some(s),
                None => {
                    self.err(
                        e.value.span.clone(),
                        format!("workflow.state.{} cannot contain references", e.key),
                        "write a plain value here",
                        Some("the state is found before variables are read; use `--state s3://BUCKET/KEY` to choose it per run".into()),
                    );
                    None
                }
            },
            _ => {
                self.err(
                    e.value.span.clone(),
                    format!(
                        "workflow.state.{} must be a string, found {}",
                        e.key,
                        type_name(&e.value)
                    ),
                    "expected a string",
                    None,
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<StateSettings>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wf.toml");
        std::fs::write(&path, text).unwrap();
        read_state_settings(&path).map_err(|d| {
            d.items
                .iter()
                .map(|i| i.message.clone())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    #[test]
    fn s3_settings_are_read() {
        let got = read(
            "[workflow]\nname = \"x\"\n[workflow.state]\nbackend = \"s3\"\nbucket = \"b\"\nkey = \"k.json\"\nregion = \"eu-west-1\"\nlease = \"30s\"\n",
        );
        assert_eq!(
            got,
            Ok(Some(StateSettings::S3 {
                bucket: "b".into(),
                key: "k.json".into(),
                region: Some("eu-west-1".into()),
                profile: None,
                lease: Some(Duration::from_secs(30)),
                backups: flow_state::Retention::default(),
            }))
        );
        assert_eq!(read("[workflow]\nname = \"x\"\n"), Ok(None));
        assert_eq!(
            read("[workflow.state]\nbackend = \"local\"\n"),
            Ok(Some(StateSettings::Local {
                backups: flow_state::Retention::default()
            }))
        );
        assert_eq!(
            read("[workflow.state]\nkeep_backups = 50\nkeep_backups_for = \"90d\"\n"),
            Ok(Some(StateSettings::Local {
                backups: flow_state::Retention {
                    keep: 50,
                    max_age: Duration::from_secs(90 * 24 * 3600),
                }
            }))
        );
    }

    #[test]
    fn mistakes_are_named() {
        let err = read("[workflow.state]\nbackend = \"s3\"\nbucket = \"b\"\n").unwrap_err();
        assert!(err.contains("needs key"), "{err}");
        let err = read("[workflow.state]\nbackend = \"gcs\"\n").unwrap_err();
        assert!(err.contains("unknown state backend `gcs`"), "{err}");
        let err = read("[workflow.state]\nbackend = \"s3\"\nbucket = \"${vars.b}\"\nkey = \"k\"\n")
            .unwrap_err();
        assert!(err.contains("cannot contain references"), "{err}");
        let err =
            read("[workflow.state]\nbackend = \"s3\"\nbuckt = \"b\"\nkey = \"k\"\n").unwrap_err();
        assert!(err.contains("unknown key `buckt`"), "{err}");
        let err = read("[workflow.state]\nbucket = \"b\"\n").unwrap_err();
        assert!(err.contains("is for backend = \"s3\""), "{err}");
        let err = read("[workflow.state]\nkeep_backups = 2\n").unwrap_err();
        assert!(err.contains("must be at least 3, found 2"), "{err}");
        let err = read("[workflow.state]\nkeep_backups = \"20\"\n").unwrap_err();
        assert!(err.contains("must be a whole number, found"), "{err}");
        let err = read("[workflow.state]\nkeep_backups_for = \"10m\"\n").unwrap_err();
        assert!(err.contains("must be at least 1h"), "{err}");
        let err = read("[workflow.state]\nkeep_backups_for = \"a month\"\n").unwrap_err();
        assert!(err.contains("is not a duration"), "{err}");
    }
}
