//! Plans: what apply would do, computed from the workflow and state alone.

pub mod compute;
pub mod model;
pub mod refine;
pub mod render;
pub mod saved;

pub use compute::{PlanRequest, compute_plan};
pub use model::{Action, Plan, StepChange};

/// The whole planning pipeline: compare the workflow with state, let
/// providers that look at real objects refine pending changes, then price
/// what the plan starts and stops (when a price table is given).
pub async fn make_plan(
    req: &PlanRequest<'_>,
    prices: Option<&crate::cost::PriceTable>,
) -> Result<Plan, crate::diag::Diagnostics> {
    let mut plan = compute_plan(req)?;
    refine::refine_plan(
        &mut plan,
        req.loaded,
        req.registry,
        req.records,
        req.salt,
        10,
    )
    .await;
    if let Some(prices) = prices {
        crate::cost::estimate(&mut plan, req.loaded, req.registry, req.records, prices);
    }
    Ok(plan)
}
