//! The inputs that make a `kube.job` survive a node: `restarts`,
//! `hang_after`, `hang_without_loss`, `checkpoint_dir`, `policy`, `check`,
//! `drain_timeout` and `replace_timeout`, read for apply and checked for
//! validate (`policy` and `check` through [`crate::fleet::spec`] with this
//! kind's platform, as `kube.node_check` reads them), and the plan's lines.

use std::time::Duration;

use serde_json::Value;

use crate::contract::{InputSpec, InputType, InputValue, Problem, ProviderError, Values};
use crate::fleet::restarts::{Bounds, bound_problems};
use crate::fleet::spec::{Common, Platform, Policy};
use crate::metrics::Program;

/// The inputs this module reads; any of them given turns restarts on.
pub(crate) const INPUTS: [&str; 9] = [
    "restarts",
    "hang_after",
    "hang_without_loss",
    "checkpoint_dir",
    "policy",
    "check",
    "drain_timeout",
    "replace_timeout",
    "max_bad_fraction",
];

/// A kube.job's platform, for `policy` and `check`: a bad node of a failed
/// attempt is cordoned, or replaced, as `kube.node_check` does it.
pub(crate) const JOB: Platform = Platform {
    kind: "kube.job",
    take_out: "cordon",
    take_out_means: "cordoned, tainted flow.dev/unhealthy and drained; the next attempt's pods go elsewhere",
    elsewhere: ("drain", "Slurm's (slurm.job, slurm.node_check)"),
    replace_later: "terminating a bad node's instance through its Auto Scaling group",
    job_keys: &["files", "manifest", "values", "substitute"],
    job_needs: &["files", "manifest"],
    job_needs_text: "`files` or `manifest`: the job each suspect node runs alone",
};

/// The schema entries of the restart inputs.
pub(crate) fn input_specs() -> Vec<InputSpec> {
    let s = |name: &'static str, about: &'static str| {
        InputSpec::optional(name, InputType::String, about)
    };
    vec![
        InputSpec::optional(
            "restarts",
            InputType::Integer,
            "How many times flow starts the job again after a failed or hung attempt (default 0); attempt N > 1 is the job named NAME-aN",
        ),
        s(
            "hang_after",
            "No new line in the job's logs for this long (e.g. \"10m\") while it runs is a hang: flow deletes the attempt and counts a failure",
        ),
        s(
            "hang_without_loss",
            "No new loss (as `parse` reads losses, e.g. parse = \"torchrun\") for this long (e.g. \"30m\") while it runs is a hang, even while it prints other lines",
        ),
        s(
            "checkpoint_dir",
            "The folder the training writes checkpoints into, on a volume of its container: each restart is told its newest entry as FLOW_RESUME_FROM (listed by a Job that mounts the training's volumes), and the folder as FLOW_CHECKPOINT_DIR",
        ),
        s(
            "policy",
            "What a node a failed attempt's check (or Kubernetes: NotReady, gone) finds bad gets: fail (the default), cordon or replace, as kube.node_check does",
        ),
        InputSpec::optional(
            "check",
            InputType::Map(Box::new(InputType::Any)),
            "A job each suspect node of a failed attempt runs alone: kube.node_check's `check` table; ${NODE} is the node's name",
        ),
        s(
            "drain_timeout",
            "How long draining a bad node may take (15m)",
        ),
        s(
            "replace_timeout",
            "Policy replace: how long the new node may take to be Ready (20m)",
        ),
        InputSpec::optional(
            "max_bad_fraction",
            InputType::Number,
            "More bad nodes than this fraction of a failed attempt's nodes fails the step and takes none out (0.25)",
        ),
    ]
}

/// What a step says of its restarts.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// How many times a failed or hung attempt is started again.
    pub restarts: u32,
    /// No new line of output for this long is a hang.
    pub hang_after: Option<Duration>,
    /// The `hang_after` text, for messages.
    pub hang_text: String,
    /// No new loss for this long is a hang, as this program reads losses.
    pub no_loss: Option<(Duration, Program)>,
    /// The folder the training writes its checkpoints into.
    pub checkpoint_dir: Option<String>,
    /// `policy` and `check`, as kube.node_check reads them.
    pub common: Common,
    /// How long draining a bad node may take.
    pub drain_timeout: Duration,
    /// Policy replace: how long the new node may take to be Ready.
    pub replace_timeout: Duration,
}

/// `drain_timeout` or `replace_timeout`: a duration (`"10m"`).
fn duration_of(key: &str, v: &Value) -> Result<Duration, Problem> {
    v.as_str()
        .and_then(|t| humantime::parse_duration(t).ok())
        .ok_or_else(|| Problem::at(key, format!("{v} is not a duration (e.g. \"10m\")")))
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
            if let Some(x) = v.get(k) {
                shared.insert(k.into(), x.clone());
            }
        }
        let timeout = |key: &str, default: u64| {
            v.get(key)
                .map(|t| duration_of(key, t))
                .transpose()
                .map(|d| d.unwrap_or(Duration::from_secs(default)))
                .map_err(|p| invalid(p.message))
        };
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
            common: JOB.common(&shared)?,
            drain_timeout: timeout("drain_timeout", 15 * 60)?,
            replace_timeout: timeout("replace_timeout", 20 * 60)?,
        }))
    }

    /// What the plan says a failure does.
    pub fn plan_lines(&self) -> Vec<String> {
        let mut lines = vec![match (&self.checkpoint_dir, self.restarts) {
            (_, 0) => "no restarts: a failed attempt fails the step".to_string(),
            (Some(dir), n) => format!(
                "up to {n} restart{}, each a new job NAME-aN resuming from the newest checkpoint in {dir} (FLOW_RESUME_FROM, listed by a Job that mounts the training's volumes)",
                if n == 1 { "" } else { "s" }
            ),
            (None, n) => format!(
                "up to {n} restart{}, each a new job NAME-aN told FLOW_ATTEMPT (no checkpoint_dir)",
                if n == 1 { "" } else { "s" }
            ),
        }];
        if self.hang_after.is_some() {
            lines.push(format!(
                "no new log line for {} is a hang: the attempt is deleted and counts as failed",
                self.hang_text
            ));
        }
        if let Some((limit, program)) = self.no_loss {
            lines.push(format!(
                "no new loss (as `parse = \"{}\"` reads it) for {} is a hang: the attempt is deleted and counts as failed",
                program.name(),
                humantime::format_duration(limit)
            ));
        }
        lines.push(match &self.common.check {
            Some(_) => format!(
                "a failed attempt's suspect nodes (NotReady or gone, its failed pods' nodes, Xid and NCCL lines, else all its pods' nodes) run the `check` job alone{}",
                self.common.rules().plan_text()
            ),
            None => "a failed attempt's nodes are named from Kubernetes (NotReady or gone), its failed pods, Xid and NCCL lines; without `check` only Kubernetes finds a node bad".into(),
        });
        lines.push(match self.common.policy {
            Policy::Fail => "a node found bad fails the step, naming it (policy fail)".into(),
            Policy::TakeOut if self.common.replace => format!(
                "a node found bad is cordoned, tainted flow.dev/unhealthy:NoSchedule and drained, its EC2 instance terminated through its Auto Scaling group (desired count kept) and the new node waited for (up to {}), before the next attempt",
                humantime::format_duration(self.replace_timeout)
            ),
            Policy::TakeOut => "a node found bad is cordoned, tainted flow.dev/unhealthy:NoSchedule and drained: the next attempt's pods go elsewhere".into(),
        });
        if self.common.policy == Policy::TakeOut {
            lines.push(format!(
                "more than {} % of an attempt's nodes found bad fails the step, taking none out",
                self.common.max_bad_fraction * 100.0
            ));
        }
        lines
    }
}

/// The problems of the restart inputs, for validate, each at its entry.
pub(crate) fn problems(inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let known = crate::contract::known_inputs(inputs);
    let mut out = Vec::new();
    let restarts = known.get("restarts");
    out.extend(bound_problems(
        inputs,
        &known,
        "starts the job again",
        "the job's logs",
    ));
    if let Some(dir) = known.get("checkpoint_dir").and_then(Value::as_str) {
        if dir.trim().is_empty() || !dir.starts_with('/') {
            out.push(
                Problem::at("checkpoint_dir", format!("`checkpoint_dir` {dir:?} is not an absolute folder"))
                    .with_help("the folder (in the training's container, on its volume) it writes checkpoints into, e.g. \"/fsx/ckpt/llama\""),
            );
        } else if restarts.and_then(Value::as_i64).unwrap_or(0) < 1
            && !inputs
                .iter()
                .any(|(k, v)| k == "restarts" && !matches!(v, InputValue::Known(_)))
        {
            out.push(
                Problem::at("checkpoint_dir", "`checkpoint_dir` is for restarts, and the step allows none")
                    .with_help("add `restarts = N`: each attempt after the first resumes from the newest checkpoint in checkpoint_dir"),
            );
        }
    }
    for key in ["drain_timeout", "replace_timeout"] {
        if let Some(Err(p)) = known.get(key).map(|t| duration_of(key, t)) {
            out.push(p);
        }
    }
    if known.get("replace_timeout").is_some()
        && known.get("policy").and_then(Value::as_str) != Some("replace")
    {
        out.push(
            Problem::at(
                "replace_timeout",
                "`replace_timeout` is for `policy = \"replace\"`",
            )
            .with_help("remove it, or set `policy = \"replace\"`"),
        );
    }
    // The shared inputs, as kube.node_check checks them; its call to give
    // `check` or `pairs` does not apply (a job's check is optional).
    let shared: Vec<(String, InputValue)> = inputs
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "policy" | "check" | "max_bad_fraction"))
        .cloned()
        .collect();
    out.extend(
        JOB.problems(&shared)
            .into_iter()
            .filter(|p| !p.path.is_empty()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::known;

    #[test]
    fn validate_refuses_what_cannot_be_done_at_its_entry() {
        let p = problems(&known(json!({"restarts": -1, "hang_after": "soon",
            "checkpoint_dir": "ckpt", "policy": "drain", "check": {"gpus": "all"},
            "replace_timeout": "5m"})));
        let paths: Vec<String> = p.iter().map(|p| p.path.join(".")).collect();
        for want in [
            "restarts",
            "hang_after",
            "checkpoint_dir",
            "policy",
            "check",
            "check.gpus",
            "replace_timeout",
        ] {
            assert!(paths.contains(&want.to_string()), "{want}: {paths:?}");
        }
        let drain = p.iter().find(|p| p.path == ["policy"]).unwrap();
        assert!(drain.message.contains("Slurm"), "{}", drain.message);
        let lone = problems(&known(json!({"checkpoint_dir": "/fsx/ckpt"})));
        assert_eq!(lone.len(), 1, "{lone:?}");
        assert!(
            lone[0].message.contains("allows none"),
            "{}",
            lone[0].message
        );
        let loss = problems(&known(json!({"restarts": 1, "hang_without_loss": "30m"})));
        assert_eq!(loss[0].path, ["hang_without_loss"]);
        let fine = problems(&known(json!({"restarts": 3, "hang_after": "10m",
            "checkpoint_dir": "/fsx/ckpt", "policy": "replace", "replace_timeout": "5m",
            "check": {"files": ["c.yaml"], "gpus": "instance-type"}})));
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn the_plan_says_what_a_failure_does() {
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        assert!(
            Spec::from_values(&v(json!({"files": ["t.yaml"]})))
                .unwrap()
                .is_none()
        );
        let s = Spec::from_values(&v(json!({"restarts": 2, "hang_after": "10m",
            "checkpoint_dir": "/fsx/ckpt", "policy": "cordon"})))
        .unwrap()
        .unwrap();
        let lines = s.plan_lines();
        assert!(
            lines[0].starts_with("up to 2 restarts, each a new job NAME-aN"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("no new log line for 10m is a hang"),
            "{lines:?}"
        );
        assert!(
            lines[3].starts_with("a node found bad is cordoned"),
            "{lines:?}"
        );
        let r = Spec::from_values(&v(json!({"restarts": 1, "policy": "replace"})))
            .unwrap()
            .unwrap();
        assert!(r.common.replace);
        assert!(
            r.plan_lines()[2].contains("Auto Scaling group"),
            "{:?}",
            r.plan_lines()
        );
    }
}
