//! One Slurm job followed to its end: its state polled every second (so a
//! finished job is noticed within about a second), its output files
//! streamed into the step's log, `scancel` when the run is interrupted, and
//! the verdict: Slurm's state and exit code first, then `success_pattern`
//! and `capture` on what the job printed.

use std::time::Duration;

use serde_json::Value;

use super::control::{self, JobLine};
use super::output::Output;
use super::output_path::OutputPattern;
use super::remote::Remote;
use crate::capture::Matchers;
use crate::contract::{Applied, OpContext, ProviderError, Values};
use crate::fleet::loss_watch::LossWatch;

/// How often the job's state is asked for.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// Consecutive failed polls tolerated (a controller restarting) before the
/// step fails.
const TOLERATED: u32 = 30;

/// A job as last seen: its lines (one per array task or range).
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The job's id (an array's id for array jobs).
    pub id: String,
    /// What the controller or accounting said.
    pub lines: Vec<JobLine>,
}

impl Seen {
    /// Whether every task has ended.
    pub fn finished(&self) -> bool {
        !self.lines.is_empty() && self.lines.iter().all(|l| control::finished(l.state()))
    }

    /// Whether every task completed with exit code 0.
    pub fn succeeded(&self) -> bool {
        self.finished()
            && self
                .lines
                .iter()
                .all(|l| l.state() == "COMPLETED" && l.exit_code() == "0:0")
    }

    /// One state for the whole job: the first task's that did not complete,
    /// else the first's.
    pub fn state(&self) -> &str {
        self.lines
            .iter()
            .find(|l| l.state() != "COMPLETED")
            .or(self.lines.first())
            .map_or("UNKNOWN", JobLine::state)
    }

    /// The first task that did not complete with exit code 0.
    pub fn first_failed(&self) -> Option<&JobLine> {
        self.lines
            .iter()
            .find(|l| l.state() != "COMPLETED" || l.exit_code() != "0:0")
    }

    /// How the job ended, for a message: its first failed task's state,
    /// exit code and what the state means, else the job's state.
    pub fn ending(&self) -> String {
        match self.first_failed() {
            Some(l) => format!(
                "ended {}, exit code {}: {}",
                l.state(),
                l.exit_code(),
                control::meaning(l.state())
            ),
            None => format!("ended {}", self.state()),
        }
    }

    /// Gives every line that names no output file (a line accounting
    /// gave) the one `pattern` works out.
    pub fn fill_output(&mut self, pattern: &OutputPattern) {
        for line in &mut self.lines {
            if line.get("StdOut").is_none()
                && let Some(path) = pattern.expand(line)
            {
                line.set("StdOut", path);
            }
        }
    }

    /// The output files to follow, by task label.
    pub fn output_files(&self) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = self
            .lines
            .iter()
            .filter_map(|l| Some((l.label(), l.get("StdOut")?.to_string())))
            .filter(|(_, path)| !path.contains('%'))
            .collect();
        files.sort();
        files.dedup_by(|a, b| a.1 == b.1);
        files
    }
}

/// The job `id` as Slurm knows it now: the controller's view, else
/// accounting's; `None` when neither knows it.
pub(crate) async fn look(remote: &Remote, id: &str) -> Result<Option<Seen>, ProviderError> {
    let lines = match control::show(remote, id).await? {
        Some(lines) if !lines.is_empty() => Some(lines),
        _ => control::accounted(remote, id).await?,
    };
    Ok(lines.map(|lines| Seen {
        id: id.to_string(),
        lines,
    }))
}

/// Follows job `id` (called `name`, writing where `pattern` says when only
/// accounting knows it) until it ends, streaming its output into `output`;
/// cancels it if the run is interrupted.
pub(crate) async fn run_to_end(
    ctx: &OpContext,
    remote: &Remote,
    output: &mut Output,
    name: &str,
    pattern: &OutputPattern,
    id: &str,
) -> Result<Seen, ProviderError> {
    let job = Followed {
        name,
        pattern,
        id,
        hang_after: None,
        no_loss: None,
        leave_cancel: false,
    };
    Ok(follow_watched(ctx, remote, output, &job).await?.seen)
}

/// A job to follow: its name, where it writes, its id, and how long it may
/// print nothing while it runs before it counts as hung.
pub(crate) struct Followed<'a> {
    /// The job's name, for messages.
    pub name: &'a str,
    /// Where it writes, when only accounting knows it.
    pub pattern: &'a OutputPattern,
    /// Its id.
    pub id: &'a str,
    /// No new output for this long while it runs: cancelled as hung.
    pub hang_after: Option<Duration>,
    /// No new loss (read by this program) for this long while it runs:
    /// cancelled as hung.
    pub no_loss: Option<(Duration, crate::metrics::Program)>,
    /// A job found hung is returned still running, its cancel left to the
    /// caller (which records why first); otherwise it is cancelled here.
    pub leave_cancel: bool,
}

/// How a followed job ended.
#[derive(Debug)]
pub(crate) struct Ended {
    /// As Slurm last told it.
    pub seen: Seen,
    /// Why flow cancelled it as hung (`no new output for 10m`), if it did.
    pub hung: Option<String>,
}

/// [`run_to_end`], and with `hang_after` a job that runs but prints no new
/// line for that long, or with `no_loss` one that logs no new loss for
/// that long, is cancelled (`scancel`) and followed to its end.
pub(crate) async fn follow_watched(
    ctx: &OpContext,
    remote: &Remote,
    output: &mut Output,
    job: &Followed<'_>,
) -> Result<Ended, ProviderError> {
    let (name, pattern, id) = (job.name, job.pattern, job.id);
    let what = format!("job `{name}` ({id})");
    let mut last_state = String::new();
    let mut failures = 0;
    // Since when the running job has printed nothing new.
    let mut quiet_since: Option<std::time::Instant> = None;
    let mut hung: Option<String> = None;
    let mut losses = job
        .no_loss
        .map(|(limit, program)| LossWatch::new(limit, program));
    loop {
        match look(remote, id).await {
            Ok(Some(mut seen)) => {
                seen.fill_output(pattern);
                failures = 0;
                let state = seen.state().to_string();
                if state != last_state {
                    let nodes = seen.lines.first().and_then(|l| l.get("NodeList"));
                    ctx.reporter.event(&match nodes {
                        Some(n) if state == "RUNNING" => format!("{what}: {state} on {n}"),
                        _ => format!("{what}: {state}"),
                    });
                    last_state = state;
                }
                let before = output.text().len();
                output
                    .poll(remote, &seen.output_files(), ctx.reporter.as_ref())
                    .await;
                if seen.finished() {
                    output.close(ctx.reporter.as_ref());
                    return Ok(Ended { seen, hung });
                }
                if seen.state() == "RUNNING" && hung.is_none() {
                    let now = std::time::Instant::now();
                    if output.text().len() > before {
                        quiet_since = Some(now);
                    }
                    let since = *quiet_since.get_or_insert(now);
                    if let Some(w) = losses.as_mut() {
                        w.look(output.text(), now);
                    }
                    let why = match (job.hang_after, &losses) {
                        (Some(limit), _) if now.duration_since(since) >= limit => Some(format!(
                            "no new output for {}",
                            humantime::format_duration(limit)
                        )),
                        (_, Some(w)) if w.stalled(now) => {
                            Some(w.why(&humantime::format_duration(w.limit).to_string()))
                        }
                        _ => None,
                    };
                    if let Some(why) = why {
                        if job.leave_cancel {
                            return Ok(Ended {
                                seen,
                                hung: Some(why),
                            });
                        }
                        ctx.reporter
                            .event(&format!("{what}: {why}: cancelling it as hung"));
                        control::cancel(remote, id).await?;
                        hung = Some(why);
                    }
                }
            }
            Ok(None) => {
                return Err(ProviderError::fatal(format!(
                    "{what} is no longer known to Slurm (neither the controller nor accounting lists it)"
                ))
                .with_help("the controller forgets finished jobs after MinJobAge (300 s by default) unless accounting (slurmdbd) keeps them; `flow apply --replace STEP` runs it again"));
            }
            Err(e) if e.is_retryable() && failures < TOLERATED => {
                failures += 1;
                ctx.reporter.log(&format!(
                    "could not read the job's state this time: {}",
                    e.message
                ));
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = ctx.cancel.cancelled() => {
                ctx.reporter.event(&format!("{what}: cancelling it (the run was interrupted)"));
                control::cancel(remote, id).await?;
                return Err(ProviderError::fatal(format!(
                    "{what} was cancelled because the run was interrupted"
                )));
            }
        }
    }
}

/// The step's verdict on a finished job: success with its outputs (and what
/// `capture` took and `parse` read, shown and told to `reporter` with the
/// gates' verdicts), or a failure naming Slurm's state, what it means, and
/// the last lines the job printed.
pub(crate) fn verdict(
    name: &str,
    seen: &Seen,
    output: &Output,
    matchers: &Matchers,
    reporter: &dyn crate::contract::Reporter,
) -> Result<Applied, ProviderError> {
    let what = format!("job `{name}` ({})", seen.id);
    let tail = || match output.tail(5) {
        t if t.is_empty() => String::new(),
        t => format!(" — last lines: {t}"),
    };
    if !seen.succeeded() {
        let bad = seen
            .first_failed()
            .expect("a job that did not succeed has a task that did not");
        let state = bad.state();
        let task = if seen.lines.len() > 1 {
            format!(" (task {})", bad.label())
        } else {
            String::new()
        };
        return Err(ProviderError::fatal(format!(
            "{what}{task} ended {state}, exit code {}: {}{}",
            bad.exit_code(),
            control::meaning(state),
            tail()
        ))
        .with_help(
            "the job's whole output is in the step's log (`flow logs FILE STEP`) and in its output file on the cluster",
        ));
    }
    let captured = matchers.judge(output.text(), reporter).map_err(|why| {
        let tail = if why.wants_tail() {
            tail()
        } else {
            String::new()
        };
        ProviderError::fatal(format!("{what}: {why}{tail}")).with_help(why.help())
    })?;
    Ok(applied(seen, captured))
}

/// The outputs every slurm.job step has ([`applied`] puts each in), before
/// what `capture` and `parse` take.
pub(crate) const OUTPUT_KEYS: [&str; 2] = ["job_id", "state"];

/// The outputs a job has only when the controller says them.
pub(crate) const SOMETIMES: [&str; 3] = ["exit_code", "nodes", "output_file"];

/// What state keeps of a job: its id and where it stands, plus `captured`.
pub(crate) fn applied(seen: &Seen, captured: Values) -> Applied {
    let mut outputs = captured;
    outputs.insert("job_id".into(), Value::String(seen.id.clone()));
    outputs.insert("state".into(), Value::String(seen.state().to_string()));
    if let Some(first) = seen.lines.first() {
        outputs.insert("exit_code".into(), Value::String(first.exit_code().into()));
        if let Some(nodes) = first.get("NodeList") {
            outputs.insert("nodes".into(), Value::String(nodes.to_string()));
        }
    }
    if let Some((_, path)) = seen.output_files().first() {
        outputs.insert("output_file".into(), Value::String(path.clone()));
    }
    Applied {
        id: Some(seen.id.clone()),
        outputs,
        private: Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::control::parse_jobs;
    use crate::testing::values;
    use serde_json::json;

    fn seen(text: &str) -> Seen {
        Seen {
            id: "8".into(),
            lines: parse_jobs(text),
        }
    }

    #[test]
    fn a_failed_state_is_named_with_its_meaning_and_the_tail() {
        let job = seen(
            "JobId=8 JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125 StdOut=/x/8.out",
        );
        let err = verdict(
            "train",
            &job,
            &Output::default(),
            &Matchers::default(),
            &crate::contract::Silent,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "job `train` (8) ended OUT_OF_MEMORY, exit code 0:125: a process was killed for using more memory than allowed"
        );
        let array = seen(
            "JobId=9 ArrayJobId=8 ArrayTaskId=1 JobState=COMPLETED ExitCode=0:0\nJobId=10 ArrayJobId=8 ArrayTaskId=2 JobState=TIMEOUT ExitCode=0:15",
        );
        assert!(array.finished() && !array.succeeded());
        assert_eq!(array.state(), "TIMEOUT");
        let err = verdict(
            "sweep",
            &array,
            &Output::default(),
            &Matchers::default(),
            &crate::contract::Silent,
        )
        .unwrap_err();
        assert!(
            err.message.contains("(task 8_2) ended TIMEOUT"),
            "{}",
            err.message
        );
    }

    /// The keys validate expects are those `applied` puts in: every one
    /// for a job the controller describes fully, the fixed ones for a bare
    /// answer.
    #[test]
    fn declared_outputs_are_the_outputs_a_job_has() {
        use crate::contract::{InputValue, Provider, ValidateContext};
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let capture = json!({"busbw": "bw: ([0-9.]+)"});
        let inputs = [("capture".to_string(), InputValue::Known(capture))];
        let declared = crate::slurm::SlurmJob::new()
            .declared_outputs(&inputs, &ctx)
            .unwrap();
        let captured = || -> Values { [("busbw".to_string(), json!(186.4))].into_iter().collect() };
        let keys = |a: Applied| {
            a.outputs
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
        };
        let full = seen("JobId=8 JobState=COMPLETED ExitCode=0:0 NodeList=vm StdOut=/x/8.out");
        assert_eq!(
            keys(applied(&full, captured())),
            declared.keys.iter().cloned().collect()
        );
        let bare = Seen {
            id: "8".into(),
            lines: Vec::new(),
        };
        let always: std::collections::BTreeSet<String> = declared
            .keys
            .iter()
            .filter(|k| !declared.conditional.contains(k))
            .cloned()
            .collect();
        assert_eq!(keys(applied(&bare, captured())), always);
    }

    #[test]
    fn a_completed_job_is_judged_by_its_output() {
        let job = seen("JobId=8 JobState=COMPLETED ExitCode=0:0 NodeList=vm StdOut=/x/8.out");
        let busbw = Matchers::from_values(&values(
            json!({"capture": {"busbw": "Avg bus bandwidth\\s*:\\s*([0-9.]+)"}}),
        ))
        .unwrap();
        let err = verdict(
            "nccl",
            &job,
            &Output::default(),
            &busbw,
            &crate::contract::Silent,
        )
        .unwrap_err();
        assert!(err.message.contains("capture `busbw`"), "{}", err.message);
        let ok = verdict(
            "nccl",
            &job,
            &Output::default(),
            &Matchers::default(),
            &crate::contract::Silent,
        )
        .unwrap();
        assert_eq!(ok.id.as_deref(), Some("8"));
        assert_eq!(ok.outputs["state"], "COMPLETED");
        assert_eq!(ok.outputs["nodes"], "vm");
        assert_eq!(ok.outputs["output_file"], "/x/8.out");
    }
}
