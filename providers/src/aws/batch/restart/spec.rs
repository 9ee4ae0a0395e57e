//! `restarts` and `checkpoint_s3` of a `batch.job`, as validate and apply
//! read them, and the newest checkpoint under `checkpoint_s3`.

use std::cmp::Ordering;

use serde_json::Value;

use crate::contract::{InputValue, Problem, ProviderError, Values};
use crate::fleet::restarts::{Bounds, bound_problems};

/// The inputs that make a job restart.
pub(crate) const INPUTS: [&str; 4] = [
    "restarts",
    "checkpoint_s3",
    "hang_after",
    "hang_without_loss",
];

/// Where the training writes its checkpoints: `s3://BUCKET/PREFIX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Prefix {
    pub bucket: String,
    /// The key prefix, ending in `/` unless empty.
    pub prefix: String,
}

impl S3Prefix {
    /// `s3://bucket/prefix/` read, or why it is not one.
    pub fn parse(text: &str) -> Result<S3Prefix, String> {
        let rest = text
            .strip_prefix("s3://")
            .ok_or_else(|| format!("`checkpoint_s3` {text:?} is not an s3:// URI"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("`checkpoint_s3` {text:?} names no bucket"));
        }
        let prefix = match prefix {
            "" => String::new(),
            p if p.ends_with('/') => p.to_string(),
            p => format!("{p}/"),
        };
        Ok(S3Prefix {
            bucket: bucket.to_string(),
            prefix,
        })
    }

    /// As an s3:// URI, ending in `/`.
    pub fn uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

/// What a job with restarts asks for.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// How many times a failed attempt is submitted again.
    pub restarts: u32,
    /// Where its checkpoints are, if flow is to tell each restart the
    /// newest.
    pub checkpoint: Option<S3Prefix>,
    /// When a running attempt is hung (`hang_after`, `hang_without_loss`).
    pub bounds: Bounds,
}

impl Spec {
    /// The spec of a step with restart inputs, `None` without.
    pub fn from_values(v: &Values) -> Result<Option<Spec>, ProviderError> {
        if !INPUTS
            .iter()
            .any(|k| v.get(*k).is_some_and(|x| !x.is_null()))
        {
            return Ok(None);
        }
        let bounds = Bounds::read(v).map_err(ProviderError::bad_input)?;
        let checkpoint = match v.get("checkpoint_s3").and_then(Value::as_str) {
            Some(t) => Some(S3Prefix::parse(t).map_err(ProviderError::bad_input)?),
            None => None,
        };
        Ok(Some(Spec {
            restarts: bounds.restarts,
            checkpoint,
            bounds,
        }))
    }

    /// The plan's line: how many restarts, resuming from where, and when
    /// an attempt is hung.
    pub fn plan_line(&self) -> String {
        let mut hung = Vec::new();
        if self.bounds.hang_after.is_some() {
            hung.push(format!("no new line for {}", self.bounds.hang_text));
        }
        if let Some((d, _)) = &self.bounds.no_loss {
            hung.push(format!(
                "no new loss for {}",
                humantime::format_duration(*d)
            ));
        }
        let hung = match hung.is_empty() {
            true => String::new(),
            false => format!(
                "; an attempt with {} is hung: terminated and restarted",
                hung.join(" or ")
            ),
        };
        let line = match &self.checkpoint {
            Some(c) => format!(
                "up to {} restarts, each a new job resuming from the newest checkpoint under {} (FLOW_RESUME_FROM)",
                self.restarts,
                c.uri()
            ),
            None => format!(
                "up to {} restarts, each a new job (no checkpoint_s3: each starts from the beginning)",
                self.restarts
            ),
        };
        line + &hung
    }
}

/// Validate's problems of the restart inputs, each at its entry.
pub(crate) fn problems(inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let known = crate::contract::known_inputs(inputs);
    let mut out = bound_problems(inputs, &known, "submits the job again", "the job's log");
    if let Some(text) = known.get("checkpoint_s3") {
        match text.as_str().map(S3Prefix::parse) {
            Some(Ok(_)) => {}
            Some(Err(why)) => out.push(Problem::at("checkpoint_s3", why).with_help(
                "the S3 prefix the training writes its checkpoints under, e.g. \"s3://my-bucket/checkpoints/run-1/\"",
            )),
            None => out.push(Problem::at("checkpoint_s3", "`checkpoint_s3` must be a string")),
        }
        if !inputs.iter().any(|(k, _)| k == "restarts") {
            out.push(
                Problem::at(
                    "checkpoint_s3",
                    "`checkpoint_s3` is read only for restarts, and the step has no `restarts`",
                )
                .with_help("add `restarts = 3` (how many times flow submits the job again after a failed attempt)"),
            );
        }
    }
    out
}

/// Orders two names with their runs of digits compared as numbers
/// (`epoch-10` after `epoch-9`).
fn natural(a: &str, b: &str) -> Ordering {
    let split = |s: &str| -> Vec<(bool, String)> {
        let mut parts: Vec<(bool, String)> = Vec::new();
        for c in s.chars() {
            let digit = c.is_ascii_digit();
            match parts.last_mut() {
                Some((d, p)) if *d == digit => p.push(c),
                _ => parts.push((digit, c.to_string())),
            }
        }
        parts
    };
    let (pa, pb) = (split(a), split(b));
    for (x, y) in pa.iter().zip(&pb) {
        let o = match (x.0, y.0) {
            (true, true) => {
                let (tx, ty) = (x.1.trim_start_matches('0'), y.1.trim_start_matches('0'));
                tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty))
            }
            _ => x.1.cmp(&y.1),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len())
}

/// The newest entry of a listing under `prefix`: each object's key and
/// its modification time (seconds); an entry is an object directly under
/// the prefix or a folder (its time its newest object's). The latest time
/// wins, the greater name on a tie (`epoch-10` after `epoch-9`). Returns
/// the entry's key (a folder's ending in `/`).
pub(crate) fn newest_entry(prefix: &str, objects: &[(String, i64)]) -> Option<String> {
    let mut entries: Vec<(String, i64)> = Vec::new();
    for (key, t) in objects {
        let Some(rest) = key.strip_prefix(prefix).filter(|r| !r.is_empty()) else {
            continue;
        };
        let entry = match rest.split_once('/') {
            Some((folder, _)) => format!("{prefix}{folder}/"),
            None => key.clone(),
        };
        match entries.iter_mut().find(|(e, _)| *e == entry) {
            Some((_, at)) => *at = (*at).max(*t),
            None => entries.push((entry, *t)),
        }
    }
    entries
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| natural(&a.0, &b.0)))
        .map(|(e, _)| e)
}

/// The newest checkpoint under `at`, as an s3:// URI, listed now.
pub(crate) async fn newest(
    s3: &aws_sdk_s3::Client,
    at: &S3Prefix,
) -> Result<Option<String>, ProviderError> {
    let mut objects = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let out = s3
            .list_objects_v2()
            .bucket(&at.bucket)
            .prefix(&at.prefix)
            .set_continuation_token(next.take())
            .send()
            .await
            .map_err(|e| super::super::super::error::aws(&format!("list {}", at.uri()), e))?;
        for o in out.contents() {
            if let (Some(k), Some(t)) = (o.key(), o.last_modified()) {
                objects.push((k.to_string(), t.secs()));
            }
        }
        match out.next_continuation_token() {
            Some(t) if out.is_truncated() == Some(true) => next = Some(t.to_string()),
            _ => break,
        }
    }
    Ok(newest_entry(&at.prefix, &objects).map(|k| format!("s3://{}/{k}", at.bucket)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_newest_entry_is_the_latest_then_the_greater_name() {
        let objects = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
            v.iter().map(|(k, t)| (k.to_string(), *t)).collect()
        };
        let l = objects(&[
            ("ck/epoch-9.pt", 100),
            ("ck/epoch-10.pt", 100),
            ("ck/epoch-2.pt", 90),
            ("ck/", 200),
        ]);
        assert_eq!(newest_entry("ck/", &l).as_deref(), Some("ck/epoch-10.pt"));
        let l = objects(&[
            ("ck/step-3/model.pt", 50),
            ("ck/step-3/optim.pt", 300),
            ("ck/step-4.pt", 200),
        ]);
        assert_eq!(newest_entry("ck/", &l).as_deref(), Some("ck/step-3/"));
        assert_eq!(newest_entry("ck/", &[]), None);
    }

    #[test]
    fn checkpoint_s3_is_an_s3_uri_and_needs_restarts() {
        let k = |v: Value| InputValue::Known(v);
        let p = problems(&[("checkpoint_s3".into(), k(json!("/fsx/ckpt")))]);
        let messages: Vec<&str> = p.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(p.len(), 2, "{messages:?}");
        assert!(messages[0].contains("not an s3:// URI"), "{messages:?}");
        assert!(messages[1].contains("no `restarts`"), "{messages:?}");
        let p = problems(&[
            ("restarts".into(), k(json!(101))),
            ("checkpoint_s3".into(), k(json!("s3://b/ck"))),
        ]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].path, ["restarts"]);
        assert_eq!(S3Prefix::parse("s3://b/ck").unwrap().uri(), "s3://b/ck/");
    }
}
