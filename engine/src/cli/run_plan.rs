//! `flow validate` and `flow plan`.

use flow_providers::Registry;

use super::args::{PlanArgs, WorkflowArgs};
use super::common::{CliError, CliResult, Ui, load_workflow, moved_records_of, settle_workflow};
use super::refresh::{RefreshRequest, refreshed};
use super::state_open::{Access, StateTarget, open_if_exists, target_with};
use crate::lang::vars::VarInputs;
use crate::pipeline::make_plan;
use crate::plan::render::{render_json, render_text};
use crate::plan::saved::{FORMAT, SavedPlan, VERSION, text_digest};
use crate::plan::{Plan, PlanRequest};

/// The variables a workflow command was given.
pub fn var_inputs(args: &WorkflowArgs) -> VarInputs {
    VarInputs {
        flags: args.vars.clone(),
        files: args.var_files.clone(),
        ..VarInputs::default()
    }
}

/// `flow validate FILE`.
pub fn validate(args: &WorkflowArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    let loaded = load_workflow(&args.file, &var_inputs(args), registry)?;
    if !ui.quiet {
        println!(
            "{} {} is valid: {} step{}, {} variable{}.",
            ui.style.ok("✓"),
            args.file.display(),
            loaded.workflow.steps.len(),
            if loaded.workflow.steps.len() == 1 {
                ""
            } else {
                "s"
            },
            loaded.workflow.vars.len(),
            if loaded.workflow.vars.len() == 1 {
                ""
            } else {
                "s"
            },
        );
    }
    Ok(0)
}

/// `flow plan FILE`.
pub fn plan(args: &PlanArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    let wf_args = &args.workflow;
    let loaded = load_workflow(&wf_args.file, &var_inputs(wf_args), registry)?;
    let target = target_with(
        &wf_args.file,
        &wf_args.state,
        loaded.workflow.state.as_ref(),
    )?;
    let prices = crate::cost::PriceTable::choose(args.prices.as_deref())
        .map_err(|e| CliError::help(e.to_string(), e.help()))?;
    let plan = crate::cli::block_on(async {
        // The lock is held while state is read, not while real objects are.
        let store = open_if_exists(&target, &wf_args.state, "flow plan", Access::Plan).await?;
        let legacy_salt = store.as_ref().map(|s| s.salt()).unwrap_or_default();
        let serial = store.as_ref().map_or(0, |s| s.serial());
        // The records handed over, not copied; the lock let go with them.
        let records = match store {
            Some(s) => s.into_steps()?,
            None => Vec::new(),
        };
        let records = records.into_iter().map(|r| (r.name.clone(), r)).collect();
        let (records, moves) = moved_records_of(&loaded, records)?;
        // Refresh never writes state during plan: what it finds is shown only.
        let request = RefreshRequest {
            enabled: args.refresh,
            parallelism: args.parallelism,
            targets: &args.target,
            timeout: args.refresh_timeout,
        };
        let refresh = refreshed(&loaded, registry, records, request).await?;
        let request = PlanRequest {
            loaded: &loaded,
            registry,
            records: &refresh.records,
            legacy_salt: &legacy_salt,
            serial,
            targets: &args.target,
            replace: &args.replace,
        };
        let settled = settle_workflow(&request, &wf_args.file, &var_inputs(wf_args))?;
        make_plan(
            &PlanRequest {
                loaded: settled.as_ref().unwrap_or(&loaded),
                ..request
            },
            Some(&prices),
            refresh.drift,
            args.refresh,
        )
        .await
        .map(|plan| Plan {
            moved: moves,
            ..plan
        })
        .map_err(CliError::Diagnostics)
    })?;
    let give_again = match &args.out {
        Some(out) => save(&plan, &loaded, &target, args, out)?,
        None => Vec::new(),
    };
    if args.json {
        println!("{}", render_json(&plan));
    } else if !ui.quiet || plan.has_changes() {
        print!("{}", render_text(&plan, &ui.style));
        if let Some(out) = &args.out {
            println!(
                "Saved the plan to {}; apply it with `flow apply {}`.",
                out.display(),
                out.display()
            );
            if !give_again.is_empty() {
                println!(
                    "The plan holds no secret: give {} again at apply.",
                    give_again.join(", ")
                );
            }
        }
    }
    Ok(if !args.detailed_exitcode {
        0
    } else if plan.unread() > 0 {
        UNREAD_EXIT
    } else if plan.has_changes() || plan.has_drift() {
        2
    } else {
        0
    })
}

/// `plan --detailed-exitcode`'s code when a step could not be read: the
/// plan is not a verdict on it, so neither "no changes" (0) nor "changes"
/// (2); 1 stays an error.
pub const UNREAD_EXIT: i32 = 3;

fn save(
    plan: &Plan,
    loaded: &crate::lang::load::Loaded,
    target: &StateTarget,
    args: &PlanArgs,
    out: &std::path::Path,
) -> Result<Vec<String>, CliError> {
    let abs = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let saved = SavedPlan {
        format: FORMAT.into(),
        version: VERSION,
        workflow_path: abs(&args.workflow.file),
        workflow_digest: text_digest(&loaded.workflow.source.text),
        state_dir: abs(&target.dir),
        state_url: target.s3.as_ref().map(|l| l.to_string()),
        vars: SavedPlan::vars_for_saving(&loaded.vars),
        targets: args.target.clone(),
        replace: args.replace.clone(),
        plan: plan.clone(),
    };
    saved
        .write(out)
        .map_err(|e| CliError::msg(format!("cannot write the plan to {}: {e}", out.display())))?;
    Ok(saved
        .to_give_again()
        .into_iter()
        .map(str::to_string)
        .collect())
}
