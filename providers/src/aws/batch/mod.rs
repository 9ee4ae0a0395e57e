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
//! once it ends (see [`super::batch_logs`]); `run` follows one job to its end.

use async_trait::async_trait;
use aws_sdk_batch::types::{JobTimeout, NodeOverrides, NodePropertyOverride};
use serde_json::Value;

mod node_check;
mod restart;
mod run;

pub use node_check::BatchNodeCheck;

use super::inputs;
use super::poll::{Pace, Waiter};
use crate::capture::Matchers;
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values, attribute_drift,
};
use run::{
    client, container_overrides, describe, find_by_token, finish, finished, job_logs, matchers,
    read_outcome, run_to_end, status, submit_once, terminate, timeout_secs,
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
                    InputSpec::optional(
                        "restarts",
                        InputType::Integer,
                        "How many times flow submits the job again (a new job, NAME-aN) after a failed attempt (default 0)",
                    ),
                    InputSpec::optional(
                        "hang_after",
                        InputType::Duration,
                        "With restarts: no new line in the job's log (the main node's) for this long is a hang: the job is terminated and restarted",
                    ),
                    InputSpec::optional(
                        "hang_without_loss",
                        InputType::Duration,
                        "With restarts: no new loss (as `parse` reads losses) for this long is a hang",
                    ),
                    InputSpec::optional(
                        "checkpoint_s3",
                        InputType::String,
                        "The s3:// prefix the training writes checkpoints under: each restart is told its newest entry as FLOW_RESUME_FROM",
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

#[async_trait]
impl Provider for BatchJob {
    fn name(&self) -> &'static str {
        "batch.job"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// The gates `expect` will check; with restarts, how many and from
    /// where.
    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        let mut lines = crate::capture::plan_lines(inputs);
        if let Ok(Some(spec)) = restart::Spec::from_values(inputs) {
            lines.push(spec.plan_line());
        }
        lines
    }

    /// `job_id`, `status`, `log_stream` (once Batch names it), each
    /// `capture` name and what `parse` reads; with restarts, `attempts`.
    fn declared_outputs(
        &self,
        inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        let declared =
            crate::capture::job_outputs("batch.job", &run::OUTPUT_KEYS, &run::SOMETIMES, inputs)?;
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
        problems.extend(Matchers::problems(&crate::contract::known_inputs(inputs)));
        problems.extend(restart::problems(inputs));
        problems
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        if let Some(spec) = restart::Spec::from_values(values)? {
            return restart::drive(ctx, values, &spec, None).await;
        }
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
        let request = submit_request(&client, values, &name)?;
        let id = submit_once(
            request,
            &ctx.token,
            &format!("submit job `{name}` to queue `{queue}`"),
        )
        .await?;
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
        let Some(id) = prior.id.and_then(restart::last_job) else {
            return Ok(());
        };
        let id = id.as_str();
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
            Pace::LONG.within(ctx.timeout),
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

    fn can_refresh(&self) -> bool {
        true
    }

    /// The job's final status, as Batch reports it now. A job Batch no
    /// longer lists (it forgets finished jobs after a while) is left as
    /// recorded: a task is judged by its run, and is not run again for it.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let Some(id) = prior.id.and_then(restart::last_job) else {
            return Ok(Refreshed::unchanged());
        };
        let client = client(ctx).await?;
        let Some(job) = describe(&client, &id).await? else {
            return Ok(Refreshed::unchanged());
        };
        let recorded = prior.outputs.get("status").cloned().unwrap_or(Value::Null);
        Ok(Refreshed::drifted(
            attribute_drift("status", recorded, Value::from(status(&job)))
                .into_iter()
                .collect(),
        ))
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
        if let Some(spec) = restart::Spec::from_values(values)? {
            return restart::read(ctx, values, &spec, id).await;
        }
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
        read_outcome(
            &id,
            finish(ctx, &client, &mut logs, values, &name, &job).await,
        )
    }
}

/// The SubmitJob request of job `name` as the inputs ask: the queue, the
/// definition, the nodes with every node's container overrides (or the
/// container's), the timeout. Its tags are [`submit_once`]'s.
fn submit_request(
    client: &aws_sdk_batch::Client,
    values: &Values,
    name: &str,
) -> Result<aws_sdk_batch::operation::submit_job::builders::SubmitJobFluentBuilder, ProviderError> {
    let mut request = client
        .submit_job()
        .job_name(name)
        .job_queue(inputs::req_str(values, "job_queue")?)
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
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
