//! `nvidia-smi -q`: `Attached GPUs : N`, then a section per GPU opened by
//! its PCI address at the line's start (`GPU 00000000:10:1C.0`), whose
//! lines nest by four spaces: a line without ` : ` opens a subsection
//! (`ECC Errors`, then `Volatile`), a `Key : Value` line is a field of the
//! subsections above it. The fields read, by driver generation:
//!
//! - ECC: `ECC Errors` › `Volatile`/`Aggregate` › every count whose name
//!   holds `Uncorrectable` (`SRAM Uncorrectable Parity`, `SRAM
//!   Uncorrectable SEC-DED`, `DRAM Uncorrectable` on drivers of 2023 on;
//!   `SRAM Uncorrectable`, `DRAM Uncorrectable` before), or before the
//!   Ampere drivers `Double Bit` › `Total`;
//! - `Retired Pages` › `Pending Page Blacklist` (or `Pending Page
//!   Retirement`); `Remapped Rows` › `Pending`, `Remapping Failure
//!   Occurred` (`Remapped Rows : N/A` where the GPU has no row remapper);
//! - `Temperature` › `GPU Current Temp`; `Clocks` › `SM`; `Max Clocks` ›
//!   `SM`;
//! - `Clocks Event Reasons` (`Clocks Throttle Reasons` before driver 535) ›
//!   `HW Slowdown`, `HW Thermal Slowdown`, `HW Power Brake Slowdown`, `SW
//!   Thermal Slowdown`.

use super::{Fact, Gpu, Listing, Parse, flag, reading};

/// The throttle reasons that mean the hardware is slowing the GPU down
/// (not `Idle`, not an applications clock setting, not the power cap a
/// busy GPU reaches).
pub(super) const SLOWDOWNS: [&str; 4] = [
    "HW Slowdown",
    "HW Thermal Slowdown",
    "HW Power Brake Slowdown",
    "SW Thermal Slowdown",
];

/// The PCI address of a line that opens a GPU's section.
fn section(line: &str) -> Option<&str> {
    let id = line.strip_prefix("GPU ")?.trim_end();
    let (domain, rest) = id.split_once(':')?;
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    let (bus, function) = rest.split_once(':').and_then(|(b, d)| {
        let (dev, f) = d.split_once('.')?;
        (hex(dev) && hex(f)).then_some((b, f))
    })?;
    (domain.len() >= 4 && hex(domain) && hex(bus) && !function.is_empty()).then_some(id)
}

/// What field `key` under `path` is, and how its value reads.
fn fact(path: &[&str], key: &str) -> Option<(Fact, Parse)> {
    let ecc = |scope: &str| match scope {
        "Volatile" => Some(Fact::EccVolatile),
        "Aggregate" => Some(Fact::EccAggregate),
        _ => None,
    };
    match (path, key) {
        (["ECC Errors", scope], k) if k.contains("Uncorrectable") => Some((ecc(scope)?, reading)),
        (["ECC Errors", scope, "Double Bit"], "Total") => Some((ecc(scope)?, reading)),
        (["Retired Pages"], k) if k.starts_with("Pending") => Some((Fact::RetiredPending, flag)),
        (["Remapped Rows"], "Pending") => Some((Fact::RemapPending, flag)),
        (["Remapped Rows"], "Remapping Failure Occurred") => Some((Fact::RemapFailure, flag)),
        (["Temperature"], "GPU Current Temp") => Some((Fact::Temperature, reading)),
        (["Clocks"], "SM") => Some((Fact::SmClock, reading)),
        (["Max Clocks"], "SM") => Some((Fact::SmClockMax, reading)),
        ([reasons, ..], k)
            if matches!(*reasons, "Clocks Event Reasons" | "Clocks Throttle Reasons")
                && SLOWDOWNS.contains(&k) =>
        {
            Some((Fact::Throttled, flag))
        }
        _ => None,
    }
}

/// The GPUs of `-q` output; `None` when `lines` hold neither its
/// `Attached GPUs` line nor a GPU section.
pub(super) fn read(lines: &[&str]) -> Option<Listing> {
    let mut attached = None;
    let mut gpus: Vec<Gpu> = Vec::new();
    let mut inside = false;
    let mut path: Vec<(usize, &str)> = Vec::new();
    for line in lines {
        let text = line.trim_end();
        if text.trim().is_empty() {
            continue;
        }
        if let Some(id) = section(text) {
            gpus.push(Gpu {
                id: id.to_string(),
                ..Gpu::default()
            });
            inside = true;
            path.clear();
            continue;
        }
        let depth = text.len() - text.trim_start().len();
        let (key, value) = match text.split_once(" : ").or_else(|| text.split_once(": ")) {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (text.trim(), None),
        };
        if depth == 0 {
            inside = false;
            if key == "Attached GPUs" {
                attached = value
                    .and_then(reading)
                    .map(|n| (n, text.trim().to_string()));
            }
            continue;
        }
        let Some(gpu) = gpus.last_mut().filter(|_| inside) else {
            continue;
        };
        while path.last().is_some_and(|(d, _)| *d >= depth) {
            path.pop();
        }
        let Some(value) = value else {
            path.push((depth, key));
            continue;
        };
        let names: Vec<&str> = path.iter().map(|(_, n)| *n).collect();
        if names.is_empty() && matches!(key, "Remapped Rows" | "Retired Pages") {
            // The whole section is `N/A`: the GPU cannot tell.
            let facts: &[Fact] = match key {
                "Remapped Rows" => &[Fact::RemapPending, Fact::RemapFailure],
                _ => &[Fact::RetiredPending],
            };
            for f in facts {
                gpu.add(*f, value, text, flag);
            }
        } else if let Some((f, parse)) = fact(&names, key) {
            gpu.add(f, value, text, parse);
        }
    }
    (attached.is_some() || !gpus.is_empty()).then_some(Listing { attached, gpus })
}
