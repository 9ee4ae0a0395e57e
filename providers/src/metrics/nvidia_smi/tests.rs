//! The reader on a real H100's `-q` and query output, a published A100
//! `-q` with a row remap pending, and those outputs with one value changed
//! to plant each fault (testdata/SOURCES says which are real).

use serde_json::json;

use super::numbers;
use crate::capture::{LogsMiss, Matchers};
use crate::metrics::{Program, Reading, sample};
use crate::testing::values;

const H100_Q: &str = "h100-2026-11-27/nvidia-smi-q.txt";
const H100_QUERY: &str = "h100-2026-11-27/nvidia-smi-query.txt";
const H200_Q: &str = "h200-2026-11-28/nvidia-smi-q.txt";
const H200_QUERY: &str = "h200-2026-11-28/nvidia-smi-query.txt";
const A100_REMAP: &str = "nvidia-smi-q-a100-remap-pending.txt";

fn read(text: &str) -> Reading {
    Program::NvidiaSmi
        .read(text)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `text` with `from` changed to `to` (the first match, or every one).
fn planted(text: &str, from: &str, to: &str, all: bool) -> String {
    assert!(text.contains(from), "no `{from}` to change");
    match all {
        true => text.replace(from, to),
        false => text.replacen(from, to, 1),
    }
}

/// What `expect` says of `text`: `Ok` or the error of its first failure.
fn judged(text: &str, expect: serde_json::Value) -> Result<(), String> {
    Matchers::from_values(&values(json!({"parse": "nvidia-smi", "expect": expect})))
        .unwrap()
        .check(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_real_idle_h100_reads_healthy_but_for_its_idle_clock() {
    let r = read(&sample(H100_Q));
    let ratio = 345.0 / 1980.0;
    assert_eq!(
        numbers(&r),
        [
            ("ecc_uncorrected_aggregate", 0.0),
            ("ecc_uncorrected_volatile", 0.0),
            ("gpus", 1.0),
            ("max_temperature_c", 33.0),
            ("remapped_rows_failure", 0.0),
            ("remapped_rows_pending", 0.0),
            ("sm_clock_ratio_min", ratio),
            ("throttled_gpus", 0.0),
        ]
    );
    // An H100 remaps rows and retires no pages: its Retired Pages are N/A.
    assert!(!r.values.contains_key("retired_pages_pending"));
    assert_eq!(
        r.lines["max_temperature_c"],
        "GPU 00000000:00:06.0: GPU Current Temp                               : 33 C"
    );
    assert_eq!(
        r.lines["sm_clock_ratio_min"],
        "GPU 00000000:00:06.0: SM                                             : 345 MHz (max: SM                                             : 1980 MHz)"
    );
    assert_eq!(
        judged(
            &sample(H100_Q),
            json!({"gpus": "== 1", "ecc_uncorrected_volatile": "== 0", "remapped_rows_pending": "== 0", "max_temperature_c": "< 85"})
        ),
        Ok(())
    );
}

#[test]
fn the_real_h100_query_table_reads_its_columns_by_the_header() {
    let r = read(&sample(H100_QUERY));
    assert_eq!(
        numbers(&r),
        [
            ("ecc_uncorrected_volatile", 0.0),
            ("gpus", 1.0),
            ("max_temperature_c", 33.0)
        ]
    );
    assert!(
        r.lines["max_temperature_c"].starts_with("GPU 0: 0, NVIDIA H100 80GB HBM3,"),
        "{}",
        r.lines["max_temperature_c"]
    );
    // The query asked for the current clock but not the maximum: no ratio,
    // and a gate on it says where it looked instead of passing.
    let e = judged(&sample(H100_QUERY), json!({"sm_clock_ratio_min": ">= 0.9"})).unwrap_err();
    assert!(e.contains("no sm_clock_ratio_min was found"), "{e}");
    assert!(e.contains("a query without that field"), "{e}");
}

#[test]
fn a_real_idle_h200_reads_as_the_h100_does() {
    let r = read(&sample(H200_Q));
    assert_eq!(
        numbers(&r),
        [
            ("ecc_uncorrected_aggregate", 0.0),
            ("ecc_uncorrected_volatile", 0.0),
            ("gpus", 1.0),
            ("max_temperature_c", 34.0),
            ("remapped_rows_failure", 0.0),
            ("remapped_rows_pending", 0.0),
            ("sm_clock_ratio_min", 345.0 / 1980.0),
            ("throttled_gpus", 0.0),
        ]
    );
    let q = read(&sample(H200_QUERY));
    assert_eq!(
        numbers(&q),
        [
            ("ecc_uncorrected_volatile", 0.0),
            ("gpus", 1.0),
            ("max_temperature_c", 34.0)
        ]
    );
    assert!(
        q.lines["gpus"].starts_with("GPU 0: 0, NVIDIA H200,")
            || q.lines["max_temperature_c"].starts_with("GPU 0: 0, NVIDIA H200,"),
        "{:?}",
        q.lines
    );
}

#[test]
fn the_published_a100_with_a_pending_row_remap_fails_its_gate_naming_the_gpu() {
    let text = sample(A100_REMAP);
    let r = read(&text);
    assert_eq!(r.values["gpus"], json!(8));
    assert_eq!(
        r.lines["gpus"],
        "Attached GPUs                             : 8"
    );
    assert_eq!(r.values["remapped_rows_pending"], json!(1));
    assert_eq!(r.values["remapped_rows_failure"], json!(0));
    assert_eq!(r.values["ecc_uncorrected_volatile"], json!(0));
    // Its Retired Pages are N/A: absent, not 0.
    assert!(!r.values.contains_key("retired_pages_pending"));
    let e = judged(&text, json!({"remapped_rows_pending": "== 0"})).unwrap_err();
    assert!(e.contains("remapped_rows_pending"), "{e}");
    assert!(
        e.contains("GPU 00000000:10:1C.0: Pending                           : Yes"),
        "{e}"
    );
    let e = judged(&text, json!({"retired_pages_pending": "== 0"})).unwrap_err();
    assert!(e.contains("no retired_pages_pending was found"), "{e}");
    assert!(e.contains("`N/A`"), "{e}");
}

#[test]
fn uncorrectable_ecc_counts_add_up_over_volatile_and_aggregate() {
    // The published A100 record's SRAM counts (1 volatile, 5 aggregate),
    // planted in the H100's sections.
    let sec_ded = "SRAM Uncorrectable SEC-DED                 : 0";
    let text = planted(
        &sample(H100_Q),
        sec_ded,
        "SRAM Uncorrectable SEC-DED                 : 1",
        false,
    );
    let text = planted(
        &text,
        sec_ded,
        "SRAM Uncorrectable SEC-DED                 : 5",
        false,
    );
    let r = read(&text);
    assert_eq!(r.values["ecc_uncorrected_volatile"], json!(1));
    assert_eq!(r.values["ecc_uncorrected_aggregate"], json!(5));
    let e = judged(&text, json!({"ecc_uncorrected_volatile": "== 0"})).unwrap_err();
    assert!(e.contains("ecc_uncorrected_volatile = 1"), "{e}");
    assert!(e.contains("SRAM Uncorrectable SEC-DED"), "{e}");
}

#[test]
fn a_thermal_slowdown_or_a_failed_remap_names_the_gpu() {
    let text = planted(
        &sample(H100_Q),
        "HW Thermal Slowdown                        : Not Active",
        "HW Thermal Slowdown                        : Active",
        false,
    );
    let r = read(&text);
    assert_eq!(r.values["throttled_gpus"], json!(1));
    assert!(r.lines["throttled_gpus"].contains("HW Thermal Slowdown"));
    let text = planted(
        &sample(H100_Q),
        "Remapping Failure Occurred                     : No",
        "Remapping Failure Occurred                     : Yes",
        false,
    );
    assert_eq!(read(&text).values["remapped_rows_failure"], json!(1));
}

/// The H100's `-q` as a two-GPU host's: a second section at another
/// address, `temp` °C.
fn two_gpus(temp: &str) -> String {
    let one = sample(H100_Q);
    let (head, section) = one.split_at(one.find("GPU 00000000:00:06.0").unwrap());
    let second = planted(section, "00000000:00:06.0", "00000000:00:07.0", true);
    let second = planted(&second, ": 33 C", &format!(": {temp}"), false);
    format!(
        "{}{section}{second}",
        planted(head, ": 1\n", ": 2\n", false)
    )
}

#[test]
fn several_gpus_give_the_worst_one_and_an_na_makes_the_value_absent() {
    let r = read(&two_gpus("91 C"));
    assert_eq!(r.values["gpus"], json!(2));
    assert_eq!(r.values["max_temperature_c"], json!(91));
    assert!(r.lines["max_temperature_c"].starts_with("GPU 00000000:00:07.0: GPU Current Temp"));
    let e = judged(&two_gpus("91 C"), json!({"max_temperature_c": "<= 85"})).unwrap_err();
    assert!(e.contains("max_temperature_c = 91"), "{e}");
    // One GPU that cannot tell: no maximum, rather than the other's.
    let r = read(&two_gpus("N/A"));
    assert!(!r.values.contains_key("max_temperature_c"));
    let e = judged(&two_gpus("N/A"), json!({"max_temperature_c": "<= 85"})).unwrap_err();
    assert!(e.contains("no max_temperature_c was found"), "{e}");
}

#[test]
fn a_query_table_without_units_reads_flags_masks_and_unsupported_fields() {
    // The header form the H100 printed, with the fields a health check
    // asks for; values as `nounits` prints them.
    let text = "index, temperature.gpu, clocks.current.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active, remapped_rows.pending, ecc.errors.uncorrected.volatile.total\n\
        0, 33, 1980, 1980, 0x0000000000000000, No, 0\n\
        1, 87, 1410, 1980, 0x0000000000000040, Yes, [N/A]\n";
    let r = read(text);
    assert_eq!(r.values["gpus"], json!(2));
    assert_eq!(r.values["max_temperature_c"], json!(87));
    assert_eq!(r.values["sm_clock_ratio_min"], json!(1410.0 / 1980.0));
    assert_eq!(r.values["throttled_gpus"], json!(1));
    assert_eq!(r.values["remapped_rows_pending"], json!(1));
    assert_eq!(
        r.lines["throttled_gpus"],
        "GPU 1: 1, 87, 1410, 1980, 0x0000000000000040, Yes, [N/A]"
    );
    assert!(!r.values.contains_key("ecc_uncorrected_volatile"));
    // Only the idle bit: not a slowdown.
    let idle = text.replace("0x0000000000000040", "0x0000000000000001");
    assert_eq!(read(&idle).values["throttled_gpus"], json!(0));
}

#[test]
fn launcher_labels_do_not_change_the_reading() {
    let plain = read(&sample(H100_Q));
    let labelled: String = sample(H100_Q)
        .lines()
        .map(|l| format!("0: {l}\n"))
        .collect();
    assert_eq!(read(&labelled).values, plain.values);
}

#[test]
fn no_devices_reads_zero_gpus_and_nothing_else() {
    let r = read("No devices were found\n");
    assert_eq!(numbers(&r), [("gpus", 0.0)]);
    let e = judged("No devices were found\n", json!({"gpus": ">= 8"})).unwrap_err();
    assert!(e.contains("gpus = 0"), "{e}");
}

#[test]
fn output_without_a_section_or_a_header_is_not_read() {
    for text in [
        // `csv,noheader`: nothing says which column is which.
        "0, NVIDIA H100 80GB HBM3, 33, 0\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        // The default table: read by the GPU count check, not by `parse`.
        &sample("h100-2026-11-27/nvidia-smi.txt"),
        "",
    ] {
        let e = Program::NvidiaSmi.read(text).unwrap_err().to_string();
        assert!(e.contains("not nvidia-smi output"), "{e}");
        assert!(e.contains("csv,noheader"), "{e}");
        let miss = Matchers::from_values(&values(json!({"parse": "nvidia-smi"})))
            .unwrap()
            .check(text)
            .unwrap_err();
        assert!(matches!(miss, LogsMiss::Unreadable(_)), "{miss}");
    }
}

/// The `-q` of drivers before Ampere's (a V100's): ECC counts by `Single
/// Bit`/`Double Bit` with a `Total`, pages retired rather than rows
/// remapped (`Remapped Rows : N/A`). The lines as published in
/// NVIDIA/dcgm-exporter#16 (its reporter's `nvidia-smi -q`), from `Ecc
/// Mode` to `GPU Current Temp`; the `GPU` line that opens the section is
/// added, as the published lines start mid-section.
const V100_Q: &str = "GPU 00000000:00:08.0
    Ecc Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            Single Bit            
                Device Memory             : 0
                Register File             : 0
                L1 Cache                  : N/A
                L2 Cache                  : 0
                Texture Memory            : 0
                Texture Shared            : 0
                CBU                       : N/A
                Total                     : 0
            Double Bit            
                Device Memory             : 0
                Register File             : 0
                L1 Cache                  : N/A
                L2 Cache                  : 0
                Texture Memory            : 0
                Texture Shared            : 0
                CBU                       : N/A
                Total                     : 0
    Retired Pages
        Single Bit ECC                    : 0
        Double Bit ECC                    : 0
        Pending Page Blacklist            : No
    Remapped Rows                         : N/A
    Temperature
        GPU Current Temp                  : 24 C
";

#[test]
fn an_older_driver_s_double_bit_totals_and_retired_pages_are_read() {
    let r = read(V100_Q);
    assert_eq!(
        numbers(&r),
        [
            ("ecc_uncorrected_volatile", 0.0),
            ("gpus", 1.0),
            ("max_temperature_c", 24.0),
            ("retired_pages_pending", 0.0),
        ]
    );
    // No row remapper: absent, not 0.
    assert!(!r.values.contains_key("remapped_rows_pending"));
    // Two double-bit errors (the second Total, Double Bit's): the Total
    // counts, the single-bit one does not.
    let total = "Total                     : 0";
    let at = V100_Q.rfind(total).unwrap();
    let text = format!(
        "{}Total                     : 2{}",
        &V100_Q[..at],
        &V100_Q[at + total.len()..]
    );
    let r = read(&text);
    assert_eq!(r.values["ecc_uncorrected_volatile"], json!(2));
    assert!(r.lines["ecc_uncorrected_volatile"].ends_with("Total                     : 2"));
}
