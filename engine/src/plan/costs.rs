//! What a plan says about cost: each step's price per hour before and after,
//! and the plan's total. The `cost` module fills them in from a price table;
//! the plan only carries and shows them.

use serde::{Deserialize, Serialize};

/// Where a price table's figures come from.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct PriceMeta {
    /// The day the prices were taken.
    pub date: String,
    /// Currency code.
    pub currency: String,
    /// The region they are for.
    pub region: String,
    /// Where they come from.
    #[serde(default)]
    pub source: String,
}

/// A step's cost before and after the plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepCost {
    /// USD per hour now (what state recorded).
    pub before_per_hour: f64,
    /// USD per hour after apply.
    pub after_per_hour: f64,
    /// What is priced, e.g. `2 × p4d.24xlarge`.
    pub items: Vec<String>,
    /// What could not be priced.
    pub unpriced: Vec<String>,
}

/// The plan's total.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanCost {
    /// USD per hour the plan starts (creates, replaces, increases).
    pub starts_per_hour: f64,
    /// USD per hour the plan stops (deletes, decreases).
    pub stops_per_hour: f64,
    /// The price table used.
    pub prices: Option<PriceMeta>,
}
