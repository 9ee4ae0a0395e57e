//! The price table: the default region's prices at the top level, other
//! regions' under `[regions."REGION"]`, read from prices.toml and laid over
//! with a file of one's own (`--prices FILE` or `FLOW_PRICES`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flow_providers::Capacity;
use serde::Deserialize;

use crate::plan::costs::PriceMeta;

/// A price table given with `--prices` or `FLOW_PRICES` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    /// The file cannot be read.
    #[error("cannot read the price table {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a price table.
    #[error("the price table {} is not valid: {detail}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What the TOML reader said.
        detail: String,
    },
}

impl PriceError {
    /// What to do about it.
    pub fn help(&self) -> &'static str {
        "give a TOML file with [meta], [instances] and [lustre] tables, and \
         [regions.\"REGION\".instances] / [regions.\"REGION\".lustre] for other regions \
         (see docs/operator.md), or leave out --prices and FLOW_PRICES to use the built-in table"
    }
}

/// Something a price table has no price for (shown under the step, not an error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no price for {0}")]
pub struct NoPrice(pub String);

/// Hours in a month, for per-GB-month storage prices.
const HOURS_PER_MONTH: f64 = 730.0;

/// One region's prices; a region other than the default may list only some.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RegionPrices {
    /// USD per hour, by instance type.
    #[serde(default)]
    pub instances: BTreeMap<String, f64>,
    /// USD per GB-month, by `DEPLOYMENT_TYPE` or `DEPLOYMENT_TYPE/THROUGHPUT`.
    #[serde(default)]
    pub lustre: BTreeMap<String, f64>,
}

impl RegionPrices {
    /// USD per hour for one capacity item, or the reason it has no price here.
    pub fn hourly(&self, cap: &Capacity) -> Result<f64, NoPrice> {
        match cap {
            Capacity::Instances {
                instance_type,
                count,
            } => self
                .instances
                .get(instance_type)
                .map(|p| p * f64::from(*count))
                .ok_or_else(|| NoPrice(priced_thing(cap))),
            // At the most: the range's least is worked out from it.
            Capacity::Scaled {
                instance_type, max, ..
            } => self
                .instances
                .get(instance_type)
                .map(|p| p * f64::from(*max))
                .ok_or_else(|| NoPrice(priced_thing(cap))),
            Capacity::LustreStorage {
                gib,
                deployment_type,
                throughput,
            } => self
                .lustre
                .get(&lustre_key(deployment_type, *throughput))
                .or_else(|| self.lustre.get(deployment_type))
                .map(|p| p * *gib as f64 / HOURS_PER_MONTH)
                .ok_or_else(|| NoPrice(priced_thing(cap))),
        }
    }

    /// `other`'s entries laid over these.
    fn extend(&mut self, other: RegionPrices) {
        self.instances.extend(other.instances);
        self.lustre.extend(other.lustre);
    }
}

fn lustre_key(deployment_type: &str, throughput: Option<u32>) -> String {
    match throughput {
        Some(t) => format!("{deployment_type}/{t}"),
        None => deployment_type.to_string(),
    }
}

/// What a table prices `cap` by: its instance type, or `FSx for Lustre KEY`.
pub fn priced_thing(cap: &Capacity) -> String {
    match cap {
        Capacity::Instances { instance_type, .. } | Capacity::Scaled { instance_type, .. } => {
            instance_type.clone()
        }
        Capacity::LustreStorage {
            deployment_type,
            throughput,
            ..
        } => format!(
            "FSx for Lustre {}",
            lustre_key(deployment_type, *throughput)
        ),
    }
}

/// Whose figure priced an item in a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PricedBy {
    /// The region's own table (or the default region's, for the default region).
    Own,
    /// The default region's: the table has no prices of the region at all.
    NoTable,
    /// The default region's: the region's table lacks the item.
    NotInTable,
}

/// A price table: the default region's (`meta.region`) prices, and other
/// regions' by region code.
#[derive(Debug, Clone, Deserialize)]
pub struct PriceTable {
    /// When the prices were taken, and the default region.
    pub meta: PriceMeta,
    /// The default region's prices (the file's top-level `[instances]` and `[lustre]`).
    #[serde(flatten)]
    pub default: RegionPrices,
    /// Other regions' prices (`[regions."us-west-2".instances]`), each maybe partial.
    #[serde(default)]
    pub regions: BTreeMap<String, RegionPrices>,
}

/// A price table file laid over the built-in one: every part optional.
#[derive(Deserialize)]
struct Partial {
    meta: Option<PriceMeta>,
    #[serde(flatten)]
    prices: RegionPrices,
    #[serde(default)]
    regions: BTreeMap<String, RegionPrices>,
}

impl PriceTable {
    /// The table that ships with flow.
    pub fn builtin() -> Self {
        let mut table: Self =
            toml::from_str(include_str!("prices.toml")).expect("the built-in price table parses");
        if let Some(own) = table.regions.remove(&table.meta.region) {
            table.default.extend(own);
        }
        table
    }

    /// The built-in table with the entries of `path` laid over it.
    pub fn with_overrides(path: &Path) -> Result<Self, PriceError> {
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        let over: Partial = toml::from_str(&text).map_err(|e| PriceError::Invalid {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        let mut table = Self::builtin();
        table.lay_over(over);
        Ok(table)
    }

    /// Lay `over` over this table. Its top-level entries are its
    /// `[meta]` region's (this table's default region when it has no
    /// `[meta]`); a `[meta]` naming another region makes that the default,
    /// and the old default one region among the others.
    fn lay_over(&mut self, over: Partial) {
        if let Some(meta) = over.meta {
            if meta.region != self.meta.region {
                let old = std::mem::take(&mut self.default);
                self.regions
                    .entry(self.meta.region.clone())
                    .or_default()
                    .extend(old);
                self.default = self.regions.remove(&meta.region).unwrap_or_default();
            }
            self.meta = meta;
        }
        self.default.extend(over.prices);
        for (region, prices) in over.regions {
            if region == self.meta.region {
                self.default.extend(prices);
            } else {
                self.regions.entry(region).or_default().extend(prices);
            }
        }
    }

    /// The table to use: `flag`, else `$FLOW_PRICES`, else the built-in one.
    pub fn choose(flag: Option<&Path>) -> Result<Self, PriceError> {
        match flag
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("FLOW_PRICES").map(Into::into))
        {
            Some(p) => Self::with_overrides(&p),
            None => Ok(Self::builtin()),
        }
    }

    /// The prices of `region`, when the table has any.
    pub fn region(&self, region: &str) -> Option<&RegionPrices> {
        if region == self.meta.region {
            Some(&self.default)
        } else {
            self.regions.get(region)
        }
    }

    /// USD per hour for one capacity item at the default region's prices.
    pub fn hourly(&self, cap: &Capacity) -> Result<f64, NoPrice> {
        self.default.hourly(cap)
    }

    /// USD per hour for one capacity item in `region`, and whose figure it
    /// is: the region's own, else the default region's (never silently).
    pub fn hourly_in(&self, region: &str, cap: &Capacity) -> Result<(f64, PricedBy), NoPrice> {
        let (own, fallback) = match self.region(region) {
            Some(own) => (own.hourly(cap), PricedBy::NotInTable),
            None => return self.hourly(cap).map(|p| (p, PricedBy::NoTable)),
        };
        match own {
            Ok(p) => Ok((p, PricedBy::Own)),
            Err(e) => self.hourly(cap).map(|p| (p, fallback)).map_err(|_| e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ty: &str, count: u32) -> Capacity {
        Capacity::Instances {
            instance_type: ty.into(),
            count,
        }
    }

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
            assert!(t.default.instances.contains_key(ty), "{ty}");
        }
        assert!((t.hourly(&nodes("p4d.24xlarge", 2)).unwrap() - 43.915284).abs() < 1e-6);
    }

    #[test]
    fn the_builtin_table_has_the_regions_it_promises() {
        let t = PriceTable::builtin();
        assert_eq!(t.meta.region, "us-east-1");
        assert!(!t.regions.contains_key("us-east-1"));
        for region in ["us-west-2", "us-east-2", "eu-west-1", "ap-northeast-1"] {
            let r = t.region(region).unwrap_or_else(|| panic!("{region}"));
            for ty in ["p4d.24xlarge", "c5.2xlarge", "m5.xlarge", "g5.xlarge"] {
                assert!(r.instances.contains_key(ty), "{region} {ty}");
            }
            // Never cheaper than the default region's list price.
            for (ty, price) in &r.instances {
                assert!(*price >= t.default.instances[ty] - 1e-9, "{region} {ty}");
            }
        }
        assert!(t.region("eu-north-1").is_none());
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
        assert_eq!(
            t.hourly(&nodes("x9.huge", 1)).unwrap_err().to_string(),
            "no price for x9.huge"
        );
    }

    #[test]
    fn a_step_in_a_region_with_a_table_is_priced_from_it() {
        let t = PriceTable::builtin();
        let (p, by) = t
            .hourly_in("ap-northeast-1", &nodes("p4d.24xlarge", 2))
            .unwrap();
        assert_eq!(by, PricedBy::Own);
        assert!((p - 2.0 * t.regions["ap-northeast-1"].instances["p4d.24xlarge"]).abs() < 1e-9);
        assert!(p > t.hourly(&nodes("p4d.24xlarge", 2)).unwrap());
        let (_, by) = t.hourly_in("us-east-1", &nodes("p4d.24xlarge", 1)).unwrap();
        assert_eq!(by, PricedBy::Own);
    }

    #[test]
    fn what_a_region_lacks_is_priced_at_the_default_and_says_so() {
        let t = PriceTable::builtin();
        let b200 = nodes("p6-b200.48xlarge", 1);
        let default = t.hourly(&b200).unwrap();
        assert_eq!(
            t.hourly_in("eu-west-1", &b200).unwrap(),
            (default, PricedBy::NotInTable)
        );
        assert_eq!(
            t.hourly_in("eu-north-1", &b200).unwrap(),
            (default, PricedBy::NoTable)
        );
        assert_eq!(
            t.hourly_in("eu-west-1", &nodes("x9.huge", 1))
                .unwrap_err()
                .to_string(),
            "no price for x9.huge"
        );
    }

    #[test]
    fn overrides_replace_single_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, "[instances]\n\"p4d.24xlarge\" = 10.0\n").unwrap();
        let t = PriceTable::with_overrides(&p).unwrap();
        assert_eq!(t.default.instances["p4d.24xlarge"], 10.0);
        assert!(t.default.instances.contains_key("p5.48xlarge"));
        assert_ne!(t.regions["us-west-2"].instances["p4d.24xlarge"], 10.0);
    }

    #[test]
    fn overrides_reach_per_region_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "[regions.\"us-west-2\".instances]\n\"p4d.24xlarge\" = 11.0\n\
             [regions.\"eu-north-1\".instances]\n\"c5.2xlarge\" = 0.5\n\
             [regions.\"us-east-1\".instances]\n\"m5.large\" = 0.1\n",
        )
        .unwrap();
        let t = PriceTable::with_overrides(&p).unwrap();
        assert_eq!(t.regions["us-west-2"].instances["p4d.24xlarge"], 11.0);
        assert!(t.regions["us-west-2"].instances.contains_key("p5.48xlarge"));
        assert_eq!(t.regions["eu-north-1"].instances.len(), 1);
        // The default region's entries live at the top level, however given.
        assert_eq!(t.default.instances["m5.large"], 0.1);
        assert!(!t.regions.contains_key("us-east-1"));
    }

    #[test]
    fn an_override_with_another_default_region_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "[meta]\ndate = \"2027-01-01\"\ncurrency = \"USD\"\nregion = \"eu-west-1\"\n\
             [instances]\n\"c5.2xlarge\" = 0.4\n",
        )
        .unwrap();
        let t = PriceTable::with_overrides(&p).unwrap();
        assert_eq!(t.meta.region, "eu-west-1");
        assert_eq!(t.default.instances["c5.2xlarge"], 0.4);
        // The rest of eu-west-1's built-in prices stay; us-east-1's become a region.
        assert!(t.default.instances.contains_key("p4d.24xlarge"));
        assert_eq!(t.regions["us-east-1"].instances["c5.2xlarge"], 0.34);
        assert!(!t.regions.contains_key("eu-west-1"));
    }
}
