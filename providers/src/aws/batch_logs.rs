//! A Batch job's logs in CloudWatch Logs: which stream holds them (the
//! job's container, or the main node's for a multi-node job), followed
//! while the job runs, and read to the end once it stops. Log events reach
//! CloudWatch a few seconds after the container writes them, so the end
//! waits (up to [`LOG_GRACE`]) for what the step's `success_pattern` and
//! `capture` need before judging the logs.

use std::time::{Duration, Instant};

use aws_sdk_batch::types::JobDetail;
use aws_sdk_cloudwatchlogs::Client;
use aws_types::SdkConfig;

use super::error;
use crate::capture::Matchers;
use crate::contract::{Cancel, ProviderError, Reporter};

/// The log group Batch writes to unless a job definition names another.
pub const DEFAULT_GROUP: &str = "/aws/batch/job";

/// How long after the job stops its first log lines may take to arrive.
const LOG_GRACE: Duration = Duration::from_secs(60);

/// Once lines have arrived, how long without new ones ends the wait.
const LOG_QUIET: Duration = Duration::from_secs(10);

/// How often the end re-reads while it waits for the logs.
const SETTLE_PAUSE: Duration = Duration::from_millis(500);

/// At most one log line a second is shown live (all go to the step log).
const LIVE_EVERY: Duration = Duration::from_secs(1);

/// The logs of one job, read as they come.
pub struct JobLogs {
    client: Client,
    group: String,
    stream: Option<String>,
    next: Option<String>,
    text: String,
    last_live: Option<Instant>,
}

impl JobLogs {
    /// Logs in `group`, the stream not known yet.
    pub fn new(config: &SdkConfig, group: String) -> JobLogs {
        JobLogs {
            client: Client::new(config),
            group,
            stream: None,
            next: None,
            text: String::new(),
            last_live: None,
        }
    }

    /// The stream, once Batch has named it.
    pub fn stream(&self) -> Option<&str> {
        self.stream.as_deref()
    }

    /// Everything read so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The last `n` lines read, joined with ` | ` for an error message.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..].join(" | ")
    }

    /// Finds the stream of `job` if not known yet: the container's, else
    /// (multi-node jobs) the main node's, else the latest attempt's.
    pub async fn locate(&mut self, batch: &aws_sdk_batch::Client, job: &JobDetail) {
        if self.stream.is_some() {
            return;
        }
        self.stream = stream_of(job);
        if self.stream.is_some() {
            return;
        }
        let (Some(id), Some(nodes)) = (job.job_id(), job.node_properties()) else {
            return;
        };
        let main = format!("{id}#{}", nodes.main_node().unwrap_or(0));
        if let Ok(out) = batch.describe_jobs().jobs(&main).send().await {
            self.stream = out.jobs().first().and_then(stream_of);
        }
    }

    /// Reads the events written since the last read: each line goes to the
    /// step log, some are shown live. A stream that does not exist yet
    /// reads as empty.
    pub async fn poll(&mut self, reporter: &dyn Reporter) -> Result<(), ProviderError> {
        let Some(stream) = self.stream.clone() else {
            return Ok(());
        };
        loop {
            let out = match self
                .client
                .get_log_events()
                .log_group_name(&self.group)
                .log_stream_name(&stream)
                .start_from_head(true)
                .set_next_token(self.next.clone())
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) if not_found(&e) => return Ok(()),
                Err(e) => {
                    return Err(error::aws(
                        &format!("read log stream `{}` `{stream}`", self.group),
                        e,
                    ));
                }
            };
            for line in out
                .events()
                .iter()
                .filter_map(|e| e.message())
                .flat_map(str::lines)
            {
                self.text.push_str(line);
                self.text.push('\n');
                reporter.log(&format!("[{stream}] {line}"));
                if self.last_live.is_none_or(|t| t.elapsed() >= LIVE_EVERY) {
                    reporter.event(line);
                    self.last_live = Some(Instant::now());
                }
            }
            let next = out.next_forward_token().map(str::to_string);
            let done = out.events().is_empty() || next == self.next;
            self.next = next;
            if done {
                return Ok(());
            }
        }
    }

    /// Reads the logs of a job that stopped: until `matchers` are satisfied,
    /// or once when nothing is asked of them. Late events are waited for up
    /// to [`LOG_GRACE`] while none has come, and [`LOG_QUIET`] after the last
    /// one. Errors reading are tolerated while time is left.
    pub async fn settle(
        &mut self,
        batch: &aws_sdk_batch::Client,
        job: &JobDetail,
        matchers: &Matchers,
        reporter: &dyn Reporter,
        cancel: &Cancel,
    ) -> Result<(), ProviderError> {
        let done = |text: &str| matchers.is_empty() || matchers.satisfied(text);
        self.settle_until(batch, job, done, reporter, cancel).await
    }

    /// [`JobLogs::settle`] until `done` says the text read is enough (a
    /// node check's output that its rules can read).
    pub async fn settle_until(
        &mut self,
        batch: &aws_sdk_batch::Client,
        job: &JobDetail,
        done: impl Fn(&str) -> bool,
        reporter: &dyn Reporter,
        cancel: &Cancel,
    ) -> Result<(), ProviderError> {
        let start = Instant::now();
        let mut last_news = start;
        loop {
            self.locate(batch, job).await;
            let before = self.text.len();
            let read = self.poll(reporter).await;
            if self.text.len() > before {
                last_news = Instant::now();
            }
            if done(&self.text) {
                return read;
            }
            let waited_enough = if self.text.is_empty() {
                start.elapsed() >= LOG_GRACE
            } else {
                last_news.elapsed() >= LOG_QUIET
            };
            if waited_enough {
                return read;
            }
            if cancel.is_cancelled() {
                return Ok(());
            }
            tokio::time::sleep(SETTLE_PAUSE).await;
        }
    }
}

/// The stream a job detail names, if any.
fn stream_of(job: &JobDetail) -> Option<String> {
    let named = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    named(job.container().and_then(|c| c.log_stream_name())).or_else(|| {
        job.attempts()
            .iter()
            .rev()
            .find_map(|a| named(a.container().and_then(|c| c.log_stream_name())))
    })
}

/// Whether CloudWatch says the group or stream does not exist (yet).
fn not_found<E>(e: &aws_sdk_cloudwatchlogs::error::SdkError<E>) -> bool
where
    E: aws_sdk_cloudwatchlogs::error::ProvideErrorMetadata,
{
    e.as_service_error()
        .and_then(|s| s.code())
        .is_some_and(|c| c == "ResourceNotFoundException")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_batch::types::{AttemptContainerDetail, AttemptDetail, ContainerDetail};

    #[test]
    fn the_stream_is_the_containers_else_the_latest_attempts() {
        let job = JobDetail::builder()
            .container(
                ContainerDetail::builder()
                    .log_stream_name("def/default/1")
                    .build(),
            )
            .build();
        assert_eq!(stream_of(&job).as_deref(), Some("def/default/1"));
        let job = JobDetail::builder()
            .container(ContainerDetail::builder().log_stream_name("").build())
            .attempts(
                AttemptDetail::builder()
                    .container(
                        AttemptContainerDetail::builder()
                            .log_stream_name("a")
                            .build(),
                    )
                    .build(),
            )
            .attempts(
                AttemptDetail::builder()
                    .container(
                        AttemptContainerDetail::builder()
                            .log_stream_name("b")
                            .build(),
                    )
                    .build(),
            )
            .build();
        assert_eq!(stream_of(&job).as_deref(), Some("b"));
        assert_eq!(stream_of(&JobDetail::builder().build()), None);
    }
}
