//! The inputs that make a `slurm.job` survive a node: `restarts`,
//! `hang_after`, `hang_without_loss`, `checkpoint_dir`, `policy`, `check`
//! and, for policy `replace`, `hyperpod_cluster`, `pcluster_cluster` and
//! `replace_timeout`, read for apply and checked for validate (policy,
//! check and the replacement's inputs as `slurm.node_check` reads them);
//! the plan's lines; and the step's id while it restarts, which records
//! every attempt and the nodes replaced after it.

use crate::fleet::id_text::{self, unescape};
use std::time::Duration;

use serde_json::Value;

use crate::contract::{InputValue, Problem, ProviderError, Values, known_inputs};
use crate::fleet::restarts::{Bounds, bound_problems};
use crate::fleet::spec::{Platform, Policy, Rules};
use crate::metrics::Program;
use crate::slurm::replacement::{self, Replacing, Through};

/// The inputs this module reads; any of them given turns restarts on.
pub(crate) const INPUTS: [&str; 10] = [
    "restarts",
    "hang_after",
    "hang_without_loss",
    "checkpoint_dir",
    "policy",
    "check",
    "max_bad_fraction",
    replacement::INPUTS[0],
    replacement::INPUTS[1],
    replacement::INPUTS[2],
];

/// A slurm.job's platform, for `policy` and `check`: a bad node of a
/// failed attempt is drained, as `slurm.node_check` drains one; `replace`
/// is taken where `hyperpod_cluster` or `pcluster_cluster` names whose
/// replacement ([`replacement::problems`]).
pub(crate) const JOB: Platform = Platform {
    kind: "slurm.job",
    take_out: "drain",
    take_out_means: "scontrol update State=DRAIN Reason=\"flow: …\", and the next attempt excludes it",
    elsewhere: ("cordon", "EKS's (kube.node_check)"),
    replace_later: "replacing a node between attempts without naming whose replacement (`hyperpod_cluster`: SageMaker HyperPod's; `pcluster_cluster`: ParallelCluster's)",
    job_keys: &["script", "args", "environment", "sbatch_args"],
    job_needs: &["script"],
    job_needs_text: "`script`: the batch script each suspect node runs",
};

/// What a step says of its restarts.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// How many times a failed or hung attempt is submitted again.
    pub restarts: u32,
    /// No new line of output for this long is a hang.
    pub hang_after: Option<Duration>,
    /// The `hang_after` text, for messages.
    pub hang_text: String,
    /// No new loss, as the step's `parse` reads losses, for this long is a
    /// hang (`hang_without_loss`).
    pub no_loss: Option<(Duration, Program)>,
    /// The folder on the cluster the training writes its checkpoints into.
    pub checkpoint_dir: Option<String>,
    /// What a node found bad gets.
    pub policy: Policy,
    /// The check a failed attempt's suspect nodes run.
    pub check: Option<Values>,
    /// What the check's output is held to (GPUs, EFA devices, DCGM).
    pub rules: Rules,
    /// Policy `replace`: the cluster a bad node is replaced through, after
    /// it is drained (`policy` is then read as `drain`).
    pub replace_through: Option<Through>,
    /// Policy `replace`: how long the platform may take to put a new node
    /// in service.
    pub replace_timeout: Duration,
    /// Policy `replace`: the most of a failed attempt's nodes that may be
    /// replaced (one always may); more fails the step, replacing none.
    pub max_bad_fraction: f64,
}

impl Spec {
    /// The restart inputs of an apply; `None` when the step gives none (the
    /// job runs once, as it always did).
    pub fn from_values(v: &Values) -> Result<Option<Spec>, ProviderError> {
        if !INPUTS
            .iter()
            .any(|k| v.get(*k).is_some_and(|x| !x.is_null()))
        {
            return Ok(None);
        }
        let invalid = |m: String| ProviderError::invalid(m).before_acting();
        let Bounds {
            restarts,
            hang_after,
            hang_text,
            no_loss,
        } = Bounds::read(v).map_err(invalid)?;
        let mut shared = Values::new();
        for k in ["policy", "check", "max_bad_fraction"] {
            if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                shared.insert(k.into(), x.clone());
            }
        }
        let (replace_through, replace_timeout) = replacement::read(v)?;
        if replace_through.is_some() {
            shared = replacement::as_drain(&shared);
        }
        let common = JOB.common(&shared)?;
        Ok(Some(Spec {
            restarts,
            hang_after,
            hang_text,
            no_loss,
            checkpoint_dir: v
                .get("checkpoint_dir")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map(str::to_string),
            policy: common.policy,
            rules: common.rules(),
            check: common.check,
            replace_through,
            replace_timeout,
            max_bad_fraction: common.max_bad_fraction,
        }))
    }

    /// What the plan says of the restarts.
    pub fn plan_lines(&self) -> Vec<String> {
        let mut lines = vec![match (&self.checkpoint_dir, self.restarts) {
            (_, 0) => "no restarts: a failed attempt fails the step".to_string(),
            (Some(dir), n) => format!(
                "up to {n} restart{}, resuming from the newest checkpoint in {dir} (FLOW_RESUME_FROM)",
                if n == 1 { "" } else { "s" }
            ),
            (None, n) => format!(
                "up to {n} restart{}, each from the start (no checkpoint_dir)",
                if n == 1 { "" } else { "s" }
            ),
        }];
        if self.hang_after.is_some() {
            lines.push(format!(
                "no new output for {} is a hang: the job is cancelled (scancel) and counts as failed",
                self.hang_text
            ));
        }
        if let Some((limit, program)) = self.no_loss {
            lines.push(format!(
                "no new loss (as `parse = \"{}\"` reads it) for {} is a hang: the job is cancelled (scancel) and counts as failed",
                program.name(),
                humantime::format_duration(limit)
            ));
        }
        lines.push(match &self.check {
            Some(c) => format!(
                "a failed attempt's suspect nodes (its NODE_FAIL, Xid and NCCL lines, else all its nodes) run `{}` alone",
                c.get("script").and_then(Value::as_str).unwrap_or("?")
            ),
            None => "a failed attempt's nodes are named from NODE_FAIL, Xid and NCCL lines; without `check` only NODE_FAIL finds a node bad".into(),
        });
        lines.push(match (self.policy, &self.replace_through) {
            (Policy::Fail, _) => "a node found bad fails the step, naming it (policy fail)".into(),
            (Policy::TakeOut, Some(through)) => format!(
                "a node found bad (NODE_FAIL or the check, never a guess) is drained (scontrol update State=DRAIN Reason=\"flow: …\"), then {}; the next attempt is submitted once it is in service, and may run on it; more bad nodes than {} % of the job's (one always may be) fails the step, replacing none",
                through.plan_text(self.replace_timeout),
                self.max_bad_fraction * 100.0
            ),
            (Policy::TakeOut, None) => "a node found bad is drained (scontrol update State=DRAIN Reason=\"flow: …\") and excluded from the next attempts".into(),
        });
        lines
    }
}

/// The problems of the restart inputs, for validate, each at its entry.
pub(crate) fn problems(inputs: &[(String, InputValue)], workdir: &crate::Workdir) -> Vec<Problem> {
    let known = known_inputs(inputs);
    let mut out = bound_problems(inputs, &known, "submits the job again", "the job's output");
    if let Some(dir) = known.get("checkpoint_dir").and_then(Value::as_str)
        && (dir.trim().is_empty() || dir.contains('\n'))
    {
        out.push(
            Problem::at("checkpoint_dir", format!("`checkpoint_dir` {dir:?} is not a folder"))
                .with_help("the folder on the cluster the training writes its checkpoints into, e.g. \"/fsx/ckpt/llama\""),
        );
    }
    // The shared inputs, as slurm.node_check checks them; its call to give
    // `check` or `pairs` does not apply (a job's check is optional).
    let shared: Vec<(String, InputValue)> = inputs
        .iter()
        .filter(|(k, _)| {
            ["policy", "check", "max_bad_fraction"].contains(&k.as_str())
                || replacement::INPUTS.contains(&k.as_str())
        })
        .cloned()
        .collect();
    out.extend(
        replacement::problems(&JOB, &shared)
            .into_iter()
            .filter(|p| !p.path.is_empty()),
    );
    if known.contains_key("max_bad_fraction")
        && known.get("policy").and_then(Value::as_str) != Some("replace")
    {
        out.push(Problem::at(
            "max_bad_fraction",
            "`max_bad_fraction` is for policy `replace`: it bounds how many of a failed attempt's nodes are replaced",
        ));
    }
    if let Some(path) = known
        .get("check")
        .and_then(|c| c.get("script"))
        .and_then(Value::as_str)
        && let Err(why) = workdir.resolve(path)
    {
        out.push(Problem::at_path(&["check", "script"], why).with_help(
            "copy the script into the workflow's folder (or a folder under it) and name it relative to the workflow file",
        ));
    }
    out
}

/// One attempt as the step's id keeps it: its job (`None` while it is
/// being submitted), the checkpoint it was told to resume from, and the
/// nodes replaced after it failed (policy `replace`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recorded {
    /// The job's id, once sbatch gave it.
    pub job: Option<String>,
    /// FLOW_RESUME_FROM, when it was given one.
    pub resumed_from: Option<String>,
    /// Its bad nodes being replaced, or replaced (each with its new node
    /// once in service).
    pub replacing: Vec<Replacing>,
    /// Why flow found it hung, recorded before its cancel (so that a run
    /// resumed after a kill tells the same cause, not `CANCELLED`).
    pub hung: Option<String>,
}

/// `,`, `@` and `|` (the id's separators) and `%` escaped.
fn escape(s: &str) -> String {
    id_text::escape(s, &[',', '@', '|'])
}

/// The step's id for `attempts`: each attempt's job id (`-` for one being
/// submitted), `@` and the checkpoint it resumed from, then `|` and each
/// node replaced after it ([`Replacing::encoded`]), joined by commas:
/// `812|gpu-3=i-0a…@worker-group-1@1764300000+@NODE_FAIL…,815@/fsx/ckpt/step-300`.
/// A job that runs once keeps its bare id.
pub(crate) fn encode(attempts: &[Recorded]) -> String {
    attempts
        .iter()
        .map(|a| {
            let mut s = a.job.clone().unwrap_or_else(|| "-".into());
            if let Some(from) = &a.resumed_from {
                s.push('@');
                s.push_str(&escape(from));
            }
            for r in &a.replacing {
                s.push('|');
                s.push_str(&r.encoded());
            }
            if let Some(why) = &a.hung {
                s.push_str("|~");
                s.push_str(&escape(why));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The attempts an id records ([`encode`] undone).
pub(crate) fn decode(id: &str) -> Vec<Recorded> {
    id.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut pieces = p.split('|');
            let first = pieces.next().unwrap_or_default();
            let (job, from) = match first.split_once('@') {
                Some((j, f)) => (j, Some(unescape(f))),
                None => (first, None),
            };
            let (hung, replacing): (Vec<&str>, Vec<&str>) =
                pieces.partition(|piece| piece.starts_with('~'));
            Recorded {
                job: (job != "-" && !job.is_empty()).then(|| job.to_string()),
                resumed_from: from,
                replacing: replacing
                    .into_iter()
                    .filter_map(Replacing::decoded)
                    .collect(),
                hung: hung.first().map(|h| unescape(&h[1..])),
            }
        })
        .collect()
}

/// The job id of the last attempt an id records, for what acts on the job
/// the step stands for (refresh, cancel on destroy).
pub(crate) fn last_job(id: &str) -> Option<String> {
    decode(id).into_iter().rev().find_map(|a| a.job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::known;

    #[test]
    fn the_id_records_each_attempt_and_its_checkpoint() {
        let attempts = [
            Recorded {
                job: Some("812".into()),
                resumed_from: None,
                replacing: Vec::new(),
                hung: Some("no new loss for 30m (after 412 logged)".into()),
            },
            Recorded {
                job: Some("815".into()),
                resumed_from: Some("/fsx/a,b@c%d|e".into()),
                replacing: vec![Replacing {
                    node: "ip-10-1-0-5".into(),
                    instance_id: "i-0a".into(),
                    group: "worker-group-1".into(),
                    since: 1_764_300_000,
                    sent: true,
                    reason: "NODE_FAIL: Slurm ended the job for node ip-10-1-0-5".into(),
                    by: Some(("i-0b".into(), "ip-10-1-0-9".into())),
                }],
                hung: None,
            },
            Recorded {
                job: None,
                resumed_from: Some("/fsx/step-3".into()),
                replacing: Vec::new(),
                hung: None,
            },
        ];
        let id = encode(&attempts);
        assert_eq!(
            id,
            "812|~no new loss for 30m (after 412 logged),815@/fsx/a%2Cb%40c%25d%7Ce|ip-10-1-0-5=i-0a@worker-group-1@1764300000+\
             @NODE_FAIL: Slurm ended the job for node ip-10-1-0-5@i-0b@ip-10-1-0-9,-@/fsx/step-3"
        );
        assert_eq!(decode(&id), attempts);
        assert_eq!(last_job(&id).as_deref(), Some("815"));
        assert_eq!(
            encode(&attempts[..1]),
            "812|~no new loss for 30m (after 412 logged)"
        );
        assert_eq!(last_job("812").as_deref(), Some("812"));
        // An id written before the hung cause was kept reads as before.
        assert_eq!(decode("812")[0].hung, None);
        assert_eq!(last_job("-"), None);
    }

    #[test]
    fn validate_refuses_bad_values_at_their_entry() {
        let dir = tempfile::tempdir().unwrap();
        let p = problems(
            &known(
                json!({"restarts": -1, "hang_after": "soon", "checkpoint_dir": " ",
                "policy": "cordon", "check": {"script": "../c.sbatch", "gpus": "all"}}),
            ),
            &dir.path().into(),
        );
        let paths: Vec<String> = p.iter().map(|p| p.path.join(".")).collect();
        for want in [
            "restarts",
            "hang_after",
            "checkpoint_dir",
            "policy",
            "check.gpus",
            "check.script",
        ] {
            assert!(paths.contains(&want.to_string()), "{want}: {paths:?}");
        }
        assert!(
            problems(&known(json!({"hang_after": "0s"})), &dir.path().into())[0]
                .message
                .contains("under a second")
        );
        let fine = problems(
            &known(
                json!({"restarts": 3, "hang_after": "10m", "checkpoint_dir": "/fsx/ckpt", "policy": "drain"}),
            ),
            &dir.path().into(),
        );
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn replace_is_taken_with_a_named_cluster_as_slurm_node_check_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let refused = problems(
            &known(json!({"restarts": 1, "policy": "replace"})),
            &dir.path().into(),
        );
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0]
                .message
                .contains("policy `replace` is not built yet for slurm.job"),
            "{refused:?}"
        );
        assert!(
            refused[0]
                .help
                .as_deref()
                .unwrap_or_default()
                .contains("name the cluster in `hyperpod_cluster`"),
            "{refused:?}"
        );
        for cluster in ["hyperpod_cluster", "pcluster_cluster"] {
            let fine = problems(
                &known(json!({"restarts": 1, "policy": "replace", cluster: "ml",
                    "replace_timeout": "20m"})),
                &dir.path().into(),
            );
            assert!(fine.is_empty(), "{cluster}: {fine:?}");
        }
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        let s = Spec::from_values(&v(json!({"restarts": 1, "policy": "replace",
            "hyperpod_cluster": "ml-cluster", "replace_timeout": "20m"})))
        .unwrap()
        .unwrap();
        assert_eq!(s.policy, Policy::TakeOut);
        assert_eq!(
            s.replace_through,
            Some(Through::HyperPod("ml-cluster".into()))
        );
        assert_eq!(s.replace_timeout, Duration::from_secs(1200));
        let last = s.plan_lines().pop().unwrap();
        assert!(
            last.contains("then its instance replaced through HyperPod cluster `ml-cluster` (BatchReplaceClusterNodes, once), the new node waited for (up to 20m); the next attempt is submitted once it is in service"),
            "{last}"
        );
        assert!(Spec::from_values(&v(json!({"restarts": 1, "policy": "replace"}))).is_err());
        assert_eq!(s.max_bad_fraction, 0.25);
        let paths = |j: Value| {
            problems(&known(j), &dir.path().into())
                .into_iter()
                .map(|p| p.path.join("."))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            paths(json!({"policy": "drain", "max_bad_fraction": 0.5})),
            ["max_bad_fraction"]
        );
        assert_eq!(
            paths(json!({"policy": "replace", "hyperpod_cluster": "ml", "max_bad_fraction": 1.5})),
            ["max_bad_fraction"]
        );
        assert!(
            paths(json!({"policy": "replace", "hyperpod_cluster": "ml", "max_bad_fraction": 0.5}))
                .is_empty()
        );
    }

    #[test]
    fn hang_without_loss_needs_a_parse_that_reads_losses() {
        let dir = tempfile::tempdir().unwrap();
        let why = |j: Value| {
            problems(&known(j), &dir.path().into())
                .into_iter()
                .map(|p| (p.path.join("."), p.message))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            why(json!({"hang_without_loss": "30m", "parse": "nccl-tests"})),
            vec![(
                "hang_without_loss".to_string(),
                "`hang_without_loss` needs a `parse` that reads losses (\"torchrun\"), and `parse = \"nccl-tests\"` reads none".to_string()
            )]
        );
        assert_eq!(
            why(json!({"hang_without_loss": "30m"}))[0].1,
            "`hang_without_loss` needs a `parse` that reads losses (\"torchrun\"): the step has no `parse`"
        );
        assert!(
            why(json!({"hang_without_loss": "never", "parse": "torchrun"}))[0]
                .1
                .contains("is not a duration")
        );
        assert!(why(json!({"hang_without_loss": "30m", "parse": "torchrun"})).is_empty());
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        let s = Spec::from_values(&v(json!({"restarts": 1, "hang_without_loss": "30m",
            "parse": "torchrun"})))
        .unwrap()
        .unwrap();
        assert_eq!(
            s.no_loss,
            Some((Duration::from_secs(1800), Program::Torchrun))
        );
        assert!(
            s.plan_lines().contains(&"no new loss (as `parse = \"torchrun\"` reads it) for 30m is a hang: the job is cancelled (scancel) and counts as failed".to_string()),
            "{:?}",
            s.plan_lines()
        );
        let refused = Spec::from_values(&v(json!({"hang_without_loss": "30m"}))).unwrap_err();
        assert!(
            refused.message.contains("needs a `parse`"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn the_plan_says_how_many_restarts_and_from_where() {
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        assert!(
            Spec::from_values(&v(json!({"script": "t.sbatch"})))
                .unwrap()
                .is_none()
        );
        let s = Spec::from_values(&v(json!({"restarts": 2, "hang_after": "10m",
            "checkpoint_dir": "/fsx/ckpt", "policy": "drain"})))
        .unwrap()
        .unwrap();
        assert_eq!(s.hang_after, Some(Duration::from_secs(600)));
        let lines = s.plan_lines();
        assert_eq!(
            lines[0],
            "up to 2 restarts, resuming from the newest checkpoint in /fsx/ckpt (FLOW_RESUME_FROM)"
        );
        assert!(
            lines[1].starts_with("no new output for 10m is a hang"),
            "{}",
            lines[1]
        );
        assert!(
            lines[3].starts_with("a node found bad is drained"),
            "{}",
            lines[3]
        );
        let e = Spec::from_values(&v(json!({"restarts": 1000}))).unwrap_err();
        assert!(e.message.contains("not a count"), "{}", e.message);
    }
}
