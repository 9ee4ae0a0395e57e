//! A `batch.job` with restarts as its step's id keeps it, and as the
//! `attempts` output, the messages and `flow runs` tell it.
//!
//! The id lists each attempt, comma-joined: its job's id (`-` while the
//! attempt is being submitted), `@` and the checkpoint it was told to
//! resume from, `~` and why it is hung once found so (before its job is
//! terminated), then, once it ended, `!` and its line
//! (`a1b2!job train FAILED: …,c3d4@s3://b/ckpt/epoch-3.pt`); `%`, `,`, `@`,
//! `~` and `!` escaped. The attempt being submitted is recorded before its
//! SubmitJob, with its checkpoint, and its job's id after: a resume finds
//! a job whose answer was lost by its token tag, never submitting a second.

use crate::fleet::id_text::{self, unescape};
use serde_json::{Value, json};

pub(crate) use crate::fleet::restarts::{attempt_name, attempt_token};

/// One attempt as the step's id keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Recorded {
    /// Its job's id, once SubmitJob answered.
    pub job_id: Option<String>,
    /// FLOW_RESUME_FROM, when it was given one.
    pub resumed_from: Option<String>,
    /// Why it is hung, recorded before its job is terminated.
    pub hung: Option<String>,
    /// Its line, once it ended.
    pub line: Option<String>,
}

/// The id's separators, escaped in the text between them.
const SEPARATORS: [char; 4] = [',', '@', '~', '!'];

fn escape(s: &str) -> String {
    id_text::escape(s, &SEPARATORS)
}

/// The step's id for `attempts`.
pub(crate) fn encode(attempts: &[Recorded]) -> String {
    attempts
        .iter()
        .map(|a| {
            let mut s = a.job_id.clone().unwrap_or_else(|| "-".into());
            if let Some(r) = &a.resumed_from {
                s.push('@');
                s.push_str(&escape(r));
            }
            if let Some(h) = &a.hung {
                s.push('~');
                s.push_str(&escape(h));
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

/// The attempts an id records ([`encode`] undone); a plain job id (a job
/// without restarts) is one attempt.
pub(crate) fn decode(id: &str) -> Vec<Recorded> {
    id.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (head, line) = match p.split_once('!') {
                Some((h, l)) => (h, Some(unescape(l))),
                None => (p, None),
            };
            let (head, hung) = match head.split_once('~') {
                Some((h, w)) => (h, Some(unescape(w))),
                None => (head, None),
            };
            let (job, resumed_from) = match head.split_once('@') {
                Some((j, r)) => (j, Some(unescape(r))),
                None => (head, None),
            };
            Recorded {
                job_id: (job != "-" && !job.is_empty()).then(|| job.to_string()),
                resumed_from,
                hung,
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
    /// Its job's id.
    pub job_id: String,
    /// `SUCCEEDED`, `FAILED` or `HUNG` (terminated by flow).
    pub status: String,
    /// Why it failed: the job's status reason.
    pub cause: Option<String>,
    /// Its nodes that failed, each with its instance and Batch's reason
    /// (`node 1 (i-0abc): Host EC2 (instance i-0abc) terminated.`).
    pub failed_nodes: Vec<String>,
    /// The nodes NCCL's warnings in the main node's log name as the peer
    /// lost, each with its instance and the line.
    pub suspects: Vec<String>,
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
            "job_id": self.job_id,
            "status": self.status,
            "cause": self.cause,
            "failed_nodes": self.failed_nodes,
            "suspects": self.suspects,
            "resumed_from": self.resumed_from,
        })
    }

    /// One line: `job train (ID) FAILED: <cause>; node 1 (i-…): <reason>
    /// (resumed from s3://…)`.
    pub fn line(&self) -> String {
        if let Some(line) = &self.earlier {
            return line.clone();
        }
        let mut s = format!("job {} ({}) {}", self.job, self.job_id, self.status);
        if let Some(c) = &self.cause {
            s.push_str(&format!(": {c}"));
            match self.failed_nodes.is_empty() {
                true => s.push_str("; no node failed"),
                false => s.push_str(&format!("; {}", self.failed_nodes.join("; "))),
            }
            for n in &self.suspects {
                s.push_str(&format!("; {n}"));
            }
        }
        if let Some(r) = &self.resumed_from {
            s.push_str(&format!(" (resumed from {r})"));
        }
        s
    }
}

/// Every attempt in a line: `attempt 1: job train … FAILED: …; attempt 2: …`.
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
    fn the_id_keeps_each_attempt_and_reads_back() {
        let attempts = vec![
            Recorded {
                job_id: Some("j-1".into()),
                resumed_from: None,
                hung: Some("no new line in 5s ~ quiet".into()),
                line: Some("job t (j-1) HUNG: a, b @ c! 100%".into()),
            },
            Recorded {
                job_id: None,
                resumed_from: Some("s3://b/ck/epoch-3.pt".into()),
                hung: None,
                line: None,
            },
        ];
        let id = encode(&attempts);
        assert_eq!(id.matches(',').count(), 1, "{id}");
        assert_eq!(decode(&id), attempts);
        assert_eq!(
            decode("j-9"),
            [Recorded {
                job_id: Some("j-9".into()),
                ..Recorded::default()
            }]
        );
        assert_eq!(attempt_name("train", 1), "train");
        assert_eq!(attempt_name("train", 3), "train-a3");
        assert_eq!(attempt_token("tok", 2), "tok-a2");
    }

    #[test]
    fn a_line_names_the_failed_nodes_and_the_checkpoint() {
        let a = Attempt {
            number: 2,
            job: "train-a2".into(),
            job_id: "j-2".into(),
            status: "FAILED".into(),
            cause: Some("Host EC2 (instance i-1) terminated.".into()),
            failed_nodes: vec!["node 1 (i-1): Host EC2 (instance i-1) terminated.".into()],
            suspects: Vec::new(),
            resumed_from: Some("s3://b/ck/epoch-3.pt".into()),
            earlier: None,
        };
        assert_eq!(
            a.line(),
            "job train-a2 (j-2) FAILED: Host EC2 (instance i-1) terminated.; node 1 (i-1): Host EC2 (instance i-1) terminated. (resumed from s3://b/ck/epoch-3.pt)"
        );
        assert_eq!(
            every(std::slice::from_ref(&a)),
            format!("attempt 2: {}", a.line())
        );
    }
}
