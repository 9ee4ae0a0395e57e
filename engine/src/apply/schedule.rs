//! Run steps in dependency order, as many at once as allowed. A failure stops
//! only what depends on it; an interrupt starts nothing new and lets running
//! steps finish (a second interrupt abandons them, their intents stay durable).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::context::RunContext;
use super::events::{Event, Failure, Outcome};
use super::job::StepJob;
use super::step::run_step;
use crate::dag::Dag;

/// How a run ended, step by step.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Each step's outcome and duration, in the order they ended.
    pub steps: Vec<(String, Outcome, Duration)>,
    /// Whether the run was interrupted.
    pub interrupted: bool,
    /// Retries made.
    pub retries: u32,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// Steps whose outcome matches `pred`.
    pub fn count(&self, pred: impl Fn(&Outcome) -> bool) -> usize {
        self.steps.iter().filter(|(_, o, _)| pred(o)).count()
    }

    /// Whether any step failed.
    pub fn failed(&self) -> bool {
        self.count(|o| matches!(o, Outcome::Failed(_))) > 0
    }
}

/// What ends a run early.
pub trait Interrupts: Send {
    /// Resolves on the next interrupt.
    fn next(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

/// Ctrl-C (SIGINT) and SIGTERM, listened to from creation on.
pub struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Listen for SIGINT and SIGTERM (needs a running tokio runtime).
    pub fn new() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}

async fn recv_or_never(sig: Option<&mut tokio::signal::unix::Signal>) {
    match sig {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

impl Interrupts for Signals {
    fn next(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            tokio::select! {
                _ = recv_or_never(self.int.as_mut()) => {}
                _ = recv_or_never(self.term.as_mut()) => {}
            }
        })
    }
}

/// Run `jobs` over `dag` (edges among job names) with at most `parallelism`
/// steps at once.
pub async fn run_all(
    ctx: Arc<RunContext>,
    jobs: Vec<StepJob>,
    dag: &Dag,
    parallelism: usize,
    timeouts: &BTreeMap<String, Duration>,
    interrupts: &mut dyn Interrupts,
) -> Report {
    let started = Instant::now();
    let mut report = Report::default();
    // Boxed: a job is large, and the map moves its values as it changes,
    // and the step's task would carry the job inline.
    let mut jobs: BTreeMap<String, Box<StepJob>> = jobs
        .into_iter()
        .map(|j| (j.change.step.clone(), Box::new(j)))
        .collect();
    let mut waiting_on: BTreeMap<String, usize> = jobs
        .keys()
        .map(|n| {
            (
                n.clone(),
                dag.needs(n)
                    .iter()
                    .filter(|d| jobs.contains_key(**d))
                    .count(),
            )
        })
        .collect();
    let mut ready: BTreeSet<String> = waiting_on
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(k, _)| k.clone())
        .collect();
    let mut running: JoinSet<(String, Outcome, Duration)> = JoinSet::new();
    let mut stopping = false;
    let parallelism = parallelism.max(1);
    loop {
        while !stopping && running.len() < parallelism {
            let Some(name) = ready.pop_first() else { break };
            let job = jobs.remove(&name).expect("ready job exists");
            ctx.sink().emit(Event::Started {
                step: name.clone(),
                action: job.change.action,
            });
            let ctx = ctx.clone();
            let timeout = timeouts.get(&name).copied();
            running.spawn(async move {
                let t0 = Instant::now();
                let outcome = run_step(ctx, job, timeout).await;
                (name, outcome, t0.elapsed())
            });
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { continue };
                let (name, outcome, elapsed) = match joined {
                    Ok(r) => r,
                    Err(e) => (String::from("?"), Outcome::Failed(Failure::bare(format!("step panicked: {e}"))), Duration::ZERO),
                };
                let ok = matches!(outcome, Outcome::Done(_) | Outcome::Unchanged);
                ctx.sink().emit(Event::Finished { step: name.clone(), outcome: outcome.clone(), elapsed });
                report.steps.push((name.clone(), outcome, elapsed));
                if ok {
                    for next in dag.needed_by(&name) {
                        if let Some(n) = waiting_on.get_mut(next) {
                            *n -= 1;
                            if *n == 0 && jobs.contains_key(next) {
                                ready.insert(next.to_string());
                            }
                        }
                    }
                } else {
                    skip_dependents(&ctx, dag, &name, &mut jobs, &mut ready, &mut report);
                }
            }
            _ = interrupts.next() => {
                if stopping {
                    running.abort_all();
                    while running.join_next().await.is_some() {}
                    report.interrupted = true;
                    break;
                }
                stopping = true;
                report.interrupted = true;
                ctx.interrupt();
                ctx.sink().emit(Event::Interrupted { running: running.len() });
            }
        }
    }
    for (name, _) in std::mem::take(&mut jobs) {
        report
            .steps
            .push((name, Outcome::NotStarted, Duration::ZERO));
    }
    report.retries = ctx.retries();
    report.elapsed = started.elapsed();
    report
}

fn skip_dependents(
    ctx: &RunContext,
    dag: &Dag,
    failed: &str,
    jobs: &mut BTreeMap<String, Box<StepJob>>,
    ready: &mut BTreeSet<String>,
    report: &mut Report,
) {
    let below = dag.with_descendants(&[failed.to_string()]);
    for name in below.into_iter().filter(|n| n != failed) {
        if jobs.remove(&name).is_some() {
            ready.remove(&name);
            let why = format!("`{failed}` did not complete");
            ctx.sink().emit(Event::Finished {
                step: name.clone(),
                outcome: Outcome::Skipped(why.clone()),
                elapsed: Duration::ZERO,
            });
            report
                .steps
                .push((name, Outcome::Skipped(why), Duration::ZERO));
        }
    }
}
