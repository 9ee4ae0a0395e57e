//! `flow runs` and `flow compare`: the run history of a workflow's job
//! steps, listed, and two runs' values side by side.

use std::path::{Path, PathBuf};

use flow_state::runs::{RunSummary, Unreadable};
use flow_state::{ReadOnlyStore, RunLog, RunOutcome, RunRecord};
use serde_json::Value;

use super::args::{CompareArgs, RunsArgs, StateArgs};
use super::common::{CliError, CliResult};
use super::state_open::{Access, open_if_exists, target};

/// The run history of `file`'s state, with an S3 state's runs by others
/// pulled in first; `None` when there is no state yet.
fn open_log(file: &Path, args: &StateArgs, command: &str) -> CliResult<Option<RunLog>> {
    let target = target(file, args)?;
    super::block_on(async {
        let Some(store) = open_if_exists(&target, args, command, Access::Read).await? else {
            return Ok(None);
        };
        let log = store.run_log();
        // An S3 state's mirror blocks in place on this runtime's thread.
        if let Err(e) = log.pull() {
            eprintln!(
                "warning: the shared runs could not be read, only this copy's are listed: {e}"
            );
        }
        Ok(Some(log))
    })
}

/// Every run in the state of `file` (for compare).
fn history(file: &Path, args: &StateArgs, command: &str) -> CliResult<Vec<RunRecord>> {
    let Some(log) = open_log(file, args, command)? else {
        return Ok(Vec::new());
    };
    let (runs, damaged) = log.all().map_err(|e| CliError::msg(e.to_string()))?;
    warn_damaged(&damaged);
    Ok(runs)
}

/// Warns of each history line that could not be read (skipped, never fatal).
pub(super) fn warn_damaged(damaged: &[Unreadable]) {
    for d in damaged {
        eprintln!("warning: {d} is damaged and skipped: {}", d.why);
    }
}

/// `flow runs FILE [STEP] [--json]`.
pub fn runs(args: &RunsArgs) -> CliResult<i32> {
    let log = open_log(&args.file, &args.state, "flow runs")?;
    let step = args.step.as_deref();
    let fail = |e: flow_state::StateError| CliError::msg(e.to_string());
    if args.json {
        // The lines as stored, one JSON array, nothing decoded.
        let (lines, damaged) = match &log {
            Some(log) => log.raw(step).map_err(fail)?,
            None => Default::default(),
        };
        warn_damaged(&damaged);
        let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 2).sum::<usize>() + 3);
        out.push('[');
        for (i, line) in lines.iter().enumerate() {
            out.push_str(if i == 0 { "\n" } else { ",\n" });
            out.push_str(line);
        }
        out.push_str("\n]\n");
        use std::io::Write;
        let _ = std::io::stdout().lock().write_all(out.as_bytes());
        return Ok(0);
    }
    let (runs, damaged) = match &log {
        Some(log) => log.summaries(step).map_err(fail)?,
        None => Default::default(),
    };
    warn_damaged(&damaged);
    if runs.is_empty() {
        println!(
            "No runs recorded{}: a job step's run is recorded when apply runs it.",
            step.map(|s| format!(" for step `{s}`")).unwrap_or_default()
        );
        return Ok(0);
    }
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(table(&runs).as_bytes());
    Ok(0)
}

/// The runs as a table: id, step, outcome, time taken, gates passed, values.
fn table(runs: &[RunSummary]) -> String {
    let rows: Vec<[String; 6]> = runs
        .iter()
        .map(|r| {
            let (passed, all) = r.gates;
            [
                r.id.clone(),
                r.step.clone(),
                {
                    let outcome = match r.outcome {
                        RunOutcome::Succeeded => "succeeded",
                        RunOutcome::Failed => "failed",
                    };
                    // Output flow's local cloud made up, not measured.
                    match r.values.iter().any(|(k, _)| k == "emulated") {
                        true => format!("{outcome} (emulated)"),
                        false => outcome.to_string(),
                    }
                },
                crate::duration::human_ms(r.duration_ms),
                if all == 0 {
                    "-".into()
                } else {
                    format!("{passed}/{all}")
                },
                r.values
                    .iter()
                    .filter(|(k, _)| k != "emulated")
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]
        })
        .collect();
    let head = ["RUN", "STEP", "OUTCOME", "TOOK", "GATES", "VALUES"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..5).map(width).collect();
    let mut out = String::new();
    let line = |cells: [&str; 6]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate().take(5) {
            l.push_str(&format!("{c:<w$}  ", w = widths[i]));
        }
        l.push_str(cells[5]);
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(head));
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    out
}

/// `flow compare RUN_A RUN_B [--workflow FILE]`.
pub fn compare(args: &CompareArgs) -> CliResult<i32> {
    let runs = match (&args.workflow, &args.state.state_dir) {
        (Some(file), _) => history(file, &args.state, "flow compare")?,
        // `--state-dir` alone: that state, not the ones under ./.flow.
        (None, Some(dir)) => state_history(dir)?,
        (None, None) => local_histories()?,
    };
    let find = |id: &str| {
        runs.iter().find(|r| r.id == id).ok_or_else(|| {
            CliError::help(
                format!("there is no run `{id}`"),
                match &args.workflow {
                    Some(f) => format!("list the runs with `flow runs {}`", f.display()),
                    None => "list the runs with `flow runs FILE`; for a state kept elsewhere than ./.flow give --workflow FILE".to_string(),
                },
            )
        })
    };
    let (a, b) = (find(&args.run_a)?, find(&args.run_b)?);
    print!("{}", side_by_side(a, b));
    Ok(0)
}

/// The runs of the local state in `dir`.
fn state_history(dir: &Path) -> CliResult<Vec<RunRecord>> {
    let store = ReadOnlyStore::open_or_read_live(dir, "flow compare")
        .map_err(|e| CliError::msg(e.to_string()))?
        .inspect(super::state_open::say_if_live)
        .ok_or_else(|| {
            CliError::help(
                format!("there is no state at {}", dir.display()),
                "give the folder `--state-dir` named when the runs were applied",
            )
        })?;
    let (runs, damaged) = store
        .run_log()
        .all()
        .map_err(|e| CliError::msg(e.to_string()))?;
    warn_damaged(&damaged);
    Ok(runs)
}

/// The runs of every local state under ./.flow (each opened in turn).
fn local_histories() -> CliResult<Vec<RunRecord>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(".flow")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    dirs.sort();
    let mut runs = Vec::new();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        // A state held by a command that answers no reads (a plan), or
        // the copy of an S3 state, is passed over: --workflow reads it
        // through its own backend.
        if let Ok(Some(store)) = ReadOnlyStore::open_or_read_live(dir, "flow compare")
            && let Ok((found, damaged)) = store.run_log().all()
        {
            super::state_open::say_if_live(&store);
            warn_damaged(&damaged);
            runs.extend(found);
        }
    }
    Ok(runs)
}

/// One row per number both runs (or either) measured, with the change.
fn side_by_side(a: &RunRecord, b: &RunRecord) -> String {
    let (left, right) = (numbers(a), numbers(b));
    // Plain values first, then per-size rows in size order.
    let mut keyed: Vec<(&Order, &String)> =
        left.iter().chain(&right).map(|(o, n, _)| (o, n)).collect();
    keyed.sort();
    keyed.dedup();
    let names: Vec<&String> = keyed.into_iter().map(|(_, n)| n).collect();
    let get = |list: &[Number], n: &str| list.iter().find(|(_, k, _)| k == n).map(|(_, _, v)| *v);
    let w = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let cell = |v: Option<f64>| v.map_or("-".to_string(), figure);
    let said = |r: &RunRecord| {
        let outcome = match r.outcome {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
        };
        format!("{} ({} {}, {outcome})", r.id, r.step, r.started)
    };
    let mut out = format!("A  {}\nB  {}\n", said(a), said(b));
    // A comparison of runs that did not run the same thing says so first.
    if a.step != b.step {
        out.push_str(&format!(
            "note: these are runs of different steps (`{}` and `{}`)\n",
            a.step, b.step
        ));
    }
    if a.inputs_digest != b.inputs_digest {
        out.push_str(&inputs_differ(a, b));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<w$}  {:>14}  {:>14}  {:>8}\n",
        "VALUE", "A", "B", "CHANGE"
    ));
    for n in names {
        let (x, y) = (get(&left, n), get(&right, n));
        let change = match (x, y) {
            (Some(x), Some(y)) if x != 0.0 => format!("{:+.1} %", (y - x) / x.abs() * 100.0),
            (Some(x), Some(y)) if x == y => "+0.0 %".into(),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "{n:<w$}  {:>14}  {:>14}  {change:>8}\n",
            cell(x),
            cell(y)
        ));
    }
    out
}

/// A number as a column shows it: at most 4 decimals, no trailing zeros.
fn figure(v: f64) -> String {
    let text = format!("{v:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.to_string()
    }
}

/// Where a number's row goes: plain values (0) before sizes (1, by bytes).
type Order = (u8, u64);

/// A row of a run's numbers: its place, its name, its value.
type Number = (Order, String, f64);

/// The numbers of a run: its number values, and for an nccl-tests size
/// table the out-of-place bus bandwidth at each size (`busbw at 8 MiB`).
fn numbers(run: &RunRecord) -> Vec<Number> {
    let mut out = Vec::new();
    for (k, v) in &run.values {
        if let Some(x) = v.as_f64() {
            out.push(((0, 0), k.clone(), x));
        } else if k == "sizes"
            && let Some(sizes) = v.as_object()
        {
            for (size, row) in sizes {
                if let (Ok(bytes), Some(bw)) = (
                    size.parse::<u64>(),
                    row.pointer("/out_of_place/busbw").and_then(Value::as_f64),
                ) {
                    out.push(((1, bytes), format!("busbw at {}", human_size(bytes)), bw));
                }
            }
        }
    }
    out
}

/// `8388608` → `8 MiB`.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut unit = 0;
    while v >= 1024 && v.is_multiple_of(1024) && unit < UNITS.len() - 1 {
        v /= 1024;
        unit += 1;
    }
    format!("{v} {}", UNITS[unit])
}

/// The note that two runs ran with different inputs: which ones, where both
/// runs kept each input's digest, else their digests as a whole.
fn inputs_differ(a: &RunRecord, b: &RunRecord) -> String {
    if a.input_digests.is_empty() || b.input_digests.is_empty() {
        let short = |d: &str| d.chars().take(12).collect::<String>();
        return format!(
            "note: their inputs differ (inputs digest {} against {}): the figures below may not measure the same setup\n",
            short(&a.inputs_digest),
            short(&b.inputs_digest)
        );
    }
    let keys: std::collections::BTreeSet<&String> = a
        .input_digests
        .keys()
        .chain(b.input_digests.keys())
        .collect();
    let named: Vec<String> = keys
        .into_iter()
        .filter_map(|k| match (a.input_digests.get(k), b.input_digests.get(k)) {
            (Some(x), Some(y)) if x == y => None,
            (Some(_), Some(_)) => Some(format!("`{k}`")),
            (Some(_), None) => Some(format!("`{k}` (only A)")),
            (None, _) => Some(format!("`{k}` (only B)")),
        })
        .collect();
    format!(
        "note: their inputs differ in {}: the figures below may not measure the same setup\n",
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(id: &str, busbw: f64, at_8m: f64) -> RunRecord {
        serde_json::from_value(json!({
            "id": id, "started": "2026-11-26T07:00:00Z", "duration_ms": 61000,
            "workflow": "wf", "step": "nccl", "provider": "kube.job", "inputs_digest": "d",
            "outcome": "succeeded", "log": "l",
            "values": {"busbw": busbw, "sizes": {
                "8388608": {"out_of_place": {"busbw": at_8m}},
                "1024": {"out_of_place": {"busbw": 0.5}}}},
            "verdicts": [{"name": "busbw", "gate": ">= 100", "passed": true}]
        }))
        .unwrap()
    }

    #[test]
    fn the_table_lists_each_run_with_its_gates_and_values() {
        let t = table(&[RunSummary {
            id: "20261126T070000.000Z-nccl-000001".into(),
            step: "nccl".into(),
            outcome: RunOutcome::Succeeded,
            duration_ms: 61_000,
            gates: (1, 1),
            values: vec![
                ("busbw".into(), "186.4".into()),
                ("sizes".into(), "(2 entries)".into()),
            ],
        }]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("RUN"), "{t}");
        assert!(
            lines[1].contains("succeeded") && lines[1].contains("1m01s"),
            "{t}"
        );
        assert!(lines[1].contains("1/1"), "{t}");
        assert!(lines[1].contains("busbw=186.4 sizes=(2 entries)"), "{t}");
    }

    #[test]
    fn compare_shows_the_change_in_percent_per_value_and_per_size() {
        let a = run("20261126T070000.000Z-nccl-000001", 200.0, 40.0);
        let b = run("20261127T070000.000Z-nccl-000002", 150.0, 10.0);
        let t = side_by_side(&a, &b);
        let row = |name: &str| t.lines().find(|l| l.starts_with(name)).unwrap().to_string();
        assert!(row("busbw ").ends_with("-25.0 %"), "{t}");
        assert!(row("busbw at 8 MiB").ends_with("-75.0 %"), "{t}");
        assert!(row("busbw at 1 KiB").ends_with("+0.0 %"), "{t}");
        // Sizes in size order, after the plain values.
        let at = |s: &str| t.find(s).unwrap();
        assert!(at("busbw at 1 KiB") < at("busbw at 8 MiB"), "{t}");
        assert!(at("busbw ") < at("busbw at 1 KiB"), "{t}");
        assert!(!t.contains("note:"), "same step, same inputs: {t}");
        let mut other = run("20261127T080000.000Z-nccl-000003", 150.0, 10.0);
        other.inputs_digest = "0123456789abcdef".into();
        let t = side_by_side(&a, &other);
        assert!(
            t.contains("note: their inputs differ (inputs digest d against 0123456789ab)"),
            "{t}"
        );
        // Runs that kept each input's digest say which inputs differ.
        let digests = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut a = a.clone();
        a.input_digests = digests(&[("files", "f1"), ("min_busbw", "m1"), ("nodes", "n")]);
        other.input_digests = digests(&[("files", "f1"), ("min_busbw", "m2"), ("timeout", "t")]);
        let t = side_by_side(&a, &other);
        assert!(
            t.contains(
                "note: their inputs differ in `min_busbw`, `nodes` (only A), `timeout` (only B):"
            ),
            "{t}"
        );
    }

    #[test]
    fn figures_keep_four_decimals_at_most() {
        assert_eq!(figure(13.23529411764706), "13.2353");
        assert_eq!(figure(150.0), "150");
        assert_eq!(figure(0.5), "0.5");
        assert_eq!(figure(-0.00001), "0");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(8_388_608), "8 MiB");
        assert_eq!(human_size(17_179_869_184), "16 GiB");
        assert_eq!(human_size(1000), "1000 B");
    }
}
