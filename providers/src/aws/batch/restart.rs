//! A `batch.job` that survives a node: with `restarts`, a failed attempt
//! is followed by a new job, up to `restarts` times, each resuming from
//! the newest checkpoint under `checkpoint_s3`.
//!
//! On Batch flow takes no node out: Batch places a job's nodes, and a
//! managed compute environment replaces an instance that died. So a
//! restart is a resubmission: attempt N is a job of its own, the step's
//! `job_name` for the first and `NAME-aN` after, tagged `flow:token` with
//! the operation's token (`TOKEN-aN` after the first); every node's
//! container is told `FLOW_ATTEMPT`, `FLOW_CHECKPOINT_DIR` (the
//! `checkpoint_s3` URI) and, from the second attempt on, `FLOW_RESUME_FROM`
//! (the newest entry under it when the attempt before failed).
//!
//! A failed attempt's cause is the job's status reason and each of its
//! nodes (`JOBID#N`) that failed with its own, named with its instance
//! (AWS's reason for a lost host names it: "Host EC2 (instance i-…)
//! terminated."; else the instance EC2 has at the node's interface). A job
//! that succeeded but misses `success_pattern`/`expect` fails the step
//! without a restart: that is not a node's fault.
//!
//! The step's id ([`record`]) is durable before each SubmitJob (the
//! attempt, with its checkpoint), after it (its job's id) and once the
//! attempt ended (its line). A resume (kill -9 of flow anywhere) walks the
//! recorded attempts, skips those with a line, and follows the job of the
//! attempt in flight, found by id or, when SubmitJob's answer was lost, by
//! its token tag: never a second job for one attempt.

mod record;
mod spec;
mod watch;

use std::sync::Arc;

use aws_sdk_batch::types::JobDetail;
use serde_json::Value;

use super::super::batch_logs::JobLogs;
use super::super::{config, inputs};
use super::node_check::nodes;
use super::run::{
    client, describe, find_by_token, finish, job_logs, matchers, status, submit_once,
};
use crate::contract::{Applied, OpContext, ProviderError, ReadOutcome, Values};
use crate::fleet::restarts::Keep;
use record::{Attempt, Recorded, attempt_name, attempt_token, decode, encode, every};

pub(crate) use spec::{INPUTS, Spec, problems};

/// The output key that lists the attempts.
pub(crate) const ATTEMPTS: &str = "attempts";

/// The step's inputs for attempt `n`: its `environment` with
/// `FLOW_ATTEMPT`, `FLOW_CHECKPOINT_DIR` and `FLOW_RESUME_FROM`.
fn attempt_values(values: &Values, spec: &Spec, n: u32, resume: Option<&str>) -> Values {
    let mut v = values.clone();
    let mut env = match v.get("environment") {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    env.insert("FLOW_ATTEMPT".into(), Value::String(n.to_string()));
    if let Some(c) = &spec.checkpoint {
        env.insert("FLOW_CHECKPOINT_DIR".into(), Value::String(c.uri()));
    }
    if let Some(r) = resume {
        env.insert("FLOW_RESUME_FROM".into(), Value::String(r.to_string()));
    }
    v.insert("environment".into(), Value::Object(env));
    v
}

/// The instance a node's status reason names (`Host EC2 (instance i-0abc)
/// terminated.`).
fn instance_in(reason: &str) -> Option<&str> {
    let at = reason.find("instance i-")? + "instance ".len();
    let id = &reason[at..];
    let end = id
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(id.len());
    Some(&id[..end])
}

/// One restarting run of the step.
struct Driver<'a> {
    ctx: &'a OpContext,
    values: &'a Values,
    spec: &'a Spec,
    client: aws_sdk_batch::Client,
    config: aws_types::SdkConfig,
    base: String,
    queue: String,
    recorded: Vec<Recorded>,
    attempts: Vec<Attempt>,
    keep: Arc<Keep>,
}

impl Driver<'_> {
    /// Records the id, durably.
    async fn record(&self) -> Result<(), ProviderError> {
        self.ctx.checkpoint.made(&encode(&self.recorded)).await
    }

    /// Tells the run history each attempt.
    fn tell(&self) {
        let lines: Vec<(u32, String)> =
            self.attempts.iter().map(|a| (a.number, a.line())).collect();
        self.keep.tell(self.ctx.reporter.as_ref(), &lines);
    }

    /// Attempt `n`'s job: the one its id records, the one its token tags
    /// (SubmitJob's answer lost), or a new one.
    async fn start(&mut self, n: u32) -> Result<String, ProviderError> {
        let at = (n - 1) as usize;
        let name = attempt_name(&self.base, n);
        if let Some(id) = self.recorded[at].job_id.clone() {
            return Ok(id);
        }
        let token = attempt_token(&self.ctx.token, n);
        if !self.ctx.token.is_empty()
            && let Some(job) = find_by_token(&self.client, &self.queue, &name, &token).await?
        {
            let id = job.job_id().unwrap_or_default().to_string();
            self.ctx.reporter.event(&format!(
                "job `{name}` ({id}, attempt {n}) was already submitted by this operation: following it"
            ));
            self.recorded[at].job_id = Some(id.clone());
            self.record().await?;
            return Ok(id);
        }
        let resume = self.recorded[at].resumed_from.clone();
        let values = attempt_values(self.values, self.spec, n, resume.as_deref());
        let request = super::submit_request(&self.client, &values, &name)?;
        let id = submit_once(
            request,
            &token,
            &format!("submit job `{name}` to queue `{}`", self.queue),
        )
        .await?;
        self.ctx.reporter.event(&format!(
            "job `{name}` ({id}, attempt {n}): submitted{}",
            resume.map_or(String::new(), |r| format!(", resuming from {r}"))
        ));
        self.recorded[at].job_id = Some(id.clone());
        self.record().await?;
        Ok(id)
    }

    /// Each node of `job` that failed, with its instance and reason; and
    /// the nodes NCCL's warnings in `text` (the main node's log) name as
    /// a lost peer, by their interface's address.
    async fn nodes_named(
        &self,
        job: &JobDetail,
        text: &str,
    ) -> Result<(Vec<String>, Vec<String>), ProviderError> {
        let (Some(id), Some(count)) = (
            job.job_id(),
            job.node_properties().and_then(|p| p.num_nodes()),
        ) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let all = nodes::describe(&self.config, &self.client, id, count).await?;
        let parent_reason = job.status_reason().unwrap_or_default();
        let reason_of = |n: &nodes::Node| {
            n.job
                .as_ref()
                .and_then(|j| j.status_reason())
                .unwrap_or("no reason given")
                .to_string()
        };
        let instance_of = |n: &nodes::Node| {
            instance_in(&reason_of(n))
                .map(str::to_string)
                .or_else(|| n.instance.as_ref().map(|(i, _)| i.clone()))
        };
        let label = |n: &nodes::Node| match instance_of(n) {
            Some(i) => format!("node {} ({i})", n.index),
            None => format!("node {}", n.index),
        };
        let failed: Vec<&nodes::Node> = all
            .iter()
            .filter(|n| n.job.as_ref().is_some_and(|j| status(j) == "FAILED"))
            .collect();
        // A node whose host was lost is the cause; the others were stopped
        // with the job. Without one, each failed node whose reason is its
        // own (not the job's).
        let lost: Vec<&nodes::Node> = failed
            .iter()
            .copied()
            .filter(|n| instance_in(&reason_of(n)).is_some())
            .collect();
        let named: Vec<&nodes::Node> = match lost.is_empty() {
            false => lost,
            true => failed
                .into_iter()
                .filter(|n| reason_of(n) != parent_reason)
                .collect(),
        };
        let addresses: Vec<String> = all.iter().filter_map(|n| n.address.clone()).collect();
        let suspects = crate::fleet::suspects::nccl(text, &addresses)
            .into_iter()
            .filter_map(|p| {
                let n = all
                    .iter()
                    .find(|n| n.address.as_deref() == Some(p.node.as_str()))?;
                (!named.iter().any(|m| m.index == n.index))
                    .then(|| format!("suspect {}: {}", label(n), p.why))
            })
            .collect();
        let failed = named
            .into_iter()
            .map(|n| format!("{}: {}", label(n), reason_of(n)))
            .collect();
        Ok((failed, suspects))
    }

    /// The newest checkpoint for attempt `n`, if `checkpoint_s3` is set.
    async fn newest_checkpoint(&self, n: u32) -> Result<Option<String>, ProviderError> {
        let Some(at) = &self.spec.checkpoint else {
            return Ok(None);
        };
        let s3 = config::s3_client(&self.config);
        let found = spec::newest(&s3, at).await?;
        self.ctx.reporter.event(&match &found {
            Some(f) => format!("newest checkpoint under {}: {f}", at.uri()),
            None => format!(
                "no checkpoint under {}: attempt {n} starts from the beginning",
                at.uri()
            ),
        });
        Ok(found)
    }

    /// From the attempts recorded to one that succeeds or the last restart.
    async fn drive(&mut self) -> Result<Applied, ProviderError> {
        let mut kctx = self.ctx.clone();
        kctx.reporter = self.keep.clone();
        let mut n: u32 = 1;
        loop {
            let at = (n - 1) as usize;
            if let Some(line) = self.recorded.get(at).and_then(|r| r.line.clone()) {
                self.attempts.push(Attempt {
                    number: n,
                    job: attempt_name(&self.base, n),
                    earlier: Some(line),
                    ..Attempt::default()
                });
                n += 1;
                continue;
            }
            if self.recorded.len() <= at {
                self.recorded.push(Recorded::default());
                self.record().await?;
            }
            let name = attempt_name(&self.base, n);
            let id = self.start(n).await?;
            let mut logs: JobLogs = job_logs(self.ctx, self.values).await?;
            let (job, hung) = match self.recorded[at].hung.clone() {
                // Found hung by an interrupted run: terminated (again).
                Some(why) => (
                    watch::stop(self.ctx, &self.client, &id, &why).await?,
                    Some(why),
                ),
                None => {
                    match watch::follow(self.ctx, &self.client, &mut logs, self.spec, &name, &id)
                        .await?
                    {
                        (job, None) => (job, None),
                        (_, Some(why)) => {
                            // Durable before the terminate: a resume knows
                            // the attempt is hung though its job ended FAILED.
                            self.recorded[at].hung = Some(why.clone());
                            self.record().await?;
                            (
                                watch::stop(self.ctx, &self.client, &id, &why).await?,
                                Some(why),
                            )
                        }
                    }
                }
            };
            let resumed_from = self.recorded[at].resumed_from.clone();
            if hung.is_none() && status(&job) == "SUCCEEDED" {
                self.attempts.push(Attempt {
                    number: n,
                    job: name.clone(),
                    job_id: id.clone(),
                    status: "SUCCEEDED".into(),
                    resumed_from,
                    ..Attempt::default()
                });
                // A job that ran to its end but misses what the step asks
                // of its log fails here, without a restart.
                let judged = finish(&kctx, &self.client, &mut logs, self.values, &name, &job).await;
                self.tell();
                let mut applied = judged?;
                applied.id = Some(encode(&self.recorded));
                let list: Vec<Value> = self.attempts.iter().map(Attempt::json).collect();
                applied.outputs.insert(ATTEMPTS.into(), Value::Array(list));
                return Ok(applied);
            }
            // The failed attempt's log, for the step log and its tail
            // (one that never ran has none to wait for).
            if job.started_at().is_some()
                && let Err(e) = logs
                    .settle_until(
                        &self.client,
                        &job,
                        |t: &str| !t.is_empty(),
                        self.ctx.reporter.as_ref(),
                        &self.ctx.cancel,
                    )
                    .await
            {
                self.ctx
                    .reporter
                    .log(&format!("logs not read: {}", e.message));
            }
            let (failed_nodes, suspects) = self.nodes_named(&job, logs.text()).await?;
            let attempt = Attempt {
                number: n,
                job: name.clone(),
                job_id: id.clone(),
                status: match &hung {
                    Some(_) => "HUNG".into(),
                    None => status(&job).to_string(),
                },
                cause: Some(match &hung {
                    Some(why) => why.clone(),
                    None => job
                        .status_reason()
                        .filter(|r| !r.is_empty())
                        .unwrap_or("no reason given")
                        .to_string(),
                }),
                failed_nodes,
                suspects,
                resumed_from,
                earlier: None,
            };
            self.ctx
                .reporter
                .event(&format!("attempt {n}: {}", attempt.line()));
            self.recorded[at].line = Some(attempt.line());
            self.attempts.push(attempt);
            if n > self.spec.restarts {
                self.record().await?;
                self.tell();
                let tail = logs.tail(5);
                return Err(ProviderError::fatal(format!(
                    "job `{}` failed on every attempt ({} of {}): {}{}",
                    self.base,
                    self.attempts.len(),
                    self.spec.restarts + 1,
                    every(&self.attempts),
                    match tail.is_empty() {
                        true => String::new(),
                        false => format!(" — last lines: {tail}"),
                    }
                ))
                .with_help("each attempt's logs are in the step's log (`flow logs FILE STEP`); `flow runs FILE` lists the attempts"));
            }
            // Durable before the next SubmitJob: this attempt's line, and
            // the next as being submitted, with its checkpoint.
            let resumed_from = self.newest_checkpoint(n + 1).await?;
            self.recorded.push(Recorded {
                resumed_from,
                ..Recorded::default()
            });
            self.record().await?;
            n += 1;
        }
    }
}

/// Runs the step's job with restarts, from the attempts `known` (the
/// step's recorded id) records.
pub(super) async fn drive(
    ctx: &OpContext,
    values: &Values,
    spec: &Spec,
    known: Option<&str>,
) -> Result<Applied, ProviderError> {
    matchers(values)?;
    let mut driver = Driver {
        ctx,
        values,
        spec,
        client: client(ctx).await?,
        config: config::sdk_config(ctx).await?,
        base: inputs::req_str(values, "job_name")?,
        queue: inputs::req_str(values, "job_queue")?,
        recorded: known.map(decode).unwrap_or_default(),
        attempts: Vec::new(),
        keep: Arc::new(Keep::new(ctx.reporter.clone())),
    };
    driver.drive().await
}

/// The read of a job with restarts (after a kill -9): the attempt in
/// flight followed on; for destroy, the last attempt's job as it stands;
/// an id whose every attempt ended failed reads as failed.
pub(super) async fn read(
    ctx: &OpContext,
    values: &Values,
    spec: &Spec,
    id: Option<&str>,
) -> Result<ReadOutcome, ProviderError> {
    let recorded = id.map(decode).unwrap_or_default();
    if ctx.destroying {
        let Some(last) = recorded.iter().rev().find_map(|r| r.job_id.clone()) else {
            return Ok(ReadOutcome::Missing);
        };
        let client = client(ctx).await?;
        return Ok(match describe(&client, &last).await? {
            Some(_) => ReadOutcome::Present(Applied {
                id: id.map(str::to_string),
                outputs: Default::default(),
                private: Value::Null,
            }),
            None => ReadOutcome::Missing,
        });
    }
    let spent =
        recorded.len() > spec.restarts as usize && recorded.iter().all(|r| r.line.is_some());
    if spent {
        return Ok(ReadOutcome::Failed {
            id: id.map(str::to_string),
            reason: format!(
                "every attempt failed: {}",
                recorded
                    .iter()
                    .filter_map(|r| r.line.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    match drive(ctx, values, spec, id).await {
        Ok(applied) => Ok(ReadOutcome::Present(applied)),
        Err(e) if e.is_retryable() => Err(e),
        Err(e) => Ok(ReadOutcome::Failed {
            id: id.map(str::to_string),
            reason: e.message,
        }),
    }
}

/// The id of the last attempt's job a restarting step's id records, for
/// refresh and delete.
pub(super) fn last_job(id: &str) -> Option<String> {
    decode(id).into_iter().rev().find_map(|r| r.job_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn each_attempt_is_told_its_number_and_checkpoint() {
        let v = values(
            json!({"job_name": "t", "environment": {"A": "1"}, "restarts": 2,
            "checkpoint_s3": "s3://b/ck"}),
        );
        let spec = Spec::from_values(&v).unwrap().unwrap();
        let a = attempt_values(&v, &spec, 2, Some("s3://b/ck/epoch-3.pt"));
        assert_eq!(
            a["environment"],
            json!({"A": "1", "FLOW_ATTEMPT": "2", "FLOW_CHECKPOINT_DIR": "s3://b/ck/",
                "FLOW_RESUME_FROM": "s3://b/ck/epoch-3.pt"})
        );
        assert_eq!(
            instance_in("Host EC2 (instance i-0abc12) terminated."),
            Some("i-0abc12")
        );
        assert_eq!(instance_in("Essential container in task exited"), None);
        assert_eq!(last_job("j-1!x,j-2@s3://b/ck/e"), Some("j-2".into()));
    }
}
