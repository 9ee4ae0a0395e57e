//! What apply and destroy share: showing the plan, the run context, running
//! the jobs and reporting the result.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flow_providers::Registry;
use flow_state::{StateBackend, StepRecord};

use super::common::{CliError, CliResult, Ui, workdir};
use super::progress::{print_json_summary, print_summary, sink_for};
use crate::apply::context::{RunContext, RunSettings};
use crate::apply::events::Outcome;
use crate::apply::job::StepJob;
use crate::apply::retry::Backoff;
use crate::apply::schedule::{Report, Signals, run_all};
use crate::dag::Dag;
use crate::lang::load::Loaded;
use crate::plan::Plan;
use crate::plan::render::render_text;
use crate::secrets::Redactor;

/// Show the plan: text, or a `plan` event in JSON mode.
pub fn show_plan(plan: &Plan, ui: Ui, always: bool) {
    if ui.json {
        let mut value: serde_json::Value =
            serde_json::from_str(&crate::plan::render::render_json(plan)).expect("plan json");
        value["type"] = serde_json::Value::String("plan".into());
        super::progress::write_json_line(&value);
    } else if always || !ui.quiet {
        print!("{}", render_text(plan, &ui.style));
    }
}
/// In JSON mode nothing may prompt.
pub fn json_needs_approval(ui: Ui, auto_approve: bool) -> CliResult {
    if ui.json && !auto_approve {
        return Err(CliError::help(
            "--json needs --auto-approve: a JSON stream cannot ask for confirmation",
            "review the plan with `flow plan --json` first, or save it with --out and apply that",
        ));
    }
    Ok(())
}
#[allow(clippy::too_many_arguments)]
pub fn run_context(
    store: &dyn StateBackend,
    registry: &Registry,
    file: &Path,
    redactor: Redactor,
    records: BTreeMap<String, StepRecord>,
    loaded: Option<Arc<Loaded>>,
    ui: Ui,
    jobs: &[StepJob],
    clean_leftovers: bool,
) -> Arc<RunContext> {
    let width = jobs.iter().map(|j| j.change.step.len()).max().unwrap_or(4);
    Arc::new(RunContext::new(
        RunSettings {
            registry: registry.clone(),
            workflow_file: file.to_path_buf(),
            layout: store.layout().clone(),
            workdir: loaded
                .as_ref()
                .map_or_else(|| workdir(file).into(), |l| l.workflow.dir.clone()),
            legacy_salt: store.salt(),
            redactor: Arc::new(redactor),
            sink: sink_for(ui, ui.json, jobs.len(), width),
            backoff: Backoff::default(),
            profile: loaded.as_ref().and_then(|l| l.workflow.profile.clone()),
            loaded,
            history: Some(store.run_log()),
            clean_leftovers,
        },
        store.committer(),
        records,
    ))
}
/// Runs `jobs` in the order `edges` allow, at most `parallelism` at once,
/// waits until every result is on disk and keeps the run's timeline.
/// `last`: the command ends after this run (no later round), so the run's
/// memory is left to the process's exit.
pub async fn run_jobs(
    ctx: Arc<RunContext>,
    jobs: Vec<StepJob>,
    edges: &[(String, String)],
    parallelism: usize,
    timeouts: &BTreeMap<String, Duration>,
    last: bool,
) -> Report {
    let names: Vec<String> = jobs.iter().map(|j| j.change.step.clone()).collect();
    let dag = Dag::new(
        names.iter().map(String::as_str),
        edges.iter().map(|(a, b)| (a.as_str(), b.as_str())),
    );
    let started_ms = now_ms();
    // The scheduler runs as a task of the runtime, beside the steps, not on
    // the thread that waits for the command: a step that ends wakes it
    // without waking another thread.
    let (run_ctx, timeouts) = (ctx.clone(), timeouts.clone());
    let scheduler = tokio::spawn(async move {
        let mut signals = Signals::new();
        run_all(run_ctx, jobs, &dag, parallelism, &timeouts, &mut signals).await
    });
    let mut report = scheduler
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    // The timeline is complete: it is written while the last results are
    // flushed, not after.
    let timeline = {
        let ctx = ctx.clone();
        tokio::task::spawn_blocking(move || keep_timeline(&ctx, started_ms))
    };
    // Every step's result must be on disk before the run counts as done.
    for (step, error) in ctx.settle().await {
        for (name, outcome, _) in report.steps.iter_mut() {
            if *name == step {
                *outcome = Outcome::Failed(error.clone());
            }
        }
    }
    if let Err(e) = timeline.await {
        std::panic::resume_unwind(e.into_panic());
    }
    // Everything is on disk (or reported as not): when the process ends
    // after this run, it frees the run's memory faster than freeing it
    // piece by piece here.
    if last {
        ctx.leave_to_exit();
    }
    report
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When each step of this run ran, kept in the state folder
/// (`last-run.json`, replaced whole) for `flow report`'s Gantt chart. A
/// file that cannot be written costs the chart, never the run.
fn keep_timeline(ctx: &RunContext, started_ms: u64) {
    let steps = ctx.timeline();
    if steps.is_empty() {
        return;
    }
    /// `last-run.json`, written straight from the spans (no JSON tree).
    #[derive(serde::Serialize)]
    struct LastRun<'a> {
        started_ms: u64,
        ended_ms: u64,
        steps: &'a [crate::apply::context::StepSpan],
    }
    let doc = LastRun {
        started_ms,
        ended_ms: now_ms(),
        steps: &steps,
    };
    let path = ctx.settings().layout.last_run();
    let tmp = path.with_extension("json.tmp");
    let written = (|| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec(&doc).map_err(std::io::Error::other)?)?;
        f.sync_data()?;
        flow_state::durable::rename_durably(&tmp, &path)
    })();
    if let Err(e) = written {
        eprintln!("warning: {} not written: {e}", path.display());
    }
}
pub fn finish(report: &Report, ui: Ui, what: &str) -> CliResult<i32> {
    if ui.json {
        print_json_summary(report);
    } else {
        print_summary(report, &ui.style, what);
    }
    if report.interrupted {
        Err(CliError::Interrupted)
    } else if report.failed() {
        Err(CliError::StepsFailed)
    } else {
        Ok(0)
    }
}
