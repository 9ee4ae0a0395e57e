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
        Capacity::Scaled {
            instance_type,
            min,
            max,
            stopped,
        } => {
            let count = if min == max {
                max.to_string()
            } else {
                format!("{min}–{max}")
            };
            let stopped = if *stopped { ", stopped" } else { "" };
            format!("{count} × {instance_type}{stopped}")
        }
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

/// USD per hour at the least and at the most.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Span {
    least: f64,
    most: f64,
}

impl Span {
    /// The least when it is not the most (counts range, a fleet stopped).
    fn least_if_less(self) -> Option<f64> {
        (self.least < self.most).then_some(self.least)
    }
}

/// What `cap`, priced `p` at its most, costs at the least and the most:
/// a scaled queue from its `min` up, nothing while its fleet is stopped.
fn span_of(cap: &Capacity, p: f64) -> Span {
    match cap {
        Capacity::Scaled { stopped: true, .. } => Span::default(),
        Capacity::Scaled { min, max, .. } if *max > 0 => Span {
            least: p * f64::from(*min) / f64::from(*max),
            most: p,
        },
        _ => Span { least: p, most: p },
    }
}

/// USD per hour for `caps` in `region` (the default region's when `None`),
/// at the least and the most, noting on `cost` what was priced at the
/// default region's figures and what has no price at all.
fn price(
    caps: &[Capacity],
    prices: &PriceTable,
    region: Option<&str>,
    cost: &mut StepCost,
    priced: &mut Priced,
) -> Span {
    let default = &prices.meta.region;
    let mut total = Span::default();
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
        let span = span_of(cap, p);
        total.least += span.least;
        total.most += span.most;
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
    let outputs = PlannedOutputs::of_plan(records, plan).keeping(registry);
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
            .map(|r| provider.capacity_applied(&r.inputs, &r.outputs, &files))
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
        let before = price(
            &before_caps,
            prices,
            region.as_deref(),
            &mut cost,
            &mut priced,
        );
        let after = price(
            &after_caps,
            prices,
            region.as_deref(),
            &mut cost,
            &mut priced,
        );
        cost.before_per_hour = before.most;
        cost.before_least_per_hour = before.least_if_less();
        cost.after_per_hour = after.most;
        cost.after_least_per_hour = after.least_if_less();
        // What it keeps running after the plan; a delete, what it stops.
        let shown = if change.action == Action::Delete {
            &before_caps
        } else {
            &after_caps
        };
        cost.items = shown.iter().map(describe).collect();
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
        let delta = after.most - before.most;
        if after.least < after.most {
            total.ranges = true;
        }
        if change.action == Action::Replace {
            total.starts_per_hour += after.most;
            total.starts_least_per_hour += after.least;
            total.stops_per_hour += before.most;
        } else if delta >= 0.0 {
            total.starts_per_hour += delta;
            total.starts_least_per_hour += (after.least - before.least).max(0.0);
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
mod tests;
