//! `nvidia-smi --query-gpu=FIELDS --format=csv[,nounits]`: a header of the
//! fields' canonical names, each with its unit in brackets
//! (`clocks.current.sm [MHz]`, whatever alias the command used:
//! `clocks.sm`, `clocks.gr`), then one row per GPU, cells joined by `, `,
//! numbers with their unit unless `nounits` (`345 MHz`), `Yes`/`No` and
//! `Active`/`Not Active` flags, `[Not Supported]` or `[N/A]` where the GPU
//! cannot tell. The throttle reasons read as in `-q` (see
//! [`super::query::SLOWDOWNS`]), by name
//! (`clocks_event_reasons.hw_slowdown`, or `clocks_throttle_reasons.` before
//! driver 535) or as the bit mask of `clocks_event_reasons.active`.

use super::{Fact, Gpu, Listing, Parse, flag, reading};

/// The fields of the throttle reasons that mean a hardware slowdown.
const SLOWDOWNS: [&str; 4] = [
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
];

/// NVML's bits of those reasons in `clocks_event_reasons.active`
/// (`nvmlClocksEventReasonHwSlowdown` 0x8, `SwThermalSlowdown` 0x20,
/// `HwThermalSlowdown` 0x40, `HwPowerBrakeSlowdown` 0x80).
const SLOWDOWN_BITS: u64 = 0x8 | 0x20 | 0x40 | 0x80;

/// Fields that name a GPU rather than measure it.
const NAMES: [&str; 4] = ["index", "name", "pci.bus_id", "uuid"];

/// The active reasons' mask (`0x0000000000000001`) as 1 when a slowdown
/// bit is set.
fn slowdown_mask(value: &str) -> Option<f64> {
    let hex = value.trim().strip_prefix("0x")?;
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(if mask & SLOWDOWN_BITS != 0 { 1.0 } else { 0.0 })
}

/// What column `field` is, and how its cells read.
fn fact(field: &str) -> Option<(Fact, Parse)> {
    let reason = field
        .strip_prefix("clocks_event_reasons.")
        .or_else(|| field.strip_prefix("clocks_throttle_reasons."));
    Some(match (field, reason) {
        ("temperature.gpu", _) => (Fact::Temperature, reading),
        ("ecc.errors.uncorrected.volatile.total", _) => (Fact::EccVolatile, reading),
        ("ecc.errors.uncorrected.aggregate.total", _) => (Fact::EccAggregate, reading),
        ("retired_pages.pending", _) => (Fact::RetiredPending, flag),
        ("remapped_rows.pending", _) => (Fact::RemapPending, flag),
        ("remapped_rows.failure", _) => (Fact::RemapFailure, flag),
        ("clocks.current.sm" | "clocks.sm", _) => (Fact::SmClock, reading),
        ("clocks.max.sm", _) => (Fact::SmClockMax, reading),
        (_, Some("active")) => (Fact::Throttled, slowdown_mask),
        (_, Some(r)) if SLOWDOWNS.contains(&r) => (Fact::Throttled, flag),
        _ => return None,
    })
}

/// A header's fields without their units, when `line` is one: every cell
/// a field name, one of them a field this reader knows.
fn header(line: &str) -> Option<Vec<&str>> {
    let fields: Vec<&str> = line
        .trim()
        .split(", ")
        .map(|c| c.split_once(" [").map_or(c, |(name, _)| name).trim())
        .collect();
    let named = |f: &&str| {
        f.starts_with(|c: char| c.is_ascii_lowercase())
            && f.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_'))
    };
    (fields.iter().all(named)
        && fields
            .iter()
            .any(|f| NAMES.contains(f) || fact(f).is_some()))
    .then_some(fields)
}

/// The GPUs of the first query table in `lines`: the rows under its header
/// with as many cells; `None` when there is no header with a row under it.
pub(super) fn read(lines: &[&str]) -> Option<Listing> {
    let (start, fields) = lines
        .iter()
        .enumerate()
        .find_map(|(i, l)| Some((i, header(l)?)))?;
    let id_column = ["index", "pci.bus_id", "uuid"]
        .iter()
        .find_map(|n| fields.iter().position(|f| f == n));
    let mut gpus = Vec::new();
    for line in &lines[start + 1..] {
        let cells: Vec<&str> = line.trim().split(", ").collect();
        if cells.len() != fields.len() || line.trim().is_empty() {
            break;
        }
        let mut gpu = Gpu {
            id: match id_column {
                Some(c) => cells[c].trim().to_string(),
                None => format!("#{}", gpus.len()),
            },
            ..Gpu::default()
        };
        for (field, cell) in fields.iter().zip(&cells) {
            if let Some((f, parse)) = fact(field) {
                gpu.add(f, cell, line, parse);
            }
        }
        gpus.push(gpu);
    }
    (!gpus.is_empty()).then_some(Listing {
        attached: None,
        gpus,
    })
}
