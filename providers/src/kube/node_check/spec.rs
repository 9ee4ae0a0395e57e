//! The inputs of `kube.node_check`, read for apply and checked for
//! validate: the shared ones through [`crate::fleet::spec`], with EKS's
//! platform (a table's job is a manifest; a bad node is cordoned), plus
//! the label selector and `drain_timeout`.

use std::time::Duration;

use serde_json::Value;

use crate::contract::{InputValue, Problem, ProviderError, Values};
use crate::fleet::spec::{Common, Platform};

/// EKS's node check platform.
pub(super) const KUBE: Platform = Platform {
    kind: "kube.node_check",
    take_out: "cordon",
    take_out_means: "cordoned, tainted flow.dev/unhealthy and drained",
    elsewhere: ("drain", "Slurm's (slurm.node_check)"),
    replace_later: "terminating a bad node's instance through its Auto Scaling group",
    job_keys: &["files", "manifest", "values", "substitute"],
    job_needs: &["files", "manifest"],
    job_needs_text: "`files` or `manifest`: the job to run",
};

/// A step's inputs, read.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    /// The label selector of the nodes to check.
    pub nodes: String,
    /// What every node check kind reads.
    pub common: Common,
    /// How long draining the bad nodes may take.
    pub drain_timeout: Duration,
    /// Policy replace: how long the new nodes may take to be Ready.
    pub replace_timeout: Duration,
}

/// `drain_timeout` or `replace_timeout`: a duration (`"10m"`).
fn duration_of(key: &str, v: &Value) -> Result<Duration, Problem> {
    v.as_str()
        .and_then(|t| humantime::parse_duration(t).ok())
        .ok_or_else(|| Problem::at(key, format!("{v} is not a duration (e.g. \"10m\")")))
}

impl Spec {
    /// The inputs of an apply (validated before).
    pub fn from_values(v: &Values) -> Result<Spec, ProviderError> {
        let invalid = |p: Problem| ProviderError::invalid(p.message).before_acting();
        Ok(Spec {
            nodes: v
                .get("nodes")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            common: KUBE.common(v)?,
            drain_timeout: v
                .get("drain_timeout")
                .map(|t| duration_of("drain_timeout", t))
                .transpose()
                .map_err(invalid)?
                .unwrap_or(Duration::from_secs(15 * 60)),
            replace_timeout: v
                .get("replace_timeout")
                .map(|t| duration_of("replace_timeout", t))
                .transpose()
                .map_err(invalid)?
                .unwrap_or(Duration::from_secs(20 * 60)),
        })
    }
}

/// The problems of a step's inputs, for validate, each at its entry.
pub(super) fn problems(inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let known = crate::contract::known_inputs(inputs);
    let mut out = KUBE.problems(inputs);
    for key in ["drain_timeout", "replace_timeout"] {
        if let Some(Err(p)) = known.get(key).map(|t| duration_of(key, t)) {
            out.push(p);
        }
    }
    // A policy that came through a reference is not known yet: no verdict.
    let policy_given = inputs.iter().any(|(n, _)| n == "policy");
    let policy = known.get("policy").and_then(Value::as_str);
    if known.contains_key("replace_timeout")
        && policy != Some("replace")
        && (policy.is_some() || !policy_given)
    {
        out.push(
            Problem::at(
                "replace_timeout",
                "`replace_timeout` is for policy `replace`",
            )
            .with_help("set `policy = \"replace\"`, or leave `replace_timeout` out"),
        );
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::known;

    #[test]
    fn policies_are_fail_cordon_and_replace() {
        use crate::fleet::spec::Policy;
        assert_eq!(KUBE.policy_of("fail").unwrap(), Policy::Fail);
        assert_eq!(KUBE.policy_of("cordon").unwrap(), Policy::TakeOut);
        assert_eq!(KUBE.policy_of("replace").unwrap(), Policy::TakeOut);
        let spec = |policy: &str| {
            Spec::from_values(
                &serde_json::from_value(
                    json!({"nodes": "a=b", "check": {"files": ["c.yaml"]}, "policy": policy}),
                )
                .unwrap(),
            )
            .unwrap()
        };
        assert!(spec("replace").common.replace);
        assert!(!spec("cordon").common.replace);
        assert_eq!(spec("replace").replace_timeout, Duration::from_secs(1200));
        let refused = |v: Value| {
            problems(&known(v))
                .into_iter()
                .filter(|p| p.path == ["replace_timeout"])
                .count()
        };
        let base = json!({"nodes": "a=b", "check": {"files": ["c.yaml"]}, "replace_timeout": "5m"});
        let with = |policy: &str| {
            let mut v = base.clone();
            v["policy"] = json!(policy);
            v
        };
        assert_eq!(refused(with("replace")), 0);
        assert_eq!(refused(with("cordon")), 1);
        assert_eq!(refused(base.clone()), 1, "the default policy is fail");
        let p = KUBE.policy_of("drain").unwrap_err();
        assert!(p.message.contains("is Slurm's"), "{}", p.message);
        let p = KUBE.policy_of("cordn").unwrap_err();
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
        assert_eq!(ok.common.max_bad_fraction, 0.3);
        let ok = Spec::from_values(&serde_json::from_value(base).unwrap()).unwrap();
        assert_eq!(ok.common.max_bad_fraction, 0.25);
    }
}
