//! `flow import FILE STEP ID`: adopt an existing object as a step's, without
//! changing it; state records it as if the step had created it, and the next
//! plan shows only how it differs from the workflow.

use flow_providers::Registry;
use flow_state::{Mutation, Status, StepRecord, now_secs};

use super::args::ImportArgs;
use super::common::{CliError, CliResult, Ui, load_workflow, records_of};
use super::run_plan::var_inputs;
use super::state_open::{Access, open, open_if_exists, target_with};
use crate::apply::sealing::kept_outputs;
use crate::plan::outputs::PlannedOutputs;

/// `flow import FILE STEP ID`.
pub async fn import(args: &ImportArgs, ui: Ui, registry: &Registry) -> CliResult<i32> {
    let wf_args = &args.workflow;
    let loaded = load_workflow(&wf_args.file, &var_inputs(wf_args), registry)?;
    let step = loaded.workflow.step(&args.step).ok_or_else(|| {
        CliError::help(
            format!(
                "there is no step `{}` in {}",
                args.step,
                wf_args.file.display()
            ),
            "name a step of the workflow; `flow graph FILE` lists them",
        )
    })?;
    let provider = loaded.provider(step).clone();
    let Some(what) = provider.import_id() else {
        return Err(CliError::help(
            format!("`{}` steps cannot be imported", step.provider),
            "import adopts a long-lived object (a stack, a cluster, a bucket, a secret…)",
        ));
    };
    let target = target_with(
        &wf_args.file,
        &wf_args.state,
        loaded.workflow.state.as_ref(),
    )?;
    // State is made only once there is something to record: a refused
    // import leaves no trace.
    let existing = open_if_exists(&target, &wf_args.state, "flow import", Access::Write).await?;
    let records = records_of(existing.as_deref())?;
    if let Some(rec) = records.get(&args.step) {
        if rec.in_flight.is_some() {
            return Err(CliError::help(
                format!("step `{}` has an operation in flight", args.step),
                "run `flow apply` first: it finishes what was started",
            ));
        }
        if rec.applied {
            let held = rec.resource_id.as_deref().unwrap_or("an object");
            return Err(CliError::help(
                format!("step `{}` already holds `{held}`", args.step),
                "a step holds one object; to adopt another, destroy this one first (`flow destroy FILE --target STEP`)",
            ));
        }
    }
    let outputs = PlannedOutputs::new(&records);
    let legacy_salt = existing.as_ref().map(|s| s.salt()).unwrap_or_default();
    let mut desired = loaded
        .resolve_inputs(step, &legacy_salt, &|s, k| outputs.lookup(s, k))
        .map_err(diagnostics)?;
    if !desired.is_known() {
        return Err(CliError::help(
            format!(
                "step `{}`'s inputs depend on steps not applied yet ({})",
                args.step,
                desired.unknown.join(", ")
            ),
            "apply or import the steps it depends on first",
        ));
    }
    let region = loaded.region_of(step);
    let ctx = loaded.unwatched_context(&args.step, region.clone());
    let applied = provider
        .import(&ctx, &args.id, &desired.actual)
        .await
        .map_err(|e| {
            let help = e
                .help
                .clone()
                .unwrap_or_else(|| format!("a `{}` step imports {what}", step.provider));
            CliError::help(loaded.redactor().redact(&e.message), help)
        })?;
    let store = match existing {
        Some(store) => store,
        None => {
            let store = open(&target, &wf_args.state, "flow import", Access::Write).await?;
            desired = loaded
                .resolve_inputs(step, &store.salt(), &|s, k| outputs.lookup(s, k))
                .map_err(diagnostics)?;
            store
        }
    };
    desired.add_content_digest(provider.as_ref(), loaded.workflow.dir_of(step));
    let mut rec = StepRecord::new(&args.step, &step.provider, now_secs());
    rec.status = Status::Applied;
    rec.applied = true;
    rec.resource_id = applied.id.clone();
    rec.inputs = desired.stored.clone();
    rec.outputs = kept_outputs(&applied.outputs, &loaded.redactor());
    rec.private = applied.private;
    rec.depends_on = loaded.deps_of(&args.step);
    rec.prevent_destroy = step.prevent_destroy;
    rec.region = region;
    store.backup()?;
    store.committer().commit(vec![Mutation::Put(rec)]).await?;
    if !ui.quiet {
        println!(
            "{} Imported `{}` into step `{}`; `flow plan {}` shows how it differs from the workflow.",
            ui.style.ok("✓"),
            args.id,
            args.step,
            wf_args.file.display()
        );
    }
    Ok(0)
}

/// Input problems as the command's error.
fn diagnostics(errs: Vec<crate::diag::Diag>) -> CliError {
    let mut diags = crate::diag::Diagnostics::default();
    errs.into_iter().for_each(|d| diags.push(d));
    CliError::Diagnostics(diags)
}
