//! `flow apply` and `flow destroy`: carry out a plan on locked, durable state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use flow_providers::Registry;
use flow_state::{StepRecord, Store};

use super::args::{ApplyArgs, DestroyArgs};
use super::common::{
    CliError, CliResult, Ui, confirm, load_workflow, records_of, state_dir, workdir,
};
use super::progress::{print_json_summary, print_summary, sink_for};
use crate::apply::events::Outcome;
use crate::apply::retry::Backoff;
use crate::apply::schedule::{Report, Signals, run_all};
use crate::apply::step::{RunContext, StepJob};
use crate::dag::Dag;
use crate::lang::load::{Loaded, load};
use crate::lang::vars::VarInputs;
use crate::plan::refine::refine_plan;
use crate::plan::render::render_text;
use crate::plan::saved::{SavedPlan, SavedVar, text_digest};
use crate::plan::{Action, Plan, PlanRequest, StepChange, compute_plan};
use crate::secrets::{Redactor, digest};

/// `flow apply FILE|PLAN`.
pub async fn apply(args: &ApplyArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    let saved = SavedPlan::read_if_plan(&args.file)
        .map_err(|e| CliError::help(e, "make a new one with `flow plan FILE --out PLAN`"))?;
    if let Some(saved) = saved {
        return apply_saved(args, saved, ui, registry).await;
    }
    let vars = VarInputs {
        flags: args.vars.clone(),
        files: args.var_files.clone(),
        ..VarInputs::default()
    };
    json_needs_approval(ui, args.auto_approve)?;
    let loaded = load_workflow(&args.file, &vars, registry)?;
    let dir = state_dir(&args.file, args.state_dir.as_ref());
    let store = Store::open(&dir, "flow apply")?;
    let records = records_of(Some(&store))?;
    let mut plan = compute_plan(&PlanRequest {
        loaded: &loaded,
        registry,
        records: &records,
        salt: &store.salt(),
        serial: store.serial(),
        targets: &args.target,
        replace: &args.replace,
    })
    .map_err(CliError::Diagnostics)?;
    refine_plan(&mut plan, &loaded, registry, &records, &store.salt(), 10).await;
    if let Ok(prices) = crate::cost::PriceTable::choose(None) {
        crate::cost::estimate(&mut plan, &loaded, registry, &records, &prices);
    }
    show_plan(&plan, ui, plan.has_changes() && !args.auto_approve);
    if !plan.has_changes() && !deps_changed(&plan, &records) {
        if ui.json {
            print_json_summary(&Report::default());
        }
        return Ok(0);
    }
    if plan.has_changes() {
        confirm("\nDo you want to apply these changes?", args.auto_approve)?;
        if !ui.quiet && !ui.json {
            println!();
        }
    }
    execute(
        &store,
        &loaded,
        plan,
        records,
        registry,
        ui,
        args.parallelism,
        &args.file,
    )
    .await
}

/// Show the plan: text, or a `plan` event in JSON mode.
fn show_plan(plan: &Plan, ui: Ui, always: bool) {
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
fn json_needs_approval(ui: Ui, auto_approve: bool) -> CliResult {
    if ui.json && !auto_approve {
        return Err(CliError::help(
            "--json needs --auto-approve: a JSON stream cannot ask for confirmation",
            "review the plan with `flow plan --json` first, or save it with --out and apply that",
        ));
    }
    Ok(())
}

/// Whether a no-op plan still has recorded dependencies to bring up to date.
fn deps_changed(plan: &Plan, records: &BTreeMap<String, StepRecord>) -> bool {
    plan.changes.iter().any(|c| {
        records
            .get(&c.step)
            .is_some_and(|r| r.depends_on != c.depends_on)
    })
}

async fn apply_saved(
    args: &ApplyArgs,
    saved: SavedPlan,
    ui: Ui,
    registry: &Registry,
) -> CliResult<i32> {
    let stale = |why: String| {
        CliError::help(
            format!("the saved plan {} is stale: {why}", args.file.display()),
            "run `flow plan --out FILE` again and apply the new plan",
        )
    };
    let text = std::fs::read_to_string(&saved.workflow_path).map_err(|e| {
        stale(format!(
            "cannot read the workflow {}: {e}",
            saved.workflow_path.display()
        ))
    })?;
    if text_digest(&text) != saved.workflow_digest {
        return Err(stale(format!(
            "{} changed since the plan was made",
            saved.workflow_path.display()
        )));
    }
    let mut vars = VarInputs {
        flags: args.vars.clone(),
        files: args.var_files.clone(),
        ..VarInputs::default()
    };
    for (name, v) in &saved.vars {
        if let SavedVar::Value(value) = v {
            vars.fixed.push((name.clone(), value.clone()));
        }
    }
    let loaded = load_workflow(&saved.workflow_path, &vars, registry)?;
    for (name, v) in &saved.vars {
        if let SavedVar::SensitiveDigest(d) = v {
            let now = loaded
                .vars
                .get(name)
                .map(|v| digest(saved.salt.as_bytes(), &v.value));
            if now.as_deref() != Some(d.as_str()) {
                return Err(CliError::help(
                    format!("sensitive variable `{name}` is not the value the plan was made with"),
                    "give it the same value (secrets are not stored in plan files)",
                ));
            }
        }
    }
    let store = Store::open(&saved.state_dir, "flow apply")?;
    if store.serial() != saved.plan.state_serial {
        return Err(stale(format!(
            "the state changed since the plan was made (serial {} then, {} now)",
            saved.plan.state_serial,
            store.serial()
        )));
    }
    let records = records_of(Some(&store))?;
    let mut plan = compute_plan(&PlanRequest {
        loaded: &loaded,
        registry,
        records: &records,
        salt: &store.salt(),
        serial: store.serial(),
        targets: &saved.targets,
        replace: &saved.replace,
    })
    .map_err(CliError::Diagnostics)?;
    refine_plan(&mut plan, &loaded, registry, &records, &store.salt(), 10).await;
    let essence = |p: &Plan| {
        p.changes
            .iter()
            .map(StepChange::essence)
            .collect::<Vec<_>>()
    };
    if essence(&plan) != essence(&saved.plan) {
        return Err(stale("recomputing it now gives a different plan".into()));
    }
    show_plan(&plan, ui, false);
    if !ui.quiet && !ui.json {
        println!();
    }
    execute(
        &store,
        &loaded,
        plan,
        records,
        registry,
        ui,
        args.parallelism,
        &saved.workflow_path,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    store: &Store,
    loaded: &Loaded,
    plan: Plan,
    records: BTreeMap<String, StepRecord>,
    registry: &Registry,
    ui: Ui,
    parallelism: usize,
    file: &Path,
) -> CliResult<i32> {
    if plan.has_changes() {
        store.backup()?;
    }
    let mut edges: Vec<(String, String)> = loaded
        .dag
        .edges()
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    edges.extend(delete_edges(&plan, &records));
    let mut redactor = Redactor::default();
    for v in loaded.vars.values().filter(|v| v.sensitive) {
        redactor.add(&v.value);
    }
    let timeouts: BTreeMap<String, Duration> = loaded
        .workflow
        .steps
        .iter()
        .filter_map(|s| s.timeout.map(|t| (s.name.clone(), t)))
        .collect();
    let jobs: Vec<StepJob> = plan
        .changes
        .iter()
        .map(|c| {
            let decl = loaded.workflow.step(&c.step).cloned();
            let region = decl
                .as_ref()
                .and_then(|d| d.region.clone())
                .or_else(|| loaded.workflow.region.clone())
                .or_else(|| records.get(&c.step).and_then(|r| r.region.clone()));
            StepJob {
                change: c.clone(),
                decl,
                depends_on: c.depends_on.clone(),
                region,
            }
        })
        .collect();
    let ctx = run_context(
        store,
        registry,
        file,
        redactor,
        records,
        Some(loaded),
        ui,
        &plan,
    );
    let report = run_jobs(ctx, jobs, &edges, parallelism, &timeouts).await;
    finish(&report, ui, "Apply")
}

/// Edges that order deletions: a removed step goes before what it depended
/// on, and after whatever still depended on it.
fn delete_edges(plan: &Plan, records: &BTreeMap<String, StepRecord>) -> Vec<(String, String)> {
    let deleting: BTreeSet<&str> = plan
        .changes
        .iter()
        .filter(|c| c.action == Action::Delete)
        .map(|c| c.step.as_str())
        .collect();
    let mut edges = Vec::new();
    for rec in records.values() {
        for dep in &rec.depends_on {
            if deleting.contains(dep.as_str()) {
                edges.push((rec.name.clone(), dep.clone()));
            }
        }
    }
    edges
}

#[allow(clippy::too_many_arguments)]
fn run_context(
    store: &Store,
    registry: &Registry,
    file: &Path,
    redactor: Redactor,
    records: BTreeMap<String, StepRecord>,
    loaded: Option<&Loaded>,
    ui: Ui,
    plan: &Plan,
) -> Arc<RunContext> {
    let width = plan.changes.iter().map(|c| c.step.len()).max().unwrap_or(4);
    let (interrupt, cancel) = flow_providers::Cancel::pair();
    Arc::new(RunContext {
        cancel,
        interrupt,
        registry: registry.clone(),
        committer: store.committer(),
        layout: store.layout().clone(),
        workdir: workdir(file),
        salt: store.salt(),
        redactor: Arc::new(redactor),
        sink: sink_for(ui, ui.json, plan.changes.len(), width),
        backoff: Backoff::default(),
        profile: loaded.and_then(|l| l.workflow.profile.clone()),
        records: Mutex::new(records),
        outputs: Mutex::new(BTreeMap::new()),
        loaded: loaded.map(|l| Arc::new(l.clone())),
        retries: AtomicU32::new(0),
        durable: Mutex::new(BTreeMap::new()),
    })
}

async fn run_jobs(
    ctx: Arc<RunContext>,
    jobs: Vec<StepJob>,
    edges: &[(String, String)],
    parallelism: usize,
    timeouts: &BTreeMap<String, Duration>,
) -> Report {
    let names: Vec<String> = jobs.iter().map(|j| j.change.step.clone()).collect();
    let dag = Dag::new(
        names.iter().map(String::as_str),
        edges.iter().map(|(a, b)| (a.as_str(), b.as_str())),
    );
    let mut signals = Signals::new();
    let mut report = run_all(ctx.clone(), jobs, &dag, parallelism, timeouts, &mut signals).await;
    // Every step's result must be on disk before the run counts as done.
    for (step, error) in ctx.settle().await {
        for (name, outcome, _) in report.steps.iter_mut() {
            if *name == step {
                *outcome = Outcome::Failed(error.clone());
            }
        }
    }
    report
}

fn finish(report: &Report, ui: Ui, what: &str) -> CliResult<i32> {
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

/// `flow destroy FILE`: delete what state records, dependents first.
pub async fn destroy(args: &DestroyArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    json_needs_approval(ui, args.auto_approve)?;
    let dir = state_dir(&args.file, args.state_dir.as_ref());
    let Some(store) = Store::open_if_exists(&dir, "flow destroy")? else {
        if ui.json {
            print_json_summary(&Report::default());
            return Ok(0);
        }
        println!(
            "Nothing to destroy: there is no state at {}.",
            dir.display()
        );
        return Ok(0);
    };
    let records = records_of(Some(&store))?;
    let graph = Dag::new(
        records.keys().map(String::as_str),
        records.values().flat_map(|r| {
            r.depends_on
                .iter()
                .map(move |d| (d.as_str(), r.name.as_str()))
        }),
    );
    let selected = select_for_destroy(args, &records, &graph)?;
    if selected.is_empty() {
        if ui.json {
            print_json_summary(&Report::default());
        } else {
            println!("Nothing to destroy: state is empty.");
        }
        return Ok(0);
    }
    let plan = Plan {
        workflow: args.file.display().to_string(),
        changes: selected
            .iter()
            .map(|name| {
                let rec = &records[name];
                StepChange {
                    step: name.clone(),
                    action: Action::Delete,
                    provider: rec.provider.clone(),
                    reason: "destroy".into(),
                    inputs: Vec::new(),
                    known_after_apply: false,
                    resumes: rec.in_flight.as_ref().map(|f| f.token.clone()),
                    depends_on: rec.depends_on.clone(),
                    details: Vec::new(),
                    cost: None,
                }
            })
            .collect(),
        state_serial: store.serial(),
        cost: None,
    };
    print!("{}", render_text(&plan, &ui.style));
    confirm(
        "\nDo you really want to destroy these steps?",
        args.auto_approve,
    )?;
    println!();
    store.backup()?;
    let edges: Vec<(String, String)> = graph
        .reversed()
        .edges()
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    // The workflow is optional for destroy: when it still loads, its secrets
    // let delete commands see values state keeps only as digests.
    let vars = VarInputs {
        flags: args.vars.clone(),
        files: args.var_files.clone(),
        ..VarInputs::default()
    };
    let loaded = load(&args.file, &vars, registry, &|n| std::env::var(n).ok()).ok();
    let mut redactor = Redactor::default();
    if let Some(l) = &loaded {
        for v in l.vars.values().filter(|v| v.sensitive) {
            redactor.add(&v.value);
        }
    }
    let jobs: Vec<StepJob> = plan
        .changes
        .iter()
        .map(|c| StepJob {
            change: c.clone(),
            decl: loaded
                .as_ref()
                .and_then(|l| l.workflow.step(&c.step).cloned()),
            depends_on: c.depends_on.clone(),
            region: records.get(&c.step).and_then(|r| r.region.clone()),
        })
        .collect();
    let ctx = run_context(
        &store,
        registry,
        &args.file,
        redactor,
        records,
        loaded.as_ref(),
        ui,
        &plan,
    );
    let report = run_jobs(ctx, jobs, &edges, args.parallelism, &BTreeMap::new()).await;
    finish(&report, ui, "Destroy")
}

/// Which steps a destroy deletes, refusing what would leave a dependent
/// without its dependency or delete a protected step.
fn select_for_destroy(
    args: &DestroyArgs,
    records: &BTreeMap<String, StepRecord>,
    graph: &Dag,
) -> CliResult<BTreeSet<String>> {
    let mut selected: BTreeSet<String> = if args.target.is_empty() {
        records.keys().cloned().collect()
    } else {
        for t in &args.target {
            if !records.contains_key(t) {
                return Err(CliError::help(
                    format!("there is no step `{t}` in state"),
                    "`flow state list FILE` shows the steps state holds",
                ));
            }
        }
        args.target.iter().cloned().collect()
    };
    if args.with_dependents {
        selected = graph.with_descendants(&selected.iter().cloned().collect::<Vec<_>>());
    }
    let mut outside = Vec::new();
    for name in &selected {
        for dependent in graph.needed_by(name) {
            if !selected.contains(dependent) {
                outside.push(format!("`{dependent}` depends on `{name}`"));
            }
        }
    }
    if !outside.is_empty() {
        return Err(CliError::help(
            format!(
                "refusing to destroy: steps outside --target depend on the targets ({})",
                outside.join("; ")
            ),
            "add them with --target, or pass --with-dependents to destroy them too",
        ));
    }
    let protected: Vec<&String> = selected
        .iter()
        .filter(|n| records[*n].prevent_destroy && records[*n].applied)
        .collect();
    if !protected.is_empty() && !args.allow_protected {
        let names: Vec<String> = protected.iter().map(|n| format!("`{n}`")).collect();
        return Err(CliError::help(
            format!(
                "refusing to destroy: {} ha{} lifecycle.prevent_destroy",
                names.join(", "),
                if names.len() == 1 { "s" } else { "ve" }
            ),
            "pass --allow-protected to destroy protected steps too, or --target the others",
        ));
    }
    Ok(selected)
}
