//! nccl-tests output (`all_reduce_perf` and the other `*_perf` programs of
//! NVIDIA/nccl-tests, as `src/common.cu` prints it): a header naming the
//! columns,
//!
//! ```text
//! #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//! #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
//! ```
//!
//! one row per message size (the first `time algbw busbw #wrong` out of
//! place, the second in place; `#wrong` is `N/A` when checking is off),
//! then `# Out of bounds values : 0 OK` and `# Avg bus bandwidth    : 17.9`.
//! Columns are found by the header's names, so programs without `redop` or
//! `root` read the same (older nccl-tests name the fourth column `error`, the
//! largest error, instead of `#wrong`). When the output holds several tables,
//! the last one counts, as the last match of a `capture` does. The network
//! NCCL used is read from its `NCCL INFO` lines ([`super::transport`]).

use serde_json::{Map, Value, json};

use super::{Kind, OutputSpec, Reading, number};

/// What the reader gives.
pub(super) const OUTPUTS: &[OutputSpec] = &[
    OutputSpec {
        name: "busbw",
        kind: Kind::Number,
        about: "the average bus bandwidth, GB/s (`# Avg bus bandwidth`)",
    },
    OutputSpec {
        name: "busbw_peak",
        kind: Kind::Number,
        about: "the largest out-of-place bus bandwidth of any message size, GB/s",
    },
    OutputSpec {
        name: "algbw_peak",
        kind: Kind::Number,
        about: "the largest out-of-place algorithm bandwidth of any message size, GB/s",
    },
    OutputSpec {
        name: "out_of_bounds",
        kind: Kind::Number,
        about: "the out-of-bounds count (`# Out of bounds values`)",
    },
    OutputSpec {
        name: "transport",
        kind: Kind::Text,
        about: "the network NCCL used: `efa`, `socket` (a fall-back to TCP) or `ib`, from the `NCCL INFO` lines NCCL_DEBUG=INFO prints",
    },
    OutputSpec {
        name: "sizes",
        kind: Kind::Table,
        about: "message size in bytes → `out_of_place` and `in_place`, each with `time_us`, `algbw`, `busbw` and `wrong`",
    },
];

/// Where the measured columns sit in a row.
struct Columns {
    count: usize,
    size: usize,
    out_of_place: [usize; 4],
    in_place: Option<[usize; 4]>,
}

/// The columns a header line names, when it is one.
fn header(line: &str) -> Option<Columns> {
    let rest = line.trim_start().strip_prefix('#')?;
    let names: Vec<&str> = rest.split_whitespace().collect();
    if names.first() != Some(&"size") || !names.contains(&"busbw") {
        return None;
    }
    let mut groups = Vec::new();
    let mut i = 0;
    while i + 3 < names.len() {
        // `#wrong` counts wrong values; older nccl-tests print `error`,
        // the largest error found.
        if names[i..i + 3] == ["time", "algbw", "busbw"]
            && matches!(names[i + 3], "#wrong" | "error")
        {
            groups.push([i, i + 1, i + 2, i + 3]);
            i += 4;
        } else {
            i += 1;
        }
    }
    Some(Columns {
        count: names.len(),
        size: 0,
        out_of_place: *groups.first()?,
        in_place: groups.get(1).copied(),
    })
}

fn measure(cells: &[&str], at: [usize; 4]) -> Option<Value> {
    let f = |i: usize| cells[i].parse::<f64>().ok().and_then(number);
    let wrong = match cells[at[3]] {
        "N/A" => Value::Null,
        w => match w.parse::<u64>() {
            Ok(n) => json!(n),
            Err(_) => number(w.parse::<f64>().ok()?)?,
        },
    };
    Some(json!({
        "time_us": f(at[0])?, "algbw": f(at[1])?, "busbw": f(at[2])?, "wrong": wrong
    }))
}

/// The value after `label :` on a `#` line.
fn summary<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest.strip_prefix(label)?.trim_start().strip_prefix(':')?;
    rest.split_whitespace().next()
}

/// Reads the last table and the summary lines after it.
pub(super) fn read(lines: &[&str]) -> Option<Reading> {
    let start = lines.iter().rposition(|l| header(l).is_some())?;
    let columns = header(lines[start])?;
    let mut sizes = Map::new();
    let (mut busbw_peak, mut algbw_peak) = (None::<(f64, &str)>, None::<(f64, &str)>);
    let mut out = Reading::default();
    for line in &lines[start + 1..] {
        if let Some(v) = summary(line, "Out of bounds values") {
            if let Ok(n) = v.parse::<u64>() {
                out.put("out_of_bounds", json!(n), line);
            }
            continue;
        }
        if let Some(v) = summary(line, "Avg bus bandwidth") {
            if let Some(n) = v.parse::<f64>().ok().and_then(number) {
                out.put("busbw", n, line);
            }
            continue;
        }
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.len() != columns.count {
            continue;
        }
        let Ok(size) = cells[columns.size].parse::<u64>() else {
            continue;
        };
        let Some(oop) = measure(&cells, columns.out_of_place) else {
            continue;
        };
        let mut row = Map::new();
        let (bus, alg) = (oop["busbw"].as_f64(), oop["algbw"].as_f64());
        row.insert("out_of_place".into(), oop);
        if let Some(at) = columns.in_place
            && let Some(ip) = measure(&cells, at)
        {
            row.insert("in_place".into(), ip);
        }
        for (peak, seen) in [(&mut busbw_peak, bus), (&mut algbw_peak, alg)] {
            if let Some(seen) = seen
                && peak.is_none_or(|(p, _)| seen > p)
            {
                *peak = Some((seen, line));
            }
        }
        sizes.insert(size.to_string(), Value::Object(row));
    }
    if sizes.is_empty() {
        return None;
    }
    for (name, peak) in [("busbw_peak", busbw_peak), ("algbw_peak", algbw_peak)] {
        if let Some((v, line)) = peak
            && let Some(n) = number(v)
        {
            out.put(name, n, line);
        }
    }
    out.put("sizes", Value::Object(sizes), lines[start]);
    if let Some((transport, line)) = super::transport::read(lines) {
        out.put("transport", json!(transport), line);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::Program;
    use super::*;

    fn read_file(name: &str) -> Reading {
        Program::NcclTests
            .read(&super::super::sample(name))
            .unwrap()
    }

    #[test]
    fn reads_the_batch_runs_table_through_mpiruns_tags() {
        let r = read_file("nccl-tests-batch-efa.txt");
        assert_eq!(r.values["busbw"], json!(156.742));
        assert_eq!(r.values["out_of_bounds"], json!(0));
        assert_eq!(r.values["busbw_peak"], json!(483.05));
        assert_eq!(r.values["algbw_peak"], json!(276.03));
        let sizes = r.values["sizes"].as_object().unwrap();
        assert_eq!(sizes.len(), 32, "8 B to 16 GB");
        assert_eq!(
            sizes["17179869184"],
            json!({
                "out_of_place": {"time_us": 62239.0, "algbw": 276.03, "busbw": 483.05, "wrong": 0},
                "in_place": {"time_us": 62200.0, "algbw": 276.2, "busbw": 483.35, "wrong": 0}
            })
        );
        assert_eq!(r.lines["busbw"], "# Avg bus bandwidth    : 156.742");
        assert!(
            r.lines["busbw_peak"].starts_with("17179869184"),
            "{:?}",
            r.lines
        );
    }

    #[test]
    fn reads_sruns_labelled_table_without_its_summary() {
        let p5 = read_file("nccl-tests-slurm-p5.txt");
        assert_eq!(p5.values["busbw_peak"], json!(487.09));
        assert!(!p5.values.contains_key("busbw"), "no average line in it");
        let p4de = read_file("nccl-tests-slurm-p4de.txt");
        assert_eq!(p4de.values["busbw_peak"], json!(78.33));
        assert_eq!(p4de.values["sizes"].as_object().unwrap().len(), 29);
    }

    #[test]
    fn reads_older_tables_whose_fourth_column_is_the_error() {
        // aws-efa-eks's published run: `error` (a float) instead of `#wrong`.
        let r = read_file("nccl-tests-eks-efa-info.txt");
        assert_eq!(r.values["busbw"], json!(11.2432));
        assert_eq!(r.values["sizes"].as_object().unwrap().len(), 30);
        assert_eq!(
            r.values["sizes"]["4294967296"]["out_of_place"],
            json!({"time_us": 183834.0, "algbw": 23.36, "busbw": 43.81, "wrong": 5e-7})
        );
    }

    /// nccl-tests 2.19.6 built against PyTorch's NCCL 2.28.9, one rank on
    /// one H100 (testdata/h100-2026-11-27): bus bandwidth is 0 by
    /// definition for one rank, the algorithm bandwidth is what it moved.
    #[test]
    fn reads_a_one_gpu_run_recorded_on_an_h100() {
        let r = read_file("h100-2026-11-27/nccl-allreduce.txt");
        assert_eq!(r.values["busbw"], json!(0.0));
        assert_eq!(r.values["busbw_peak"], json!(0.0));
        assert_eq!(r.values["algbw_peak"], json!(1506.8));
        assert_eq!(r.values["out_of_bounds"], json!(0));
        let sizes = r.values["sizes"].as_object().unwrap();
        assert_eq!(sizes.len(), 28, "8 B to 1 GiB");
        assert_eq!(
            sizes["1073741824"]["out_of_place"],
            json!({"time_us": 712.58, "algbw": 1506.8, "busbw": 0.0, "wrong": 0})
        );
        // 5-digit in-place figures fill their column: still read.
        assert_eq!(sizes["1073741824"]["in_place"]["algbw"], json!(957629.0));
        assert_eq!(r.lines["busbw"], "# Avg bus bandwidth    : 0");
    }

    #[test]
    fn reads_the_local_clouds_emulated_output() {
        let r = read_file("../scripts/local-cloud/outputs/all_reduce_perf.txt");
        assert_eq!(r.values["busbw"], json!(17.9053));
        assert_eq!(r.values["transport"], "efa", "its NCCL_DEBUG=INFO lines");
    }

    #[test]
    fn columns_follow_the_header_and_unchecked_rows_read_as_null() {
        // all_gather without redop and root, checking off (-c 0).
        let text = "#  size  count  type  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n\
                    1024  256  float  20.1  0.05  0.04  N/A  19.9  0.05  0.04  N/A\n\
                    # Avg bus bandwidth : 0.04\n";
        let r = Program::NcclTests.read(text).unwrap();
        assert_eq!(
            r.values["sizes"]["1024"]["out_of_place"]["wrong"],
            Value::Null
        );
        assert_eq!(
            r.values["sizes"]["1024"]["in_place"]["time_us"],
            json!(19.9)
        );
        assert_eq!(r.values["busbw"], json!(0.04));
    }

    #[test]
    fn the_last_table_counts() {
        let table = |bw: &str| {
            format!(
                "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n\
                 8  2  float  sum  -1  10.0  1.0  {bw}  0  10.0  1.0  {bw}  0\n# Avg bus bandwidth : {bw}\n"
            )
        };
        let r = Program::NcclTests
            .read(&format!("{}{}", table("1.5"), table("2.5")))
            .unwrap();
        assert_eq!(r.values["busbw"], json!(2.5));
        assert_eq!(r.values["busbw_peak"], json!(2.5));
    }

    #[test]
    fn a_header_without_rows_is_no_table() {
        let text = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n\
                    NCCL WARN NET/Socket : no interface found\n";
        assert!(Program::NcclTests.read(text).is_err());
    }
}
