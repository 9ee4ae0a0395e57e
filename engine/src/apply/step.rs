//! Carry out one step: resolve its inputs, pick its provider, and hand it to
//! the reconcile state machine (`reconcile`, over the single operations in
//! `operation`); turn whatever ends it into the step's [`Outcome`]. A timeout
//! keeps the intent, so the next apply reconciles the operation.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flow_state::Status;

use super::context::RunContext;
use super::error::StepError;
use super::events::{Outcome, StepReporter};
use super::job::StepJob;
use super::operation::Op;
use crate::lang::inputs::Desired;
use crate::lang::providers::recorded_provider;
use crate::plan::Action;

/// Carry out `job` within `timeout`. On timeout the intent stays in state, so
/// the next apply reconciles the operation through the provider.
/// A job step's run is recorded in the state's run history (`history`).
pub async fn run_step(
    ctx: Arc<RunContext>,
    job: Box<StepJob>,
    timeout: Option<Duration>,
) -> Outcome {
    let name = job.change.step.clone();
    let settings = ctx.settings();
    let reporter = Arc::new(StepReporter::new(
        &name,
        &settings.layout.log_file(&name),
        settings.redactor.clone(),
        ctx.sink().clone(),
    ));
    let (started, clock) = (SystemTime::now(), Instant::now());
    let result = match timeout {
        Some(t) => match tokio::time::timeout(t, converge(&ctx, &job, &reporter)).await {
            Ok(r) => r,
            Err(_) => Err(StepError::TimedOut(t)),
        },
        None => converge(&ctx, &job, &reporter).await,
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            let failure = ctx.failure(&name, &error);
            if let Some(mut rec) = ctx.journal().record(&name) {
                rec.status = Status::Failed;
                rec.last_error = Some(failure.message.clone());
                let _ = ctx.journal().persist(&mut rec).await;
            }
            Outcome::Failed(failure)
        }
    };
    let took = clock.elapsed();
    let start_ms = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    super::history::record(&ctx, &job, &reporter, start_ms, took, &outcome).await;
    let word = match &outcome {
        super::events::Outcome::Done(a) => a.word().to_string(),
        super::events::Outcome::Unchanged => "unchanged".into(),
        super::events::Outcome::Failed(_) => "failed".into(),
        super::events::Outcome::Skipped(_) => "skipped".into(),
        super::events::Outcome::NotStarted => "not started".into(),
    };
    ctx.note_span(super::context::StepSpan {
        step: name.clone(),
        start_ms,
        end_ms: start_ms + took.as_millis() as u64,
        outcome: word,
    });
    outcome
}

async fn converge(
    ctx: &Arc<RunContext>,
    job: &StepJob,
    reporter: &Arc<StepReporter>,
) -> Result<Outcome, StepError> {
    let name = &job.change.step;
    let settings = ctx.settings();
    let provider = match (&job.decl, &settings.loaded) {
        (Some(decl), Some(loaded)) => loaded.provider(decl).clone(),
        _ => recorded_provider(&settings.registry, name, &job.change.provider)
            .map_err(StepError::UnknownProvider)?,
    };
    reporter.remark(&format!(
        "{} ({})",
        job.change.action.word(),
        job.change.provider
    ));
    let resolved = match (&job.decl, &settings.loaded) {
        (Some(decl), Some(loaded)) => Some(
            loaded
                .resolve_inputs(decl, &settings.legacy_salt, &|s, k| ctx.lookup(s, k))
                .map(|mut desired| {
                    desired.add_content_digest(provider.as_ref(), loaded.workflow.dir_of(decl));
                    // Text functions made from secrets is masked from now on,
                    // in this step's lines and every later one.
                    for derived in &desired.derived_secrets {
                        settings
                            .redactor
                            .add(&serde_json::Value::String(derived.clone()));
                    }
                    desired
                })
                .map_err(StepError::Inputs),
        ),
        _ => None,
    };
    let outcome = if job.change.action == Action::Delete {
        // A delete needs nothing from the workflow; what it can resolve only
        // helps to unseal secrets the delete command uses.
        let desired = resolved.and_then(Result::ok).filter(Desired::is_known);
        let op = Op {
            ctx,
            job,
            provider: provider.as_ref(),
            reporter: reporter.clone(),
            desired: desired.as_ref(),
            destroying: true,
        };
        op.delete_all()
            .await
            .inspect_err(|e| op.reporter.note(&format!("failed: {e}")))?
    } else {
        let desired = resolved.ok_or(StepError::NotInWorkflow)??;
        if !desired.is_known() {
            return Err(StepError::InputsUnknown(desired.unknown.clone()));
        }
        let op = Op {
            ctx,
            job,
            provider: provider.as_ref(),
            reporter: reporter.clone(),
            desired: Some(&desired),
            destroying: false,
        };
        op.apply()
            .await
            .inspect_err(|e| op.reporter.note(&format!("failed: {e}")))?
    };
    reporter.remark(&match &outcome {
        Outcome::Done(a) => format!("{} done", a.word()),
        Outcome::Unchanged => "unchanged".to_string(),
        other => format!("{other:?}"),
    });
    Ok(outcome)
}
