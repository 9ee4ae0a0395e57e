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
    /// The least USD per hour now, where counts range or a fleet is stopped
    /// (`before_per_hour` is then the most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_least_per_hour: Option<f64>,
    /// The least USD per hour after apply, where counts range or a fleet
    /// is stopped (`after_per_hour` is then the most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_least_per_hour: Option<f64>,
    /// What is priced, e.g. `2 × p4d.24xlarge`.
    pub items: Vec<String>,
    /// What could not be priced.
    pub unpriced: Vec<String>,
    /// The region the step runs in (its own, the workflow's, else
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`); `None` when none is set, and
    /// the table's default region priced it.
    #[serde(default)]
    pub region: Option<String>,
    /// What the step's region's prices lack and the default region's
    /// figures priced instead, e.g. `p5.48xlarge at us-east-1's price: not in
    /// the eu-west-1 table`.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The plan's total.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanCost {
    /// USD per hour the plan starts (creates, replaces, increases).
    pub starts_per_hour: f64,
    /// USD per hour the plan stops (deletes, decreases).
    pub stops_per_hour: f64,
    /// Whether a step's count ranges (a scaled queue): `starts_per_hour` is
    /// then the most and `starts_least_per_hour` the least.
    #[serde(default)]
    pub ranges: bool,
    /// USD per hour the plan starts at the least (see `ranges`).
    #[serde(default)]
    pub starts_least_per_hour: f64,
    /// The price table used.
    pub prices: Option<PriceMeta>,
    /// The regions the plan's steps were priced in, and how (empty in
    /// plans saved before prices were per region: those were all priced at
    /// `prices.region`).
    #[serde(default)]
    pub regions: Vec<RegionPriced>,
}

/// How the steps of one region were priced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegionPriced {
    /// The region; `None` for steps whose region is not set (priced at the
    /// table's default region).
    pub region: Option<String>,
    /// Whether the table has prices of this region; when not, its steps
    /// were priced at the default region's.
    pub has_table: bool,
    /// What its table lacks, priced at the default region's figures.
    #[serde(default)]
    pub borrowed: Vec<String>,
}

impl RegionPriced {
    /// This region in the total line: `us-west-2`, `eu-north-1 priced at
    /// us-east-1's, no table for it`, `eu-west-1 with p5.48xlarge at
    /// us-east-1's, not in its table`, `no region set, priced at us-east-1's`.
    fn describe(&self, default: &str) -> String {
        match &self.region {
            None => format!("no region set, priced at {default}'s"),
            Some(r) if !self.has_table => format!("{r} priced at {default}'s, no table for it"),
            Some(r) if self.borrowed.is_empty() => r.clone(),
            Some(r) => format!(
                "{r} with {} at {default}'s, not in its table",
                self.borrowed.join(", ")
            ),
        }
    }

    /// Priced from its own region's table alone.
    fn own_prices_only(&self) -> bool {
        self.region.is_some() && self.has_table && self.borrowed.is_empty()
    }
}

impl PlanCost {
    /// What the total was priced with, naming the regions actually used:
    /// `on-demand, us-west-2 prices of 2026-11-01` when every step was
    /// priced from one region's own table, else `on-demand, prices of
    /// 2026-11-01: us-west-2; eu-north-1 priced at us-east-1's, no table
    /// for it`. `None` without a price table.
    pub fn prices_note(&self) -> Option<String> {
        let meta = self.prices.as_ref()?;
        let note = match self.regions.as_slice() {
            [] => format!("on-demand, {} prices of {}", meta.region, meta.date),
            [only] if only.own_prices_only() => format!(
                "on-demand, {} prices of {}",
                only.region.as_deref().unwrap_or(&meta.region),
                meta.date
            ),
            all => format!(
                "on-demand, prices of {}: {}",
                meta.date,
                all.iter()
                    .map(|r| r.describe(&meta.region))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        Some(note)
    }

    /// Whether the plan's steps run in more than one region.
    pub fn mixed_regions(&self) -> bool {
        self.regions.len() > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_cost(regions: Vec<RegionPriced>) -> PlanCost {
        PlanCost {
            starts_per_hour: 1.0,
            stops_per_hour: 0.0,
            ranges: false,
            starts_least_per_hour: 0.0,
            prices: Some(PriceMeta {
                date: "2026-11-01".into(),
                currency: "USD".into(),
                region: "us-east-1".into(),
                source: String::new(),
            }),
            regions,
        }
    }

    fn region(name: Option<&str>, has_table: bool, borrowed: &[&str]) -> RegionPriced {
        RegionPriced {
            region: name.map(str::to_string),
            has_table,
            borrowed: borrowed.iter().map(|b| b.to_string()).collect(),
        }
    }

    #[test]
    fn one_region_with_its_own_prices_is_named_alone() {
        let cost = plan_cost(vec![region(Some("us-west-2"), true, &[])]);
        assert_eq!(
            cost.prices_note().unwrap(),
            "on-demand, us-west-2 prices of 2026-11-01"
        );
    }

    #[test]
    fn mixed_regions_and_fallbacks_are_each_named() {
        let cost = plan_cost(vec![
            region(None, true, &[]),
            region(Some("eu-north-1"), false, &[]),
            region(
                Some("eu-west-1"),
                true,
                &["p5.48xlarge", "FSx for Lustre SCRATCH_2"],
            ),
            region(Some("us-west-2"), true, &[]),
        ]);
        assert_eq!(
            cost.prices_note().unwrap(),
            "on-demand, prices of 2026-11-01: no region set, priced at us-east-1's; \
             eu-north-1 priced at us-east-1's, no table for it; \
             eu-west-1 with p5.48xlarge, FSx for Lustre SCRATCH_2 at us-east-1's, not in its table; \
             us-west-2"
        );
        let cost = plan_cost(vec![region(Some("eu-north-1"), false, &[])]);
        assert_eq!(
            cost.prices_note().unwrap(),
            "on-demand, prices of 2026-11-01: eu-north-1 priced at us-east-1's, no table for it"
        );
    }

    #[test]
    fn plans_saved_before_regions_still_load_and_say_what_they_said() {
        let saved = r#"{"starts_per_hour": 65.5452, "stops_per_hour": 0.0,
            "prices": {"date": "2026-11-01", "currency": "USD", "region": "us-east-1"}}"#;
        let cost: PlanCost = serde_json::from_str(saved).unwrap();
        assert!(cost.regions.is_empty());
        assert_eq!(
            cost.prices_note().unwrap(),
            "on-demand, us-east-1 prices of 2026-11-01"
        );
        let step = r#"{"before_per_hour": 0.0, "after_per_hour": 65.5452,
            "items": ["2 × p4d.24xlarge"], "unpriced": []}"#;
        let step: StepCost = serde_json::from_str(step).unwrap();
        assert_eq!(step.region, None);
        assert!(step.notes.is_empty());
    }
}
