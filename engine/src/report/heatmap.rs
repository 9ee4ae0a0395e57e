//! The fleet's health over time for `flow report`: one row per node, one
//! column per run of a node check step (`kube.node_check`,
//! `slurm.node_check`, `batch.node_check`), each cell the node's verdict in that run (healthy,
//! bad, unknown, or not checked), its reason in the cell's tooltip.
//!
//! A fleet of more than [`ALL_ROWS`] nodes keeps a row for each node that
//! was not healthy in some run drawn, and folds the nodes healthy in every
//! run drawn into one row that says how many they are: a 1,000-node fleet
//! with three bad nodes is four rows, the three named.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use flow_state::RunRecord;
use serde_json::Value;

use super::chart::escape;

/// Runs drawn, newest last.
pub const COLUMNS: usize = 30;
/// Fleets up to this many nodes get a row per node.
pub const ALL_ROWS: usize = 64;

const CELL_W: f64 = 18.0;
const ROW_H: f64 = 16.0;
const TOP: f64 = 64.0;

/// A node's verdict in one run, as the step's run history holds it.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    status: Status,
    reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Bad,
    Unknown,
    Healthy,
}

impl Status {
    fn of(text: &str) -> Option<Status> {
        match text {
            "bad" => Some(Status::Bad),
            "unknown" => Some(Status::Unknown),
            "healthy" => Some(Status::Healthy),
            _ => None,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Status::Bad => "bad",
            Status::Unknown => "unknown",
            Status::Healthy => "healthy",
        }
    }

    fn colour(self) -> &'static str {
        match self {
            Status::Bad => "#dc2626",
            Status::Unknown => "#9ca3af",
            Status::Healthy => "#16a34a",
        }
    }
}

/// Each node's verdict in `run`, when it is a node check's run: every value
/// it recorded is a verdict (`{"status": …, "reason": …}`).
fn verdicts(run: &RunRecord) -> Option<BTreeMap<&str, Cell>> {
    if !run.provider.ends_with(".node_check") || run.values.is_empty() {
        return None;
    }
    run.values
        .iter()
        .map(|(node, v)| {
            let status = Status::of(v.get("status")?.as_str()?)?;
            let reason = v.get("reason").and_then(Value::as_str).unwrap_or_default();
            Some((
                node.as_str(),
                Cell {
                    status,
                    reason: reason.to_string(),
                },
            ))
        })
        .collect()
}

/// Names in the order people number nodes: `gpu-2` before `gpu-10`.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                out.push((
                    std::mem::take(&mut text),
                    digits.parse().unwrap_or(u64::MAX),
                ));
                digits.clear();
            }
            text.push(c);
        }
    }
    out.push((text, digits.parse().unwrap_or(0)));
    out
}

/// A row of the map: a node, or the nodes healthy in every run drawn.
enum Row<'a> {
    Node(&'a str),
    AlwaysHealthy(usize),
}

/// The heatmap of a step's node checks (its runs, oldest first), with the
/// `id` `fleet-chart-{slug}`, or `None` when none of them is a node
/// check's.
pub fn fleet(slug: &str, runs: &[&RunRecord]) -> Option<String> {
    let checked: Vec<(&RunRecord, BTreeMap<&str, Cell>)> = runs
        .iter()
        .filter_map(|r| Some((*r, verdicts(r)?)))
        .collect();
    let checked = &checked[checked.len().saturating_sub(COLUMNS)..];
    if checked.is_empty() {
        return None;
    }
    // A node's worst verdict in the runs drawn, for its row's order.
    let mut worst: BTreeMap<&str, Status> = BTreeMap::new();
    for (_, cells) in checked {
        for (node, cell) in cells {
            let w = worst.entry(node).or_insert(cell.status);
            *w = (*w).min(cell.status);
        }
    }
    let mut nodes: Vec<&str> = worst.keys().copied().collect();
    nodes.sort_by_key(|n| (worst[n], natural_key(n)));
    let healthy_always = nodes
        .iter()
        .filter(|n| worst[*n] == Status::Healthy)
        .count();
    let rows: Vec<Row> = if nodes.len() > ALL_ROWS {
        let mut rows: Vec<Row> = nodes
            .iter()
            .filter(|n| worst[*n] != Status::Healthy)
            .map(|n| Row::Node(n))
            .collect();
        if healthy_always > 0 {
            rows.push(Row::AlwaysHealthy(healthy_always));
        }
        rows
    } else {
        nodes.iter().map(|n| Row::Node(n)).collect()
    };
    let label_w = rows
        .iter()
        .map(|r| match r {
            Row::Node(n) => n.chars().count(),
            Row::AlwaysHealthy(_) => 30,
        })
        .max()
        .unwrap_or(4)
        .min(40) as f64
        * 6.5
        + 16.0;
    let width = (label_w + checked.len() as f64 * CELL_W + 16.0).max(360.0);
    let height = TOP + rows.len() as f64 * ROW_H + 40.0;
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" id="fleet-chart-{id}" class="chart" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="11"><rect width="100%" height="100%" fill="#fff"/>"##,
        id = escape(slug),
    );
    for (i, (run, _)) in checked.iter().enumerate() {
        let x = label_w + i as f64 * CELL_W + CELL_W / 2.0;
        let when = run
            .started
            .get(5..16)
            .unwrap_or(&run.started)
            .replace('T', " ");
        let _ = write!(
            out,
            r##"<text x="{x:.1}" y="{y:.1}" transform="rotate(-60 {x:.1} {y:.1})" fill="#555">{}</text>"##,
            escape(&when),
            y = TOP - 6.0,
        );
    }
    for (row, r) in rows.iter().enumerate() {
        let y = TOP + row as f64 * ROW_H;
        match r {
            Row::Node(node) => {
                let _ = write!(
                    out,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#111">{}</text>"##,
                    label_w - 6.0,
                    y + 12.0,
                    escape(node)
                );
                for (i, (run, cells)) in checked.iter().enumerate() {
                    cell(&mut out, label_w, i, y, node, run, cells.get(node));
                }
            }
            Row::AlwaysHealthy(n) => {
                let _ = write!(
                    out,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#111" class="always-healthy">{n} node(s) healthy in every run</text>"##,
                    label_w - 6.0,
                    y + 12.0,
                );
                for i in 0..checked.len() {
                    let _ = write!(
                        out,
                        r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" opacity="0.5"/>"##,
                        label_w + i as f64 * CELL_W + 1.0,
                        y + 1.0,
                        CELL_W - 2.0,
                        ROW_H - 2.0,
                        Status::Healthy.colour(),
                    );
                }
            }
        }
    }
    let legend_y = TOP + rows.len() as f64 * ROW_H + 24.0;
    let mut x = label_w;
    for (word, colour) in [
        ("healthy", Status::Healthy.colour()),
        ("bad", Status::Bad.colour()),
        ("unknown", Status::Unknown.colour()),
        ("not checked", "#f3f4f6"),
    ] {
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{colour}" stroke="#d1d5db"/><text x="{:.1}" y="{legend_y:.1}" fill="#333">{word}</text>"##,
            legend_y - 9.0,
            x + 14.0,
        );
        x += 14.0 + word.len() as f64 * 6.5 + 16.0;
    }
    out.push_str("</svg>");
    Some(out)
}

/// One cell: `node`'s verdict in `run` (or "not checked").
fn cell(
    out: &mut String,
    label_w: f64,
    column: usize,
    y: f64,
    node: &str,
    run: &RunRecord,
    verdict: Option<&Cell>,
) {
    let (status, colour, reason) = match verdict {
        Some(c) => (c.status.word(), c.status.colour(), c.reason.as_str()),
        None => ("not checked", "#f3f4f6", "not in this run"),
    };
    let _ = write!(
        out,
        r##"<rect class="cell" data-node="{node}" data-run="{run_id}" data-status="{status}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{node}, {started}: {status}: {reason}</title></rect>"##,
        label_w + column as f64 * CELL_W + 1.0,
        y + 1.0,
        CELL_W - 2.0,
        ROW_H - 2.0,
        node = escape(node),
        run_id = escape(&run.id),
        started = escape(&run.started),
        reason = escape(reason),
    );
}

/// The nodes not healthy in the newest node check of `runs`, for the text
/// under the map.
pub fn newest_not_healthy(runs: &[&RunRecord]) -> Option<Vec<(String, String)>> {
    let newest = runs.iter().rev().find_map(|r| verdicts(r))?;
    Some(
        newest
            .into_iter()
            .filter(|(_, c)| c.status != Status::Healthy)
            .map(|(n, c)| (n.to_string(), format!("{}: {}", c.status.word(), c.reason)))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(id: &str, started: &str, values: Value) -> RunRecord {
        serde_json::from_value(json!({
            "id": id, "started": started, "duration_ms": 1000,
            "workflow": "wf", "step": "fleet", "provider": "slurm.node_check",
            "inputs_digest": "d", "outcome": "failed", "log": "l", "values": values,
            "verdicts": []
        }))
        .unwrap()
    }

    fn v(status: &str, reason: &str) -> Value {
        json!({"status": status, "by": "check", "reason": reason})
    }

    fn cells(svg: &str) -> Vec<(String, String, String)> {
        svg.split("<rect class=\"cell\" ")
            .skip(1)
            .map(|c| {
                let attr = |name: &str| {
                    let from = c.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                    c[from..from + c[from..].find('"').unwrap()].to_string()
                };
                (attr("data-node"), attr("data-run"), attr("data-status"))
            })
            .collect()
    }

    #[test]
    fn each_node_is_a_row_and_each_run_a_column_bad_nodes_first() {
        let r1 = run(
            "r1",
            "2026-11-28T01:00:00Z",
            json!({"gpu-10": v("healthy", "8 GPUs"), "gpu-2": v("healthy", "8 GPUs"),
                   "gpu-3": v("bad", "nvidia-smi lists 7 GPUs")}),
        );
        let r2 = run(
            "r2",
            "2026-11-28T02:00:00Z",
            json!({"gpu-10": v("unknown", "no figure"), "gpu-2": v("healthy", "8 GPUs"),
                   "gpu-4": v("healthy", "8 GPUs (the replacement)")}),
        );
        let svg = fleet("fleet", &[&r1, &r2]).unwrap();
        assert!(svg.contains("id=\"fleet-chart-fleet\""));
        let got = cells(&svg);
        let want: Vec<(String, String, String)> = [
            ("gpu-3", "r1", "bad"),
            ("gpu-3", "r2", "not checked"),
            ("gpu-10", "r1", "healthy"),
            ("gpu-10", "r2", "unknown"),
            ("gpu-2", "r1", "healthy"),
            ("gpu-2", "r2", "healthy"),
            ("gpu-4", "r1", "not checked"),
            ("gpu-4", "r2", "healthy"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        assert_eq!(got, want);
        assert!(
            svg.contains(
                "<title>gpu-3, 2026-11-28T01:00:00Z: bad: nvidia-smi lists 7 GPUs</title>"
            ),
            "{svg}"
        );
        assert!(
            svg.contains(">11-28 01:00<"),
            "run's time on its column: {svg}"
        );
    }

    #[test]
    fn a_large_fleet_folds_its_always_healthy_nodes_into_one_row() {
        let values = |bad: &[usize]| {
            let map: serde_json::Map<String, Value> = (1..=1000)
                .map(|i| {
                    let status = if bad.contains(&i) { "bad" } else { "healthy" };
                    (format!("node-{i}"), v(status, "x"))
                })
                .collect();
            Value::Object(map)
        };
        let r1 = run("r1", "2026-11-28T01:00:00Z", values(&[17]));
        let r2 = run("r2", "2026-11-28T02:00:00Z", values(&[512, 999]));
        let svg = fleet("fleet", &[&r1, &r2]).unwrap();
        let rows: BTreeSet<String> = cells(&svg).into_iter().map(|c| c.0).collect();
        assert_eq!(
            rows,
            ["node-17", "node-512", "node-999"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        );
        assert!(svg.contains(">997 node(s) healthy in every run<"), "{svg}");
        assert!(svg.len() < 20_000, "{} bytes", svg.len());
        assert_eq!(
            newest_not_healthy(&[&r1, &r2]).unwrap(),
            vec![
                ("node-512".to_string(), "bad: x".to_string()),
                ("node-999".to_string(), "bad: x".to_string())
            ]
        );
    }

    #[test]
    fn runs_of_other_kinds_draw_nothing() {
        let mut other = run("r1", "2026-11-28T01:00:00Z", json!({"busbw": 90}));
        assert!(fleet("fleet", &[&other]).is_none());
        other.provider = "slurm.job".into();
        other.values = run("r", "t", json!({"gpu-1": v("bad", "x")})).values;
        assert!(fleet("fleet", &[&other]).is_none(), "only node checks");
        let odd = run("r2", "t", json!({"gpu-1": {"status": "maybe"}}));
        assert!(fleet("fleet", &[&odd]).is_none(), "not a verdict");
    }

    #[test]
    fn only_the_newest_columns_are_drawn() {
        let runs: Vec<RunRecord> = (0..40)
            .map(|i| {
                run(
                    &format!("r{i:02}"),
                    "2026-11-28T01:00:00Z",
                    json!({"gpu-1": v("healthy", "ok")}),
                )
            })
            .collect();
        let refs: Vec<&RunRecord> = runs.iter().collect();
        let got = cells(&fleet("fleet", &refs).unwrap());
        assert_eq!(got.len(), COLUMNS);
        assert_eq!(got[0].1, "r10");
        assert_eq!(got.last().unwrap().1, "r39");
    }
}
