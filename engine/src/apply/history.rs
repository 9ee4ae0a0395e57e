//! Recording each run of a job step in the state's run history: when it
//! started, how long it took, how it ended, what its output measured and
//! how its gates judged it, with secrets masked. A history that cannot be
//! written is said in the step's log and never fails the step.

use std::sync::Arc;
use std::time::Duration;

use flow_providers::StepKind;
use flow_state::{GateVerdict, RunOutcome, RunRecord};
use sha2::{Digest, Sha256};

use super::context::RunContext;
use super::events::{Outcome, StepReporter};
use super::job::StepJob;
use crate::plan::Action;

/// Records the run of `job` that ended in `outcome`, if it ran a job.
pub async fn record(
    ctx: &RunContext,
    job: &StepJob,
    reporter: &StepReporter,
    started_ms: u64,
    took: Duration,
    outcome: &Outcome,
) {
    let settings = ctx.settings();
    let Some(log) = settings.history.clone() else {
        return;
    };
    let measured = reporter.take_measured();
    let is_job = settings
        .registry
        .get(&job.change.provider)
        .is_some_and(|p| p.schema().kind == StepKind::Task);
    if job.change.action == Action::Delete || !(is_job || measured.is_some()) {
        return;
    }
    let (outcome, error) = match outcome {
        Outcome::Done(_) => (RunOutcome::Succeeded, None),
        Outcome::Failed(f) => (RunOutcome::Failed, Some(f.message.clone())),
        _ => return,
    };
    let name = &job.change.step;
    let redact = |v: serde_json::Value| -> serde_json::Value {
        let text = reporter.redactor().redact(&v.to_string());
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
    };
    let measured = measured.unwrap_or_default();
    let recorded = ctx
        .journal()
        .record(name)
        .map(|r| r.inputs.clone())
        .unwrap_or_default();
    let inputs = serde_json::to_vec(&recorded).unwrap_or_default();
    let digest = |v: &[u8]| hex::encode(Sha256::digest(v));
    let input_digests = recorded
        .iter()
        .map(|(k, v)| (k.clone(), digest(v.to_string().as_bytes())))
        .collect();
    let run = RunRecord {
        id: flow_state::runs::run_id(started_ms, name),
        started: flow_state::timefmt::format_rfc3339(started_ms / 1000),
        duration_ms: took.as_millis() as u64,
        workflow: settings
            .loaded
            .as_ref()
            .map(|l| l.workflow.name.clone())
            .unwrap_or_default(),
        step: name.clone(),
        provider: job.change.provider.clone(),
        inputs_digest: digest(&inputs),
        input_digests,
        outcome,
        error: error.map(|e| reporter.redactor().redact(&e)),
        values: measured
            .values
            .into_iter()
            .map(|(k, v)| (k, redact(v)))
            .collect(),
        verdicts: measured
            .verdicts
            .into_iter()
            .map(|v| GateVerdict {
                passed: v.failed.is_none(),
                why: v.failed.map(|w| reporter.redactor().redact(&w)),
                name: v.name,
                gate: reporter.redactor().redact(&v.gate),
            })
            .collect(),
        log: reporter.log_path().display().to_string(),
    };
    // On a thread of its own: an S3 state's mirror blocks on its runtime.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let run = Arc::new(run);
    let written = run.clone();
    std::thread::spawn(move || {
        let _ = tx.send(log.append(&written));
    });
    match rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => reporter.remark(&format!("this run is not in the history: {e}")),
        Err(_) => reporter.remark("this run is not in the history: its writer stopped"),
    }
}
