//! What every kind that runs a job object follows it by (`kube.job`, the
//! checks of `kube.node_check`): which objects are jobs, the label that
//! picks their pods, and their state from their conditions.

use serde_json::Value;

use super::objects::Record;

/// Whether `doc` is a job flow can follow.
pub(crate) fn is_job(api_version: &str, kind: &str) -> bool {
    (api_version == "batch/v1" && kind == "Job")
        || (api_version.starts_with("kubeflow.org/") && kind.ends_with("Job"))
}

/// The label that picks the job's pods.
pub(crate) fn pod_selector(r: &Record) -> String {
    if r.kind == "Job" && r.api_version == "batch/v1" {
        format!("job-name={}", r.name)
    } else {
        format!("training.kubeflow.org/job-name={}", r.name)
    }
}

/// How the job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobState {
    Running(String),
    Succeeded,
    Failed(String),
}

/// The state of a job object (batch `Complete`/`Failed`, Kubeflow
/// `Succeeded`/`Failed` conditions).
pub(crate) fn job_state(obj: &Value) -> JobState {
    let conditions = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_true = |t: &str| {
        conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(t)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    if let Some(c) = is_true("Failed") {
        let s = |k: &str| {
            c.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        return JobState::Failed(match (s("reason"), s("message")) {
            (r, m) if m.is_empty() => r,
            (r, m) if r.is_empty() => m,
            (r, m) => format!("{r}: {m}"),
        });
    }
    if is_true("Complete").is_some() || is_true("Succeeded").is_some() {
        return JobState::Succeeded;
    }
    let latest = conditions
        .iter()
        .rev()
        .find(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .and_then(|c| c.get("type").and_then(Value::as_str))
        .unwrap_or("Pending");
    JobState::Running(latest.to_string())
}
