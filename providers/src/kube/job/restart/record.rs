//! A `kube.job` with restarts, as its step's id records it and as the
//! `attempts` output, the messages and `flow runs` tell it.
//!
//! The id lists each attempt, comma-joined: the job's uid (`-` while the
//! attempt is being created), `@` and the checkpoint it was told to resume
//! from, `#` and its nodes (`;`-joined) when it hung and is being deleted,
//! then, once it ended, `!` and its line
//! (`uid1!job train Failed: …; cordoned gpu-2,uid2@/fsx/ckpt/epoch-4.pt`),
//! `,` `@` `#` `;` `!` and `%` escaped. A resume (kill -9 of flow anywhere) reads it:
//! attempts with a line are done with (their nodes taken out already),
//! the first without one is followed or created.

use serde_json::{Value, json};

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
    /// Its line, once it ended and its nodes were dealt with.
    pub line: Option<String>,
}

fn escape(s: &str) -> String {
    s.replace('%', "%25")
        .replace(',', "%2C")
        .replace('@', "%40")
        .replace('#', "%23")
        .replace(';', "%3B")
        .replace('!', "%21")
}

fn unescape(s: &str) -> String {
    s.replace("%21", "!")
        .replace("%3B", ";")
        .replace("%23", "#")
        .replace("%40", "@")
        .replace("%2C", ",")
        .replace("%25", "%")
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
                line,
            }
        })
        .collect()
}

/// The name of attempt `n`'s job: the manifest's for the first, `NAME-aN`
/// after.
pub(crate) fn attempt_name(base: &str, n: u32) -> String {
    match n {
        1 => base.to_string(),
        n => format!("{base}-a{n}"),
    }
}

/// The token annotation of attempt `n`: the operation's for the first.
pub(crate) fn attempt_token(token: &str, n: u32) -> String {
    match n {
        1 => token.to_string(),
        n => format!("{token}-a{n}"),
    }
}

/// One attempt as the step's outputs and messages tell it.
#[derive(Debug, Clone, Default)]
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
                line: Some("job train Failed: a, b! 100%".into()),
            },
            Recorded {
                uid: Some("u2".into()),
                resumed_from: None,
                hung_on: Some(vec!["n1".into(), "n;2".into()]),
                line: None,
            },
            Recorded {
                uid: None,
                resumed_from: Some("/fsx/a@b#c".into()),
                hung_on: None,
                line: None,
            },
        ];
        let id = encode(&attempts);
        assert_eq!(
            id,
            "u1!job train Failed: a%2C b%21 100%25,u2#n1;n%3B2,-@/fsx/a%40b%23c"
        );
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
