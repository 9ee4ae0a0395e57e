//! Batch jobs pinned to nodes, run a batch at a time: each the step's
//! `check` or `pairs` script submitted with `sbatch --nodelist=… --nodes=N`
//! (`slurm.job`'s submission, script preamble and following), all at once,
//! each followed to its end; what each printed comes back.

use std::sync::Arc;

use serde_json::Value;

use crate::contract::{OpContext, ProviderError, Reporter, Values};
use crate::fleet::report::Ran;
use crate::inputs;
use crate::slurm::control;
use crate::slurm::output::Output;
use crate::slurm::output_path::OutputPattern;
use crate::slurm::remote::Remote;
use crate::slurm::{run, script};

/// One job to run: where, and what it is told.
#[derive(Debug, Clone)]
pub(crate) struct Pinned {
    /// Its name's suffix (`c3`, `r2-c1-c5`).
    pub suffix: String,
    /// The nodes it runs on.
    pub nodes: Vec<String>,
    /// Variables exported to its script (NODE, or NODE_A and NODE_B).
    pub values: Vec<(String, String)>,
}

/// Runs the jobs of a batch on one cluster.
pub(crate) struct Batch<'a> {
    /// The operation.
    pub ctx: &'a OpContext,
    /// Where Slurm's commands run.
    pub remote: &'a Remote,
    /// The partition the jobs are submitted to, when the step names one.
    pub partition: Option<String>,
}

/// A reporter that writes a job's progress and output into the step's log
/// only, each line marked with the job's nodes: many jobs run at once.
struct Marked {
    inner: Arc<dyn Reporter>,
    mark: String,
}

impl Reporter for Marked {
    fn event(&self, message: &str) {
        self.inner.log(&format!("[{}] {message}", self.mark));
    }

    fn log(&self, line: &str) {
        self.inner.log(&format!("[{}] {line}", self.mark));
    }
}

/// The job name for `step`'s job `suffix`.
fn job_name(step: &str, suffix: &str) -> String {
    format!("{step}-{suffix}")
}

/// sbatch's options for `p`: the token's comment, its name, the partition,
/// the table's own options, then the pinning (last, so it wins).
fn sbatch_args(
    token: &str,
    name: &str,
    partition: Option<&str>,
    own: &[String],
    p: &Pinned,
) -> Vec<String> {
    let mut args = vec![
        format!("--comment={}", control::token_comment(token)),
        format!("--job-name={name}"),
    ];
    if let Some(part) = partition {
        args.push(format!("--partition={part}"));
    }
    args.extend(own.iter().cloned());
    args.push(format!("--nodelist={}", p.nodes.join(",")));
    args.push(format!("--nodes={}", p.nodes.len()));
    args
}

/// What one job came to, as the fleet's judges read it.
fn ran(what: &str, seen: &run::Seen, output: &Output) -> Ran {
    let failed = (!seen.succeeded()).then(|| seen.ending());
    Ran {
        label: what.to_string(),
        failed,
        text: output.text().to_string(),
    }
}

impl Batch<'_> {
    /// Runs one job per entry of `pinned`, all at once, and returns what
    /// each came to, in order. A job that cannot be submitted cancels those
    /// already queued; an interrupted run cancels them all.
    pub async fn run(&self, table: &Values, pinned: &[Pinned]) -> Result<Vec<Ran>, ProviderError> {
        let path = inputs::req_str(table, "script")?;
        let text = script::read(&self.ctx.workdir, &path).map_err(ProviderError::before_acting)?;
        let env = inputs::str_map(table, "environment")?;
        let args = inputs::str_list(table, "args")?;
        let own = inputs::str_list(table, "sbatch_args")?;
        let mut started: Vec<(String, String, OutputPattern)> = Vec::new();
        for p in pinned {
            let mut env = env.clone();
            env.extend(p.values.iter().cloned());
            let body = script::with_preamble(&text, &env, &args);
            let name = job_name(&self.ctx.step, &p.suffix);
            let argv = sbatch_args(&self.ctx.token, &name, self.partition.as_deref(), &own, p);
            match control::submit(self.remote, &argv, &body).await {
                Ok(id) => {
                    self.ctx.reporter.log(&format!(
                        "submitted job `{name}` ({id}) on {}",
                        p.nodes.join(",")
                    ));
                    started.push((name, id, OutputPattern::of(&argv, &body)));
                }
                Err(e) => {
                    for (_, id, _) in &started {
                        let _ = control::cancel(self.remote, id).await;
                    }
                    return Err(e);
                }
            }
        }
        let follows = started.iter().zip(pinned).map(|((name, id, pattern), p)| {
            let mut ctx = self.ctx.clone();
            ctx.reporter = Arc::new(Marked {
                inner: self.ctx.reporter.clone(),
                mark: p.nodes.join("+"),
            });
            async move {
                let mut output = Output::default();
                let seen =
                    run::run_to_end(&ctx, self.remote, &mut output, name, pattern, id).await?;
                Ok::<_, ProviderError>(ran(&format!("job `{name}` ({id})"), &seen, &output))
            }
        });
        let results = futures::future::join_all(follows).await;
        if results.iter().any(Result::is_err) {
            // One job lost (no longer known to Slurm) or an interrupted run:
            // none of the others is left running.
            for (_, id, _) in &started {
                let _ = control::cancel(self.remote, id).await;
            }
        }
        results.into_iter().collect()
    }
}

/// A job's variables for its nodes: `NODE` for one, `NODE_A`, `NODE_B` for a pair.
pub(crate) fn values_for(nodes: &[String]) -> Vec<(String, String)> {
    match nodes {
        [one] => vec![("NODE".into(), one.clone())],
        [a, b] => vec![("NODE_A".into(), a.clone()), ("NODE_B".into(), b.clone())],
        _ => Vec::new(),
    }
}

/// Cancels what an earlier, interrupted run of this operation left queued
/// or running (its jobs carry the operation's token as their comment).
pub(super) async fn cancel_leftovers(
    ctx: &OpContext,
    remote: &Remote,
) -> Result<(), ProviderError> {
    if ctx.token.is_empty() {
        return Ok(());
    }
    let ran = remote
        .run(
            &[
                "squeue",
                "-h",
                "-t",
                "PENDING,RUNNING,CONFIGURING",
                "-o",
                "%i|%k",
            ],
            None,
        )
        .await?;
    if !ran.ok() {
        return Ok(());
    }
    let comment = control::token_comment(&ctx.token);
    for line in ran.stdout.lines() {
        if let Some((id, c)) = line.trim().split_once('|')
            && c == comment
        {
            ctx.reporter
                .log(&format!("cancelling job {id}, left by an interrupted run"));
            control::cancel(remote, id).await?;
        }
    }
    Ok(())
}

/// The `check` or `pairs` table's job, for the plan: its script.
pub(super) fn script_of(table: &Values) -> String {
    table
        .get("script")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinning_comes_last_and_wins() {
        let p = Pinned {
            suffix: "r1-c1-c2".into(),
            nodes: vec!["c1".into(), "c2".into()],
            values: values_for(&["c1".into(), "c2".into()]),
        };
        let args = sbatch_args(
            "tok",
            "fleet-r1-c1-c2",
            Some("gpu"),
            &["--ntasks-per-node=8".into()],
            &p,
        );
        assert_eq!(
            args,
            [
                "--comment=flow:tok",
                "--job-name=fleet-r1-c1-c2",
                "--partition=gpu",
                "--ntasks-per-node=8",
                "--nodelist=c1,c2",
                "--nodes=2"
            ]
        );
        assert_eq!(
            p.values,
            [
                ("NODE_A".to_string(), "c1".to_string()),
                ("NODE_B".into(), "c2".into())
            ]
        );
        assert_eq!(
            values_for(&["c3".into()]),
            [("NODE".to_string(), "c3".to_string())]
        );
    }

    #[test]
    fn a_job_that_did_not_complete_is_a_failed_run() {
        let seen = run::Seen {
            id: "9".into(),
            lines: control::parse_jobs("JobId=9 JobState=FAILED ExitCode=1:0 NodeList=c1"),
        };
        let r = ran("job `x` (9)", &seen, &Output::default());
        assert_eq!(
            r.failed.as_deref(),
            Some("ended FAILED, exit code 1:0: the script exited with a non-zero code")
        );
        let ok = run::Seen {
            id: "9".into(),
            lines: control::parse_jobs("JobId=9 JobState=COMPLETED ExitCode=0:0"),
        };
        assert_eq!(ran("j", &ok, &Output::default()).failed, None);
    }
}
