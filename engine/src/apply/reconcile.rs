//! The reconcile state machine of one step: finish what an interrupted
//! operation started (asking the provider what it left behind, with the
//! recorded token), then create, update, replace or delete until the step
//! matches the workflow. Each single operation is in `operation`.

use std::sync::Arc;

use flow_providers::{ReadOutcome, Reporter};
use flow_state::{InFlight, Operation, Status, StepRecord};

use super::error::StepError;
use super::events::{Event, Outcome, StepReporter};
use super::job::new_token;
use super::operation::Op;
use super::sealing::{kept_outputs, unsealed};
use crate::lang::inputs::Desired;
use crate::plan::Action;

/// How reconciling an interrupted operation ended.
#[derive(Debug, PartialEq, Eq)]
enum Reconciled {
    /// The operation is finished: the record says what exists.
    Finished,
    /// The operation had failed on the far side and left something (a
    /// rolled-back stack, a failed job) that must be deleted before the
    /// step is created again.
    LeftFailure,
}

impl Op<'_> {
    /// Create, update or replace until the step matches the desired inputs.
    pub(super) async fn apply(&self) -> Result<Outcome, StepError> {
        let desired = self.desired.expect("apply has desired inputs");
        let planned = self.job.change.action;
        let mut rec = self.base_record();
        let mut did: Option<Action> = None;
        // A plan that only finishes a replacement asks for no new one.
        let finishing = self
            .job
            .change
            .create_before_destroy
            .as_ref()
            .is_some_and(|r| r.finishes);
        // A replacement the plan could not be sure of (forced only by
        // inputs known after apply) is judged again on the real values.
        let mut replace_requested =
            planned == Action::Replace && !finishing && !self.job.change.replace_if_changed;
        // A replacement whose create failed on the far side: it is deleted
        // and made again; the object it replaces stays until one succeeds.
        let mut failed_replacement = false;
        // A create that failed on the far side and left something (a failed
        // job, a rolled-back stack): what it left is deleted on the way to
        // creating the step again, which stays a create (as the plan said).
        let mut clearing_failed_create = false;
        for _ in 0..4 {
            if let Some(flight) = rec.in_flight.clone() {
                if self.reconcile(&mut rec, flight, desired).await? == Reconciled::LeftFailure {
                    replace_requested = true;
                    failed_replacement = rec.deposed.is_some();
                    clearing_failed_create = !failed_replacement && planned == Action::Create;
                }
                did = Some(did.unwrap_or(planned));
                continue;
            }
            if rec.applied && rec.deposed.is_some() && !failed_replacement {
                // A replacement exists; the object it replaces is retired
                // before anything else (and was the only thing planned
                // when the plan said it finishes one).
                self.finish_deposed(&mut rec, false).await?;
                if finishing {
                    replace_requested = false;
                }
                // Whatever brought the step here (a resumed create), it
                // ends as a replacement: the old object is gone.
                did = Some(did.map_or(Action::Replace, |d| d.max(Action::Replace)));
                continue;
            }
            if !rec.applied
                && rec.deposed.is_some()
                && !crate::plan::replacing::wanted(self.job.decl.as_deref(), self.provider)
            {
                // The replacement was never made and the step no longer
                // wants it made first (a reservation the old object holds):
                // the old object goes, then the new one is made.
                self.finish_deposed(&mut rec, false).await?;
                continue;
            }
            if !rec.applied {
                let import = self.job.decl.as_ref().and_then(|d| d.import.clone());
                if let (Action::Import, Some(id)) = (planned, import) {
                    self.import(&mut rec, desired, &id).await?;
                    return Ok(Outcome::Done(Action::Import));
                }
                let replacing = rec.deposed.is_some();
                self.create(&mut rec, desired, new_token()).await?;
                self.finish_deposed(&mut rec, false).await?;
                let made = if replacing {
                    Action::Replace
                } else {
                    Action::Create
                };
                return Ok(Outcome::Done(did.map_or(made, |d| d.max(made))));
            }
            let change = if rec.provider != self.job.change.provider || replace_requested {
                flow_providers::Change::Replace(vec![])
            } else {
                self.provider.diff(
                    &crate::secrets::upgrade_legacy_seals(&rec.inputs),
                    &desired.stored,
                )
            };
            let wanted = match change {
                // A failed last attempt, or a change outside flow that no
                // input shows, is updated back to the workflow.
                flow_providers::Change::NoOp
                    if (rec.last_error.is_some() || !rec.drifted.is_empty())
                        && planned != Action::NoOp =>
                {
                    Action::Update
                }
                flow_providers::Change::NoOp => Action::NoOp,
                flow_providers::Change::Update(_) => Action::Update,
                flow_providers::Change::Replace(_) => Action::Replace,
            };
            if wanted > planned && did.is_none() {
                return Err(StepError::PlanOutdated { planned, wanted });
            }
            // A replacement the plan left to the real values (see
            // `replace_if_changed`) that they turn out to need, on a step
            // that must not be deleted: stop before anything is.
            if wanted == Action::Replace
                && !failed_replacement
                && self.job.decl.as_ref().is_some_and(|d| d.prevent_destroy)
            {
                return Err(StepError::Protected);
            }
            match wanted {
                Action::NoOp => {
                    if rec.depends_on != self.job.depends_on || rec.last_error.is_some() {
                        rec.depends_on = self.job.depends_on.clone();
                        rec.last_error = None;
                        rec.status = Status::Applied;
                        self.ctx.journal().persist(&mut rec).await?;
                    }
                    let outputs = rec.outputs.clone();
                    self.ctx.keep_outputs_if_absent(self.name(), outputs);
                    return Ok(did.map_or(Outcome::Unchanged, Outcome::Done));
                }
                Action::Update => {
                    self.update(&mut rec, desired, new_token()).await?;
                    return Ok(Outcome::Done(
                        did.unwrap_or(Action::Update).max(Action::Update),
                    ));
                }
                _ if failed_replacement => {
                    // Only the failed replacement goes; the next turn makes
                    // it again under the same name, then retires the old.
                    self.delete(&mut rec, new_token()).await?;
                    failed_replacement = false;
                    replace_requested = false;
                    did = Some(Action::Replace);
                }
                _ if self.job.change.create_before_destroy.is_some()
                    && crate::plan::replacing::wanted(self.job.decl.as_deref(), self.provider) =>
                {
                    self.replace_creating_first(&mut rec, desired).await?;
                    return Ok(Outcome::Done(Action::Replace));
                }
                _ => {
                    self.delete(&mut rec, new_token()).await?;
                    replace_requested = false;
                    did = Some(if clearing_failed_create {
                        Action::Create
                    } else {
                        Action::Replace
                    });
                }
            }
        }
        Err(StepError::DidNotSettle)
    }

    /// Finish what an interrupted operation started.
    async fn reconcile(
        &self,
        rec: &mut StepRecord,
        flight: InFlight,
        desired: &Desired,
    ) -> Result<Reconciled, StepError> {
        self.reporter.note(&format!(
            "reconciling an interrupted {} (token {})",
            flight.operation, flight.token
        ));
        // After a failure the last apply reported, what the failed
        // operation left is read again: not shown as this run's news.
        let failed_before = rec.last_error.is_some();
        self.ctx.sink().emit(Event::Progress {
            step: self.name().to_string(),
            message: if failed_before {
                format!("reading what the failed {} left", flight.operation)
            } else {
                format!("reconciling interrupted {}", flight.operation)
            },
        });
        match flight.operation {
            Operation::Create => {
                let mut ctx = self.op_context(&flight.token);
                if failed_before {
                    ctx.reporter = Arc::new(Reread(self.reporter.clone()));
                }
                let read_inputs = self.live(
                    &if flight.inputs == desired.stored {
                        desired.actual.clone()
                    } else {
                        unsealed(&flight.inputs, Some(desired))
                    },
                    rec.name_suffix.as_deref(),
                );
                let found = self
                    .provider
                    .read(&ctx, known_id(rec, &flight), &read_inputs)
                    .await
                    .map_err(StepError::CheckInterrupted)?;
                match found {
                    ReadOutcome::Present(applied) => {
                        self.reporter
                            .note("the interrupted create had completed: adopting it");
                        self.succeeded(rec, applied, &flight.inputs, rec.attempts)
                            .await?;
                    }
                    ReadOutcome::Missing => {
                        if flight.inputs == desired.stored {
                            self.create(rec, desired, flight.token).await?;
                        } else {
                            rec.in_flight = None;
                            self.create(rec, desired, new_token()).await?;
                        }
                    }
                    ReadOutcome::Failed { id, reason } => {
                        if failed_before {
                            self.reporter.event(
                                "deleting what the failed create left, then creating the step again",
                            );
                        } else {
                            self.reporter.note(&format!(
                                "the interrupted create had failed ({reason}): deleting what it left, then creating again"
                            ));
                        }
                        rec.applied = true;
                        rec.resource_id = id.or(rec.resource_id.take());
                        rec.inputs = flight.inputs.clone();
                        rec.in_flight = None;
                        return Ok(Reconciled::LeftFailure);
                    }
                }
            }
            Operation::Update => self.update(rec, desired, flight.token).await?,
            Operation::Delete => self.delete(rec, flight.token).await?,
        }
        Ok(Reconciled::Finished)
    }

    /// Delete the step's object (finding it first if a create was
    /// interrupted) and forget the step.
    pub(super) async fn delete_all(&self) -> Result<Outcome, StepError> {
        let Some(mut rec) = self.ctx.journal().record(self.name()) else {
            return Ok(Outcome::Unchanged);
        };
        if let Some(flight) = rec.in_flight.clone() {
            match flight.operation {
                Operation::Create => {
                    let ctx = self.op_context(&flight.token);
                    let found = self
                        .provider
                        .read(
                            &ctx,
                            known_id(&rec, &flight),
                            &self.live(
                                &unsealed(&flight.inputs, self.desired),
                                rec.name_suffix.as_deref(),
                            ),
                        )
                        .await
                        .map_err(StepError::CheckInterrupted)?;
                    match found {
                        ReadOutcome::Present(applied) => {
                            rec.applied = true;
                            rec.resource_id = applied.id;
                            rec.inputs = flight.inputs.clone();
                            rec.outputs =
                                kept_outputs(&applied.outputs, &self.ctx.settings().redactor);
                            rec.private = applied.private;
                        }
                        // What a failed create left (a rolled-back stack)
                        // is deleted like the object itself would be.
                        ReadOutcome::Failed { id, .. } => {
                            rec.applied = true;
                            rec.resource_id = id.or(rec.resource_id.take());
                            rec.inputs = flight.inputs.clone();
                        }
                        ReadOutcome::Missing => {}
                    }
                    rec.in_flight = None;
                }
                Operation::Update => {
                    rec.in_flight = None;
                }
                Operation::Delete => {
                    self.delete(&mut rec, flight.token).await?;
                }
            }
        }
        if rec.applied {
            self.delete(&mut rec, new_token()).await?;
        }
        // What a create-before-destroy replacement put aside goes too.
        self.finish_deposed(&mut rec, true).await?;
        self.ctx.journal().forget(self.name()).await?;
        Ok(Outcome::Done(Action::Delete))
    }
}

/// The reporter of a read of what a failed operation left: the last apply
/// showed that operation's progress, captures and verdicts, so they go to
/// the step's log only, and what it measured is not this run's.
struct Reread(Arc<StepReporter>);

impl Reporter for Reread {
    fn event(&self, message: &str) {
        self.0.log(&format!("(the failed run) {message}"));
    }

    fn log(&self, line: &str) {
        self.0.log(line);
    }
}

/// The id of the object an interrupted operation concerns: the one recorded
/// for the step, else the one the operation checkpointed into its intent.
fn known_id<'a>(rec: &'a StepRecord, flight: &'a InFlight) -> Option<&'a str> {
    rec.resource_id.as_deref().or(flight.id.as_deref())
}
