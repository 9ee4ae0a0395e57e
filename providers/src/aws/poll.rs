//! Waiting for long AWS operations: poll with growing delays, report
//! progress only when it changes, give up after a limit.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::pacing;
use crate::contract::{ProviderError, Reporter};

/// What one look at a long operation found.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// Finished with this result.
    Done(T),
    /// Still going; these lines are new progress to report (may be empty).
    Pending(Vec<String>),
}

/// How a wait paces itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// The first delay.
    pub first: Duration,
    /// No delay is longer than this.
    pub max: Duration,
    /// Give up after this long (the step's `timeout` usually ends it sooner;
    /// see [`Pace::within`]).
    pub limit: Duration,
    /// How the delays are chosen.
    pub rhythm: Rhythm,
    /// When the operation was asked for, if this wait follows the call that
    /// started it: the expected length counts from there, as the service's
    /// does, not from the answer (`None`: from the wait's start).
    pub since: Option<Instant>,
}

/// How the delays of a wait are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rhythm {
    /// From `first`, half as long again each time, at most `max`: for waits
    /// that settle in seconds (Kubernetes objects). Scaled by
    /// `FLOW_TIME_SCALE` too, so that under a test cloud's scaled clock a
    /// Kubernetes job is looked at as often, in its time, as on a cluster.
    Growing,
    /// A cloud operation of the expected length (`None`: unknown), paced by
    /// [`pacing::next_delay`] and scaled by `FLOW_TIME_SCALE`.
    Cloud(Option<Duration>),
}

impl Pace {
    /// Pacing for cloud operations that take minutes, of unknown length.
    pub const LONG: Pace = Pace {
        first: pacing::FIRST,
        max: pacing::BUDGET,
        limit: Duration::from_secs(6 * 3600),
        rhythm: Rhythm::Cloud(None),
        since: None,
    };

    /// Pacing for a cloud operation that usually lasts `expected`
    /// ([`pacing::expected`]).
    pub const fn expecting(expected: Duration) -> Pace {
        Pace {
            rhythm: Rhythm::Cloud(Some(expected)),
            ..Pace::LONG
        }
    }

    /// The same pace, giving up no sooner than the step's `timeout`.
    pub fn within(self, timeout: Option<Duration>) -> Pace {
        Pace {
            limit: timeout.map_or(self.limit, |t| self.limit.max(t)),
            ..self
        }
    }

    /// The same pace, counting the operation's length from `sent`, when the
    /// call that started it went out (`None`: this wait did not send it,
    /// and counts from its own start).
    pub fn since(self, sent: Option<Instant>) -> Pace {
        Pace {
            since: sent.or(self.since),
            ..self
        }
    }

    /// The factor this wait's delays are scaled by.
    fn scale(&self) -> f64 {
        pacing::time_scale()
    }

    /// The delay after `last` (zero before the first), `elapsed` (unscaled)
    /// into the wait, `looks` looks made so far.
    pub fn next(&self, elapsed: Duration, last: Duration, looks: u32) -> Duration {
        match self.rhythm {
            Rhythm::Growing if last.is_zero() => self.first,
            Rhythm::Growing => (last + last / 2).min(self.max),
            Rhythm::Cloud(expected) => pacing::next_delay(expected, elapsed, last, looks),
        }
    }
}

/// How many looks in a row may fail with a retryable error before the wait fails.
const MAX_FAILED_LOOKS: u32 = 8;

/// Reports progress lines, each only when it differs from the one before.
pub(crate) struct Progress<'a> {
    reporter: &'a dyn Reporter,
    last: Option<String>,
}

impl<'a> Progress<'a> {
    /// Progress going to `reporter`.
    pub fn new(reporter: &'a dyn Reporter) -> Self {
        Progress {
            reporter,
            last: None,
        }
    }

    /// Shows `line` as an event (and logs it) unless it repeats the last one.
    pub fn show(&mut self, line: &str) {
        if self.last.as_deref() == Some(line) {
            return;
        }
        self.reporter.event(line);
        self.reporter.log(line);
        self.last = Some(line.to_string());
    }
}

/// The pacing and bookkeeping of one wait, for loops that keep their own
/// state between looks: report progress, tolerate a few failed looks, pause.
pub(crate) struct Waiter<'a> {
    pace: Pace,
    what: String,
    start: Instant,
    last: Duration,
    /// Looks made so far (each pause comes after one).
    looks: u32,
    failed_looks: u32,
    /// Progress lines shown so far, deduplicated.
    pub progress: Progress<'a>,
    reporter: &'a dyn Reporter,
}

impl<'a> Waiter<'a> {
    /// A wait for `what` (`"stack \`vpc\`"`), reporting to `reporter`.
    pub fn new(pace: Pace, reporter: &'a dyn Reporter, what: impl Into<String>) -> Self {
        Waiter {
            pace,
            what: what.into(),
            start: pace.since.unwrap_or_else(Instant::now),
            last: Duration::ZERO,
            looks: 0,
            failed_looks: 0,
            progress: Progress::new(reporter),
            reporter,
        }
    }

    /// Shows each line that differs from the one before it.
    pub fn report(&mut self, lines: impl IntoIterator<Item = String>) {
        for line in lines {
            self.progress.show(&line);
        }
    }

    /// Notes a look that succeeded (failed looks count again from zero).
    pub fn looked(&mut self) {
        self.failed_looks = 0;
    }

    /// Accepts a failed look when it is retryable and not one too many;
    /// otherwise returns the error.
    pub fn tolerate(&mut self, e: ProviderError) -> Result<(), ProviderError> {
        if e.is_retryable() && self.failed_looks < MAX_FAILED_LOOKS {
            self.failed_looks += 1;
            self.reporter.log(&format!(
                "while waiting for {}: {} (will look again)",
                self.what, e.message
            ));
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Sleeps before the next look, as the pace says; fails once the wait
    /// would outlast its limit (real time, never scaled).
    pub async fn pause(&mut self) -> Result<(), ProviderError> {
        let scale = self.pace.scale();
        let elapsed = self.start.elapsed();
        self.looks += 1;
        let delay = self
            .pace
            .next(pacing::unscaled(elapsed, scale), self.last, self.looks);
        let sleep = pacing::scaled(delay, scale);
        if elapsed + sleep > self.pace.limit {
            return Err(ProviderError::fatal(format!(
                "gave up waiting for {} after {}s; it may still finish: the next apply looks again",
                self.what,
                elapsed.as_secs()
            )));
        }
        tokio::time::sleep(sleep).await;
        self.last = delay;
        Ok(())
    }
}

/// Looks at an operation with `look` until it is done, waiting longer between
/// looks, reporting each new progress line. A look that fails retryably
/// (throttling, a 5xx) is repeated after the next delay; `what` names the
/// operation in the error when the wait gives up.
pub(crate) async fn until<T, F, Fut>(
    pace: Pace,
    reporter: &dyn Reporter,
    what: &str,
    mut look: F,
) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step<T>, ProviderError>>,
{
    let mut waiter = Waiter::new(pace, reporter, what);
    loop {
        match look().await {
            Ok(Step::Done(value)) => return Ok(value),
            Ok(Step::Pending(lines)) => {
                waiter.looked();
                waiter.report(lines);
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RecordingReporter;

    const FAST: Pace = Pace {
        first: Duration::from_millis(1),
        max: Duration::from_millis(4),
        limit: Duration::from_secs(5),
        rhythm: Rhythm::Growing,
        since: None,
    };

    #[tokio::test]
    async fn reports_only_changes_and_returns_the_result() {
        let reporter = RecordingReporter::default();
        let mut n = 0;
        let statuses = ["SUBMITTED", "SUBMITTED", "RUNNABLE", "RUNNING", "RUNNING"];
        let done = until(FAST, &reporter, "job", || {
            n += 1;
            let i = n - 1;
            async move {
                Ok(match statuses.get(i) {
                    Some(s) => Step::Pending(vec![format!("job is {s}")]),
                    None => Step::Done(i),
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(done, 5);
        assert_eq!(
            reporter.events(),
            ["job is SUBMITTED", "job is RUNNABLE", "job is RUNNING"]
        );
    }

    #[tokio::test]
    async fn retryable_failures_are_looked_past_fatal_ones_are_not() {
        let reporter = RecordingReporter::default();
        let mut n = 0;
        let got = until(FAST, &reporter, "stack", || {
            n += 1;
            let k = n;
            async move {
                if k < 3 {
                    Err(ProviderError::retryable("Rate exceeded"))
                } else {
                    Ok(Step::Done(k))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
        assert_eq!(reporter.logs().len(), 2);
        let err = until(FAST, &reporter, "stack", || async {
            Err::<Step<()>, _>(ProviderError::fatal("gone"))
        })
        .await
        .unwrap_err();
        assert_eq!(err.message, "gone");
    }

    #[tokio::test]
    async fn gives_up_after_the_limit() {
        let reporter = RecordingReporter::default();
        let pace = Pace {
            limit: Duration::from_millis(20),
            ..FAST
        };
        let err = until(pace, &reporter, "file system fs-1", || async {
            Ok::<Step<()>, ProviderError>(Step::Pending(vec![]))
        })
        .await
        .unwrap_err();
        assert!(
            err.message.contains("gave up waiting for file system fs-1"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn a_wait_since_its_call_counts_from_the_call() {
        let reporter = RecordingReporter::default();
        let pace = Pace {
            limit: Duration::from_millis(200),
            ..FAST
        };
        let mut looks = 0;
        // Asked for a second ago: the limit is already past after one look.
        let sent = Instant::now() - Duration::from_secs(1);
        let err = until(pace.since(Some(sent)), &reporter, "cluster c", || {
            looks += 1;
            async { Ok::<Step<()>, ProviderError>(Step::Pending(vec![])) }
        })
        .await
        .unwrap_err();
        assert_eq!(looks, 1, "{}", err.message);
        assert!(err.message.contains("after 1s"), "{}", err.message);
        // From the wait's own start, the same pace looks many times first.
        looks = 0;
        until(pace, &reporter, "cluster c", || {
            looks += 1;
            async { Ok::<Step<()>, ProviderError>(Step::Pending(vec![])) }
        })
        .await
        .unwrap_err();
        assert!(looks > 10, "{looks} looks");
    }
}
