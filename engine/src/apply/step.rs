//! Carry out one step: durable intent first, then the provider call, then the
//! durable result. An interrupted operation is reconciled before anything new.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flow_providers::{Applied, OpContext, Prior, Provider, ReadOutcome, Registry, Values};
use flow_state::{Committer, InFlight, Operation, StateLayout, Status, StepRecord, now_secs};
use serde_json::Value;

use super::events::{Event, EventSink, Outcome, StepReporter};
use super::retry::{Backoff, with_retries};
use crate::lang::ast::StepDecl;
use crate::lang::inputs::Desired;
use crate::lang::load::Loaded;
use crate::lang::providers::recorded_provider;
use crate::lang::resolve::Lookup;
use crate::plan::{Action, StepChange};
use crate::secrets::{Redactor, sensitive_marker};

/// What every step of one run shares.
pub struct RunContext {
    /// Provider kinds.
    pub registry: Registry,
    /// Durable writes.
    pub committer: Committer,
    /// Where logs go.
    pub layout: StateLayout,
    /// The workflow file's folder.
    pub workdir: PathBuf,
    /// The state's digest salt.
    pub salt: [u8; 32],
    /// Masks secrets in everything written or shown.
    pub redactor: Arc<Redactor>,
    /// Where events go.
    pub sink: Arc<dyn EventSink>,
    /// Retry pacing.
    pub backoff: Backoff,
    /// The state as this run changes it.
    pub records: Mutex<BTreeMap<String, StepRecord>>,
    /// Outputs produced in this run, with secrets in clear (memory only).
    pub outputs: Mutex<BTreeMap<String, Values>>,
    /// The AWS profile the workflow names, if any.
    pub profile: Option<String>,
    /// Fires on the first interrupt (tasks stop, resources finish).
    pub cancel: flow_providers::Cancel,
    /// Sends the interrupt to `cancel`.
    pub interrupt: tokio::sync::watch::Sender<bool>,
    /// The workflow, for resolving inputs (None for destroy).
    pub loaded: Option<Arc<Loaded>>,
    /// Retries made so far in this run.
    pub retries: std::sync::atomic::AtomicU32,
    /// Success records queued but maybe not yet on disk, by step: dependents
    /// start at once and wait for these before their first side effect.
    pub durable: Mutex<BTreeMap<String, DurableFlag>>,
}

/// Whether a queued record reached the disk: `None` while unknown.
pub type DurableFlag = tokio::sync::watch::Receiver<Option<Result<(), String>>>;

/// One step to carry out.
#[derive(Debug, Clone)]
pub struct StepJob {
    /// The planned change.
    pub change: StepChange,
    /// Its declaration, when the workflow has it (not for deletes of removed steps).
    pub decl: Option<StepDecl>,
    /// Dependencies to record.
    pub depends_on: Vec<String>,
    /// The region to operate in (the step's, else the workflow's, else the recorded one).
    pub region: Option<String>,
}

impl RunContext {
    fn record(&self, name: &str) -> Option<StepRecord> {
        self.records.lock().expect("records").get(name).cloned()
    }

    async fn persist(&self, rec: &mut StepRecord) -> Result<(), String> {
        rec.updated_at = now_secs();
        self.records
            .lock()
            .expect("records")
            .insert(rec.name.clone(), rec.clone());
        self.committer
            .put(rec.clone())
            .await
            .map_err(|e| format!("could not write state: {e}"))
    }

    /// Record `rec` without waiting for the flush: dependents may be started
    /// at once, since each waits (in `begin`) for this flag before it does
    /// anything, and the writer never writes a later change before this one.
    fn persist_queued(&self, rec: &mut StepRecord) {
        rec.updated_at = now_secs();
        self.records
            .lock()
            .expect("records")
            .insert(rec.name.clone(), rec.clone());
        let pending = self
            .committer
            .submit(vec![flow_state::Mutation::Put(rec.clone())]);
        let (tx, rx) = tokio::sync::watch::channel(None);
        self.durable
            .lock()
            .expect("durable")
            .insert(rec.name.clone(), rx);
        tokio::spawn(async move {
            let result = pending
                .durable()
                .await
                .map(|_| ())
                .map_err(|e| format!("could not write state: {e}"));
            let _ = tx.send(Some(result));
        });
    }

    /// Wait until the queued record of `step`, if any, is on disk.
    async fn wait_durable(&self, step: &str) -> Result<(), String> {
        let flag = self.durable.lock().expect("durable").get(step).cloned();
        let Some(mut flag) = flag else { return Ok(()) };
        let settled = flag
            .wait_for(Option::is_some)
            .await
            .map_err(|_| format!("the state of `{step}` was never written"))?
            .clone();
        settled
            .expect("settled")
            .map_err(|e| format!("the state of `{step}` could not be written: {e}"))
    }

    /// Wait for every queued record; the steps whose record could not be written.
    pub async fn settle(&self) -> Vec<(String, String)> {
        let names: Vec<String> = self
            .durable
            .lock()
            .expect("durable")
            .keys()
            .cloned()
            .collect();
        let mut failed = Vec::new();
        for name in names {
            if let Err(e) = self.wait_durable(&name).await {
                failed.push((name, e));
            }
        }
        failed
    }

    async fn forget(&self, name: &str) -> Result<(), String> {
        self.records.lock().expect("records").remove(name);
        self.committer
            .remove(name)
            .await
            .map_err(|e| format!("could not write state: {e}"))
    }

    fn lookup(&self, step: &str, key: &str) -> Lookup {
        if let Some(outs) = self.outputs.lock().expect("outputs").get(step) {
            return match outs.get(key) {
                Some(v) => Lookup::Known(v.clone()),
                None => Lookup::Missing(outs.keys().cloned().collect()),
            };
        }
        match self.records.lock().expect("records").get(step) {
            Some(rec) => match rec.outputs.get(key) {
                Some(v) => Lookup::Known(v.clone()),
                None => Lookup::Missing(rec.outputs.keys().cloned().collect()),
            },
            None => Lookup::Unknown,
        }
    }
}

/// `recorded` with every sealed leaf that equals the same leaf of `stored`
/// (the desired value in its stored form) replaced by the leaf of `actual`.
fn unseal(recorded: &Value, stored: &Value, actual: &Value) -> Value {
    match (recorded, stored, actual) {
        (r, s, a) if flow_providers::is_sealed(r) => {
            if r == s {
                a.clone()
            } else {
                r.clone()
            }
        }
        (Value::Object(r), Value::Object(s), Value::Object(a)) => Value::Object(
            r.iter()
                .map(|(k, v)| {
                    let real = match (s.get(k), a.get(k)) {
                        (Some(sv), Some(av)) => unseal(v, sv, av),
                        _ => v.clone(),
                    };
                    (k.clone(), real)
                })
                .collect(),
        ),
        (r, _, _) => r.clone(),
    }
}

/// A fresh operation token: 32 hex digits, valid as an AWS ClientRequestToken.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Carry out `job` within `timeout`. On timeout the intent stays in state, so
/// the next apply reconciles the operation through the provider.
pub async fn run_step(ctx: Arc<RunContext>, job: StepJob, timeout: Option<Duration>) -> Outcome {
    let name = job.change.step.clone();
    let result = match timeout {
        Some(t) => match tokio::time::timeout(t, converge(&ctx, &job)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "timed out after {}; the operation is recorded and will be reconciled on the next apply",
                humantime::format_duration(t)
            )),
        },
        None => converge(&ctx, &job).await,
    };
    match result {
        Ok(outcome) => outcome,
        Err(message) => {
            let message = ctx.redactor.redact(&message);
            if let Some(mut rec) = ctx.record(&name) {
                rec.status = Status::Failed;
                rec.last_error = Some(message.clone());
                let _ = ctx.persist(&mut rec).await;
            }
            Outcome::Failed(message)
        }
    }
}

async fn converge(ctx: &Arc<RunContext>, job: &StepJob) -> Result<Outcome, String> {
    let name = &job.change.step;
    let provider = match (&job.decl, &ctx.loaded) {
        (Some(decl), Some(loaded)) => loaded.provider(decl).clone(),
        _ => recorded_provider(&ctx.registry, name, &job.change.provider)
            .map_err(|d| format!("{} ({})", d.message, d.help.unwrap_or_default()))?,
    };
    let reporter = Arc::new(StepReporter::new(
        name,
        &ctx.layout.log_file(name),
        ctx.redactor.clone(),
        ctx.sink.clone(),
    ));
    reporter.remark(&format!(
        "{} ({})",
        job.change.action.word(),
        job.change.provider
    ));
    let resolved = match (&job.decl, &ctx.loaded) {
        (Some(decl), Some(loaded)) => Some(
            loaded
                .resolve_inputs(decl, &ctx.salt, &|s, k| ctx.lookup(s, k))
                .map(|mut desired| {
                    desired.add_content_digest(provider.as_ref(), &loaded.workflow.dir);
                    desired
                })
                .map_err(|diags| {
                    diags
                        .into_iter()
                        .map(|d| d.message)
                        .collect::<Vec<_>>()
                        .join("; ")
                }),
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
        };
        op.delete_all()
            .await
            .inspect_err(|e| op.reporter.note(&format!("failed: {e}")))?
    } else {
        let desired = resolved.ok_or("the step is not in the workflow")??;
        if !desired.is_known() {
            return Err(format!(
                "inputs still unknown: {}",
                desired.unknown.join(", ")
            ));
        }
        let op = Op {
            ctx,
            job,
            provider: provider.as_ref(),
            reporter: reporter.clone(),
            desired: Some(&desired),
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

struct Op<'a> {
    ctx: &'a Arc<RunContext>,
    job: &'a StepJob,
    provider: &'a dyn Provider,
    reporter: Arc<StepReporter>,
    /// The inputs the workflow asks for now, when it can say.
    desired: Option<&'a Desired>,
}

impl Op<'_> {
    fn name(&self) -> &str {
        &self.job.change.step
    }

    fn op_context(&self, token: &str) -> OpContext {
        OpContext {
            step: self.name().to_string(),
            token: token.to_string(),
            workdir: self.ctx.workdir.clone(),
            log_path: self.ctx.layout.log_file(self.name()),
            region: self.job.region.clone(),
            profile: self.ctx.profile.clone(),
            cancel: self.ctx.cancel.clone(),
            reporter: self.reporter.clone(),
        }
    }

    fn retries(&self) -> u32 {
        self.job.decl.as_ref().map_or(0, |d| d.retries)
    }

    fn on_retry(&self) -> impl FnMut(u32, Duration, &flow_providers::ProviderError) + '_ {
        move |attempt, delay, err| {
            self.ctx
                .retries
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let error = self.ctx.redactor.redact(&err.message);
            self.reporter.note(&format!(
                "attempt {attempt} failed, retrying in {delay:?}: {error}"
            ));
            self.ctx.sink.emit(Event::Retrying {
                step: self.name().to_string(),
                attempt,
                delay,
                error,
            });
        }
    }

    fn base_record(&self) -> StepRecord {
        let mut rec = self
            .ctx
            .record(self.name())
            .unwrap_or_else(|| StepRecord::new(self.name(), &self.job.change.provider, now_secs()));
        if let Some(decl) = &self.job.decl {
            rec.prevent_destroy = decl.prevent_destroy;
        }
        rec
    }

    fn keep_outputs(&self, outputs: &Values) -> Values {
        outputs
            .iter()
            .map(|(k, v)| {
                let kept = if self.ctx.redactor.touches(v) {
                    sensitive_marker(&self.ctx.salt, v)
                } else {
                    v.clone()
                };
                (k.clone(), kept)
            })
            .collect()
    }

    async fn begin(
        &self,
        rec: &mut StepRecord,
        operation: Operation,
        token: &str,
        inputs: &Values,
    ) -> Result<(), String> {
        rec.status = Status::Pending;
        rec.region = self.job.region.clone();
        rec.in_flight = Some(InFlight {
            operation,
            token: token.to_string(),
            inputs: inputs.clone(),
            started_at: now_secs(),
        });
        self.ctx.persist(rec).await?;
        // What this step needs was recorded before this intent (the writer
        // keeps order), so it is on disk now unless writing it failed.
        for dep in &self.job.depends_on {
            self.ctx.wait_durable(dep).await?;
        }
        Ok(())
    }

    async fn succeeded(
        &self,
        rec: &mut StepRecord,
        applied: Applied,
        stored: &Values,
        attempts: u32,
    ) -> Result<(), String> {
        rec.applied = true;
        rec.status = Status::Applied;
        rec.resource_id = applied.id.clone();
        rec.inputs = stored.clone();
        rec.outputs = self.keep_outputs(&applied.outputs);
        rec.private = applied.private.clone();
        rec.provider = self.job.change.provider.clone();
        rec.depends_on = self.job.depends_on.clone();
        rec.in_flight = None;
        rec.attempts = attempts;
        rec.last_error = None;
        self.ctx
            .outputs
            .lock()
            .expect("outputs")
            .insert(self.name().to_string(), applied.outputs);
        self.ctx.persist_queued(rec);
        Ok(())
    }

    async fn failed(
        &self,
        rec: &mut StepRecord,
        err: flow_providers::ProviderError,
        attempts: u32,
    ) -> String {
        let message = self.ctx.redactor.redact(&err.message);
        rec.status = Status::Failed;
        rec.in_flight = None;
        rec.attempts = attempts;
        rec.last_error = Some(message.clone());
        if let Err(e) = self.ctx.persist(rec).await {
            return format!("{message} (and {e})");
        }
        message
    }

    /// Recorded inputs with sealed secrets put back where the workflow still
    /// gives the same value (same digest), so that update and delete see
    /// real values.
    fn unsealed(&self, recorded: &Values) -> Values {
        let Some(desired) = self.desired else {
            return recorded.clone();
        };
        recorded
            .iter()
            .map(|(k, v)| {
                let real = match (desired.stored.get(k), desired.actual.get(k)) {
                    (Some(stored), Some(actual)) => unseal(v, stored, actual),
                    _ => v.clone(),
                };
                (k.clone(), real)
            })
            .collect()
    }

    /// Create, update or replace until the step matches the desired inputs.
    async fn apply(&self) -> Result<Outcome, String> {
        let desired = self.desired.expect("apply has desired inputs");
        let planned = self.job.change.action;
        let mut rec = self.base_record();
        let mut did: Option<Action> = None;
        let mut replace_requested = planned == Action::Replace;
        for _ in 0..4 {
            if let Some(flight) = rec.in_flight.clone() {
                self.reconcile(&mut rec, flight, desired).await?;
                did = Some(did.unwrap_or(planned));
                continue;
            }
            if !rec.applied {
                self.create(&mut rec, desired, new_token()).await?;
                return Ok(Outcome::Done(
                    did.map_or(Action::Create, |d| d.max(Action::Create)),
                ));
            }
            let change = if rec.provider != self.job.change.provider || replace_requested {
                flow_providers::Change::Replace(vec![])
            } else {
                self.provider.diff(&rec.inputs, &desired.stored)
            };
            let wanted = match change {
                flow_providers::Change::NoOp
                    if rec.last_error.is_some() && planned != Action::NoOp =>
                {
                    Action::Update
                }
                flow_providers::Change::NoOp => Action::NoOp,
                flow_providers::Change::Update(_) => Action::Update,
                flow_providers::Change::Replace(_) => Action::Replace,
            };
            if wanted > planned && did.is_none() {
                return Err(format!(
                    "the plan said {} but with the values known now the step needs {}; run plan again",
                    planned.word(),
                    wanted.word()
                ));
            }
            match wanted {
                Action::NoOp => {
                    if rec.depends_on != self.job.depends_on || rec.last_error.is_some() {
                        rec.depends_on = self.job.depends_on.clone();
                        rec.last_error = None;
                        rec.status = Status::Applied;
                        self.ctx.persist(&mut rec).await?;
                    }
                    let outputs = rec.outputs.clone();
                    self.ctx
                        .outputs
                        .lock()
                        .expect("outputs")
                        .entry(self.name().to_string())
                        .or_insert(outputs);
                    return Ok(did.map_or(Outcome::Unchanged, Outcome::Done));
                }
                Action::Update => {
                    self.update(&mut rec, desired, new_token()).await?;
                    return Ok(Outcome::Done(
                        did.unwrap_or(Action::Update).max(Action::Update),
                    ));
                }
                _ => {
                    self.delete(&mut rec, new_token()).await?;
                    replace_requested = false;
                    did = Some(Action::Replace);
                }
            }
        }
        Err("the step did not settle after several operations".into())
    }

    /// Finish what an interrupted operation started.
    async fn reconcile(
        &self,
        rec: &mut StepRecord,
        flight: InFlight,
        desired: &Desired,
    ) -> Result<(), String> {
        self.reporter.note(&format!(
            "reconciling an interrupted {} (token {})",
            flight.operation, flight.token
        ));
        self.ctx.sink.emit(Event::Progress {
            step: self.name().to_string(),
            message: format!("reconciling interrupted {}", flight.operation),
        });
        match flight.operation {
            Operation::Create => {
                let ctx = self.op_context(&flight.token);
                let read_inputs = if flight.inputs == desired.stored {
                    desired.actual.clone()
                } else {
                    flight.inputs.clone()
                };
                let found = self
                    .provider
                    .read(&ctx, rec.resource_id.as_deref(), &read_inputs)
                    .await
                    .map_err(|e| {
                        format!("could not check the interrupted create: {}", e.message)
                    })?;
                match found {
                    ReadOutcome::Present(applied) => {
                        self.reporter
                            .note("the interrupted create had completed: adopting it");
                        self.succeeded(rec, applied, &flight.inputs, rec.attempts)
                            .await
                    }
                    ReadOutcome::Missing => {
                        if flight.inputs == desired.stored {
                            self.create(rec, desired, flight.token).await
                        } else {
                            rec.in_flight = None;
                            self.create(rec, desired, new_token()).await
                        }
                    }
                }
            }
            Operation::Update => self.update(rec, desired, flight.token).await,
            Operation::Delete => self.delete(rec, flight.token).await,
        }
    }

    async fn create(
        &self,
        rec: &mut StepRecord,
        desired: &Desired,
        token: String,
    ) -> Result<(), String> {
        self.begin(rec, Operation::Create, &token, &desired.stored)
            .await?;
        let ctx = self.op_context(&token);
        let (res, attempts) = with_retries(
            self.retries(),
            self.ctx.backoff,
            || self.provider.create(&ctx, &desired.actual),
            self.on_retry(),
        )
        .await;
        match res {
            Ok(applied) => {
                self.succeeded(rec, applied, &desired.stored, attempts)
                    .await
            }
            Err(e) => Err(self.failed(rec, e, attempts).await),
        }
    }

    async fn update(
        &self,
        rec: &mut StepRecord,
        desired: &Desired,
        token: String,
    ) -> Result<(), String> {
        self.begin(rec, Operation::Update, &token, &desired.stored)
            .await?;
        let ctx = self.op_context(&token);
        let (inputs, outputs, private) =
            (rec.inputs.clone(), rec.outputs.clone(), rec.private.clone());
        let id = rec.resource_id.clone();
        let prior = Prior {
            id: id.as_deref(),
            inputs: &inputs,
            outputs: &outputs,
            private: &private,
        };
        let (res, attempts) = with_retries(
            self.retries(),
            self.ctx.backoff,
            || self.provider.update(&ctx, prior, &desired.actual),
            self.on_retry(),
        )
        .await;
        match res {
            Ok(applied) => {
                self.succeeded(rec, applied, &desired.stored, attempts)
                    .await
            }
            Err(e) => Err(self.failed(rec, e, attempts).await),
        }
    }

    async fn delete(&self, rec: &mut StepRecord, token: String) -> Result<(), String> {
        let recorded = rec.inputs.clone();
        self.begin(rec, Operation::Delete, &token, &recorded)
            .await?;
        let inputs = self.unsealed(&recorded);
        let ctx = self.op_context(&token);
        let (outputs, private) = (rec.outputs.clone(), rec.private.clone());
        let id = rec.resource_id.clone();
        let prior = Prior {
            id: id.as_deref(),
            inputs: &inputs,
            outputs: &outputs,
            private: &private,
        };
        let (res, attempts) = with_retries(
            self.retries(),
            self.ctx.backoff,
            || self.provider.delete(&ctx, prior),
            self.on_retry(),
        )
        .await;
        match res {
            Ok(()) => {
                rec.applied = false;
                rec.resource_id = None;
                rec.inputs = Values::new();
                rec.outputs = Values::new();
                rec.private = Value::Null;
                rec.in_flight = None;
                rec.attempts = attempts;
                rec.last_error = None;
                self.ctx.persist(rec).await
            }
            Err(e) => Err(self.failed(rec, e, attempts).await),
        }
    }

    /// Delete the step's object (finding it first if a create was
    /// interrupted) and forget the step.
    async fn delete_all(&self) -> Result<Outcome, String> {
        let Some(mut rec) = self.ctx.record(self.name()) else {
            return Ok(Outcome::Unchanged);
        };
        if let Some(flight) = rec.in_flight.clone() {
            match flight.operation {
                Operation::Create => {
                    let ctx = self.op_context(&flight.token);
                    let found = self
                        .provider
                        .read(&ctx, rec.resource_id.as_deref(), &flight.inputs)
                        .await
                        .map_err(|e| {
                            format!("could not check the interrupted create: {}", e.message)
                        })?;
                    if let ReadOutcome::Present(applied) = found {
                        rec.applied = true;
                        rec.resource_id = applied.id;
                        rec.inputs = flight.inputs.clone();
                        rec.outputs = self.keep_outputs(&applied.outputs);
                        rec.private = applied.private;
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
        self.ctx.forget(self.name()).await?;
        Ok(Outcome::Done(Action::Delete))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unseal_restores_only_leaves_whose_digest_still_matches() {
        let d1 = flow_providers::seal_hex(&"a".repeat(64));
        let d2 = flow_providers::seal_hex(&"b".repeat(64));
        let recorded = json!({"REGION": "x", "TOKEN": d1, "OLD": d2});
        let stored =
            json!({"REGION": "x", "TOKEN": d1, "OLD": flow_providers::seal_hex(&"c".repeat(64))});
        let actual = json!({"REGION": "x", "TOKEN": "real", "OLD": "new"});
        assert_eq!(
            unseal(&recorded, &stored, &actual),
            json!({"REGION": "x", "TOKEN": "real", "OLD": d2})
        );
        assert_eq!(unseal(&json!(d1), &json!(d1), &json!("v")), json!("v"));
    }

    #[test]
    fn unseal_leaves_plain_digests_alone() {
        // An image digest recorded as a plain input is a value, not a seal.
        let image = format!("sha256:{}", "d".repeat(64));
        assert_eq!(
            unseal(&json!(image), &json!(image), &json!("other")),
            json!(image)
        );
    }

    #[test]
    fn tokens_are_valid_client_request_tokens() {
        let t = new_token();
        assert_eq!(t.len(), 32);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(t, new_token());
    }
}
