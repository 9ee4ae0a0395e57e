//! Following one attempt's job of a `batch.job` with restarts to its end,
//! and finding it hung: no new line in its log (the main node's stream,
//! for a multi-node job) for `hang_after`, or no new loss, as the step's
//! `parse` reads losses, for `hang_without_loss`
//! ([`crate::fleet::loss_watch`]). The clocks start when the job is
//! RUNNING. A hung job is left running here: the driver records why
//! before it terminates it ([`stop`]).

use std::time::{Duration, Instant};

use aws_sdk_batch::types::JobDetail;

use super::super::super::batch_logs::JobLogs;
use super::super::run::{describe, finished, run_to_end, status, terminate};
use super::Spec;
use crate::contract::{OpContext, ProviderError};
use crate::fleet::loss_watch::LossWatch;

/// How often a job with a hang rule is looked at: a quarter of the
/// shortest rule, between 1 and 15 seconds.
fn pause_for(spec: &Spec) -> Duration {
    let shortest = [
        spec.bounds.hang_after,
        spec.bounds.no_loss.as_ref().map(|(d, _)| *d),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(Duration::from_secs(60));
    (shortest / 4).clamp(Duration::from_secs(1), Duration::from_secs(15))
}

/// Follows job `id` (called `name`) to its end, or until it is hung:
/// the job, and why it is hung if it is.
pub(super) async fn follow(
    ctx: &OpContext,
    client: &aws_sdk_batch::Client,
    logs: &mut JobLogs,
    spec: &Spec,
    name: &str,
    id: &str,
) -> Result<(JobDetail, Option<String>), ProviderError> {
    if spec.bounds.hang_after.is_none() && spec.bounds.no_loss.is_none() {
        return Ok((run_to_end(ctx, client, logs, name, id).await?, None));
    }
    let what = format!("job `{name}` ({id})");
    let pause = pause_for(spec);
    let mut watch = spec
        .bounds
        .no_loss
        .as_ref()
        .map(|(d, p)| LossWatch::new(*d, *p));
    let mut shown = String::new();
    let mut last_news: Option<Instant> = None;
    let mut errors = 0;
    loop {
        match describe(client, id).await {
            Ok(Some(job)) => {
                errors = 0;
                let st = status(&job).to_string();
                if st != shown {
                    let reason = job
                        .status_reason()
                        .filter(|r| !r.is_empty() && finished(&st));
                    ctx.reporter.event(&match reason {
                        Some(r) => format!("{what}: {st} ({r})"),
                        None => format!("{what}: {st}"),
                    });
                    shown = st.clone();
                }
                if finished(&st) {
                    return Ok((job, None));
                }
                if st == "RUNNING" {
                    let now = Instant::now();
                    logs.locate(client, &job).await;
                    let before = logs.text().len();
                    if let Err(e) = logs.poll(ctx.reporter.as_ref()).await {
                        ctx.reporter
                            .log(&format!("logs not read this time: {}", e.message));
                    }
                    if last_news.is_none() || logs.text().len() > before {
                        last_news = Some(now);
                    }
                    if let Some(w) = watch.as_mut() {
                        w.look(logs.text(), now);
                    }
                    let quiet = last_news.map_or(Duration::ZERO, |t| now.duration_since(t));
                    let why = match (spec.bounds.hang_after, &watch) {
                        (Some(limit), _) if quiet >= limit => Some(format!(
                            "no new line in its log for {}",
                            spec.bounds.hang_text
                        )),
                        (_, Some(w)) if w.stalled(now) => {
                            Some(w.why(&humantime::format_duration(w.limit).to_string()))
                        }
                        _ => None,
                    };
                    if let Some(why) = why {
                        ctx.reporter.event(&format!("{what} is hung: {why}"));
                        return Ok((job, Some(why)));
                    }
                }
            }
            Ok(None) => {
                return Err(ProviderError::fatal(format!(
                    "{what} is no longer known to Batch"
                )));
            }
            Err(e) if e.is_retryable() && errors < 5 => errors += 1,
            Err(e) => return Err(e),
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = ctx.cancel.cancelled() => {
                ctx.reporter.event(&format!("{what}: terminating (the run was interrupted)"));
                terminate(client, id, "interrupted from flow").await?;
                return Err(ProviderError::fatal(format!("{what} was terminated because the run was interrupted")));
            }
        }
    }
}

/// Terminates hung job `id` (`why` it is hung) and waits for Batch to
/// end it; the ended job. One that ended already is left as it is.
pub(super) async fn stop(
    ctx: &OpContext,
    client: &aws_sdk_batch::Client,
    id: &str,
    why: &str,
) -> Result<JobDetail, ProviderError> {
    let start = Instant::now();
    let mut asked = false;
    loop {
        match describe(client, id).await? {
            Some(job) if finished(status(&job)) => return Ok(job),
            Some(_) if !asked => {
                terminate(client, id, &format!("flow: hung: {why}")).await?;
                ctx.reporter
                    .event(&format!("job {id}: terminated (hung: {why})"));
                asked = true;
            }
            Some(_) => {}
            None => {
                return Err(ProviderError::fatal(format!(
                    "job {id} is no longer known to Batch"
                )));
            }
        }
        if start.elapsed() > Duration::from_secs(600) {
            return Err(ProviderError::retryable(format!(
                "job {id} was terminated as hung and is not ended yet"
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn a_job_with_a_hang_rule_is_looked_at_often_enough() {
        let spec = |v| Spec::from_values(&values(v)).unwrap().unwrap();
        assert_eq!(
            pause_for(&spec(json!({"restarts": 1, "hang_after": "8s"}))),
            Duration::from_secs(2)
        );
        assert_eq!(
            pause_for(&spec(json!({"restarts": 1, "hang_after": "2h"}))),
            Duration::from_secs(15)
        );
        assert_eq!(
            pause_for(&spec(json!({"restarts": 1, "hang_after": "2s"}))),
            Duration::from_secs(1)
        );
    }
}
