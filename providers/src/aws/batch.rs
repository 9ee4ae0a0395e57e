//! The `batch.job` provider: a task that runs one AWS Batch job to the end.
//!
//! Create submits the job tagged with `flow:token` = the operation token and
//! waits until it is `SUCCEEDED` or `FAILED`, showing each status change; a
//! failed job fails the step with its status reason. `read` after a crash
//! finds the job by its tag in the queue and waits for it, so a resumed run
//! never submits a second one. An interrupted run (Ctrl-C) terminates the
//! job; so does destroy, or a re-run, of a job still running.
//!
//! The job's CloudWatch logs are followed into the step log while it runs;
//! `success_pattern` and `capture` judge them and take outputs from them
//! once it ends (see [`super::batch_logs`]).

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_batch::Client;
use aws_sdk_batch::types::{
    ContainerOverrides, JobDetail, JobTimeout, KeyValuePair, KeyValuesPair, NodeOverrides,
    NodePropertyOverride,
};
use serde_json::Value;

use super::batch_logs::{self, JobLogs};
use super::poll::{Pace, Waiter};
use super::{config, error, inputs, tags};
use crate::capture::Matchers;
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Schema, StepKind, ValidateContext, Values,
};

/// The `batch.job` provider kind.
#[derive(Debug, Clone)]
pub struct BatchJob {
    schema: Schema,
}

impl BatchJob {
    /// The provider with its schema.
    pub fn new() -> Self {
        BatchJob {
            schema: Schema {
                kind: StepKind::Task,
                description: "An AWS Batch job, run until it succeeds or fails",
                inputs: vec![
                    InputSpec::required("job_name", InputType::String, "The job's name"),
                    InputSpec::required(
                        "job_queue",
                        InputType::String,
                        "The job queue's name or ARN",
                    ),
                    InputSpec::required(
                        "job_definition",
                        InputType::String,
                        "The job definition's name, name:revision or ARN",
                    ),
                    InputSpec::optional(
                        "num_nodes",
                        InputType::Integer,
                        "Nodes of a multi-node parallel job (overrides the job definition's)",
                    ),
                    InputSpec::optional(
                        "environment",
                        InputType::Map(Box::new(InputType::String)),
                        "Environment variables added to the container (every node's, for multi-node jobs)",
                    ),
                    InputSpec::optional(
                        "command",
                        InputType::List(Box::new(InputType::String)),
                        "The container's command, overriding the job definition's",
                    ),
                    InputSpec::optional(
                        "timeout",
                        InputType::Duration,
                        "How long an attempt may run before Batch stops it (at least 60s)",
                    ),
                    InputSpec::optional(
                        "log_group",
                        InputType::String,
                        "The CloudWatch log group of the job's logs (default /aws/batch/job)",
                    ),
                ]
                .into_iter()
                .chain(crate::capture::input_specs())
                .collect(),
                open_inputs: false,
            },
        }
    }
}

impl Default for BatchJob {
    fn default() -> Self {
        Self::new()
    }
}

/// Statuses a job ends in.
fn finished(status: &str) -> bool {
    status == "SUCCEEDED" || status == "FAILED"
}

/// A Batch client for `ctx`.
async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

/// A reader of the job's logs, in the group the inputs name.
async fn job_logs(ctx: &OpContext, values: &Values) -> Result<JobLogs, ProviderError> {
    let group = inputs::opt_str(values, "log_group")?
        .unwrap_or_else(|| batch_logs::DEFAULT_GROUP.to_string());
    Ok(JobLogs::new(&config::sdk_config(ctx).await?, group))
}

/// The step's `success_pattern` and `capture`.
fn matchers(values: &Values) -> Result<Matchers, ProviderError> {
    Matchers::from_values(values).map_err(|p| {
            let help = p.help.unwrap_or_else(|| {
                "fix `success_pattern` or `capture` in the workflow; `flow validate FILE` checks them".into()
            });
            ProviderError::invalid(p.message).with_help(help)
        })
}

/// The job's status as Batch writes it.
fn status(job: &JobDetail) -> &str {
    job.status().map_or("UNKNOWN", |s| s.as_str())
}

/// The job with id `id`, if Batch still knows it.
async fn describe(client: &Client, id: &str) -> Result<Option<JobDetail>, ProviderError> {
    client
        .describe_jobs()
        .jobs(id)
        .send()
        .await
        .map(|out| out.jobs().first().cloned())
        .map_err(|e| error::aws(&format!("describe job `{id}`"), e))
}

/// The job called `name` in `queue` tagged with operation token `token`.
async fn find_by_token(
    client: &Client,
    queue: &str,
    name: &str,
    token: &str,
) -> Result<Option<JobDetail>, ProviderError> {
    let mut ids = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let out = client
            .list_jobs()
            .job_queue(queue)
            .filters(
                KeyValuesPair::builder()
                    .name("JOB_NAME")
                    .values(name)
                    .build(),
            )
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws(&format!("list jobs `{name}` in queue `{queue}`"), e))?;
        ids.extend(
            out.job_summary_list()
                .iter()
                .filter_map(|j| j.job_id().map(str::to_string)),
        );
        match out.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => break,
        }
    }
    for chunk in ids.chunks(100) {
        let out = client
            .describe_jobs()
            .set_jobs(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| error::aws(&format!("describe jobs `{name}`"), e))?;
        if let Some(job) = out.jobs().iter().find(|j| {
            j.tags()
                .and_then(|t| t.get(tags::TOKEN))
                .is_some_and(|t| t == token)
        }) {
            return Ok(Some(job.clone()));
        }
    }
    Ok(None)
}

/// What state keeps of a job that succeeded, with what its logs gave.
fn applied(job: &JobDetail, logs: &JobLogs, captured: Values) -> Applied {
    let id = job.job_id().unwrap_or_default().to_string();
    let mut outputs = captured;
    outputs.insert("job_id".into(), Value::String(id.clone()));
    outputs.insert("status".into(), Value::String(status(job).to_string()));
    if let Some(stream) = logs.stream() {
        outputs.insert("log_stream".into(), Value::String(stream.to_string()));
    }
    Applied {
        id: Some(id),
        outputs,
        private: Value::Null,
    }
}

/// Stops job `id` with `reason`.
async fn terminate(client: &Client, id: &str, reason: &str) -> Result<(), ProviderError> {
    client
        .terminate_job()
        .job_id(id)
        .reason(reason)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error::aws(&format!("terminate job `{id}`"), e))
}

/// Waits for job `id` (called `name`) to finish, showing each status change;
/// terminates it if the run is interrupted. Returns the finished job.
async fn run_to_end(
    ctx: &OpContext,
    client: &Client,
    logs: &mut JobLogs,
    name: &str,
    id: &str,
) -> Result<JobDetail, ProviderError> {
    let what = format!("job `{name}` ({id})");
    let mut waiter = Waiter::new(Pace::LONG, ctx.reporter.as_ref(), what.clone());
    loop {
        match describe(client, id).await {
            Ok(Some(job)) => {
                waiter.looked();
                let st = status(&job);
                let mut line = format!("{what}: {st}");
                if let Some(reason) = job
                    .status_reason()
                    .filter(|r| !r.is_empty() && finished(st))
                {
                    line.push_str(&format!(" ({reason})"));
                }
                waiter.report([line]);
                if finished(st) {
                    return Ok(job);
                }
                if st == "RUNNING" {
                    logs.locate(client, &job).await;
                    if let Err(e) = logs.poll(ctx.reporter.as_ref()).await {
                        ctx.reporter
                            .log(&format!("logs not read this time: {}", e.message));
                    }
                }
            }
            Ok(None) => {
                return Err(ProviderError::fatal(format!(
                    "{what} is no longer known to Batch"
                )).with_help("Batch forgets jobs some days after they end, and all of a deleted queue's jobs; `flow apply --replace STEP` runs it again"));
            }
            Err(e) => waiter.tolerate(e)?,
        }
        tokio::select! {
            paused = waiter.pause() => paused?,
            () = ctx.cancel.cancelled() => {
                ctx.reporter.event(&format!("{what}: terminating (the run was interrupted)"));
                terminate(client, id, "interrupted from flow").await?;
                return Err(ProviderError::fatal(format!("{what} was terminated because the run was interrupted")));
            }
        }
    }
}

/// The result of a finished job once its logs are read: success with what
/// `capture` took, or the step's failure with the reason and the logs' last
/// lines.
async fn finish(
    ctx: &OpContext,
    client: &Client,
    logs: &mut JobLogs,
    values: &Values,
    name: &str,
    job: &JobDetail,
) -> Result<Applied, ProviderError> {
    let matchers = matchers(values)?;
    let asked = if status(job) == "SUCCEEDED" {
        &matchers
    } else {
        &Matchers::default()
    };
    if let Err(e) = logs
        .settle(client, job, asked, ctx.reporter.as_ref(), &ctx.cancel)
        .await
    {
        ctx.reporter.log(&format!("logs not read: {}", e.message));
    }
    let checked = if status(job) == "SUCCEEDED" {
        matchers.check(logs.text())
    } else {
        Ok(Values::new())
    };
    if let Ok(captured) = &checked {
        crate::capture::report(ctx.reporter.as_ref(), captured);
    }
    outcome(name, job, logs, checked)
}

/// Success (with the captured outputs) or the step's failure, from the
/// finished job, its logs and what `success_pattern` and `capture` made of
/// them (`checked`, looked at only for a job that succeeded).
fn outcome(
    name: &str,
    job: &JobDetail,
    logs: &JobLogs,
    checked: Result<Values, crate::capture::LogsMiss>,
) -> Result<Applied, ProviderError> {
    let what = format!("job `{name}` ({})", job.job_id().unwrap_or("?"));
    let tail = || match logs.tail(5) {
        t if t.is_empty() => String::new(),
        t => format!(" — last lines: {t}"),
    };
    if status(job) == "SUCCEEDED" {
        return match checked {
            Ok(captured) => Ok(applied(job, logs, captured)),
            Err(why) if logs.stream().is_none() => Err(ProviderError::fatal(format!(
                "{what}: {why} (Batch named no log stream for it)"
            )).with_help("the job definition's log configuration decides where its logs go: give the step `log_group` if it is not /aws/batch/job")),
            Err(why) => Err(ProviderError::fatal(format!("{what}: {why}{}", tail())).with_help(
                "the job ran but its log did not show what `success_pattern` and `capture` look for: read it with `flow logs FILE STEP`",
            )),
        };
    }
    let reason = job
        .status_reason()
        .filter(|r| !r.is_empty())
        .unwrap_or("no reason given");
    Err(ProviderError::fatal(format!(
        "{what} {}: {reason}{}",
        status(job),
        tail()
    ))
    .with_help(
        "the job's whole log is in the step's log (`flow logs FILE STEP`) and in its CloudWatch log stream",
    ))
}

/// The container overrides the inputs ask for, if any.
fn container_overrides(values: &Values) -> Result<Option<ContainerOverrides>, ProviderError> {
    let env = inputs::str_map(values, "environment")?;
    let command = inputs::str_list(values, "command")?;
    if env.is_empty() && values.get("command").is_none_or(Value::is_null) {
        return Ok(None);
    }
    let mut overrides = ContainerOverrides::builder();
    for (k, v) in env {
        overrides = overrides.environment(KeyValuePair::builder().name(k).value(v).build());
    }
    if values.get("command").is_some_and(|c| !c.is_null()) {
        overrides = overrides.set_command(Some(command));
    }
    Ok(Some(overrides.build()))
}

/// Seconds of the `timeout` input, if set.
fn timeout_secs(values: &Values) -> Result<Option<i32>, ProviderError> {
    let Some(text) = inputs::opt_str(values, "timeout")? else {
        return Ok(None);
    };
    let d = humantime::parse_duration(&text).map_err(|e| {
        ProviderError::bad_input(format!("`timeout` {text:?} is not a duration: {e}"))
    })?;
    Ok(Some(d.as_secs().clamp(60, i32::MAX as u64) as i32))
}

#[async_trait]
impl Provider for BatchJob {
    fn name(&self) -> &'static str {
        "batch.job"
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (name, value) in inputs {
            match (name.as_str(), value) {
                ("num_nodes", InputValue::Known(v)) if v.as_i64().is_some_and(|n| n < 1) => {
                    problems.push(Problem::at(name, "`num_nodes` must be at least 1"));
                }
                ("timeout", InputValue::Known(Value::String(t)))
                    if humantime::parse_duration(t).is_ok_and(|d| d.as_secs() < 60) =>
                {
                    problems.push(Problem::at(
                        name,
                        "Batch needs a `timeout` of at least 60 seconds",
                    ));
                }
                _ => {}
            }
        }
        if let Err(p) = Matchers::from_values(&crate::contract::known_inputs(inputs)) {
            problems.push(p);
        }
        problems
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "job_name")?;
        let queue = inputs::req_str(values, "job_queue")?;
        matchers(values)?;
        let client = client(ctx).await?;
        let mut logs = job_logs(ctx, values).await?;
        if !ctx.token.is_empty()
            && let Some(job) = find_by_token(&client, &queue, &name, &ctx.token).await?
        {
            let id = job.job_id().unwrap_or_default().to_string();
            ctx.reporter.event(&format!(
                "job `{name}` ({id}) was already submitted by this operation"
            ));
            let job = run_to_end(ctx, &client, &mut logs, &name, &id).await?;
            return finish(ctx, &client, &mut logs, values, &name, &job).await;
        }
        let mut request = client
            .submit_job()
            .job_name(&name)
            .job_queue(&queue)
            .job_definition(inputs::req_str(values, "job_definition")?);
        let overrides = container_overrides(values)?;
        match inputs::opt_int(values, "num_nodes")? {
            Some(n) => {
                let mut nodes = NodeOverrides::builder().num_nodes(n as i32);
                if let Some(o) = overrides {
                    nodes = nodes.node_property_overrides(
                        NodePropertyOverride::builder()
                            .target_nodes("0:")
                            .container_overrides(o)
                            .build(),
                    );
                }
                request = request.node_overrides(nodes.build());
            }
            None => request = request.set_container_overrides(overrides),
        }
        if let Some(secs) = timeout_secs(values)? {
            request = request.timeout(JobTimeout::builder().attempt_duration_seconds(secs).build());
        }
        let all_tags: HashMap<String, String> = tags::with_token(&BTreeMap::new(), &ctx.token)
            .into_iter()
            .collect();
        // SubmitJob has no idempotency token: an SDK retry after a lost
        // answer would submit a second job. The engine retries instead, and
        // this create looks for the token's job first.
        let out = request
            .set_tags(Some(all_tags))
            .customize()
            .config_override(
                aws_sdk_batch::config::Builder::default()
                    .retry_config(aws_config::retry::RetryConfig::disabled()),
            )
            .send()
            .await
            .map_err(|e| error::refused(&format!("submit job `{name}` to queue `{queue}`"), e))?;
        let id = out.job_id().unwrap_or_default().to_string();
        ctx.reporter
            .event(&format!("job `{name}` ({id}): submitted"));
        let job = run_to_end(ctx, &client, &mut logs, &name, &id).await?;
        finish(ctx, &client, &mut logs, values, &name, &job).await
    }

    /// Tasks re-run instead of updating; the engine replaces them. Kept for
    /// the contract: runs the job again.
    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        self.create(ctx, values).await
    }

    /// Terminates the job if it is still running; a finished job has nothing
    /// to delete.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(id) = prior.id else { return Ok(()) };
        let client = client(ctx).await?;
        let Some(job) = describe(&client, id).await? else {
            return Ok(());
        };
        if finished(status(&job)) {
            return Ok(());
        }
        let name = job.job_name().unwrap_or(id).to_string();
        ctx.reporter.event(&format!(
            "job `{name}` ({id}) is {}: terminating it",
            status(&job)
        ));
        terminate(&client, id, "destroyed from flow").await?;
        let mut waiter = Waiter::new(
            Pace::LONG,
            ctx.reporter.as_ref(),
            format!("job `{name}` to stop"),
        );
        loop {
            match describe(&client, id).await {
                Ok(None) => return Ok(()),
                Ok(Some(j)) if finished(status(&j)) => return Ok(()),
                Ok(Some(j)) => {
                    waiter.looked();
                    waiter.report([format!("job `{name}` ({id}): {}", status(&j))]);
                }
                Err(e) => waiter.tolerate(e)?,
            }
            waiter.pause().await?;
        }
    }

    /// The job this operation submitted (by id, else by its token tag),
    /// waited for if still running; one that failed, or whose log lacks
    /// what the step asks for, reads as failed.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let name = inputs::req_str(values, "job_name")?;
        let queue = inputs::req_str(values, "job_queue")?;
        let client = client(ctx).await?;
        let found = match id {
            Some(id) => describe(&client, id).await?,
            None if !ctx.token.is_empty() => {
                find_by_token(&client, &queue, &name, &ctx.token).await?
            }
            None => None,
        };
        let Some(job) = found else {
            return Ok(ReadOutcome::Missing);
        };
        let id = job.job_id().unwrap_or_default().to_string();
        let mut logs = job_logs(ctx, values).await?;
        let job = if finished(status(&job)) {
            job
        } else {
            ctx.reporter.event(&format!(
                "job `{name}` ({id}) is still {}: waiting for it",
                status(&job)
            ));
            run_to_end(ctx, &client, &mut logs, &name, &id).await?
        };
        // A job that failed, or whose logs do not show what the step asks
        // for, ran to its end: the engine starts a new one under a new token.
        match finish(ctx, &client, &mut logs, values, &name, &job).await {
            Ok(applied) => Ok(ReadOutcome::Present(applied)),
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => Ok(ReadOutcome::Failed {
                id: Some(id),
                reason: e.message,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use aws_sdk_batch::types::JobStatus;
    use serde_json::json;

    #[test]
    fn overrides_and_timeout_follow_the_inputs() {
        assert!(container_overrides(&values(json!({}))).unwrap().is_none());
        let o = container_overrides(&values(
            json!({"environment": {"A": "1"}, "command": ["nccl", "-b", "8"]}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.environment()[0].name(), Some("A"));
        assert_eq!(o.command(), ["nccl", "-b", "8"]);
        assert_eq!(
            timeout_secs(&values(json!({"timeout": "2h"}))).unwrap(),
            Some(7200)
        );
        assert_eq!(
            timeout_secs(&values(json!({"timeout": "5s"}))).unwrap(),
            Some(60)
        );
        assert_eq!(timeout_secs(&values(json!({}))).unwrap(), None);
    }

    #[test]
    fn failed_jobs_fail_with_their_reason() {
        let job = JobDetail::builder()
            .job_id("j-1")
            .status(JobStatus::Failed)
            .status_reason("Essential container in task exited")
            .build();
        let logs = JobLogs::new(
            &aws_types::SdkConfig::builder().build(),
            batch_logs::DEFAULT_GROUP.into(),
        );
        let err = outcome("nccl", &job, &logs, Ok(Values::new())).unwrap_err();
        assert_eq!(
            err.message,
            "job `nccl` (j-1) FAILED: Essential container in task exited"
        );
        let ok = JobDetail::builder()
            .job_id("j-2")
            .status(JobStatus::Succeeded)
            .build();
        assert_eq!(
            outcome("nccl", &ok, &logs, Ok(Values::new()))
                .unwrap()
                .outputs["status"],
            "SUCCEEDED"
        );
        let busbw =
            Matchers::from_values(&values(json!({"capture": {"busbw": "bw: ([0-9.]+)"}}))).unwrap();
        let err = outcome("nccl", &ok, &logs, busbw.check(logs.text())).unwrap_err();
        assert!(
            err.message.contains("Batch named no log stream"),
            "{}",
            err.message
        );
    }

    #[test]
    fn validate_checks_nodes_and_timeout() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let problems = BatchJob::new().validate(
            &[
                ("num_nodes".into(), InputValue::Known(json!(0))),
                ("timeout".into(), InputValue::Known(json!("10s"))),
                ("capture".into(), InputValue::Known(json!({"busbw": "(["}))),
            ],
            &ctx,
        );
        assert_eq!(problems.len(), 3);
        assert_eq!(problems[2].path, ["capture", "busbw"]);
    }
}
