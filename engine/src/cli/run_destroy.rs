//! `flow destroy`: delete what state records, dependents first, from state
//! alone (the workflow, when it still loads, only gives secrets back).

use std::collections::{BTreeMap, BTreeSet};

use flow_providers::Registry;
use flow_state::StepRecord;

use super::args::DestroyArgs;
use super::common::{CliError, CliResult, Ui, confirm, records_of};
use super::progress::print_json_summary;
use super::run::{finish, json_needs_approval, run_context, run_jobs, show_plan};
use super::state_open::{Access, open_if_exists, target};
use crate::apply::job::{SharedDecl, StepJob};
use crate::apply::schedule::Report;
use crate::dag::Dag;
use crate::lang::ast::select_addresses;
use crate::lang::load::{Loaded, load};
use crate::lang::vars::VarInputs;
use crate::plan::{Action, Plan, StepChange};

/// `flow destroy FILE`: delete what state records, dependents first.
pub async fn destroy(args: &DestroyArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    json_needs_approval(ui, args.auto_approve)?;
    let target = target(&args.file, &args.state)?;
    let Some(store) = open_if_exists(&target, &args.state, "flow destroy", Access::Write).await?
    else {
        if ui.json {
            print_json_summary(&Report::default());
            return Ok(0);
        }
        println!(
            "Nothing to destroy: there is no state at {}.",
            target.describe()
        );
        return Ok(0);
    };
    let records = records_of(Some(store.as_ref()))?;
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
                    create_before_destroy: None,
                    replace_if_changed: false,
                }
            })
            .collect(),
        state_serial: store.serial(),
        cost: None,
        drift: Vec::new(),
        moved: Vec::new(),
        warnings: Vec::new(),
        deferred: Vec::new(),
    };
    // The workflow is optional for destroy: when it still loads, its secrets
    // let delete commands see values state keeps only as digests, and its
    // profile is the one the deletes use.
    let vars = VarInputs {
        flags: args.vars.clone(),
        files: args.var_files.clone(),
        ..VarInputs::default()
    };
    let loaded = load(&args.file, &vars, registry, &|n| std::env::var(n).ok())
        .ok()
        .map(std::sync::Arc::new);
    // Missing credentials or region stop here, before anything is asked or run.
    crate::plan::access::check(crate::plan::access::changed(
        &plan,
        loaded.as_deref(),
        &records,
        registry,
    ))
    .await
    .map_err(|(message, help)| CliError::help(message, help))?;
    // As for apply: `-q` shows the plan only when it asks to confirm it,
    // `--json` as one JSON line.
    show_plan(&plan, ui, !args.auto_approve);
    confirm(
        "\nDo you really want to destroy these steps?",
        args.auto_approve,
    )?;
    if !ui.quiet && !ui.json {
        println!();
    }
    store.backup()?;
    let edges: Vec<(String, String)> = graph
        .reversed()
        .edges()
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let redactor = loaded.as_deref().map(Loaded::redactor).unwrap_or_default();
    let jobs: Vec<StepJob> = plan
        .changes
        .into_iter()
        .map(|change| StepJob {
            decl: loaded
                .as_ref()
                .and_then(|l| SharedDecl::of(l, &change.step)),
            depends_on: change.depends_on.clone(),
            region: records.get(&change.step).and_then(|r| r.region.clone()),
            change,
        })
        .collect();
    let ctx = run_context(
        store.as_ref(),
        registry,
        &args.file,
        redactor,
        records,
        loaded,
        ui,
        &jobs,
        args.clean_leftovers,
    );
    let report = run_jobs(ctx, jobs, &edges, args.parallelism, &BTreeMap::new(), true).await;
    finish(&report, ui, "Destroy")
}
/// Which steps a destroy deletes, refusing what would leave a dependent
/// without its dependency or delete a protected step.
fn select_for_destroy(
    args: &DestroyArgs,
    records: &BTreeMap<String, StepRecord>,
    graph: &Dag,
) -> CliResult<BTreeSet<String>> {
    let targets = select_addresses(&args.target, records.keys().map(String::as_str));
    let mut selected: BTreeSet<String> = if targets.is_empty() {
        records.keys().cloned().collect()
    } else {
        for t in &targets {
            if !records.contains_key(t) {
                return Err(CliError::help(
                    format!("there is no step `{t}` in state"),
                    "`flow state list FILE` shows the steps state holds",
                ));
            }
        }
        targets.iter().cloned().collect()
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
