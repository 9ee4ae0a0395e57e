//! The inputs of `kube.node_check`, read for apply and checked for validate.

use std::time::Duration;

use serde_json::Value;

use crate::capture::Matchers;
use crate::contract::{InputValue, Problem, ProviderError, Values};

/// What is done with the nodes found bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Policy {
    /// Fail the step, naming them.
    Fail,
    /// Cordon, taint and drain them; the step succeeds.
    Cordon,
}

/// The GPUs each node's `nvidia-smi` must list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gpus {
    /// As many as the node's instance type has (its
    /// `node.kubernetes.io/instance-type` label, flow's table).
    InstanceType,
    /// This many.
    Count(u32),
}

/// The keys of the `check` table.
const CHECK_KEYS: &[&str] = &[
    "files",
    "manifest",
    "values",
    "substitute",
    "success_pattern",
    "capture",
    "parse",
    "expect",
    "gpus",
];

/// The keys of the `pairs` table.
const PAIR_KEYS: &[&str] = &[
    "files",
    "manifest",
    "values",
    "substitute",
    "floor",
    "of_median",
];

/// The policies, as written.
const POLICIES: &str = "`fail` (the step fails naming them) or `cordon` (cordoned, tainted flow.dev/unhealthy and drained)";

/// A step's inputs, read.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    /// The label selector of the nodes to check.
    pub nodes: String,
    /// The check each node runs alone (a job's manifest and how its log is judged).
    pub check: Option<Values>,
    /// The GPU count the check's `nvidia-smi` must list.
    pub gpus: Option<Gpus>,
    /// The test each pair of nodes runs (an NCCL job's manifest).
    pub pairs: Option<Values>,
    /// The instance type's bus bandwidth floor, GB/s.
    pub floor: Option<f64>,
    /// The fraction of the fleet's median below which a pair is bad.
    pub of_median: f64,
    /// What is done with bad nodes.
    pub policy: Policy,
    /// The most of the fleet that may be found bad and taken out.
    pub max_bad_fraction: f64,
    /// How long draining the bad nodes may take.
    pub drain_timeout: Duration,
}

fn table(v: &Values, key: &str) -> Option<Values> {
    v.get(key).and_then(Value::as_object).cloned()
}

/// A number, or text that is one (`"${vars.min_busbw}"` may arrive as either).
fn number(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str()?.trim().parse().ok())
}

fn gpus_of(v: &Value) -> Result<Gpus, String> {
    match v {
        Value::String(s) if s == "instance-type" => Ok(Gpus::InstanceType),
        Value::Number(n) => n
            .as_u64()
            .filter(|n| (1..=64).contains(n))
            .map(|n| Gpus::Count(n as u32))
            .ok_or_else(|| format!("`{n}` is not a GPU count (1 to 64)")),
        other => Err(format!(
            "`{other}` is neither a GPU count nor \"instance-type\""
        )),
    }
}

/// `max_bad_fraction`: a number (or its text) above 0 and below 1.
fn fraction_of(v: &Value) -> Result<f64, Problem> {
    match number(v) {
        Some(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err(Problem::at(
            "max_bad_fraction",
            format!(
                "{v} is not a fraction of the fleet: give one above 0 and below 1 (0.25 by default)"
            ),
        )),
    }
}

/// `drain_timeout`: a duration (`"10m"`).
fn drain_timeout_of(v: &Value) -> Result<Duration, Problem> {
    v.as_str()
        .and_then(|t| humantime::parse_duration(t).ok())
        .ok_or_else(|| {
            Problem::at(
                "drain_timeout",
                format!("{v} is not a duration (e.g. \"10m\")"),
            )
        })
}

fn policy_of(text: &str) -> Result<Policy, Problem> {
    match text {
        "fail" => Ok(Policy::Fail),
        "cordon" => Ok(Policy::Cordon),
        "replace" => Err(Problem::at(
            "policy",
            "policy `replace` is not built yet for kube.node_check: terminating a bad node's instance through its Auto Scaling group is still to come",
        )
        .with_help(format!("use {POLICIES}; then replace the cordoned nodes by hand"))),
        other => {
            let mut p = Problem::at(
                "policy",
                format!("`{other}` is not a policy: a bad node's policy is {POLICIES}"),
            );
            if let Some(c) = crate::suggest::closest(other, ["fail", "cordon", "replace"]) {
                p = p.with_help(format!("did you mean `{c}`?"));
            }
            Err(p)
        }
    }
}

impl Spec {
    /// The inputs of an apply (validated before).
    pub fn from_values(v: &Values) -> Result<Spec, ProviderError> {
        let invalid = |p: Problem| ProviderError::invalid(p.message).before_acting();
        let check = table(v, "check");
        let pairs = table(v, "pairs");
        let num = |t: &Option<Values>, k: &str| t.as_ref().and_then(|t| number(t.get(k)?));
        Ok(Spec {
            nodes: v
                .get("nodes")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            gpus: check
                .as_ref()
                .and_then(|c| c.get("gpus"))
                .map(gpus_of)
                .transpose()
                .map_err(|e| invalid(Problem::at("check", e)))?,
            floor: num(&pairs, "floor"),
            of_median: num(&pairs, "of_median").unwrap_or(0.8),
            check,
            pairs,
            policy: policy_of(v.get("policy").and_then(Value::as_str).unwrap_or("fail"))
                .map_err(invalid)?,
            // Checked again here: a value that came through a reference
            // was not known at validate.
            max_bad_fraction: v
                .get("max_bad_fraction")
                .map(fraction_of)
                .transpose()
                .map_err(invalid)?
                .unwrap_or(0.25),
            drain_timeout: v
                .get("drain_timeout")
                .map(drain_timeout_of)
                .transpose()
                .map_err(invalid)?
                .unwrap_or(Duration::from_secs(15 * 60)),
        })
    }
}

/// The problems of a step's inputs, for validate, each at its entry.
pub(super) fn problems(inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let known = crate::contract::known_inputs(inputs);
    let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
    let mut out = Vec::new();
    if !has("check") && !has("pairs") {
        out.push(Problem::at_path(
            &[],
            "give `check` (a job each node runs alone), `pairs` (an NCCL test each pair of nodes runs), or both",
        ));
    }
    if let Some(text) = known.get("policy").and_then(Value::as_str)
        && let Err(p) = policy_of(text)
    {
        out.push(p);
    }
    if let Some(Err(p)) = known.get("max_bad_fraction").map(fraction_of) {
        out.push(p);
    }
    if let Some(Err(p)) = known.get("drain_timeout").map(drain_timeout_of) {
        out.push(p);
    }
    if let Some(sel) = known.get("nodes").and_then(Value::as_str)
        && !sel.contains('=')
        && !sel.contains(" in ")
    {
        out.push(
            Problem::at("nodes", format!("`{sel}` is not a label selector"))
                .with_help("e.g. \"eks.amazonaws.com/nodegroup=gpu\""),
        );
    }
    for (name, keys) in [("check", CHECK_KEYS), ("pairs", PAIR_KEYS)] {
        if let Some(t) = table(&known, name) {
            out.extend(table_problems(name, &t, keys));
        }
    }
    out
}

/// The problems of the `check` or `pairs` table.
fn table_problems(name: &str, t: &Values, keys: &[&str]) -> Vec<Problem> {
    let mut out = Vec::new();
    for k in t.keys().filter(|k| !keys.contains(&k.as_str())) {
        out.push(
            Problem::at_path(&[name, k], format!("`{name}` takes no `{k}`"))
                .on_key()
                .with_help(format!("`{name}` takes {}", keys.join(", "))),
        );
    }
    if !t.contains_key("files") && !t.contains_key("manifest") {
        out.push(Problem::at(
            name,
            format!("`{name}` needs `files` or `manifest`: the job to run"),
        ));
    }
    let within = |p: Problem| {
        let mut path = vec![name.to_string()];
        path.extend(p.path);
        Problem { path, ..p }
    };
    if name == "check" {
        out.extend(Matchers::problems(t).into_iter().map(within));
        if let Some(g) = t.get("gpus")
            && let Err(e) = gpus_of(g)
        {
            out.push(Problem::at_path(&["check", "gpus"], e).with_help(
                "a number, or \"instance-type\" for the count of the node's instance type",
            ));
        }
    } else {
        for k in ["floor", "of_median"] {
            if let Some(v) = t.get(k)
                && number(v).is_none_or(|f| f <= 0.0)
            {
                out.push(Problem::at_path(
                    &["pairs", k],
                    format!("`{v}` is not a positive number"),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn known(v: Value) -> Vec<(String, InputValue)> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), InputValue::Known(v.clone())))
            .collect()
    }

    #[test]
    fn policies_are_fail_and_cordon_and_replace_is_refused_for_now() {
        assert_eq!(policy_of("fail").unwrap(), Policy::Fail);
        assert_eq!(policy_of("cordon").unwrap(), Policy::Cordon);
        let p = policy_of("replace").unwrap_err();
        assert!(p.message.contains("not built yet"), "{}", p.message);
        let p = policy_of("cordn").unwrap_err();
        assert_eq!(p.path, ["policy"]);
        assert_eq!(p.help.as_deref(), Some("did you mean `cordon`?"));
    }

    #[test]
    fn problems_inside_check_point_into_it() {
        let p = problems(&known(json!({
            "nodes": "eks.amazonaws.com/nodegroup=gpu",
            "check": {"files": ["c.yaml"], "expect": {"gpu": ">= 8"}, "gpus": "all", "extra": 1},
            "max_bad_fraction": 1.5,
        })));
        let paths: Vec<Vec<String>> = p.iter().map(|p| p.path.clone()).collect();
        assert!(
            paths.contains(&vec!["check".into(), "expect".into(), "gpu".into()]),
            "{p:?}"
        );
        assert!(
            paths.contains(&vec!["check".into(), "gpus".into()]),
            "{p:?}"
        );
        assert!(
            paths.contains(&vec!["check".into(), "extra".into()]),
            "{p:?}"
        );
        assert!(paths.contains(&vec!["max_bad_fraction".into()]), "{p:?}");
        assert!(problems(&known(json!({"nodes": "a=b"})))[0].path.is_empty());
    }

    /// A limit that came through a reference (unknown at validate) is
    /// checked at apply too: a fraction of 1.5 would let every node be
    /// taken out.
    #[test]
    fn apply_refuses_limits_validate_could_not_see() {
        let base = json!({"nodes": "a=b", "check": {"files": ["c.yaml"]}});
        let with = |k: &str, v: Value| {
            let mut v2 = base.clone();
            v2[k] = v;
            serde_json::from_value::<Values>(v2).unwrap()
        };
        let e = Spec::from_values(&with("max_bad_fraction", json!(1.5))).unwrap_err();
        assert!(
            e.message.contains("is not a fraction of the fleet"),
            "{}",
            e.message
        );
        let e = Spec::from_values(&with("max_bad_fraction", json!("half"))).unwrap_err();
        assert!(e.message.contains("is not a fraction"), "{}", e.message);
        let e = Spec::from_values(&with("drain_timeout", json!("soon"))).unwrap_err();
        assert!(e.message.contains("is not a duration"), "{}", e.message);
        let ok = Spec::from_values(&with("max_bad_fraction", json!("0.3"))).unwrap();
        assert_eq!(ok.max_bad_fraction, 0.3);
        let ok = Spec::from_values(&serde_json::from_value(base).unwrap()).unwrap();
        assert_eq!(ok.max_bad_fraction, 0.25);
    }
}
