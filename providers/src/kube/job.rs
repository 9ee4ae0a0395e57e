//! `kube.job` (a task): a Job, PyTorchJob or MPIJob run to completion.
//!
//! The manifest holds exactly one job object. Create applies it (annotated
//! with the operation token), follows its pods ([`super::logs`]) until the
//! job succeeds or fails, and then checks `success_pattern` and takes the
//! `capture` outputs from the logs. A failure names the failing pod and its
//! reason. An interrupt (Ctrl-C) deletes the job and its pods. A job of the
//! same name left by an earlier run of the step is deleted first; one this
//! very operation made (a resumed apply) is followed, never made twice.
//! Destroy deletes the job and its pods.

mod restart;

use std::sync::Arc;

use ::kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::connection::{Connection, Target};
use super::errors;
use super::job_object::{JobState, is_job, job_state, pod_selector};
use super::logs::{self, Follower};
use super::objects::{KUBE_PACE, Kinds, Record};
use super::render::{Doc, Sources};
use crate::aws::poll::Waiter;
use crate::capture::Matchers;
use crate::contract::{
    Applied, InputValue, OpContext, PlanDetail, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Schema, StepKind, ValidateContext, Values,
};
use restart::Spec as Restarts;

/// The annotation naming the step that made a job.
const STEP_ANNOTATION: &str = "flow.dev/step";

/// The `kube.job` provider kind.
#[derive(Debug, Clone)]
pub struct KubeJob {
    schema: Schema,
}

impl KubeJob {
    /// The provider with its schema.
    pub fn new() -> Self {
        let mut inputs = super::connection_inputs();
        inputs.extend(super::manifest_inputs());
        inputs.extend(crate::capture::input_specs());
        inputs.extend(restart::input_specs());
        KubeJob {
            schema: Schema {
                kind: StepKind::Task,
                description: "A Kubernetes Job, PyTorchJob or MPIJob run to completion, its logs followed",
                inputs,
                open_inputs: false,
            },
        }
    }
}

impl Default for KubeJob {
    fn default() -> Self {
        Self::new()
    }
}

/// One operation on the step's job.
struct Run<'a> {
    ctx: &'a OpContext,
    conn: Connection,
    inputs: &'a Values,
}

impl<'a> Run<'a> {
    fn new(ctx: &'a OpContext, inputs: &'a Values) -> Result<Self, ProviderError> {
        Ok(Run {
            ctx,
            conn: Connection::new(ctx, inputs)?,
            inputs,
        })
    }

    /// The job object, placed in its namespace and annotated.
    async fn doc(&self, kinds: &mut Kinds) -> Result<Doc, ProviderError> {
        let docs = Sources::from_inputs(self.inputs)?
            .render(&self.ctx.workdir)
            .await?;
        let doc = single_job(&docs).map_err(ProviderError::fatal)?;
        let ns = match self.inputs.get("namespace").and_then(Value::as_str) {
            Some(ns) => ns.to_string(),
            None => self
                .conn
                .context_namespace()
                .await?
                .unwrap_or_else(|| "default".into()),
        };
        let mut placed = kinds.place(&doc, &ns).await?;
        let meta = placed.object["metadata"]
            .as_object_mut()
            .expect("placed has metadata");
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(super::TOKEN_ANNOTATION.into(), json!(self.ctx.token));
            a.insert(STEP_ANNOTATION.into(), json!(self.ctx.step));
        }
        Ok(placed)
    }

    fn matchers(&self) -> Result<Matchers, ProviderError> {
        Matchers::from_values(self.inputs).map_err(|p| {
            let help = p.help.unwrap_or_else(|| {
                "fix `success_pattern` or `capture` in the workflow; `flow validate FILE` checks them".into()
            });
            ProviderError::invalid(p.message).with_help(help)
        })
    }

    /// Creates the job unless this operation already did, then follows it.
    async fn run(&self) -> Result<Applied, ProviderError> {
        if let Some(spec) = Restarts::from_values(self.inputs)? {
            return restart::drive(self, &spec, None).await;
        }
        let mut kinds = Kinds::new(self.conn.client().await?);
        let doc = self
            .doc(&mut kinds)
            .await
            .map_err(ProviderError::before_acting)?;
        let mut record = Kinds::record_of(&doc);
        match kinds.get(&record).await? {
            Some(existing)
                if annotation(&existing, super::TOKEN_ANNOTATION)
                    == Some(self.ctx.token.as_str()) =>
            {
                self.ctx.reporter.log(&format!(
                    "{} was already started by this operation: following it",
                    record.label()
                ));
                record.uid = existing.metadata.uid.unwrap_or_default();
            }
            Some(existing)
                if annotation(&existing, STEP_ANNOTATION) == Some(self.ctx.step.as_str()) =>
            {
                self.ctx.reporter.log(&format!(
                    "deleting {} left by an earlier run",
                    record.label()
                ));
                record.uid = existing.metadata.uid.clone().unwrap_or_default();
                self.delete_job(&mut kinds, &record).await?;
                record = kinds.apply(&doc).await?.0;
            }
            Some(_) => {
                return Err(crate::ownership::not_own(&record.label()));
            }
            None => {
                record = kinds.apply(&doc).await?.0;
                self.ctx
                    .reporter
                    .event(&format!("started {}", record.label()));
            }
        }
        self.follow(&mut kinds, &record).await
    }

    /// Follows the job to its end.
    async fn follow(&self, kinds: &mut Kinds, record: &Record) -> Result<Applied, ProviderError> {
        let ended = self.follow_until(kinds, record, None).await?;
        match ended.state {
            JobState::Failed(why) => Err(failed(record, &why, &ended.pods)),
            _ => self.judged(record, &ended, self.ctx.reporter.as_ref()),
        }
    }

    /// Follows the job until it ends, or, with `watch`, until the watch
    /// finds it hung (no new log line, or no new loss, for its time).
    async fn follow_until(
        &self,
        kinds: &mut Kinds,
        record: &Record,
        mut watch: Option<&mut restart::Watch>,
    ) -> Result<Ended, ProviderError> {
        let api = kinds.api_for(record).await?;
        let pods: Api<Pod> = Api::namespaced(
            self.conn.client().await?,
            record.namespace.as_deref().unwrap_or("default"),
        );
        let mut follower = Follower::new(pods, pod_selector(record), self.ctx.reporter.clone());
        let reporter: Arc<dyn crate::contract::Reporter> = self.ctx.reporter.clone();
        let mut waiter = Waiter::new(KUBE_PACE, reporter.as_ref(), record.label());
        let (state, last_pods) = loop {
            let look = async {
                let obj = api
                    .get_opt(&record.name)
                    .await
                    .map_err(|e| errors::kube(&format!("read {}", record.label()), e))?
                    .ok_or_else(|| {
                        ProviderError::vanished(format!(
                            "{} was deleted while running",
                            record.label()
                        ))
                    })?;
                let pods = follower.look().await?;
                Ok::<_, ProviderError>((
                    job_state(&serde_json::to_value(&obj).unwrap_or(Value::Null)),
                    pods,
                ))
            };
            match look.await {
                Ok((JobState::Running(phase), pods)) => {
                    if let Some(w) = watch.as_deref_mut()
                        && let Some(why) = w.look(&follower.text(), &pods)
                    {
                        follower.abort();
                        return Ok(Ended {
                            state: JobState::Running(phase),
                            hung: Some(why),
                            text: follower.text(),
                            pods,
                        });
                    }
                    waiter.looked();
                    waiter.report([format!("{}: {phase}", record.label())]);
                }
                Ok(done) => break done,
                Err(e) => waiter.tolerate(e)?,
            }
            tokio::select! {
                r = waiter.pause() => r?,
                _ = self.ctx.cancel.cancelled() => {
                    follower.abort();
                    self.ctx.reporter.event(&format!("interrupted: deleting {}", record.label()));
                    self.delete_job(kinds, record).await?;
                    return Err(ProviderError::fatal(format!("interrupted: {} and its pods were deleted", record.label())));
                }
            }
        };
        follower.finish(&last_pods).await;
        let pods = follower.look().await.unwrap_or(last_pods);
        Ok(Ended {
            state,
            hung: None,
            text: follower.text(),
            pods,
        })
    }

    /// A job that succeeded, judged by `success_pattern`, `capture`,
    /// `parse` and `expect`.
    fn judged(
        &self,
        record: &Record,
        ended: &Ended,
        reporter: &dyn crate::contract::Reporter,
    ) -> Result<Applied, ProviderError> {
        let matchers = self.matchers()?;
        self.ctx
            .reporter
            .event(&format!("{} succeeded", record.label()));
        let captured = matchers.judge(&ended.text, reporter).map_err(|e| {
            ProviderError::fatal(format!("{}: {e}", record.label())).with_help(e.help())
        })?;
        Ok(Applied {
            id: Some(record.uid.clone()),
            outputs: outputs(record, &ended.pods, captured),
            private: json!({ "job": record }),
        })
    }

    /// Deletes the job and its pods (the garbage collector would, but it may
    /// be slow or absent) and waits until they are gone.
    async fn delete_job(&self, kinds: &mut Kinds, record: &Record) -> Result<(), ProviderError> {
        let api = kinds.api_for(record).await?;
        match api.delete(&record.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if errors::status(&e) == Some(404) => {}
            Err(e) => return Err(errors::kube(&format!("delete {}", record.label()), e)),
        }
        let ns = record.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.conn.client().await?, ns);
        let selector = pod_selector(record);
        pods.delete_collection(
            &DeleteParams::background(),
            &ListParams::default().labels(&selector),
        )
        .await
        .map_err(|e| errors::kube(&format!("delete pods {selector}"), e))?;
        let mut gone = record.clone();
        gone.uid = String::new();
        kinds.delete(&gone, self.ctx.reporter.as_ref()).await?;
        Ok(())
    }
}

/// How an attempt ended: the job's state (still `Running` when the watch
/// found it hung), why it is hung, its pods and its logs.
struct Ended {
    state: JobState,
    hung: Option<String>,
    pods: Vec<Pod>,
    text: String,
}

/// The error of a job that failed: its reason and the failing pod.
fn failed(record: &Record, why: &str, pods: &[Pod]) -> ProviderError {
    let mut message = format!("{} failed: {why}", record.label());
    if let Some(pod) = logs::failure_reason(pods) {
        message.push_str("; ");
        message.push_str(&pod);
    }
    ProviderError::fatal(message).with_help(
        "the pods' logs are in the step's log (`flow logs FILE STEP`); `kubectl describe` the job for its events",
    )
}

fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The one job object of the manifests.
// A `String` error on purpose: the text is one problem, shown as it is
// at the step input's span; no caller tells its cases apart.
fn single_job(docs: &[Doc]) -> Result<Doc, String> {
    let jobs: Vec<&Doc> = docs
        .iter()
        .filter(|d| is_job(d.api_version(), d.kind()))
        .collect();
    let others: Vec<String> = docs
        .iter()
        .filter(|d| !is_job(d.api_version(), d.kind()))
        .map(|d| format!("{} {}", d.kind(), d.name()))
        .collect();
    if !others.is_empty() {
        return Err(format!(
            "kube.job runs one Job, PyTorchJob or MPIJob; apply {} with a kube.manifest step",
            others.join(", ")
        ));
    }
    match jobs.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err("the manifest holds no Job, PyTorchJob or MPIJob".into()),
        _ => Err(format!(
            "the manifest holds {} jobs; kube.job runs one",
            jobs.len()
        )),
    }
}

/// The outputs every kube.job step has ([`outputs`] puts each in), before
/// what `capture` and `parse` take.
const OUTPUT_KEYS: [&str; 5] = ["name", "namespace", "kind", "uid", "pods"];

/// The outputs of a job that succeeded: the job, its pods, what its logs gave.
fn outputs(record: &Record, pods: &[Pod], captured: Values) -> Values {
    let mut outputs = Values::new();
    outputs.insert("name".into(), json!(record.name));
    outputs.insert("namespace".into(), json!(record.namespace));
    outputs.insert("kind".into(), json!(record.kind));
    outputs.insert("uid".into(), json!(record.uid));
    let names: Vec<String> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    outputs.insert("pods".into(), json!(names));
    outputs.extend(captured);
    outputs
}

#[async_trait]
impl Provider for KubeJob {
    fn name(&self) -> &'static str {
        "kube.job"
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        crate::substitute::digest_of_input(inputs, "files", &ctx.workdir)
    }

    fn has_plan_detail(&self) -> bool {
        true
    }

    /// When the cluster is there: whether it would take the job (a
    /// server-side dry run; see [`super::dry_run`]).
    async fn plan_detail(
        &self,
        ctx: &OpContext,
        _prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        let run = Run::new(ctx, desired)?;
        let mut kinds = Kinds::new(run.conn.client().await?);
        let doc = run.doc(&mut kinds).await?;
        let ns = doc.namespace().unwrap_or("default").to_string();
        Ok(PlanDetail {
            lines: super::dry_run::lines(&mut kinds, &[doc], &ns).await,
            replace_because: None,
            refusals: Vec::new(),
        })
    }

    /// The gates `expect` will check.
    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        let mut lines = crate::capture::plan_lines(inputs);
        if let Ok(Some(spec)) = Restarts::from_values(inputs) {
            lines.extend(spec.plan_lines());
        }
        lines
    }

    /// `OUTPUT_KEYS`, each `capture` name and what `parse` reads.
    fn declared_outputs(
        &self,
        inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        let declared = crate::capture::job_outputs("kube.job", &OUTPUT_KEYS, &[], inputs)?;
        let restarts = inputs
            .iter()
            .any(|(k, _)| restart::INPUTS.contains(&k.as_str()));
        Some(match restarts {
            true => declared.with_conditional(&[restart::ATTEMPTS]),
            false => declared,
        })
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let mut out = Target::problems(inputs);
        let known = crate::contract::known_inputs(inputs);
        let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
        if !has("files") && !has("manifest") {
            out.push(Problem::at_path(
                &[],
                "give `files` (a YAML file or URL) or an inline `manifest` holding the job",
            ));
        }
        out.extend(Matchers::problems(&known));
        out.extend(restart::problems(inputs));
        if let Err(problems) = super::file_entry::parse(known.get("files")) {
            out.extend(problems);
        }
        let all_known = inputs.iter().all(|(k, v)| {
            !matches!(k.as_str(), "values" | "substitute" | "files" | "manifest")
                || matches!(v, InputValue::Known(_))
        });
        if all_known && let Ok(sources) = Sources::from_inputs(&known) {
            let (docs, problems) = sources.offline(&ctx.workdir);
            if problems.is_empty() && sources.files.iter().all(|f| !super::fetch::is_url(f)) {
                match single_job(&docs) {
                    Err(e) => out.push(Problem::at(
                        if has("files") { "files" } else { "manifest" },
                        e,
                    )),
                    Ok(job) => out.extend(restart::job_problems(&job, &known)),
                }
            }
            out.extend(problems);
        } else if let Ok(sources) = Sources::from_inputs(&known) {
            out.extend(sources.unreadable_files(&ctx.workdir));
        }
        out
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        Run::new(ctx, inputs)?.run().await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        // Tasks are replaced, never updated; a retried failure runs again.
        Run::new(ctx, inputs)?.run().await
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(record) = prior
            .private
            .get("job")
            .cloned()
            .and_then(|v| serde_json::from_value::<Record>(v).ok())
        else {
            return Ok(());
        };
        let run = Run::new(ctx, prior.inputs)?;
        let mut kinds = Kinds::new(run.conn.client().await?);
        run.delete_job(&mut kinds, &record).await
    }

    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let run = Run::new(ctx, inputs)?;
        if let Some(spec) = Restarts::from_values(inputs)? {
            return restart::read(&run, &spec, id).await;
        }
        let mut kinds = Kinds::new(run.conn.client().await?);
        let doc = match run.doc(&mut kinds).await {
            Ok(d) => d,
            Err(e) if e.message.contains("does not serve") => return Ok(ReadOutcome::Missing),
            Err(e) => return Err(e),
        };
        let mut record = Kinds::record_of(&doc);
        match kinds.get(&record).await? {
            Some(obj) if annotation(&obj, super::TOKEN_ANNOTATION) == Some(ctx.token.as_str()) => {
                record.uid = obj.metadata.uid.clone().unwrap_or_default();
                ctx.reporter.log(&format!(
                    "{} from the interrupted run exists: following it",
                    record.label()
                ));
                match run.follow(&mut kinds, &record).await {
                    Ok(applied) => Ok(ReadOutcome::Present(applied)),
                    Err(e) if e.is_retryable() => Err(e),
                    // It ran to its end and failed: the next run deletes it.
                    Err(e) => Ok(ReadOutcome::Failed {
                        id: None,
                        reason: e.message,
                    }),
                }
            }
            _ => Ok(ReadOutcome::Missing),
        }
    }
}

#[cfg(test)]
mod tests;
