//! The planning pipeline shared by `plan`, `apply` and saved-plan `apply`:
//! compare the workflow with state (`plan::compute`), let providers that look
//! at real objects refine pending changes (`plan::refine`), then price what
//! the plan starts and stops (`cost`). It sits above both `plan` and `cost`,
//! so neither needs the other's pipeline.

use crate::diag::Diagnostics;
use crate::lang::load::Loaded;
use crate::lang::resolve::Lookup;
use crate::plan::model::{DriftFound, StepDrift};
use crate::plan::outputs::PlannedOutputs;
use crate::plan::{Action, Plan, PlanRequest, compute_plan, refine};

/// Loads the workflow again, with the step outputs known now.
pub type Reload<'a> = dyn Fn(&dyn Fn(&str, &str) -> Lookup) -> Result<Loaded, Diagnostics> + 'a;

/// Expand the steps whose `for_each` was deferred as far as state allows:
/// plan what is known, give the recorded outputs of the steps that plan
/// leaves alone, and load again (through `reload`), until no more expands.
/// `req.loaded` is the workflow as first loaded; the result replaces it.
pub fn settle(req: &PlanRequest<'_>, reload: &Reload<'_>) -> Result<Loaded, Diagnostics> {
    let mut loaded = req.loaded.clone();
    // Each round expands at least one step, or stops.
    for _ in 0..=req.loaded.workflow.steps.len() {
        if loaded.workflow.deferred.is_empty() {
            break;
        }
        let plan = compute_plan(&PlanRequest {
            loaded: &loaded,
            ..*req
        })?;
        let known = PlannedOutputs::of_plan(req.records, &plan).keeping(req.registry);
        let next = reload(&|step, key| known.lookup(step, key))?;
        if next.workflow.deferred.len() >= loaded.workflow.deferred.len() {
            break;
        }
        loaded = next;
    }
    Ok(loaded)
}

/// The whole planning pipeline: compare the workflow with state (as refresh
/// found it; `drift` is what refresh saw), let providers refine pending
/// changes (offline from their inputs; looking at real objects too when
/// `look`, which an offline plan, `--refresh=false`, is not), then price
/// what the plan starts and stops (when a price table is given).
pub async fn make_plan(
    req: &PlanRequest<'_>,
    prices: Option<&crate::cost::PriceTable>,
    drift: Vec<StepDrift>,
    look: bool,
) -> Result<Plan, crate::diag::Diagnostics> {
    let mut plan = compute_plan(req)?;
    explain_drift(&mut plan, drift);
    let parallelism = if look { 10 } else { 0 };
    let refused = refine::refine_plan(
        &mut plan,
        req.loaded,
        req.records,
        req.legacy_salt,
        parallelism,
    )
    .await;
    if !refused.is_empty() {
        return Err(crate::diag::Diagnostics { items: refused });
    }
    if let Some(prices) = prices {
        crate::cost::estimate(&mut plan, req.loaded, req.registry, req.records, prices);
    }
    Ok(plan)
}

/// Keep what refresh found in the plan, and say why a step changes when it
/// is because of it.
fn explain_drift(plan: &mut Plan, drift: Vec<StepDrift>) {
    for d in &drift {
        let Some(change) = plan.changes.iter_mut().find(|c| c.step == d.step) else {
            continue;
        };
        match (&d.found, change.action) {
            (DriftFound::Deleted, Action::Create) => {
                change.reason = "deleted outside flow".into();
            }
            (DriftFound::Changed { attributes }, Action::Update | Action::Replace)
                if change.reason == "inputs changed" =>
            {
                let drifted = |name: &str| attributes.iter().any(|a| a.name == name);
                change.reason = if change.inputs.iter().all(|i| drifted(&i.name)) {
                    "changed outside flow".into()
                } else {
                    "inputs changed, and changed outside flow".into()
                };
            }
            _ => {}
        }
    }
    plan.drift = drift;
}
