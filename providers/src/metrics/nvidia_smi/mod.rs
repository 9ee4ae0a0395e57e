//! What `nvidia-smi` prints for a GPU health check, read into values a gate
//! can judge, in the two forms check scripts run:
//!
//! - `nvidia-smi --query-gpu=FIELDS --format=csv[,nounits]`: one row per
//!   GPU under a header that names each column by its canonical field
//!   (`clocks.current.sm [MHz]` even where the command said `clocks.sm`),
//!   read by [`csv`]; `csv,noheader` cannot be read, as nothing then says
//!   which column is which;
//! - `nvidia-smi -q` (or `-q -d ECC,TEMPERATURE,...`): a section per GPU
//!   (`GPU 00000000:10:1C.0`) of indented `Key : Value` lines, read by
//!   [`query`].
//!
//! A field a GPU prints as `N/A` or `[Not Supported]` is absent, not zero,
//! and so is every value that needs it: a gate on it then fails saying no
//! value was found, never passes. When a script prints both forms, the
//! `-q` sections are read.

mod csv;
mod query;

use serde_json::Value;

use super::{Kind, OutputSpec, Reading, number};

/// What the reader gives.
pub(super) const OUTPUTS: &[OutputSpec] = &[
    OutputSpec {
        name: "gpus",
        kind: Kind::Number,
        about: "the GPUs listed (`-q`'s `Attached GPUs`, else its GPU sections or the query's rows; 0 for `No devices were found`)",
    },
    OutputSpec {
        name: "max_temperature_c",
        kind: Kind::Number,
        about: "the hottest GPU's temperature, °C (`temperature.gpu`, `GPU Current Temp`)",
    },
    OutputSpec {
        name: "ecc_uncorrected_volatile",
        kind: Kind::Number,
        about: "uncorrectable ECC errors since the driver loaded, summed over the GPUs (`ecc.errors.uncorrected.volatile.total`; `-q`'s Volatile `… Uncorrectable …` counts)",
    },
    OutputSpec {
        name: "ecc_uncorrected_aggregate",
        kind: Kind::Number,
        about: "uncorrectable ECC errors over the GPUs' lifetime, summed (`ecc.errors.uncorrected.aggregate.total`; `-q`'s Aggregate counts)",
    },
    OutputSpec {
        name: "retired_pages_pending",
        kind: Kind::Number,
        about: "GPUs with a page retirement pending a reset (`retired_pages.pending`, `Pending Page Blacklist : Yes`; GPUs before Ampere)",
    },
    OutputSpec {
        name: "remapped_rows_pending",
        kind: Kind::Number,
        about: "GPUs with a row remap pending a reset (`remapped_rows.pending`, Remapped Rows' `Pending : Yes`; A100, H100 and later)",
    },
    OutputSpec {
        name: "remapped_rows_failure",
        kind: Kind::Number,
        about: "GPUs whose row remapping failed (`remapped_rows.failure`, `Remapping Failure Occurred : Yes`)",
    },
    OutputSpec {
        name: "sm_clock_ratio_min",
        kind: Kind::Number,
        about: "the lowest SM clock over its maximum, over the GPUs (`clocks.current.sm` / `clocks.max.sm`; an idle GPU clocks down, so judge it under load)",
    },
    OutputSpec {
        name: "throttled_gpus",
        kind: Kind::Number,
        about: "GPUs slowed by hardware: HW slowdown, HW thermal or power-brake slowdown, or SW thermal slowdown active (`Clocks Event Reasons`, `clocks_event_reasons.*`)",
    },
];

/// What `-q` or `--format=csv` prints where a value is not there.
fn absent(value: &str) -> bool {
    let v = value.trim();
    v.is_empty() || v.starts_with('[') || v.eq_ignore_ascii_case("N/A")
}

/// A number with its unit after it (`33 C`, `345 MHz`, `69.65 W`, `0`).
fn reading(value: &str) -> Option<f64> {
    value.split_whitespace().next()?.parse().ok()
}

/// `Yes`/`No`, `Active`/`Not Active` as 1 and 0.
fn flag(value: &str) -> Option<f64> {
    match value.trim() {
        "Yes" | "Active" | "1" => Some(1.0),
        "No" | "Not Active" | "0" => Some(0.0),
        _ => None,
    }
}

/// How a field's value reads into a figure ([`reading`], [`flag`]).
type Parse = fn(&str) -> Option<f64>;

/// One GPU's value of one fact: its figure and the line that gave it, or
/// the line that said the GPU cannot tell (`N/A`).
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Value(f64, String),
    Absent(String),
}

/// How two lines of one fact on one GPU combine.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Combine {
    /// Counts add up (the ECC counters of each memory).
    Sum,
    /// The largest holds (any active throttle reason).
    Max,
}

/// What one GPU's lines say, fact by fact.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Copy)]
enum Fact {
    Temperature,
    EccVolatile,
    EccAggregate,
    RetiredPending,
    RemapPending,
    RemapFailure,
    SmClock,
    SmClockMax,
    Throttled,
}

impl Fact {
    fn combine(self) -> Combine {
        match self {
            Fact::EccVolatile | Fact::EccAggregate => Combine::Sum,
            _ => Combine::Max,
        }
    }
}

/// One GPU as its lines describe it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Gpu {
    /// How the output names it (`0`, `00000000:10:1C.0`).
    id: String,
    facts: std::collections::BTreeMap<Fact, Seen>,
}

impl Gpu {
    /// Adds a line's `value` to `fact`; `parse` reads the value, and one it
    /// cannot read (`N/A`) makes the fact absent for this GPU.
    fn add(&mut self, fact: Fact, value: &str, line: &str, parse: Parse) {
        let seen = match parse(value).filter(|_| !absent(value)) {
            Some(v) => Seen::Value(v, line.trim().to_string()),
            None => Seen::Absent(line.trim().to_string()),
        };
        let merged = match (self.facts.remove(&fact), seen) {
            (None, s) => s,
            (Some(Seen::Absent(l)), _) | (_, Seen::Absent(l)) => Seen::Absent(l),
            (Some(Seen::Value(a, la)), Seen::Value(b, lb)) => match fact.combine() {
                Combine::Sum => Seen::Value(a + b, if a > 0.0 || b == 0.0 { la } else { lb }),
                Combine::Max if b > a => Seen::Value(b, lb),
                Combine::Max => Seen::Value(a, la),
            },
        };
        self.facts.insert(fact, merged);
    }

    /// The fact's figure, with the line naming this GPU.
    fn value(&self, fact: Fact) -> Option<(f64, String)> {
        match self.facts.get(&fact)? {
            Seen::Value(v, line) => Some((*v, format!("GPU {}: {line}", self.id))),
            Seen::Absent(_) => None,
        }
    }
}

/// What one form of nvidia-smi output lists.
struct Listing {
    /// The GPUs it says are attached, where it says so.
    attached: Option<(f64, String)>,
    gpus: Vec<Gpu>,
}

/// Reads nvidia-smi's output: the `-q` sections, else a `--format=csv`
/// table, else `No devices were found`; `None` when none is there.
pub(super) fn read(lines: &[&str]) -> Option<Reading> {
    let listing = query::read(lines)
        .or_else(|| csv::read(lines))
        .or_else(|| no_devices(lines))?;
    let mut out = Reading::default();
    let count = match listing.attached {
        Some(a) => a,
        None => (
            listing.gpus.len() as f64,
            listing
                .gpus
                .last()
                .map(|g| format!("GPU {}", g.id))
                .unwrap_or_default(),
        ),
    };
    put(&mut out, "gpus", Some(count));
    if listing.gpus.is_empty() {
        return Some(out);
    }
    let gpus = &listing.gpus;
    put(
        &mut out,
        "max_temperature_c",
        each(gpus, |g| g.value(Fact::Temperature)).map(|v| pick(v, |a, b| a > b)),
    );
    for (name, fact) in [
        ("ecc_uncorrected_volatile", Fact::EccVolatile),
        ("ecc_uncorrected_aggregate", Fact::EccAggregate),
        ("retired_pages_pending", Fact::RetiredPending),
        ("remapped_rows_pending", Fact::RemapPending),
        ("remapped_rows_failure", Fact::RemapFailure),
        ("throttled_gpus", Fact::Throttled),
    ] {
        put(&mut out, name, each(gpus, |g| g.value(fact)).map(sum));
    }
    let ratio = |g: &Gpu| {
        let (now, line) = g.value(Fact::SmClock)?;
        let (max, max_line) = g.value(Fact::SmClockMax)?;
        let line = match max_line == line {
            // One query row holds both.
            true => line,
            false => {
                let max = max_line
                    .split_once(": ")
                    .map_or(max_line.as_str(), |(_, l)| l);
                format!("{line} (max: {max})")
            }
        };
        (max > 0.0).then_some((now / max, line))
    };
    put(
        &mut out,
        "sm_clock_ratio_min",
        each(gpus, ratio).map(|v| pick(v, |a, b| a < b)),
    );
    Some(out)
}

/// Each GPU's value, or `None` when any GPU lacks it.
fn each(gpus: &[Gpu], value: impl Fn(&Gpu) -> Option<(f64, String)>) -> Option<Vec<(f64, String)>> {
    gpus.iter().map(value).collect()
}

/// The value `better` prefers (the hottest, the slowest), with its line.
fn pick(values: Vec<(f64, String)>, better: fn(f64, f64) -> bool) -> (f64, String) {
    values
        .into_iter()
        .reduce(|best, v| if better(v.0, best.0) { v } else { best })
        .expect("at least one GPU")
}

/// The sum, with the line of the GPU that adds the most.
fn sum(values: Vec<(f64, String)>) -> (f64, String) {
    let total = values.iter().map(|(v, _)| v).sum();
    let (_, line) = pick(values, |a, b| a > b);
    (total, line)
}

/// Puts a value: a whole number (a count, a temperature) as an integer,
/// as nvidia-smi printed it.
fn put(out: &mut Reading, name: &str, value: Option<(f64, String)>) {
    let Some((v, line)) = value else {
        return;
    };
    let n = match v.fract() == 0.0 && v.abs() < 9e15 {
        true => Some(Value::from(v as i64)),
        false => number(v),
    };
    if let Some(n) = n {
        out.put(name, n, &line);
    }
}

/// `No devices were found`: nvidia-smi ran and lists no GPU.
fn no_devices(lines: &[&str]) -> Option<Listing> {
    let line = lines.iter().find(|l| l.trim() == "No devices were found")?;
    Some(Listing {
        attached: Some((0.0, line.trim().to_string())),
        gpus: Vec::new(),
    })
}

/// The values a reading holds, for tests.
#[cfg(test)]
fn numbers(r: &Reading) -> Vec<(&str, f64)> {
    r.values
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_f64()?)))
        .collect()
}

#[cfg(test)]
mod tests;
