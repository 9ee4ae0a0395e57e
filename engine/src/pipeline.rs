//! The planning pipeline shared by `plan`, `apply` and saved-plan `apply`:
//! compare the workflow with state (`plan::compute`), let providers that look
//! at real objects refine pending changes (`plan::refine`), then price what
//! the plan starts and stops (`cost`). It sits above both `plan` and `cost`,
//! so neither needs the other's pipeline.

use crate::plan::{Plan, PlanRequest, compute_plan, refine};

/// The whole planning pipeline: compare the workflow with state, let
/// providers that look at real objects refine pending changes, then price
/// what the plan starts and stops (when a price table is given).
pub async fn make_plan(
    req: &PlanRequest<'_>,
    prices: Option<&crate::cost::PriceTable>,
) -> Result<Plan, crate::diag::Diagnostics> {
    let mut plan = compute_plan(req)?;
    refine::refine_plan(&mut plan, req.loaded, req.records, req.salt, 10).await;
    if let Some(prices) = prices {
        crate::cost::estimate(&mut plan, req.loaded, req.registry, req.records, prices);
    }
    Ok(plan)
}
