//! Cost in the plan: what the steps a plan creates, changes or deletes keep
//! running, priced from a dated table that ships with flow (prices.toml) and
//! can be overridden (`--prices FILE` or `FLOW_PRICES`).

use std::collections::BTreeMap;

use flow_providers::{Capacity, Registry, Values};
use flow_state::StepRecord;
use serde::Deserialize;

use crate::lang::load::Loaded;
use crate::lang::providers::recorded_provider;
pub use crate::plan::costs::{PlanCost, PriceMeta, StepCost};
use crate::plan::outputs::PlannedOutputs;
use crate::plan::{Action, Plan};

/// A price table given with `--prices` or `FLOW_PRICES` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    /// The file cannot be read.
    #[error("cannot read the price table {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a price table.
    #[error("the price table {} is not valid: {detail}", path.display())]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// What the TOML reader said.
        detail: String,
    },
}

impl PriceError {
    /// What to do about it.
    pub fn help(&self) -> &'static str {
        "give a TOML file with [meta], [instances] and [lustre] tables (see docs/operator.md), \
         or leave out --prices and FLOW_PRICES to use the built-in table"
    }
}

/// Something a price table has no price for (shown under the step, not an error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no price for {0}")]
pub struct NoPrice(pub String);

/// Hours in a month, for per-GB-month storage prices.
const HOURS_PER_MONTH: f64 = 730.0;

/// A price table.
#[derive(Debug, Clone, Deserialize)]
pub struct PriceTable {
    /// When and where the prices were taken.
    pub meta: PriceMeta,
    /// USD per hour, by instance type.
    #[serde(default)]
    pub instances: BTreeMap<String, f64>,
    /// USD per GB-month, by `DEPLOYMENT_TYPE` or `DEPLOYMENT_TYPE/THROUGHPUT`.
    #[serde(default)]
    pub lustre: BTreeMap<String, f64>,
}

impl PriceTable {
    /// The table that ships with flow.
    pub fn builtin() -> Self {
        toml::from_str(include_str!("prices.toml")).expect("the built-in price table parses")
    }

    /// The built-in table with the entries of `path` laid over it.
    pub fn with_overrides(path: &std::path::Path) -> Result<Self, PriceError> {
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        #[derive(Deserialize)]
        struct Partial {
            meta: Option<PriceMeta>,
            #[serde(default)]
            instances: BTreeMap<String, f64>,
            #[serde(default)]
            lustre: BTreeMap<String, f64>,
        }
        let over: Partial = toml::from_str(&text).map_err(|e| PriceError::Invalid {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        let mut table = Self::builtin();
        if let Some(meta) = over.meta {
            table.meta = meta;
        }
        table.instances.extend(over.instances);
        table.lustre.extend(over.lustre);
        Ok(table)
    }

    /// The table to use: `flag`, else `$FLOW_PRICES`, else the built-in one.
    pub fn choose(flag: Option<&std::path::Path>) -> Result<Self, PriceError> {
        match flag
            .map(std::path::Path::to_path_buf)
            .or_else(|| std::env::var_os("FLOW_PRICES").map(Into::into))
        {
            Some(p) => Self::with_overrides(&p),
            None => Ok(Self::builtin()),
        }
    }

    /// USD per hour for one capacity item, or the reason it has no price.
    pub fn hourly(&self, cap: &Capacity) -> Result<f64, NoPrice> {
        match cap {
            Capacity::Instances {
                instance_type,
                count,
            } => self
                .instances
                .get(instance_type)
                .map(|p| p * f64::from(*count))
                .ok_or_else(|| NoPrice(instance_type.clone())),
            Capacity::LustreStorage {
                gib,
                deployment_type,
                throughput,
            } => {
                let key = match throughput {
                    Some(t) => format!("{deployment_type}/{t}"),
                    None => deployment_type.clone(),
                };
                self.lustre
                    .get(&key)
                    .or_else(|| self.lustre.get(deployment_type))
                    .map(|p| p * *gib as f64 / HOURS_PER_MONTH)
                    .ok_or_else(|| NoPrice(format!("FSx for Lustre {key}")))
            }
        }
    }
}

fn describe(cap: &Capacity) -> String {
    match cap {
        Capacity::Instances {
            instance_type,
            count,
        } => format!("{count} × {instance_type}"),
        Capacity::LustreStorage {
            gib,
            deployment_type,
            throughput,
        } => match throughput {
            Some(t) => format!("FSx for Lustre {gib} GiB {deployment_type} {t} MB/s/TiB"),
            None => format!("FSx for Lustre {gib} GiB {deployment_type}"),
        },
    }
}

fn price(caps: &[Capacity], prices: &PriceTable, cost: &mut StepCost) -> f64 {
    let mut total = 0.0;
    for cap in caps {
        match prices.hourly(cap) {
            Ok(p) => total += p,
            Err(e) => cost.unpriced.push(e.to_string()),
        }
    }
    total
}

/// Attach costs to every change of `plan` whose provider reports capacity.
pub fn estimate(
    plan: &mut Plan,
    loaded: &Loaded,
    registry: &Registry,
    records: &BTreeMap<String, StepRecord>,
    prices: &PriceTable,
) {
    let mut total = PlanCost {
        prices: Some(prices.meta.clone()),
        ..PlanCost::default()
    };
    let outputs = PlannedOutputs::of_plan(records, plan);
    let mut costs = Vec::new();
    for (index, change) in plan.changes.iter().enumerate() {
        if change.action == Action::NoOp {
            continue;
        }
        let decl = loaded.workflow.step(&change.step);
        let provider = match decl {
            Some(decl) => loaded.provider(decl).clone(),
            // A step only state holds: priced by the kind it was applied with.
            None => match recorded_provider(registry, &change.step, &change.provider) {
                Ok(p) => p,
                Err(_) => continue,
            },
        };
        let files = flow_providers::ValidateContext {
            workdir: decl.map_or(loaded.workflow.dir.clone(), |d| {
                loaded.workflow.dir_of(d).to_path_buf()
            }),
        };
        let before_caps = records
            .get(&change.step)
            .filter(|r| r.applied)
            .map(|r| provider.capacity(&r.inputs, &files))
            .unwrap_or_default();
        let after_caps = match (change.action, decl) {
            (Action::Delete, _) | (_, None) => Vec::new(),
            (_, Some(decl)) => {
                let lookup = |s: &str, k: &str| outputs.lookup(s, k);
                let known: Values = loaded
                    .resolve_inputs(decl, &[0u8; 32], &lookup)
                    .map(|d| d.actual)
                    .unwrap_or_default();
                provider.capacity(&known, &files)
            }
        };
        if before_caps.is_empty() && after_caps.is_empty() {
            continue;
        }
        let mut cost = StepCost::default();
        cost.before_per_hour = price(&before_caps, prices, &mut cost);
        cost.after_per_hour = price(&after_caps, prices, &mut cost);
        cost.items = after_caps.iter().map(describe).collect();
        let delta = cost.after_per_hour - cost.before_per_hour;
        if change.action == Action::Replace {
            total.starts_per_hour += cost.after_per_hour;
            total.stops_per_hour += cost.before_per_hour;
        } else if delta >= 0.0 {
            total.starts_per_hour += delta;
        } else {
            total.stops_per_hour -= delta;
        }
        costs.push((index, cost));
    }
    for (index, cost) in costs {
        plan.changes[index].cost = Some(cost);
    }
    plan.cost = Some(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_table_prices_the_seed_instances() {
        let t = PriceTable::builtin();
        for ty in [
            "p4d.24xlarge",
            "p4de.24xlarge",
            "p5.48xlarge",
            "p6-b200.48xlarge",
            "trn1.32xlarge",
            "c5.2xlarge",
            "ml.m5.2xlarge",
        ] {
            assert!(t.instances.contains_key(ty), "{ty}");
        }
        let two = Capacity::Instances {
            instance_type: "p4d.24xlarge".into(),
            count: 2,
        };
        assert!((t.hourly(&two).unwrap() - 65.5452).abs() < 1e-6);
    }

    #[test]
    fn lustre_is_priced_per_gib_month() {
        let t = PriceTable::builtin();
        let fsx = Capacity::LustreStorage {
            gib: 1200,
            deployment_type: "PERSISTENT_1".into(),
            throughput: Some(200),
        };
        assert!((t.hourly(&fsx).unwrap() - 0.290 * 1200.0 / 730.0).abs() < 1e-9);
        let odd = Capacity::Instances {
            instance_type: "x9.huge".into(),
            count: 1,
        };
        assert_eq!(
            t.hourly(&odd).unwrap_err().to_string(),
            "no price for x9.huge"
        );
    }

    #[test]
    fn overrides_replace_single_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, "[instances]\n\"p4d.24xlarge\" = 10.0\n").unwrap();
        let t = PriceTable::with_overrides(&p).unwrap();
        assert_eq!(t.instances["p4d.24xlarge"], 10.0);
        assert!(t.instances.contains_key("p5.48xlarge"));
    }
}
