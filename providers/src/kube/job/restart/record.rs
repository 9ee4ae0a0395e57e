//! A `kube.job` with restarts, as its step's id records it and as the
//! `attempts` output, the messages and `flow runs` tell it.
//!
//! The id lists each attempt, comma-joined: the job's uid (`-` while the
//! attempt is being created), `@` and the checkpoint it was told to resume
//! from, `#` and its nodes (`;`-joined) when it hung and is being deleted,
//! with `~` and [`HungLog`] (as JSON): why it hung and the lines of its
//! log that named a node, which a resume has no other way to read (the
//! job and its pods are deleted); then, once it ended, `!` and its line
//! (`uid1!job train Failed: …; cordoned gpu-2,uid2@/fsx/ckpt/epoch-4.pt`),
//! `,` `@` `#` `;` `~` `^` `!` and `%` escaped. With policy replace, before the
//! attempt's bad nodes' instances are terminated, `^` and its [`Pending`]
//! (as JSON) come before the line: the attempt as it will read, and the
//! replacement under way. A resume (kill -9 of flow anywhere) reads it:
//! attempts with a line are done with (their nodes taken out already); the
//! first without one is followed or created, and one with a pending
//! replacement has it carried out (never terminating twice) and recorded.

use crate::fleet::id_text::{self, unescape};
use serde_json::{Value, json};

use crate::kube::node_check::for_job::Replacement;

pub(crate) use crate::fleet::restarts::{attempt_name, attempt_token};

/// One attempt as the step's id keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Recorded {
    /// The job's uid, once it was created.
    pub uid: Option<String>,
    /// FLOW_RESUME_FROM, when it was given one.
    pub resumed_from: Option<String>,
    /// A hung attempt's nodes, recorded before its job is deleted (a
    /// resume then checks them though the job and its pods are gone).
    pub hung_on: Option<Vec<String>>,
    /// A hung attempt's cause and the log lines that named its nodes,
    /// recorded with `hung_on`.
    pub hung_log: Option<HungLog>,
    /// Policy replace: the attempt and the replacement of its bad nodes,
    /// kept before their instances are terminated, until its line is.
    pub pending: Option<Pending>,
    /// Its line, once it ended and its nodes were dealt with.
    pub line: Option<String>,
}

/// What a hung attempt's log said, kept for a resume: the job's pods,
/// and so its log, are deleted before its nodes are checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct HungLog {
    /// Why it is hung (`no new loss for 30m (after 812 logged)`).
    pub why: String,
    /// The lines of its log that named a node (an Xid, NCCL's peer).
    pub lines: Vec<String>,
}

impl HungLog {
    fn json(&self) -> Value {
        json!({"why": self.why, "lines": self.lines})
    }

    fn from_json(v: &Value) -> Option<HungLog> {
        Some(HungLog {
            why: v["why"].as_str()?.to_string(),
            lines: v["lines"]
                .as_array()?
                .iter()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect(),
        })
    }
}

/// An attempt whose bad nodes were cordoned and drained and whose
/// instances are being terminated: what a resume needs to finish and
/// record it as an uninterrupted run does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The attempt as it reads without its replacements.
    pub attempt: Attempt,
    /// The replacement under way.
    pub replacement: Replacement,
}

impl Pending {
    fn json(&self) -> Value {
        json!({"attempt": self.attempt.json(), "replacement": self.replacement.json()})
    }

    fn from_json(v: &Value) -> Option<Pending> {
        Some(Pending {
            attempt: Attempt::from_json(&v["attempt"])?,
            replacement: Replacement::from_json(&v["replacement"])?,
        })
    }
}

/// The id's separators, escaped in the text between them.
const SEPARATORS: [char; 7] = [',', '@', '#', ';', '~', '^', '!'];

fn escape(s: &str) -> String {
    id_text::escape(s, &SEPARATORS)
}

/// The step's id for `attempts`.
pub(crate) fn encode(attempts: &[Recorded]) -> String {
    attempts
        .iter()
        .map(|a| {
            let mut s = a.uid.clone().unwrap_or_else(|| "-".into());
            if let Some(r) = &a.resumed_from {
                s.push('@');
                s.push_str(&escape(r));
            }
            if let Some(nodes) = &a.hung_on {
                s.push('#');
                let nodes: Vec<String> = nodes.iter().map(|n| escape(n)).collect();
                s.push_str(&nodes.join(";"));
            }
            if let Some(h) = &a.hung_log {
                s.push('~');
                s.push_str(&escape(&h.json().to_string()));
            }
            if let Some(p) = &a.pending {
                s.push('^');
                s.push_str(&escape(&p.json().to_string()));
            }
            if let Some(l) = &a.line {
                s.push('!');
                s.push_str(&escape(l));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The attempts an id records ([`encode`] undone); a plain uid (a job
/// without restarts) is one attempt.
pub(crate) fn decode(id: &str) -> Vec<Recorded> {
    id.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (head, line) = match p.split_once('!') {
                Some((u, l)) => (u, Some(unescape(l))),
                None => (p, None),
            };
            let (head, pending) = match head.split_once('^') {
                Some((h, p)) => (
                    h,
                    serde_json::from_str(&unescape(p))
                        .ok()
                        .as_ref()
                        .and_then(Pending::from_json),
                ),
                None => (head, None),
            };
            let (head, hung_log) = match head.split_once('~') {
                Some((h, l)) => (
                    h,
                    serde_json::from_str(&unescape(l))
                        .ok()
                        .as_ref()
                        .and_then(HungLog::from_json),
                ),
                None => (head, None),
            };
            let (head, hung_on) = match head.split_once('#') {
                Some((h, n)) => (
                    h,
                    Some(
                        n.split(';')
                            .filter(|n| !n.is_empty())
                            .map(unescape)
                            .collect(),
                    ),
                ),
                None => (head, None),
            };
            let (uid, resumed_from) = match head.split_once('@') {
                Some((u, r)) => (u, Some(unescape(r))),
                None => (head, None),
            };
            Recorded {
                uid: (uid != "-" && !uid.is_empty()).then(|| uid.to_string()),
                resumed_from,
                hung_on,
                hung_log,
                pending,
                line,
            }
        })
        .collect()
}

/// One attempt as the step's outputs and messages tell it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub number: u32,
    /// Its job's name.
    pub job: String,
    /// `Succeeded`, `Failed`, `Hung`.
    pub state: String,
    /// Why it failed (`None` for the one that succeeded).
    pub cause: Option<String>,
    /// What named its suspect nodes, or that nothing did.
    pub suspects: String,
    /// The nodes its pods ran on.
    pub nodes: Vec<String>,
    /// Its suspect nodes.
    pub suspect_nodes: Vec<String>,
    /// The nodes policy cordon or replace took out after it.
    pub cordoned: Vec<String>,
    /// Policy replace: each replaced node, its instance and the new node.
    pub replaced: Vec<Value>,
    /// The checkpoint it was told to resume from (FLOW_RESUME_FROM).
    pub resumed_from: Option<String>,
    /// An attempt an earlier run of this operation ended: only its line is
    /// known.
    pub earlier: Option<String>,
}

impl Attempt {
    /// As the `attempts` output holds it.
    pub fn json(&self) -> Value {
        if let Some(line) = &self.earlier {
            return json!({"attempt": self.number, "job": self.job, "line": line});
        }
        json!({
            "attempt": self.number,
            "job": self.job,
            "state": self.state,
            "cause": self.cause,
            "nodes": self.nodes,
            "suspects": (!self.suspects.is_empty()).then_some(&self.suspects),
            "suspect_nodes": self.suspect_nodes,
            "cordoned": self.cordoned,
            "replaced": self.replaced,
            "resumed_from": self.resumed_from,
        })
    }

    /// [`Attempt::json`] of an attempt that ended (not an earlier run's)
    /// read back.
    fn from_json(v: &Value) -> Option<Attempt> {
        let text = |k: &str| v[k].as_str().map(str::to_string);
        let list = |k: &str| -> Option<Vec<String>> {
            v[k].as_array()?
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect()
        };
        Some(Attempt {
            number: u32::try_from(v["attempt"].as_u64()?).ok()?,
            job: text("job")?,
            state: text("state")?,
            cause: text("cause"),
            suspects: text("suspects").unwrap_or_default(),
            nodes: list("nodes")?,
            suspect_nodes: list("suspect_nodes")?,
            cordoned: list("cordoned")?,
            replaced: v["replaced"].as_array()?.clone(),
            resumed_from: text("resumed_from"),
            earlier: None,
        })
    }

    /// One line: `job train Failed: <cause>; <suspects>; cordoned gpu-2`.
    pub fn line(&self) -> String {
        if let Some(line) = &self.earlier {
            return line.clone();
        }
        let mut s = format!("job {} {}", self.job, self.state);
        if !self.nodes.is_empty() {
            s.push_str(&format!(" on {}", self.nodes.join(",")));
        }
        if let Some(c) = &self.cause {
            s.push_str(&format!(": {c}; {}", self.suspects));
        }
        if !self.cordoned.is_empty() {
            s.push_str(&format!("; cordoned {}", self.cordoned.join(", ")));
        }
        if let Some(r) = &self.resumed_from {
            s.push_str(&format!(" (resumed from {r})"));
        }
        for r in &self.replaced {
            s.push_str(&format!(
                "; replaced {} ({}) by {}",
                r["node"].as_str().unwrap_or("?"),
                r["instance"].as_str().unwrap_or("?"),
                r["new_node"].as_str().unwrap_or("a node not seen yet")
            ));
        }
        s
    }
}

/// Every attempt in a line: `attempt 1: job train Failed: …; attempt 2: …`.
pub(crate) fn every(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|a| format!("attempt {}: {}", a.number, a.line()))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_records_each_attempt_and_its_line() {
        let attempts = [
            Recorded {
                uid: Some("u1".into()),
                resumed_from: None,
                hung_on: None,
                hung_log: None,
                pending: None,
                line: Some("job train Failed: a, b! 100%".into()),
            },
            Recorded {
                uid: Some("u2".into()),
                resumed_from: None,
                hung_on: Some(vec!["n1".into(), "n;2".into()]),
                hung_log: Some(HungLog {
                    why: "no new loss for 3s (after 6 logged)".into(),
                    lines: vec![
                        "n0: NCCL WARN peer n;2<43562> ~ 100% silent, still waiting".into(),
                    ],
                }),
                pending: None,
                line: None,
            },
            Recorded {
                uid: None,
                resumed_from: Some("/fsx/a@b#c".into()),
                hung_on: None,
                hung_log: None,
                pending: None,
                line: None,
            },
        ];
        let id = encode(&attempts);
        let parts: Vec<&str> = id.split(',').collect();
        assert_eq!(parts[0], "u1!job train Failed: a%2C b%21 100%25");
        assert!(parts[1].starts_with("u2#n1;n%3B2~{"), "{id}");
        assert!(
            parts[1].contains("n%3B2<43562> %7E 100%25 silent%2C still"),
            "the hung log's line escaped: {id}"
        );
        assert_eq!(parts[2], "-@/fsx/a%40b%23c");
        assert_eq!(parts.len(), 3, "{id}");
        assert_eq!(decode(&id), attempts);
        assert_eq!(
            decode("u9"),
            vec![Recorded {
                uid: Some("u9".into()),
                ..Recorded::default()
            }]
        );
        assert_eq!(attempt_name("train", 1), "train");
        assert_eq!(attempt_name("train", 3), "train-a3");
        assert_eq!(attempt_token("tok", 2), "tok-a2");
    }

    /// A replacement under way is kept with the attempt as it will read,
    /// and read back whole, whatever its text holds.
    #[test]
    fn a_pending_replacement_is_kept_until_the_line_is() {
        let attempt = Attempt {
            number: 1,
            job: "train".into(),
            state: "Failed".into(),
            cause: Some("NCCL error: peer 10.0.1.5, lost!".into()),
            suspects: "node ip-10-0-1-5 NotReady; 100% ^".into(),
            nodes: vec!["ip-10-0-1-4".into(), "ip-10-0-1-5".into()],
            suspect_nodes: vec!["ip-10-0-1-5".into()],
            cordoned: vec!["ip-10-0-1-5".into()],
            resumed_from: Some("/fsx/ckpt/e4".into()),
            ..Attempt::default()
        };
        let replacement = Replacement::from_json(&json!({
            "replacing": [{"node": "ip-10-0-1-5", "instance": "i-5", "group": "eks-gpu"}],
            "before": ["i-4", "i-5"]}))
        .unwrap();
        let recorded = vec![Recorded {
            uid: Some("u1".into()),
            resumed_from: Some("/fsx/ckpt/e4".into()),
            hung_on: None,
            hung_log: None,
            pending: Some(Pending {
                attempt,
                replacement,
            }),
            line: None,
        }];
        let id = encode(&recorded);
        assert_eq!(id.matches(',').count(), 0, "{id}");
        assert_eq!(id.matches('!').count(), 0, "{id}");
        assert_eq!(decode(&id), recorded);
    }

    #[test]
    fn an_attempt_reads_as_its_job_cause_and_what_was_done() {
        let a = Attempt {
            number: 1,
            job: "train".into(),
            state: "Failed".into(),
            cause: Some("PyTorchJobFailed".into()),
            suspects: "node gpu-2 NotReady".into(),
            nodes: vec!["gpu-1".into(), "gpu-2".into()],
            suspect_nodes: vec!["gpu-2".into()],
            cordoned: vec!["gpu-2".into()],
            ..Attempt::default()
        };
        assert_eq!(
            a.line(),
            "job train Failed on gpu-1,gpu-2: PyTorchJobFailed; node gpu-2 NotReady; cordoned gpu-2"
        );
        assert_eq!(a.json()["cordoned"], json!(["gpu-2"]));
    }
}
