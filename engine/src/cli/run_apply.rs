//! `flow apply FILE|PLAN`: plan, confirm, and carry out the plan on locked,
//! durable state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flow_providers::Registry;
use flow_state::{StateBackend, StepRecord};

use super::args::ApplyArgs;
use super::args::StateArgs;
use super::common::{
    CliError, CliResult, Ui, confirm, load_workflow, moved_records, settle_workflow, write_moves,
};
use super::progress::print_json_summary;
use super::refresh::{RefreshRequest, record, refreshed};
use super::run::{finish, json_needs_approval, run_context, run_jobs, show_plan};
use super::state_open::{Access, open, target_with};
use crate::apply::job::{SharedDecl, StepJob};
use crate::apply::schedule::Report;
use crate::lang::load::Loaded;
use crate::lang::vars::VarInputs;
use crate::pipeline::make_plan;
use crate::plan::refresh::Refresh;
use crate::plan::render::render_drift;
use crate::plan::saved::{SavedPlan, SavedVar, text_digest};
use crate::plan::{Action, Plan, PlanRequest, StepChange};
use crate::secrets::digest;

/// `flow apply FILE|PLAN`.
pub async fn apply(args: &ApplyArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    let saved = SavedPlan::read_if_plan(&args.file).map_err(|e| {
        CliError::help(
            e.to_string(),
            "make a new one with `flow plan FILE --out PLAN`",
        )
    })?;
    if let Some(saved) = saved {
        return apply_saved(args, saved, ui, registry).await;
    }
    let vars = VarInputs {
        flags: args.vars.clone(),
        files: args.var_files.clone(),
        ..VarInputs::default()
    };
    json_needs_approval(ui, args.auto_approve)?;
    // Shared with the run as it is: the run context holds it without a copy.
    let loaded = Arc::new(load_workflow(&args.file, &vars, registry)?);
    let target = target_with(&args.file, &args.state, loaded.workflow.state.as_ref())?;
    let store = open(&target, &args.state, "flow apply", Access::Write).await?;
    let store = store.as_ref();
    // A step whose for_each reads outputs known only after apply is planned
    // in a later round, once those outputs are in state; the lock is held
    // throughout. Each round starts from the workflow as first loaded: it
    // settles the deferred steps against state as it is then.
    for round in 1.. {
        let deferred = match apply_round(args, &vars, &loaded, store, ui, registry, round).await? {
            Round::Done(code) => {
                // The process ends with this command: the workflow goes
                // with it, instead of being freed a declaration at a time.
                std::mem::forget(loaded);
                return Ok(code);
            }
            Round::Deferred(n) => n,
        };
        if !ui.quiet && !ui.json {
            println!(
                "\nRound {}: planning the {deferred} deferred step{} now that what {} waited on has applied.\n",
                round + 1,
                if deferred == 1 { "" } else { "s" },
                if deferred == 1 { "it" } else { "they" },
            );
        }
    }
    unreachable!("the rounds end by returning")
}

/// How one round of apply ended.
enum Round {
    /// Finished, with this exit code.
    Done(i32),
    /// Applied, and this many steps wait for the next round.
    Deferred(usize),
}

/// One round of `flow apply FILE`: refresh (the first round only), expand
/// what state now makes known, plan, confirm, and run the plan.
#[allow(clippy::too_many_arguments)]
async fn apply_round(
    args: &ApplyArgs,
    vars: &VarInputs,
    loaded: &Arc<Loaded>,
    store: &dyn StateBackend,
    ui: Ui,
    registry: &Registry,
    round: usize,
) -> CliResult<Round> {
    let request = RefreshRequest {
        enabled: round == 1 && (args.refresh || args.refresh_only),
        parallelism: args.parallelism,
        targets: &args.target,
        timeout: args.refresh_timeout,
    };
    let (records, moves) = moved_records(loaded, Some(store))?;
    let refresh = refreshed(loaded, registry, records, request).await?;
    if args.refresh_only {
        return refresh_only(store, &refresh, &moves, ui, args.auto_approve)
            .await
            .map(Round::Done);
    }
    let prices = crate::cost::PriceTable::choose(None).ok();
    let legacy_salt = store.salt();
    let request = PlanRequest {
        loaded,
        registry,
        records: &refresh.records,
        legacy_salt: &legacy_salt,
        serial: store.serial(),
        targets: &args.target,
        replace: &args.replace,
    };
    let settled = settle_workflow(&request, &args.file, vars)?.map(Arc::new);
    let loaded = settled.as_ref().unwrap_or(loaded);
    let plan = make_plan(
        &PlanRequest {
            loaded: loaded.as_ref(),
            ..request
        },
        prices.as_ref(),
        refresh.drift.clone(),
        true,
    )
    .await
    .map(|plan| Plan {
        moved: moves,
        ..plan
    })
    .map_err(CliError::Diagnostics)?;
    // Missing credentials or region stop here, before anything is asked or run.
    crate::plan::access::check(crate::plan::access::changed(
        &plan,
        Some(loaded.as_ref()),
        &refresh.records,
        registry,
    ))
    .await
    .map_err(|(message, help)| CliError::help(message, help))?;
    show_plan(&plan, ui, plan.has_changes() && !args.auto_approve);
    let runnable = !plan.moved.is_empty() || plan.changes.iter().any(|c| c.action != Action::NoOp);
    if !runnable && !deps_changed(&plan, &refresh.records) {
        record(store, &refresh).await?;
        if !plan.deferred.is_empty() {
            return Err(stuck(&plan));
        }
        if ui.json {
            print_json_summary(&Report::default());
        }
        return Ok(Round::Done(0));
    }
    if plan.has_changes() {
        confirm("\nDo you want to apply these changes?", args.auto_approve)?;
        if !ui.quiet && !ui.json {
            println!();
        }
    }
    let deferred = plan.deferred.len();
    let code = execute(
        store,
        loaded,
        plan,
        refresh,
        registry,
        ui,
        args.parallelism,
        &args.file,
    )
    .await?;
    Ok(match deferred {
        0 => Round::Done(code),
        n => Round::Deferred(n),
    })
}

/// The error for deferred steps that nothing left in the plan can unblock.
fn stuck(plan: &Plan) -> CliError {
    let names: Vec<String> = plan
        .deferred
        .iter()
        .map(|d| format!("`{}` ({})", d.step, d.reason))
        .collect();
    CliError::help(
        format!(
            "{} step{} stay deferred after everything else applied: {}",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join("; ")
        ),
        "a for_each may read outputs of steps that apply in the same run; check that those steps are not excluded by --target",
    )
}

/// `flow apply --refresh-only`: show what changed outside flow and record it
/// in state, changing nothing in the cloud.
async fn refresh_only(
    store: &dyn StateBackend,
    refresh: &Refresh,
    moves: &[crate::plan::moves::MovedAddress],
    ui: Ui,
    auto_approve: bool,
) -> CliResult<i32> {
    if !ui.quiet && !ui.json {
        print!("{}", render_drift(&refresh.drift, &ui.style));
    }
    if refresh.rewritten.is_empty() {
        if !ui.quiet && !ui.json {
            println!("State matches the real objects: nothing to record.");
        }
        return Ok(0);
    }
    confirm(
        "\nDo you want to record these in state (nothing in the cloud changes)?",
        auto_approve,
    )?;
    store.backup()?;
    // The records refresh read carry their new addresses: the moves go to
    // state first, or the old addresses would stay beside the new ones.
    write_moves(store, moves, &refresh.records).await?;
    record(store, refresh).await?;
    if !ui.quiet && !ui.json {
        for m in moves {
            println!("Moved {} → {} in state ([[moved]]).", m.from, m.to);
        }
        println!(
            "\nRefresh complete: {} step{} recorded as found.",
            refresh.rewritten.len(),
            if refresh.rewritten.len() == 1 {
                ""
            } else {
                "s"
            }
        );
    }
    Ok(0)
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
    let loaded = Arc::new(load_workflow(&saved.workflow_path, &vars, registry)?);
    for (name, v) in &saved.vars {
        if let SavedVar::SensitiveDigest(d) = v {
            let now = loaded.vars.get(name).map(|v| digest(&v.value));
            if now.as_deref() != Some(d.as_str()) {
                return Err(given_again_differs(name, d, now.as_deref()));
            }
        }
    }
    let state = StateArgs {
        state_dir: Some(saved.state_dir.clone()),
        state_url: saved.state_url.clone(),
        ..args.state.clone()
    };
    let target = target_with(&saved.workflow_path, &state, loaded.workflow.state.as_ref())?;
    let store = open(&target, &state, "flow apply", Access::Write).await?;
    let store = store.as_ref();
    if store.serial() != saved.plan.state_serial {
        return Err(stale(format!(
            "the state changed since the plan was made (serial {} then, {} now)",
            saved.plan.state_serial,
            store.serial()
        )));
    }
    let request = RefreshRequest {
        enabled: args.refresh,
        parallelism: args.parallelism,
        targets: &saved.targets,
        timeout: args.refresh_timeout,
    };
    let (records, moves) = moved_records(&loaded, Some(store))?;
    let refresh = refreshed(&loaded, registry, records, request).await?;
    let prices = crate::cost::PriceTable::choose(None).ok();
    let legacy_salt = store.salt();
    let request = PlanRequest {
        loaded: &loaded,
        registry,
        records: &refresh.records,
        legacy_salt: &legacy_salt,
        serial: store.serial(),
        targets: &saved.targets,
        replace: &saved.replace,
    };
    let settled = settle_workflow(&request, &saved.workflow_path, &vars)?.map(Arc::new);
    let loaded = settled.as_ref().unwrap_or(&loaded);
    let plan = make_plan(
        &PlanRequest {
            loaded: loaded.as_ref(),
            ..request
        },
        prices.as_ref(),
        refresh.drift.clone(),
        true,
    )
    .await
    .map(|plan| Plan {
        moved: moves,
        ..plan
    })
    .map_err(CliError::Diagnostics)?;
    if plan.moved != saved.plan.moved {
        return Err(stale("its [[moved]] entries no longer match state".into()));
    }
    let essence = |p: &Plan| {
        p.changes
            .iter()
            .map(StepChange::essence)
            .collect::<Vec<_>>()
    };
    if essence(&plan) != essence(&saved.plan) || plan.deferred != saved.plan.deferred {
        return Err(stale("recomputing it now gives a different plan".into()));
    }
    show_plan(&plan, ui, false);
    if !ui.quiet && !ui.json {
        println!();
    }
    let deferred = plan.deferred.len();
    let code = execute(
        store,
        loaded,
        plan,
        refresh,
        registry,
        ui,
        args.parallelism,
        &saved.workflow_path,
    )
    .await?;
    if deferred > 0 && !ui.quiet && !ui.json {
        // A saved plan is exactly what was reviewed: the deferred steps
        // get a plan of their own.
        println!(
            "\n{deferred} deferred step{} not applied: a saved plan runs only what it shows. Plan again (`flow plan {} --out PLAN`) to plan {}.",
            if deferred == 1 { " was" } else { "s were" },
            saved.workflow_path.display(),
            if deferred == 1 { "it" } else { "them" },
        );
    }
    Ok(code)
}

/// The error for a sensitive variable given at apply whose fingerprint is
/// not the one the plan saved (`saved`): another value, none, or the plan
/// made with another fingerprint key.
fn given_again_differs(name: &str, saved: &str, now: Option<&str>) -> CliError {
    use flow_providers::fingerprint::key_id_of;
    match (key_id_of(saved), now.and_then(key_id_of)) {
        (Some(then), Some(mine)) if then != mine => CliError::help(
            format!(
                "sensitive variable `{name}` cannot be checked: the plan was made with fingerprint key {then}, and yours is {mine}"
            ),
            "apply the plan as the user who made it, share one key file (docs/state.md, \"fingerprint key\"), or make the plan again",
        ),
        (_, None) => CliError::help(
            format!("sensitive variable `{name}` is not given; the plan does not hold secrets"),
            "give it again as when planning (its environment variable, --var or a var file)",
        ),
        _ => CliError::help(
            format!("sensitive variable `{name}` is not the value the plan was made with"),
            "give it the same value (secrets are not stored in plan files)",
        ),
    }
}

/// Carry out `plan` on what `refresh` found: back state up, write the
/// moves and what refresh rewrote, then run the steps.
#[allow(clippy::too_many_arguments)]
async fn execute(
    store: &dyn StateBackend,
    loaded: &Arc<Loaded>,
    mut plan: Plan,
    refresh: Refresh,
    registry: &Registry,
    ui: Ui,
    parallelism: usize,
    file: &Path,
) -> CliResult<i32> {
    // No later round follows this run: its memory can go with the process.
    let last = plan.deferred.is_empty();
    // The backup is taken before the first write (moves, refresh, steps),
    // on a thread of its own: its file and fsyncs overlap with preparing
    // the jobs here.
    let back_up = plan.has_changes();
    let changes = std::mem::take(&mut plan.changes);
    let (backed_up, (edges, timeouts, jobs)) = std::thread::scope(|s| {
        let backup = back_up.then(|| s.spawn(|| store.backup()));
        let prepared = prepare_jobs(loaded, changes, &refresh.records);
        let backed_up = backup.map(|b| b.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (backed_up, prepared)
    });
    if let Some(backed_up) = backed_up {
        backed_up?;
    }
    write_moves(store, &plan.moved, &refresh.records).await?;
    record(store, &refresh).await?;
    let records = refresh.records;
    let redactor = loaded.redactor();
    let ctx = run_context(
        store,
        registry,
        file,
        redactor,
        records,
        Some(loaded.clone()),
        ui,
        &jobs,
        false,
    );
    let report = run_jobs(ctx, jobs, &edges, parallelism, &timeouts, last).await;
    if last {
        // Like the run's records: the process ends soon, and frees the
        // plan's thousands of allocations at once.
        std::mem::forget(plan);
    }
    finish(&report, ui, "Apply")
}
/// What the run needs beside the context: the edges among steps (the
/// workflow's, and those that order deletions), each step's timeout, and
/// the jobs.
type Prepared = (
    Vec<(String, String)>,
    BTreeMap<String, Duration>,
    Vec<StepJob>,
);

/// The edges, timeouts and jobs of a plan's `changes` (see [`Prepared`]);
/// the jobs take the changes over.
fn prepare_jobs(
    loaded: &Arc<Loaded>,
    changes: Vec<StepChange>,
    records: &BTreeMap<String, StepRecord>,
) -> Prepared {
    let mut edges: Vec<(String, String)> = loaded
        .dag
        .edges()
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    edges.extend(delete_edges(&changes, records));
    let timeouts: BTreeMap<String, Duration> = loaded
        .workflow
        .steps
        .iter()
        .filter_map(|s| s.timeout.map(|t| (s.name.clone(), t)))
        .collect();
    let jobs: Vec<StepJob> = changes
        .into_iter()
        .map(|change| {
            let decl = SharedDecl::of(loaded, &change.step);
            let region = decl
                .as_ref()
                .map_or(loaded.workflow.region.clone(), |d| loaded.region_of(d))
                .or_else(|| records.get(&change.step).and_then(|r| r.region.clone()));
            StepJob {
                depends_on: change.depends_on.clone(),
                change,
                decl,
                region,
            }
        })
        .collect();
    (edges, timeouts, jobs)
}

/// Edges that order deletions: a removed step goes before what it depended
/// on, and after whatever still depended on it.
fn delete_edges(
    changes: &[StepChange],
    records: &BTreeMap<String, StepRecord>,
) -> Vec<(String, String)> {
    let deleting: BTreeSet<&str> = changes
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
