//! The operations of one step: each is an intent made durable first (with
//! its operation token), then the provider call with retries, then the
//! durable result. Which operations a step needs is decided in
//! `reconcile`; the inputs' secrets are handled in `sealing`.

use std::sync::Arc;
use std::time::Duration;

use flow_providers::{Applied, ErrorKind, OpContext, Prior, Provider, ProviderError, Values};
use flow_state::{InFlight, Operation, Status, StepRecord, now_secs};
use serde_json::Value;

use super::context::RunContext;
use super::error::StepError;
use super::events::{Event, StepReporter};
use super::job::StepJob;
use super::retry::with_retries;
use super::sealing::{kept_outputs, unsealed};
use crate::lang::inputs::Desired;

/// One step's operations against its provider, for one run.
pub(super) struct Op<'a> {
    pub(super) ctx: &'a Arc<RunContext>,
    pub(super) job: &'a StepJob,
    pub(super) provider: &'a dyn Provider,
    pub(super) reporter: Arc<StepReporter>,
    /// The inputs the workflow asks for now, when it can say.
    pub(super) desired: Option<&'a Desired>,
    /// Whether this run destroys the step (see [`OpContext::destroying`]).
    pub(super) destroying: bool,
}

/// Records an id a provider reports mid-operation into the step's intent,
/// durably, when the intent is still the one under `token`.
struct IntentCheckpoint {
    ctx: Arc<RunContext>,
    step: String,
    token: String,
}

#[async_trait::async_trait]
impl flow_providers::Checkpoint for IntentCheckpoint {
    async fn made(&self, id: &str) -> Result<(), ProviderError> {
        let Some(mut rec) = self.ctx.journal().record(&self.step) else {
            return Ok(());
        };
        match rec.in_flight.as_mut() {
            Some(flight) if flight.token == self.token => flight.id = Some(id.to_string()),
            _ => return Ok(()),
        }
        self.ctx.journal().persist(&mut rec).await.map_err(|e| {
            ProviderError::fatal(format!("could not record `{id}` in the step's intent: {e}"))
        })
    }
}

impl Op<'_> {
    /// The step's name.
    pub(super) fn name(&self) -> &str {
        &self.job.change.step
    }

    /// What the provider is handed for an operation under `token`.
    pub(super) fn op_context(&self, token: &str) -> OpContext {
        let checkpoint: Arc<dyn flow_providers::Checkpoint> = if token.is_empty() {
            Arc::new(flow_providers::NoCheckpoint)
        } else {
            Arc::new(IntentCheckpoint {
                ctx: self.ctx.clone(),
                step: self.name().to_string(),
                token: token.to_string(),
            })
        };
        OpContext {
            checkpoint,
            timeout: self.job.decl.as_ref().and_then(|d| d.timeout),
            destroying: self.destroying,
            clean_leftovers: self.destroying && self.ctx.settings().clean_leftovers,
            step: self.name().to_string(),
            token: token.to_string(),
            workdir: self.workdir(),
            log_path: self.reporter.log_path(),
            region: self.job.region.clone(),
            profile: self.ctx.settings().profile.clone(),
            cancel: self.ctx.cancel().clone(),
            reporter: self.reporter.clone(),
        }
    }

    /// The folder the step's relative paths resolve against: its module's
    /// for a module's step, else the workflow's.
    fn workdir(&self) -> flow_providers::Workdir {
        match (&self.job.decl, &self.ctx.settings().loaded) {
            (Some(decl), Some(loaded)) => loaded.workflow.dir_of(decl).clone(),
            _ => self.ctx.settings().workdir.clone(),
        }
    }

    /// `inputs` as the provider must see them for an object whose name
    /// carries `suffix` (a create-before-destroy replacement's).
    pub(super) fn live(&self, inputs: &Values, suffix: Option<&str>) -> Values {
        crate::plan::replacing::live_inputs(self.provider, inputs, suffix)
    }

    /// How many times a retryable error is retried (the step's `retries`).
    pub(super) fn retries(&self) -> u32 {
        self.job.decl.as_ref().map_or(0, |d| d.retries)
    }

    /// `call`, retried as the step's `retries` allow; its result and the
    /// number of attempts.
    pub(super) async fn with_retries<T, F, Fut>(&self, call: F) -> (Result<T, ProviderError>, u32)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        with_retries(
            self.retries(),
            self.ctx.settings().backoff,
            call,
            self.on_retry(),
        )
        .await
    }

    /// What happens before each retry: counted, logged, shown.
    pub(super) fn on_retry(
        &self,
    ) -> impl FnMut(u32, Duration, &flow_providers::ProviderError) + '_ {
        move |attempt, delay, err| {
            self.ctx.count_retry();
            let error = self.ctx.settings().redactor.redact(&err.message);
            self.reporter.note(&format!(
                "attempt {attempt} failed, retrying in {delay:?}: {error}"
            ));
            self.ctx.sink().emit(Event::Retrying {
                step: self.name().to_string(),
                attempt,
                delay,
                error,
            });
        }
    }

    /// The step's record as this run knows it, or a new one.
    pub(super) fn base_record(&self) -> StepRecord {
        let mut rec =
            self.ctx.journal().record(self.name()).unwrap_or_else(|| {
                StepRecord::new(self.name(), &self.job.change.provider, now_secs())
            });
        if let Some(decl) = &self.job.decl {
            rec.prevent_destroy = decl.prevent_destroy;
        }
        rec
    }

    /// Record the intent (operation, token, inputs) and wait until it is on
    /// disk, and until what the step needs is on disk too.
    pub(super) async fn begin(
        &self,
        rec: &mut StepRecord,
        operation: Operation,
        token: &str,
        inputs: &Values,
    ) -> Result<(), StepError> {
        rec.status = Status::Pending;
        rec.region = self.job.region.clone();
        rec.in_flight = Some(InFlight {
            operation,
            token: token.to_string(),
            inputs: inputs.clone(),
            started_at: now_secs(),
            id: None,
        });
        self.ctx.journal().persist(rec).await?;
        // What this step needs was recorded before this intent (the writer
        // keeps order), so it is on disk now unless writing it failed.
        for dep in &self.job.depends_on {
            self.ctx.journal().wait_durable(dep).await?;
        }
        Ok(())
    }

    /// Copies into `rec`'s intent the id the provider recorded while the
    /// operation ran (see [`IntentCheckpoint`]), which this run's copy of
    /// the record does not have yet.
    fn keep_checkpointed_id(&self, rec: &mut StepRecord) {
        let Some(flight) = rec.in_flight.as_mut() else {
            return;
        };
        if flight.id.is_some() {
            return;
        }
        flight.id = self
            .ctx
            .journal()
            .with_record(self.name(), |r| {
                r.in_flight
                    .as_ref()
                    .filter(|f| f.token == flight.token)
                    .and_then(|f| f.id.clone())
            })
            .flatten();
    }

    /// Record the result; dependents may start before it is flushed.
    pub(super) async fn succeeded(
        &self,
        rec: &mut StepRecord,
        applied: Applied,
        stored: &Values,
        attempts: u32,
    ) -> Result<(), StepError> {
        rec.applied = true;
        rec.status = Status::Applied;
        rec.resource_id = applied.id.clone();
        rec.inputs = stored.clone();
        rec.outputs = kept_outputs(&applied.outputs, &self.ctx.settings().redactor);
        rec.private = applied.private.clone();
        rec.provider = self.job.change.provider.clone();
        rec.depends_on = self.job.depends_on.clone();
        rec.in_flight = None;
        rec.attempts = attempts;
        rec.last_error = None;
        rec.drifted.clear();
        self.ctx.put_outputs(self.name(), applied.outputs);
        self.ctx.journal().persist_queued(rec);
        Ok(())
    }

    /// Record the failure and return it as the step's error. The intent
    /// stays unless the provider's answer proves that nothing happened
    /// ([`ErrorKind::NotCreated`]): a timeout, exhausted retries or any other
    /// failure may have left an object behind, and the next apply first asks
    /// the provider what the recorded token did.
    pub(super) async fn failed(
        &self,
        rec: &mut StepRecord,
        err: flow_providers::ProviderError,
        attempts: u32,
    ) -> StepError {
        if err.kind == ErrorKind::NotCreated {
            rec.in_flight = None;
        }
        self.keep_checkpointed_id(rec);
        let error = StepError::Provider(err);
        rec.status = Status::Failed;
        rec.attempts = attempts;
        rec.last_error = Some(self.ctx.failure(self.name(), &error).message);
        match self.ctx.journal().persist(rec).await {
            Ok(()) => error,
            Err(state) => StepError::Unrecorded {
                error: Box::new(error),
                state,
            },
        }
    }

    /// Record what a create or update ended with: the result, or the failure.
    async fn record_outcome(
        &self,
        rec: &mut StepRecord,
        res: Result<Applied, ProviderError>,
        stored: &Values,
        attempts: u32,
    ) -> Result<(), StepError> {
        match res {
            Ok(applied) => self.succeeded(rec, applied, stored, attempts).await,
            Err(e) => Err(self.failed(rec, e, attempts).await),
        }
    }

    /// Create under `token`: intent, the provider's create with retries, result.
    pub(super) async fn create(
        &self,
        rec: &mut StepRecord,
        desired: &Desired,
        token: String,
    ) -> Result<(), StepError> {
        self.begin(rec, Operation::Create, &token, &desired.stored)
            .await?;
        let ctx = self.op_context(&token);
        let actual = self.live(&desired.actual, rec.name_suffix.as_deref());
        let (res, attempts) = self
            .with_retries(|| self.provider.create(&ctx, &actual))
            .await;
        self.record_outcome(rec, res, &desired.stored, attempts)
            .await
    }

    /// Adopt the existing object `id`: nothing in the cloud changes, so no
    /// intent is written; the result is recorded as a create's would be.
    pub(super) async fn import(
        &self,
        rec: &mut StepRecord,
        desired: &Desired,
        id: &str,
    ) -> Result<(), StepError> {
        rec.region = self.job.region.clone();
        let ctx = self.op_context("");
        let (res, attempts) = self
            .with_retries(|| self.provider.import(&ctx, id, &desired.actual))
            .await;
        if res.is_ok() {
            self.reporter.note(&format!("adopted `{id}`"));
        }
        self.record_outcome(rec, res, &desired.stored, attempts)
            .await
    }

    /// Update in place under `token`: intent, the provider's update with retries, result.
    pub(super) async fn update(
        &self,
        rec: &mut StepRecord,
        desired: &Desired,
        token: String,
    ) -> Result<(), StepError> {
        self.begin(rec, Operation::Update, &token, &desired.stored)
            .await?;
        let ctx = self.op_context(&token);
        let suffix = rec.name_suffix.clone();
        let recorded = RecordedPrior::of(rec, self.live(&rec.inputs, suffix.as_deref()));
        let actual = self.live(&desired.actual, suffix.as_deref());
        let (res, attempts) = self
            .with_retries(|| self.provider.update(&ctx, recorded.prior(), &actual))
            .await;
        self.record_outcome(rec, res, &desired.stored, attempts)
            .await
    }

    /// Delete under `token`: intent, the provider's delete with retries, result.
    pub(super) async fn delete(
        &self,
        rec: &mut StepRecord,
        token: String,
    ) -> Result<(), StepError> {
        let recorded = rec.inputs.clone();
        self.begin(rec, Operation::Delete, &token, &recorded)
            .await?;
        let live = self.live(
            &unsealed(&recorded, self.desired),
            rec.name_suffix.as_deref(),
        );
        let prior = RecordedPrior::of(rec, live);
        let ctx = self.op_context(&token);
        let (res, attempts) = self
            .with_retries(|| self.provider.delete(&ctx, prior.prior()))
            .await;
        match res {
            Ok(()) => {
                rec.applied = false;
                rec.resource_id = None;
                rec.inputs = Values::new();
                rec.outputs = Values::new();
                rec.private = Value::Null;
                // While an old object is put aside, the next one must not
                // take its name: a failed replacement is made again under
                // its own.
                if rec.deposed.is_none() {
                    rec.name_suffix = None;
                }
                rec.in_flight = None;
                rec.attempts = attempts;
                rec.last_error = None;
                Ok(self.ctx.journal().persist(rec).await?)
            }
            Err(e) => Err(self.failed(rec, e, attempts).await),
        }
    }
}

/// What a record holds for a provider's [`Prior`], copied, so that the
/// record can be changed (the intent written) while the call runs.
pub(super) struct RecordedPrior {
    pub(super) id: Option<String>,
    pub(super) inputs: Values,
    pub(super) outputs: Values,
    pub(super) private: Value,
}

impl RecordedPrior {
    /// `rec`'s id, outputs and private data, with `inputs` (the recorded
    /// inputs, unsealed where the workflow still gives the secret).
    pub(super) fn of(rec: &StepRecord, inputs: Values) -> Self {
        RecordedPrior {
            id: rec.resource_id.clone(),
            inputs,
            outputs: rec.outputs.clone(),
            private: rec.private.clone(),
        }
    }

    /// The view the provider gets.
    pub(super) fn prior(&self) -> Prior<'_> {
        Prior {
            id: self.id.as_deref(),
            inputs: &self.inputs,
            outputs: &self.outputs,
            private: &self.private,
        }
    }
}
