//! `flow report FILE [STEP] [-o PAGE]`: the workflow's state, its last
//! run's timeline and its run history, drawn into one HTML page
//! (`crate::report`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use flow_providers::Registry;
use flow_state::{RunRecord, StateLayout, StepRecord};

use super::args::ReportArgs;
use super::common::{CliError, CliResult, load_workflow};
use super::run_plan::var_inputs;
use super::state_open::{Access, open_if_exists, target_with};
use crate::report::{LastRun, Page, render, step_times};

/// Writes the page and says where.
pub fn report(args: &ReportArgs, registry: &Registry) -> CliResult<i32> {
    let wf = &args.workflow;
    let loaded = load_workflow(&wf.file, &var_inputs(wf), registry)?;
    let target = target_with(&wf.file, &wf.state, loaded.workflow.state.as_ref())?;
    let (records, mut runs) = super::block_on(async {
        let Some(store) = open_if_exists(&target, &wf.state, "flow report", Access::Read).await?
        else {
            return Ok::<_, CliError>((Vec::new(), Vec::new()));
        };
        let log = store.run_log();
        if let Err(e) = log.pull() {
            eprintln!(
                "warning: the shared runs could not be read, only this copy's are drawn: {e}"
            );
        }
        let (runs, damaged) = log.all().map_err(|e| CliError::msg(e.to_string()))?;
        super::runs::warn_damaged(&damaged);
        let records = store.steps().map_err(|e| CliError::msg(e.to_string()))?;
        Ok((records, runs))
    })?;
    if let Some(step) = &args.step {
        if loaded.workflow.step(step).is_none() && !runs.iter().any(|r| &r.step == step) {
            return Err(CliError::help(
                format!("there is no step `{step}` in the workflow or its runs"),
                "list the steps with `flow state list FILE`, the runs with `flow runs FILE`",
            ));
        }
        runs.retain(|r| &r.step == step);
    }
    let layout = StateLayout::new(&target.dir);
    let last_run = read_last_run(&layout);
    let records: BTreeMap<String, StepRecord> =
        records.into_iter().map(|r| (r.name.clone(), r)).collect();
    let shades = super::graph::shades(&loaded, &records);
    let notes = last_run.as_ref().map(step_times).unwrap_or_default();
    let page = render(&Page {
        workflow: &loaded.workflow.name,
        generated: flow_state::timefmt::format_rfc3339(flow_state::now_secs()),
        graph_svg: super::graph::svg_with_notes(&loaded, &shades, &notes),
        last_run,
        runs: sorted(runs),
    });
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target.dir.join("report.html"));
    write_page(&out, &page)?;
    println!(
        "Report written to {} ({} KB)",
        out.display(),
        page.len().div_ceil(1024)
    );
    Ok(0)
}

/// The runs in start order (a pulled run may sit after later ones).
fn sorted(mut runs: Vec<RunRecord>) -> Vec<RunRecord> {
    runs.sort_by(|a, b| a.id.cmp(&b.id));
    runs
}

/// The last run's timeline, if one was kept and reads.
fn read_last_run(layout: &StateLayout) -> Option<LastRun> {
    let text = std::fs::read_to_string(layout.last_run()).ok()?;
    match serde_json::from_str(&text) {
        Ok(last) => Some(last),
        Err(e) => {
            eprintln!(
                "warning: {} is damaged, the report has no timeline: {e}",
                layout.last_run().display()
            );
            None
        }
    }
}

fn write_page(out: &PathBuf, page: &str) -> CliResult<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::msg(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(out, page)
        .map_err(|e| CliError::msg(format!("cannot write {}: {e}", out.display())))
}
