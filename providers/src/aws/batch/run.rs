//! Running one Batch job to its end: finding it by token, following its
//! status and logs, judging the result, and the request's overrides.

use aws_sdk_batch::Client;
use aws_sdk_batch::types::{ContainerOverrides, JobDetail, KeyValuePair, KeyValuesPair};
use serde_json::Value;

use super::super::batch_logs::{self, JobLogs};
use super::super::poll::{Pace, Waiter};
use super::super::{config, error, inputs, tags};
use crate::capture::Matchers;
use crate::contract::{Applied, OpContext, ProviderError, Values};

/// Statuses a job ends in.
pub(super) fn finished(status: &str) -> bool {
    status == "SUCCEEDED" || status == "FAILED"
}

/// A Batch client for `ctx`.
pub(super) async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

/// A reader of the job's logs, in the group the inputs name.
pub(super) async fn job_logs(ctx: &OpContext, values: &Values) -> Result<JobLogs, ProviderError> {
    let group = inputs::opt_str(values, "log_group")?
        .unwrap_or_else(|| batch_logs::DEFAULT_GROUP.to_string());
    Ok(JobLogs::new(&config::sdk_config(ctx).await?, group))
}

/// The step's `success_pattern` and `capture`.
pub(super) fn matchers(values: &Values) -> Result<Matchers, ProviderError> {
    Matchers::from_values(values).map_err(|p| {
            let help = p.help.unwrap_or_else(|| {
                "fix `success_pattern` or `capture` in the workflow; `flow validate FILE` checks them".into()
            });
            ProviderError::invalid(p.message).with_help(help)
        })
}

/// The job's status as Batch writes it.
pub(super) fn status(job: &JobDetail) -> &str {
    job.status().map_or("UNKNOWN", |s| s.as_str())
}

/// The job with id `id`, if Batch still knows it.
pub(super) async fn describe(
    client: &Client,
    id: &str,
) -> Result<Option<JobDetail>, ProviderError> {
    client
        .describe_jobs()
        .jobs(id)
        .send()
        .await
        .map(|out| out.jobs().first().cloned())
        .map_err(|e| error::aws(&format!("describe job `{id}`"), e))
}

/// The job called `name` in `queue` tagged with operation token `token`.
pub(super) async fn find_by_token(
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

/// The outputs every batch.job step has ([`applied`] puts each in), before
/// what `capture` and `parse` take.
pub(super) const OUTPUT_KEYS: [&str; 2] = ["job_id", "status"];

/// The output a job has only once Batch named its log stream.
pub(super) const SOMETIMES: [&str; 1] = ["log_stream"];

/// What state keeps of a job that succeeded, with what its logs gave.
pub(super) fn applied(job: &JobDetail, logs: &JobLogs, captured: Values) -> Applied {
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
pub(super) async fn terminate(
    client: &Client,
    id: &str,
    reason: &str,
) -> Result<(), ProviderError> {
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
pub(super) async fn run_to_end(
    ctx: &OpContext,
    client: &Client,
    logs: &mut JobLogs,
    name: &str,
    id: &str,
) -> Result<JobDetail, ProviderError> {
    let what = format!("job `{name}` ({id})");
    let mut waiter = Waiter::new(
        Pace::LONG.within(ctx.timeout),
        ctx.reporter.as_ref(),
        what.clone(),
    );
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
pub(super) async fn finish(
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
        matchers.judge(logs.text(), ctx.reporter.as_ref())
    } else {
        Ok(Values::new())
    };
    outcome(name, job, logs, checked)
}

/// Success (with the captured outputs) or the step's failure, from the
/// finished job, its logs and what `success_pattern` and `capture` made of
/// them (`checked`, looked at only for a job that succeeded).
pub(super) fn outcome(
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
            Err(why) => {
                let tail = if why.wants_tail() { tail() } else { String::new() };
                Err(ProviderError::fatal(format!("{what}: {why}{tail}")).with_help(why.help()))
            }
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
pub(super) fn container_overrides(
    values: &Values,
) -> Result<Option<ContainerOverrides>, ProviderError> {
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
/// What `read` answers for job `id` judged with `judged`: present, or,
/// for a job that failed or whose output is not what the step asks for
/// (it ran to its end), failed, so that the engine starts a new one under
/// a new token; a retryable error stays an error.
pub(super) fn read_outcome(
    id: &str,
    judged: Result<Applied, ProviderError>,
) -> Result<crate::contract::ReadOutcome, ProviderError> {
    use crate::contract::ReadOutcome;
    match judged {
        Ok(applied) => Ok(ReadOutcome::Present(applied)),
        Err(e) if e.is_retryable() => Err(e),
        Err(e) => Ok(ReadOutcome::Failed {
            id: Some(id.to_string()),
            reason: e.message,
        }),
    }
}

/// Sends `request` tagged with the operation's `token`, once, and returns
/// the job's id. SubmitJob has no idempotency token: an SDK retry after a
/// lost answer would submit a second job. The engine retries instead, and
/// a retried create looks for the token's job first (`find_by_token`).
/// `what` names the request in the error.
pub(super) async fn submit_once(
    request: aws_sdk_batch::operation::submit_job::builders::SubmitJobFluentBuilder,
    token: &str,
    what: &str,
) -> Result<String, ProviderError> {
    let all_tags: std::collections::HashMap<String, String> =
        tags::with_token(&std::collections::BTreeMap::new(), token)
            .into_iter()
            .collect();
    let out = request
        .set_tags(Some(all_tags))
        .customize()
        .config_override(
            aws_sdk_batch::config::Builder::default()
                .retry_config(aws_config::retry::RetryConfig::disabled()),
        )
        .send()
        .await
        .map_err(|e| error::refused(what, e))?;
    Ok(out.job_id().unwrap_or_default().to_string())
}

pub(super) fn timeout_secs(values: &Values) -> Result<Option<i32>, ProviderError> {
    let Some(text) = inputs::opt_str(values, "timeout")? else {
        return Ok(None);
    };
    let d = humantime::parse_duration(&text).map_err(|e| {
        ProviderError::bad_input(format!("`timeout` {text:?} is not a duration: {e}"))
    })?;
    Ok(Some(d.as_secs().clamp(60, i32::MAX as u64) as i32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::batch_logs;
    use crate::testing::values;
    use aws_sdk_batch::types::JobStatus;
    use serde_json::json;

    /// The keys validate expects are those `applied` puts in: a job whose
    /// log stream Batch has not named has all but `log_stream`.
    #[test]
    fn declared_outputs_are_the_outputs_a_job_has() {
        use crate::contract::{InputValue, Provider, ValidateContext};
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let capture = json!({"busbw": "bw: ([0-9.]+)"});
        let inputs = [("capture".to_string(), InputValue::Known(capture))];
        let declared = super::super::BatchJob::new()
            .declared_outputs(&inputs, &ctx)
            .unwrap();
        let job = JobDetail::builder().job_id("j-1").build();
        let logs = JobLogs::new(
            &aws_types::SdkConfig::builder().build(),
            batch_logs::DEFAULT_GROUP.into(),
        );
        let captured: Values = [("busbw".to_string(), json!(186.4))].into_iter().collect();
        let a = applied(&job, &logs, captured);
        let keys: std::collections::BTreeSet<&String> = a.outputs.keys().collect();
        let always: std::collections::BTreeSet<&String> = declared
            .keys
            .iter()
            .filter(|k| !declared.conditional.contains(k))
            .collect();
        assert_eq!(keys, always);
        assert_eq!(declared.conditional, SOMETIMES);
    }

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
}
