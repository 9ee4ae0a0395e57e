//! Each node's verdict as the step's outputs, log, error and run history
//! hold it, with its evidence.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::contract::{OpContext, Values};
use crate::fleet::{self, Measured};
use crate::metrics::Program;

/// One node's verdict as the step's outputs hold it.
pub(super) fn verdict(status: &str, by: &str, reason: String, extra: Value) -> Value {
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
pub(super) fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no output)")
        .to_string()
}

/// The verdict of a node its pair with a healthy node found bad.
pub(super) fn bad_pair(e: fleet::Evidence) -> Value {
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
pub(super) fn measure(r: &super::jobs::Ran) -> Measured {
    match Program::NcclTests.read(&r.text) {
        Ok(reading) if r.succeeded.is_none() => Measured {
            value: reading.values.get("busbw").and_then(Value::as_f64),
            line: reading
                .lines
                .get("busbw")
                .cloned()
                .unwrap_or_else(|| first_line(&r.text)),
        },
        _ => Measured {
            value: None,
            line: match &r.succeeded {
                Some(why) => format!("{} failed: {why}", r.label),
                None => first_line(&r.text),
            },
        },
    }
}

/// The nodes of `status` in `verdicts`.
pub(super) fn with_status(verdicts: &BTreeMap<String, Value>, status: &str) -> Vec<String> {
    verdicts
        .iter()
        .filter(|(_, v)| v["status"] == status)
        .map(|(n, _)| n.clone())
        .collect()
}

/// The outputs of every kube.node_check step ([`outputs`] puts each in).
pub(super) const OUTPUT_KEYS: [&str; 7] = [
    "nodes", "healthy", "bad", "unknown", "rounds", "verdicts", "cordoned",
];

/// The step's outputs: the nodes checked, each verdict, the rounds of pairs
/// and the nodes cordoned.
pub(super) fn outputs(
    names: &[String],
    verdicts: &BTreeMap<String, Value>,
    rounds: u32,
    cordoned: &[String],
) -> Values {
    let mut outputs = Values::new();
    outputs.insert("nodes".into(), json!(names));
    outputs.insert("healthy".into(), json!(with_status(verdicts, "healthy")));
    outputs.insert("bad".into(), json!(with_status(verdicts, "bad")));
    outputs.insert("unknown".into(), json!(with_status(verdicts, "unknown")));
    outputs.insert("rounds".into(), json!(rounds));
    outputs.insert("verdicts".into(), json!(verdicts));
    outputs.insert("cordoned".into(), json!(cordoned));
    outputs
}

/// `node: reason (line: …)` for each of `nodes`.
pub(super) fn evidence(verdicts: &BTreeMap<String, Value>, nodes: &[String]) -> String {
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
pub(super) fn record(ctx: &OpContext, verdicts: &BTreeMap<String, Value>) {
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

    /// The keys validate expects are those `outputs` puts in.
    #[test]
    fn declared_outputs_are_the_outputs_a_check_has() {
        let verdicts = BTreeMap::from([(
            "n1".to_string(),
            verdict("healthy", "check", "ok".into(), json!({})),
        )]);
        let out = outputs(&["n1".to_string()], &verdicts, 1, &[]);
        let keys: Vec<&str> = out.keys().map(String::as_str).collect();
        let mut want = OUTPUT_KEYS.to_vec();
        want.sort();
        assert_eq!(keys, want);
        assert_eq!(out["healthy"], json!(["n1"]));
    }
}
