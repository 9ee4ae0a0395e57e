//! `flow report`: one self-contained HTML page of what a workflow's runs
//! measured. It holds the graph coloured by status, with each step's time
//! in the last run; the Gantt chart of that run; each NCCL step's bus
//! bandwidth by message size, newest run against earlier ones; each
//! training step's loss by step; each node check step's fleet, node by
//! run (its verdicts over time); and the latest runs with their gates.
//! Inline SVG and CSS only: no script, nothing fetched, readable offline.

pub mod chart;
pub mod heatmap;

use std::collections::BTreeMap;
use std::fmt::Write;

use flow_state::{RunOutcome, RunRecord};
use serde_json::Value;

use crate::apply::context::StepSpan;
use chart::{Axes, Bar, Series, escape};

/// When each step of the last apply or destroy ran (`last-run.json`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct LastRun {
    /// When the run started (ms since the epoch).
    pub started_ms: u64,
    /// Each step's span.
    pub steps: Vec<StepSpan>,
}

/// What a page is made of.
#[derive(Debug, Clone)]
pub struct Page<'a> {
    /// The workflow's name.
    pub workflow: &'a str,
    /// When the page was made (RFC 3339).
    pub generated: String,
    /// The graph, as `flow graph --format svg` draws it, with times.
    pub graph_svg: String,
    /// The last run's timeline, when one was kept.
    pub last_run: Option<LastRun>,
    /// The runs, oldest first (of one step when the page is about one).
    pub runs: Vec<RunRecord>,
}

/// Earlier runs drawn beside the newest in each curve.
const EARLIER: usize = 5;
/// Runs listed in the table.
const LISTED: usize = 30;

/// How long each step took in the last run (`12.3 s`), for the graph.
pub fn step_times(last: &LastRun) -> BTreeMap<String, String> {
    last.steps
        .iter()
        .map(|s| {
            let took = (s.end_ms.saturating_sub(s.start_ms)) as f64 / 1000.0;
            (s.step.clone(), chart::seconds(took))
        })
        .collect()
}

/// The page.
pub fn render(page: &Page) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>flow report: {name}</title>\
         <style>{CSS}</style></head><body>\n<h1>{name}</h1>\n<p class=\"meta\">Report made {gen} by flow \
         from the workflow's state and run history: {runs} run(s). No script, nothing fetched.</p>\n",
        name = escape(page.workflow),
        gen = escape(&page.generated),
        runs = page.runs.len(),
    );
    let _ = write!(
        out,
        "<h2 id=\"graph\">Steps</h2>\n<div class=\"figure\">{}</div>\n",
        page.graph_svg
    );
    match &page.last_run {
        Some(last) if !last.steps.is_empty() => {
            let mut spans = last.steps.clone();
            spans.sort_by_key(|s| (s.start_ms, s.end_ms));
            let bars: Vec<Bar> = spans
                .iter()
                .map(|s| Bar {
                    step: s.step.clone(),
                    from: s.start_ms.saturating_sub(last.started_ms) as f64 / 1000.0,
                    to: s.end_ms.saturating_sub(last.started_ms) as f64 / 1000.0,
                    outcome: s.outcome.clone(),
                })
                .collect();
            let _ = write!(
                out,
                "<h2 id=\"gantt\">Where the last run's time went</h2>\n<div class=\"figure\">{}</div>\n",
                chart::gantt("gantt-chart", &bars)
            );
        }
        _ => out.push_str("<h2 id=\"gantt\">Where the last run's time went</h2>\n<p>No run of this state was timed yet: apply it first.</p>\n"),
    }
    for (step, runs) in by_step(&page.runs) {
        if let Some(svg) = bandwidth(&step, &runs) {
            let _ = write!(
                out,
                "<h2 id=\"busbw-{id}\">NCCL bus bandwidth: {s}</h2>\n<div class=\"figure\">{svg}</div>\n{gates}",
                id = escape(&slug(&step)),
                s = escape(&step),
                gates = gates_of(runs.last().copied()),
            );
        }
        if let Some(svg) = heatmap::fleet(&slug(&step), &runs) {
            let _ = write!(
                out,
                "<h2 id=\"fleet-{id}\">Fleet health: {s}</h2>\n<div class=\"figure\">{svg}</div>\n{now}",
                id = escape(&slug(&step)),
                s = escape(&step),
                now = not_healthy_now(&runs),
            );
        }
        if let Some(svg) = loss(&step, &runs) {
            let _ = write!(
                out,
                "<h2 id=\"loss-{id}\">Loss: {s}</h2>\n<div class=\"figure\">{svg}</div>\n{gates}",
                id = escape(&slug(&step)),
                s = escape(&step),
                gates = gates_of(runs.last().copied()),
            );
        }
    }
    out.push_str(&table(&page.runs));
    out.push_str("</body></html>\n");
    out
}

const CSS: &str = "body{font-family:Helvetica,Arial,sans-serif;margin:24px 32px;color:#111;max-width:1100px}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}.meta{color:#555;margin:0}\
.figure{overflow-x:auto;border:1px solid #e5e7eb;border-radius:6px;padding:8px;background:#fff}\
table{border-collapse:collapse;font-size:12px;margin-top:8px}td,th{border-bottom:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}\
.failed{color:#b91c1c;font-weight:bold}.succeeded{color:#15803d}ul.gates{margin:6px 0;font-size:12px}";

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The runs of each step, oldest first, steps in name order.
fn by_step(runs: &[RunRecord]) -> BTreeMap<String, Vec<&RunRecord>> {
    let mut out: BTreeMap<String, Vec<&RunRecord>> = BTreeMap::new();
    for r in runs {
        out.entry(r.step.clone()).or_default().push(r);
    }
    out
}

/// The newest run and up to [`EARLIER`] before it that have `key`.
fn recent<'a>(runs: &[&'a RunRecord], key: &str) -> Vec<&'a RunRecord> {
    let with: Vec<&RunRecord> = runs
        .iter()
        .copied()
        .filter(|r| r.values.contains_key(key))
        .collect();
    with[with.len().saturating_sub(EARLIER + 1)..].to_vec()
}

fn label(r: &RunRecord, newest: bool, figure: Option<String>) -> String {
    let when = r
        .started
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string();
    let tail = figure.map(|f| format!(", {f}")).unwrap_or_default();
    let outcome = if r.outcome == RunOutcome::Failed {
        " (failed)"
    } else {
        ""
    };
    // Made up by flow's local cloud, not measured: said on the curve.
    let emulated = if r.values.contains_key("emulated") {
        " (emulated)"
    } else {
        ""
    };
    format!(
        "{}{when}{tail}{outcome}{emulated}",
        if newest { "newest: " } else { "" }
    )
}

/// The newest run with `key` and the ones before it as curves on `axes`:
/// `points` draws a run, `figure` names it in the legend.
fn curves(
    runs: &[&RunRecord],
    key: &str,
    axes: &Axes,
    points: impl Fn(&RunRecord) -> Vec<(f64, f64)>,
    figure: impl Fn(&RunRecord) -> Option<String>,
) -> Option<String> {
    let picked = recent(runs, key);
    let last = picked.len().checked_sub(1)?;
    let series: Vec<Series> = picked
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            label: label(r, i == last, figure(r)),
            points: points(r),
            newest: i == last,
        })
        .collect();
    Some(chart::lines(axes, &series))
}

/// The bus bandwidth of each message size, out of place.
fn bandwidth(step: &str, runs: &[&RunRecord]) -> Option<String> {
    let axes = Axes {
        id: &format!("busbw-chart-{}", slug(step)),
        x: "message size",
        y: "bus bandwidth, out of place (GB/s)",
        log2_x: true,
    };
    let points = |r: &RunRecord| {
        let mut points: Vec<(f64, f64)> = r.values["sizes"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(size, row)| {
                Some((
                    size.parse::<f64>().ok()?,
                    row.pointer("/out_of_place/busbw")?.as_f64()?,
                ))
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points
    };
    let average = |r: &RunRecord| {
        let avg = r.values.get("busbw").and_then(Value::as_f64)?;
        Some(format!("avg {avg} GB/s"))
    };
    curves(runs, "sizes", &axes, points, average)
}

/// The loss at each logged step.
fn loss(step: &str, runs: &[&RunRecord]) -> Option<String> {
    let axes = Axes {
        id: &format!("loss-chart-{}", slug(step)),
        x: "training step",
        y: "loss",
        log2_x: false,
    };
    let points = |r: &RunRecord| {
        r.values["losses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
            .collect()
    };
    let last = |r: &RunRecord| {
        let loss = r.values.get("loss").and_then(Value::as_f64)?;
        Some(format!("last {loss}"))
    };
    curves(runs, "losses", &axes, points, last)
}

/// The nodes the newest node check did not find healthy, as a list.
fn not_healthy_now(runs: &[&RunRecord]) -> String {
    let Some(nodes) = heatmap::newest_not_healthy(runs) else {
        return String::new();
    };
    if nodes.is_empty() {
        return "<p class=\"succeeded\">Every node healthy in the newest check.</p>\n".into();
    }
    let mut out = String::from("<ul class=\"gates\">");
    for (node, why) in nodes {
        let _ = write!(
            out,
            "<li class=\"failed\">{}: {}</li>",
            escape(&node),
            escape(&why)
        );
    }
    out.push_str("</ul>\n");
    out
}

/// The newest run's gates, as a list.
fn gates_of(run: Option<&RunRecord>) -> String {
    let Some(run) = run.filter(|r| !r.verdicts.is_empty()) else {
        return String::new();
    };
    let mut out = String::from("<ul class=\"gates\">");
    for v in &run.verdicts {
        let _ = write!(
            out,
            "<li class=\"{}\">{} {}: {}</li>",
            if v.passed { "succeeded" } else { "failed" },
            escape(&v.name),
            escape(&v.gate),
            escape(v.why.as_deref().unwrap_or("passed")),
        );
    }
    out.push_str("</ul>\n");
    out
}

/// The latest runs: when, step, outcome, time, gates, numbers.
fn table(runs: &[RunRecord]) -> String {
    let mut out = String::from(
        "<h2 id=\"runs\">Latest runs</h2>\n<table><tr><th>run</th><th>step</th><th>outcome</th><th>took</th><th>gates</th><th>values</th></tr>\n",
    );
    for r in runs.iter().rev().take(LISTED) {
        let passed = r.verdicts.iter().filter(|v| v.passed).count();
        let values: Vec<String> = r
            .values
            .iter()
            .filter_map(|(k, v)| match v {
                Value::Number(n) => Some(format!("{k}={n}")),
                Value::String(s) => Some(format!("{k}={s}")),
                _ => None,
            })
            .collect();
        let outcome = match r.outcome {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"{outcome}\">{outcome}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.id),
            escape(&r.step),
            escape(&chart::seconds(r.duration_ms as f64 / 1000.0)),
            if r.verdicts.is_empty() {
                "-".to_string()
            } else {
                format!("{passed}/{}", r.verdicts.len())
            },
            escape(&values.join(" ")),
        );
    }
    out.push_str("</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(id: &str, step: &str, values: Value) -> RunRecord {
        serde_json::from_value(json!({
            "id": id, "started": "2026-11-26T07:00:00Z", "duration_ms": 61000,
            "workflow": "wf", "step": step, "provider": "kube.job", "inputs_digest": "d",
            "outcome": "succeeded", "log": "l", "values": values,
            "verdicts": [{"name": "busbw", "gate": ">= 100", "passed": false, "why": "busbw = 90 is not >= 100"}]
        }))
        .unwrap()
    }

    #[test]
    fn the_page_holds_the_graph_the_gantt_the_curves_and_the_runs() {
        let sizes = |bw: f64| json!({"8": {"out_of_place": {"busbw": 0.1}}, "1048576": {"out_of_place": {"busbw": bw}}});
        let runs: Vec<RunRecord> = (0..8)
            .map(|i| {
                run(
                    &format!("r{i}"),
                    "nccl",
                    json!({"busbw": 90 + i, "sizes": sizes(40.0 + i as f64),
                           "emulated": "flow local cloud: emulated"}),
                )
            })
            .chain([run(
                "t1",
                "train",
                json!({"loss": 1.2, "losses": [[1, 2.0], [2, 1.5], [3, 1.2]]}),
            )])
            .collect();
        let page = render(&Page {
            workflow: "eks <p4d>",
            generated: "2026-11-26T07:00:00Z".into(),
            graph_svg: "<svg id=\"graph-svg\"></svg>".into(),
            last_run: Some(LastRun {
                started_ms: 1000,
                steps: vec![StepSpan {
                    step: "nccl".into(),
                    start_ms: 1000,
                    end_ms: 4000,
                    outcome: "create".into(),
                }],
            }),
            runs,
        });
        assert!(
            page.contains("<title>flow report: eks &lt;p4d&gt;</title>"),
            "escaped"
        );
        assert!(page.contains("id=\"graph-svg\""));
        assert!(page.contains("id=\"gantt-chart\""));
        assert!(page.contains("id=\"busbw-chart-nccl\""));
        assert!(page.contains("id=\"loss-chart-train\""));
        // The newest and 5 earlier runs: 6 lines in the bandwidth chart.
        let busbw = &page[page.find("busbw-chart-nccl").unwrap()..];
        let busbw = &busbw[..busbw.find("</svg>").unwrap()];
        assert_eq!(busbw.matches("<polyline").count(), 6);
        assert!(
            busbw.contains("newest: 2026-11-26 07:00:00, avg 97 GB/s (emulated)"),
            "{busbw}"
        );
        assert!(
            page.contains("busbw &gt;= 100: busbw = 90 is not &gt;= 100"),
            "gates listed"
        );
        assert!(!page.contains("<script"), "no script");
        assert!(
            !page.contains("http://")
                || page.matches("http://").count()
                    == page.matches("http://www.w3.org/2000/svg").count(),
            "nothing to fetch"
        );
        assert_eq!(page.matches("<tr>").count(), 1 + 9, "a row per run");
    }

    #[test]
    fn a_state_never_applied_says_so_instead_of_a_chart() {
        let page = render(&Page {
            workflow: "wf",
            generated: "now".into(),
            graph_svg: String::new(),
            last_run: None,
            runs: vec![],
        });
        assert!(page.contains("No run of this state was timed yet"));
        assert!(!page.contains("busbw-chart"));
    }
}
