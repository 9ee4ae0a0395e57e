//! Each node's verdict as a node check step's outputs, log, error and run
//! history hold it, with its evidence: one shape on every platform
//! (`kube.node_check`, `slurm.node_check`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::contract::{OpContext, Values};
use crate::fleet::{self, Measured};
use crate::metrics::Program;

/// What one job of a check (one node's, or one pair's) came to.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The job, for messages (`Job default/nvidia-smi-node-3`, `job 41`).
    pub label: String,
    /// Why it failed, when it did.
    pub failed: Option<String>,
    /// What it printed.
    pub text: String,
}

/// One node's verdict as the step's outputs hold it.
pub fn verdict(status: &str, by: &str, reason: String, extra: Value) -> Value {
    let mut v = json!({"status": status, "by": by, "reason": reason});
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// A figure to 4 decimals (a median of 17.9053 × 0.8 is 14.3242).
fn round(f: f64) -> f64 {
    (f * 1e4).round() / 1e4
}

/// The first non-empty line of `text`, for a verdict without a figure.
pub fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no output)")
        .to_string()
}

/// The verdict of a node its pair with a healthy node found bad.
pub fn bad_pair(e: fleet::Evidence) -> Value {
    let threshold = round(e.threshold);
    let reason = format!(
        "busbw {} GB/s < {threshold} ({}) with healthy node {}",
        e.value, e.against, e.partner
    );
    let extra = json!({"short": format!("busbw-below-{}", e.against), "value": e.value,
        "threshold": threshold, "against": e.against, "partner": e.partner, "line": e.line});
    verdict("bad", "pairs", reason, extra)
}

/// A pair's bus bandwidth, read as `parse = "nccl-tests"` reads it.
pub fn measure(r: &Ran) -> Measured {
    match Program::NcclTests.read(&r.text) {
        Ok(reading) if r.failed.is_none() => Measured {
            value: reading.values.get("busbw").and_then(Value::as_f64),
            line: reading
                .lines
                .get("busbw")
                .cloned()
                .unwrap_or_else(|| first_line(&r.text)),
        },
        _ => Measured {
            value: None,
            line: match &r.failed {
                Some(why) => format!("{} failed: {why}", r.label),
                None => first_line(&r.text),
            },
        },
    }
}

/// The nodes of `status` in `verdicts`.
pub fn with_status(verdicts: &BTreeMap<String, Value>, status: &str) -> Vec<String> {
    verdicts
        .iter()
        .filter(|(_, v)| v["status"] == status)
        .map(|(n, _)| n.clone())
        .collect()
}

/// The outputs every node check step has, whatever its platform; each kind
/// adds the nodes its policy took out (`cordoned`, `drained`).
pub const OUTPUT_KEYS: [&str; 6] = ["nodes", "healthy", "bad", "unknown", "rounds", "verdicts"];

/// The step's outputs: the nodes checked, each verdict, the rounds of
/// pairs, and under `taken_key` the nodes the policy took out.
pub fn outputs(
    names: &[String],
    verdicts: &BTreeMap<String, Value>,
    rounds: u32,
    taken_key: &str,
    taken: &[String],
) -> Values {
    let mut outputs = Values::new();
    outputs.insert("nodes".into(), json!(names));
    outputs.insert("healthy".into(), json!(with_status(verdicts, "healthy")));
    outputs.insert("bad".into(), json!(with_status(verdicts, "bad")));
    outputs.insert("unknown".into(), json!(with_status(verdicts, "unknown")));
    outputs.insert("rounds".into(), json!(rounds));
    outputs.insert("verdicts".into(), json!(verdicts));
    outputs.insert(taken_key.into(), json!(taken));
    outputs
}

/// `node: reason (line: …)` for each of `nodes`.
pub fn evidence(verdicts: &BTreeMap<String, Value>, nodes: &[String]) -> String {
    nodes
        .iter()
        .map(|n| {
            let v = &verdicts[n];
            match v["line"].as_str() {
                Some(l) if !l.is_empty() => format!(
                    "{n}: {} (line: `{l}`)",
                    v["reason"].as_str().unwrap_or_default()
                ),
                _ => format!("{n}: {}", v["reason"].as_str().unwrap_or_default()),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each node's verdict for the run history (sent pass or fail).
pub fn record(ctx: &OpContext, verdicts: &BTreeMap<String, Value>) {
    ctx.reporter.measured(&crate::contract::Measured {
        values: verdicts
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
        verdicts: verdicts
            .iter()
            .map(|(n, v)| crate::contract::Verdict {
                name: n.clone(),
                gate: "healthy".into(),
                failed: (v["status"] != "healthy").then(|| {
                    format!(
                        "{}: {}",
                        v["status"].as_str().unwrap_or_default(),
                        v["reason"].as_str().unwrap_or_default()
                    )
                }),
            })
            .collect(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_hold_every_common_key_and_the_taken_out_nodes() {
        let verdicts = BTreeMap::from([
            (
                "n1".to_string(),
                verdict("healthy", "check", "ok".into(), json!({})),
            ),
            (
                "n2".to_string(),
                verdict("bad", "check", "gpus".into(), json!({"line": "x"})),
            ),
        ]);
        let names = ["n1".to_string(), "n2".to_string()];
        let out = outputs(&names, &verdicts, 1, "drained", &["n2".to_string()]);
        let mut want: Vec<&str> = OUTPUT_KEYS.to_vec();
        want.push("drained");
        want.sort();
        assert_eq!(out.keys().map(String::as_str).collect::<Vec<_>>(), want);
        assert_eq!(out["bad"], json!(["n2"]));
        assert_eq!(evidence(&verdicts, &["n2".into()]), "n2: gpus (line: `x`)");
    }

    #[test]
    fn a_pair_without_a_figure_or_a_failed_job_measures_nothing() {
        let ran = |failed: Option<&str>, text: &str| Ran {
            label: "job 4".into(),
            failed: failed.map(str::to_string),
            text: text.into(),
        };
        let m = measure(&ran(None, "NCCL WARN no fabric\n"));
        assert_eq!((m.value, m.line.as_str()), (None, "NCCL WARN no fabric"));
        let m = measure(&ran(Some("FAILED"), "# Avg bus bandwidth    : 17.9\n"));
        assert_eq!((m.value, m.line.as_str()), (None, "job 4 failed: FAILED"));
        let b = bad_pair(fleet::Evidence {
            value: 4.4763,
            threshold: 14.324_24,
            against: "median",
            partner: "c1".into(),
            line: "# Avg bus bandwidth    : 4.4763".into(),
        });
        assert_eq!(
            b["reason"],
            "busbw 4.4763 GB/s < 14.3242 (median) with healthy node c1"
        );
        assert_eq!(b["short"], "busbw-below-median");
    }
}
