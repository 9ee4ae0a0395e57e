//! Cost in the plan: what the steps a plan creates, changes or deletes keep
//! running, each priced in its own region from a dated table that ships with
//! flow (prices.toml) and can be overridden (`--prices FILE` or
//! `FLOW_PRICES`).

mod table;

use std::collections::BTreeMap;

use flow_providers::{Capacity, Registry, Values};
use flow_state::StepRecord;

use crate::lang::load::Loaded;
use crate::lang::providers::recorded_provider;
pub use crate::plan::costs::{PlanCost, PriceMeta, RegionPriced, StepCost};
use crate::plan::outputs::PlannedOutputs;
use crate::plan::{Action, Plan};
pub use table::{NoPrice, PriceError, PriceTable, PricedBy, RegionPrices, priced_thing};

/// The region a step runs in, as the AWS SDK would find it: `declared`
/// (the step's own region, else the workflow's), else `AWS_REGION`, else
/// `AWS_DEFAULT_REGION`, read through `env`; empty values count as unset.
/// `None` when none is set (the SDK would then ask the profile, which flow
/// does not read for pricing).
pub fn step_region(
    declared: Option<String>,
    env: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    declared
        .into_iter()
        .chain(
            ["AWS_REGION", "AWS_DEFAULT_REGION"]
                .into_iter()
                .filter_map(env),
        )
        .map(|r| r.trim().to_string())
        .find(|r| !r.is_empty())
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

/// What pricing one step's capacity found, besides the figures.
#[derive(Default)]
struct Priced {
    /// How many items got a price.
    items: usize,
    /// What the step's region's table lacks (priced at the default region's).
    borrowed: Vec<String>,
}

/// USD per hour for `caps` in `region` (the default region's when `None`),
/// noting on `cost` what was priced at the default region's figures and
/// what has no price at all.
fn price(
    caps: &[Capacity],
    prices: &PriceTable,
    region: Option<&str>,
    cost: &mut StepCost,
    priced: &mut Priced,
) -> f64 {
    let default = &prices.meta.region;
    let mut total = 0.0;
    for cap in caps {
        let found = match region {
            Some(r) => prices.hourly_in(r, cap),
            None => prices.hourly(cap).map(|p| (p, PricedBy::Own)),
        };
        let (p, by) = match found {
            Ok(found) => found,
            Err(e) => {
                push_new(&mut cost.unpriced, e.to_string());
                continue;
            }
        };
        total += p;
        priced.items += 1;
        let region = region.unwrap_or(default);
        match by {
            PricedBy::Own => {}
            PricedBy::NoTable => push_new(
                &mut cost.notes,
                format!("priced at {default}'s: the price table has no {region} prices"),
            ),
            PricedBy::NotInTable => {
                let thing = priced_thing(cap);
                push_new(
                    &mut cost.notes,
                    format!("{thing} at {default}'s price: not in the {region} table"),
                );
                push_new(&mut priced.borrowed, thing);
            }
        }
    }
    total
}

fn push_new(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Attach costs to every change of `plan` whose provider reports capacity,
/// each step priced in its own region ([`step_region`], reading the
/// process environment).
pub fn estimate(
    plan: &mut Plan,
    loaded: &Loaded,
    registry: &Registry,
    records: &BTreeMap<String, StepRecord>,
    prices: &PriceTable,
) {
    estimate_with_env(plan, loaded, registry, records, prices, &|k| {
        std::env::var(k).ok()
    });
}

/// [`estimate`] with the environment read through `env`.
pub fn estimate_with_env(
    plan: &mut Plan,
    loaded: &Loaded,
    registry: &Registry,
    records: &BTreeMap<String, StepRecord>,
    prices: &PriceTable,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let mut total = PlanCost {
        prices: Some(prices.meta.clone()),
        ..PlanCost::default()
    };
    let mut regions: BTreeMap<Option<String>, RegionPriced> = BTreeMap::new();
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
                loaded.workflow.dir_of(d).clone()
            }),
        };
        let record = records.get(&change.step);
        let before_caps = record
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
        // Where the workflow puts the step; a step only state holds, where
        // it was applied.
        let declared = match decl {
            Some(decl) => loaded.region_of(decl),
            None => record.and_then(|r| r.region.clone()),
        };
        let region = step_region(declared, env);
        let mut cost = StepCost {
            region: region.clone(),
            ..StepCost::default()
        };
        let mut priced = Priced::default();
        cost.before_per_hour = price(
            &before_caps,
            prices,
            region.as_deref(),
            &mut cost,
            &mut priced,
        );
        cost.after_per_hour = price(
            &after_caps,
            prices,
            region.as_deref(),
            &mut cost,
            &mut priced,
        );
        cost.items = after_caps.iter().map(describe).collect();
        if priced.items > 0 {
            let entry = regions
                .entry(region.clone())
                .or_insert_with(|| RegionPriced {
                    has_table: region.as_deref().is_none_or(|r| prices.region(r).is_some()),
                    region: region.clone(),
                    borrowed: Vec::new(),
                });
            for thing in priced.borrowed {
                push_new(&mut entry.borrowed, thing);
            }
        }
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
    total.regions = regions.into_values().collect();
    plan.cost = Some(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_workflow_region_comes_first() {
        let vars = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_DEFAULT_REGION", "ap-northeast-1"),
        ];
        assert_eq!(
            step_region(Some("us-west-2".into()), env(&vars)).as_deref(),
            Some("us-west-2")
        );
    }

    #[test]
    fn aws_region_is_used_when_the_workflow_names_none() {
        let vars = [
            ("AWS_REGION", "us-west-2"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
        ];
        assert_eq!(step_region(None, env(&vars)).as_deref(), Some("us-west-2"));
        let vars = [("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "eu-west-1")];
        assert_eq!(step_region(None, env(&vars)).as_deref(), Some("eu-west-1"));
        assert_eq!(step_region(None, env(&[])), None);
    }

    /// A workflow of `steps`, each `(name, region, instance type)`, planned
    /// from empty state and priced with the built-in table and `vars` as
    /// the environment.
    fn priced_plan(
        workflow_region: Option<&str>,
        steps: &[(&str, Option<&str>, &str)],
        vars: &[(&str, &str)],
    ) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("[workflow]\nname = \"costed\"\n");
        if let Some(r) = workflow_region {
            text.push_str(&format!("region = \"{r}\"\n"));
        }
        for (name, region, ty) in steps {
            text.push_str(&format!("\n[steps.{name}]\nprovider = \"eks.nodegroup\"\n"));
            if let Some(r) = region {
                text.push_str(&format!("region = \"{r}\"\n"));
            }
            text.push_str(&format!(
                "[steps.{name}.inputs]\ncluster = \"c\"\nname = \"{name}\"\n\
                 instance_types = [\"{ty}\"]\ndesired_size = 2\nsubnet_ids = [\"subnet-1\"]\n"
            ));
        }
        let path = dir.path().join("wf.toml");
        std::fs::write(&path, text).unwrap();
        let registry = flow_providers::Registry::builtin();
        let no_env = |_: &str| None;
        let loaded = crate::lang::load::load(&path, &Default::default(), &registry, &no_env)
            .unwrap_or_else(|d| panic!("{d:?}"));
        let records = BTreeMap::new();
        let req = crate::plan::PlanRequest {
            loaded: &loaded,
            registry: &registry,
            records: &records,
            legacy_salt: &[0u8; 32],
            serial: 0,
            targets: &[],
            replace: &[],
        };
        let mut plan = crate::plan::compute_plan(&req).unwrap();
        let vars = env(vars);
        estimate_with_env(
            &mut plan,
            &loaded,
            &registry,
            &records,
            &PriceTable::builtin(),
            &vars,
        );
        plan
    }

    fn step_cost<'a>(plan: &'a Plan, step: &str) -> &'a StepCost {
        plan.changes
            .iter()
            .find(|c| c.step == step)
            .and_then(|c| c.cost.as_ref())
            .unwrap()
    }

    #[test]
    fn a_us_west_2_step_is_priced_from_the_us_west_2_table() {
        let plan = priced_plan(Some("us-west-2"), &[("gpu", None, "p4d.24xlarge")], &[]);
        let table = PriceTable::builtin();
        let cost = step_cost(&plan, "gpu");
        assert_eq!(cost.region.as_deref(), Some("us-west-2"));
        let west = table.regions["us-west-2"].instances["p4d.24xlarge"];
        assert!((cost.after_per_hour - 2.0 * west).abs() < 1e-9);
        assert!(cost.notes.is_empty(), "{:?}", cost.notes);
        let total = plan.cost.as_ref().unwrap();
        assert_eq!(
            total.prices_note().unwrap(),
            "on-demand, us-west-2 prices of 2026-11-01"
        );
    }

    #[test]
    fn a_tokyo_step_costs_what_tokyo_charges() {
        let plan = priced_plan(
            Some("ap-northeast-1"),
            &[("gpu", None, "p4d.24xlarge")],
            &[],
        );
        let cost = step_cost(&plan, "gpu");
        assert!((cost.after_per_hour - 2.0 * 30.09784).abs() < 1e-9);
    }

    #[test]
    fn a_region_without_a_table_falls_back_and_says_so() {
        let plan = priced_plan(
            None,
            &[
                ("west", Some("us-west-2"), "p4d.24xlarge"),
                ("north", Some("eu-north-1"), "p4d.24xlarge"),
            ],
            &[],
        );
        let north = step_cost(&plan, "north");
        let east = PriceTable::builtin().default.instances["p4d.24xlarge"];
        assert!((north.after_per_hour - 2.0 * east).abs() < 1e-9);
        assert_eq!(
            north.notes,
            ["priced at us-east-1's: the price table has no eu-north-1 prices"]
        );
        let total = plan.cost.as_ref().unwrap();
        assert!(total.mixed_regions());
        assert_eq!(
            total.prices_note().unwrap(),
            "on-demand, prices of 2026-11-01: eu-north-1 priced at us-east-1's, \
             no table for it; us-west-2"
        );
    }

    #[test]
    fn a_type_missing_from_its_region_is_named() {
        let plan = priced_plan(Some("eu-west-1"), &[("gpu", None, "p5.48xlarge")], &[]);
        let cost = step_cost(&plan, "gpu");
        assert_eq!(
            cost.notes,
            ["p5.48xlarge at us-east-1's price: not in the eu-west-1 table"]
        );
        assert_eq!(
            plan.cost.as_ref().unwrap().prices_note().unwrap(),
            "on-demand, prices of 2026-11-01: eu-west-1 with p5.48xlarge at us-east-1's, \
             not in its table"
        );
    }

    #[test]
    fn aws_region_prices_a_workflow_that_names_none() {
        let plan = priced_plan(
            None,
            &[("gpu", None, "p4d.24xlarge")],
            &[("AWS_REGION", "ap-northeast-1")],
        );
        assert_eq!(
            step_cost(&plan, "gpu").region.as_deref(),
            Some("ap-northeast-1")
        );
        assert_eq!(
            plan.cost.as_ref().unwrap().prices_note().unwrap(),
            "on-demand, ap-northeast-1 prices of 2026-11-01"
        );
        let plan = priced_plan(None, &[("gpu", None, "p4d.24xlarge")], &[]);
        assert_eq!(step_cost(&plan, "gpu").region, None);
        assert_eq!(
            plan.cost.as_ref().unwrap().prices_note().unwrap(),
            "on-demand, prices of 2026-11-01: no region set, priced at us-east-1's"
        );
    }
}
