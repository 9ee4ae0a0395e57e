//! The inputs of `slurm.node_check`, read for apply and checked for
//! validate: the shared ones through [`crate::fleet::spec`], with Slurm's
//! platform (a table's job is a batch script; a bad node is drained), plus
//! which nodes and the batch scripts' own entries.

use std::time::Duration;

use serde_json::Value;

use crate::contract::{InputValue, Problem, ProviderError, Values};
use crate::fleet::spec::{Common, Platform, table};
use crate::slurm::replacement::{self, Through};
use crate::slurm::script;

/// Slurm's node check platform.
pub(super) const SLURM: Platform = Platform {
    kind: "slurm.node_check",
    take_out: "drain",
    take_out_means: "scontrol update State=DRAIN Reason=\"flow: …\": Slurm runs no new job there",
    elsewhere: ("cordon", "EKS's (kube.node_check)"),
    replace_later: "replacing without naming whose replacement (`hyperpod_cluster`: SageMaker HyperPod's; `pcluster_cluster`: ParallelCluster's)",
    job_keys: JOB_KEYS,
    job_needs: &["script"],
    job_needs_text: "`script`: the batch script to run",
};

/// The keys of a table's batch job.
const JOB_KEYS: &[&str] = &["script", "args", "environment", "sbatch_args"];

/// sbatch options flow sets itself on every job, refused in `sbatch_args`.
const PINNING: &[&str] = &[
    "--nodelist",
    "-w",
    "--nodes",
    "-N",
    "--comment",
    "--array",
    "-a",
];

/// A step's inputs, read.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    /// The nodes to check, as a Slurm hostlist (`compute-[1-16]`).
    pub nodes: Option<String>,
    /// The partition whose nodes are checked (all of them without
    /// `nodes`), and the jobs run in.
    pub partition: Option<String>,
    /// With policy `replace`, the cluster a bad node is replaced through,
    /// after it is drained (the policy read as `drain` in `common`).
    pub replace_through: Option<Through>,
    /// Policy `replace`: how long the platform may take to put a new node
    /// in service.
    pub replace_timeout: Duration,
    /// What every node check kind reads.
    pub common: Common,
}

impl Spec {
    /// The inputs of an apply (validated before).
    pub fn from_values(v: &Values) -> Result<Spec, ProviderError> {
        let text = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let (replace_through, replace_timeout) = replacement::read(v)?;
        let common = match &replace_through {
            Some(_) => SLURM.common(&replacement::as_drain(v))?,
            None => SLURM.common(v)?,
        };
        let spec = Spec {
            nodes: text("nodes"),
            partition: text("partition"),
            common,
            replace_through,
            replace_timeout,
        };
        if spec.nodes.is_none() && spec.partition.is_none() {
            return Err(ProviderError::invalid(
                "give `nodes` (a hostlist, e.g. \"compute-[1-16]\") or `partition`",
            )
            .before_acting());
        }
        Ok(spec)
    }

    /// What the nodes are, for messages: `` `compute-[1-16]` `` or
    /// `` partition `gpu` ``.
    pub fn what(&self) -> String {
        match (&self.nodes, &self.partition) {
            (Some(n), Some(p)) => format!("`{n}` in partition `{p}`"),
            (Some(n), None) => format!("`{n}`"),
            (None, Some(p)) => format!("partition `{p}`"),
            (None, None) => "no nodes".into(),
        }
    }
}

/// Whether `s` reads as a Slurm hostlist (`compute-[1-16,20]`, `a,b`).
pub(super) fn is_hostlist(s: &str) -> bool {
    let mut depth = 0i32;
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c.is_ascii_alphanumeric() || "-_.,".contains(c) => {}
            _ => return false,
        }
        if !(0..=1).contains(&depth) {
            return false;
        }
    }
    depth == 0 && !s.is_empty()
}

/// The problems of a step's inputs, for validate, each at its entry.
pub(super) fn problems(inputs: &[(String, InputValue)], workdir: &crate::Workdir) -> Vec<Problem> {
    let known = crate::contract::known_inputs(inputs);
    let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
    let mut out = replacement::problems(&SLURM, inputs);
    if !has("nodes") && !has("partition") {
        out.push(Problem::at_path(
            &[],
            "give `nodes` (a Slurm hostlist, e.g. \"compute-[1-16]\") or `partition` (every node of it): the nodes to check",
        ));
    }
    if let Some(n) = known.get("nodes").and_then(Value::as_str)
        && !is_hostlist(n)
    {
        out.push(
            Problem::at("nodes", format!("`{n}` is not a Slurm hostlist")).with_help(
                "e.g. \"compute-[1-16]\" or \"gpu-1,gpu-2\", as `scontrol show hostnames` reads it",
            ),
        );
    }
    if let Some(p) = known.get("ssh_port").and_then(Value::as_i64)
        && !(1..=65535).contains(&p)
    {
        out.push(Problem::at(
            "ssh_port",
            "`ssh_port` must be between 1 and 65535",
        ));
    }
    for name in ["check", "pairs"] {
        if let Some(t) = table(&known, name) {
            out.extend(job_problems(name, &t, workdir));
        }
    }
    out
}

/// The problems of a table's batch job: its script outside the workflow's
/// folder, an sbatch option that is not one or that flow sets itself, an
/// environment name that is not a shell name.
fn job_problems(name: &str, t: &Values, workdir: &crate::Workdir) -> Vec<Problem> {
    let mut out = Vec::new();
    if let Some(path) = t.get("script").and_then(Value::as_str)
        && let Err(why) = workdir.resolve(path)
    {
        out.push(Problem::at_path(&[name, "script"], why).with_help(
            "copy the script into the workflow's folder (or a folder under it) and name it relative to the workflow file",
        ));
    }
    for arg in t
        .get("sbatch_args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let option = arg.split('=').next().unwrap_or(arg);
        if !arg.starts_with('-') {
            out.push(
                Problem::at_path(
                    &[name, "sbatch_args"],
                    format!("{arg:?} is not an sbatch option (options start with `-`)"),
                )
                .with_help("the script is the table's `script`; give options as \"--name=value\""),
            );
        } else if PINNING.contains(&option) {
            out.push(
                Problem::at_path(&[name, "sbatch_args"], format!("flow sets `{option}` itself on every job of a node check"))
                    .with_help("each check job runs on its node (--nodelist=NODE --nodes=1), each pair's on its two (--nodelist=A,B --nodes=2)"),
            );
        }
    }
    for key in t
        .get("environment")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.keys())
    {
        if !script::is_env_name(key) {
            out.push(
                Problem::at_path(
                    &[name, "environment", key],
                    format!("`{key}` is not a shell variable name"),
                )
                .on_key(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::known;

    #[test]
    fn hostlists_are_told_from_other_text() {
        for ok in ["compute-[1-16]", "gpu-1,gpu-2", "q1-st-p5-[1-4,7]", "node1"] {
            assert!(is_hostlist(ok), "{ok}");
        }
        for bad in ["", "a=b", "c[1-2", "c]1[", "c[[1]]", "a b"] {
            assert!(!is_hostlist(bad), "{bad}");
        }
    }

    #[test]
    fn validate_points_at_each_entry() {
        let dir = tempfile::tempdir().unwrap();
        let p = problems(
            &known(json!({
                "nodes": "eks.amazonaws.com/nodegroup=gpu",
                "policy": "cordon",
                "check": {"script": "../c.sbatch", "sbatch_args": ["--nodelist=c1", "x"], "environment": {"A-B": "1"}},
                "pairs": {"script": "p.sbatch", "floor": 0},
            })),
            &dir.path().into(),
        );
        let paths: Vec<String> = p.iter().map(|p| p.path.join(".")).collect();
        for want in [
            "policy",
            "nodes",
            "pairs.floor",
            "check.script",
            "check.sbatch_args",
            "check.environment.A-B",
        ] {
            assert!(paths.contains(&want.to_string()), "{want}: {paths:?}");
        }
        assert_eq!(
            paths.iter().filter(|p| *p == "check.sbatch_args").count(),
            2
        );
        let none = problems(
            &known(json!({"check": {"script": "c.sbatch"}})),
            &dir.path().into(),
        );
        assert_eq!(none.len(), 1, "{none:?}");
        assert!(
            none[0].message.contains("give `nodes`"),
            "{}",
            none[0].message
        );
    }

    #[test]
    fn replace_is_refused_unless_a_hyperpod_or_parallelcluster_cluster_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let check = json!({"script": "c.sbatch"});
        let refused = problems(
            &known(json!({"partition": "p", "policy": "replace", "check": check})),
            &dir.path().into(),
        );
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].path, ["policy"]);
        assert!(
            refused[0]
                .help
                .as_deref()
                .unwrap_or_default()
                .contains("name the cluster in `hyperpod_cluster`"),
            "{refused:?}"
        );
        let allowed = problems(
            &known(
                json!({"partition": "p", "policy": "replace", "check": check,
                "hyperpod_cluster": "ml-cluster"}),
            ),
            &dir.path().into(),
        );
        assert!(allowed.is_empty(), "{allowed:?}");
        let allowed = problems(
            &known(
                json!({"partition": "p", "policy": "replace", "check": check,
                "pcluster_cluster": "ml-p5"}),
            ),
            &dir.path().into(),
        );
        assert!(allowed.is_empty(), "{allowed:?}");
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        let s = Spec::from_values(&v(json!({"partition": "p", "policy": "replace",
            "check": check, "hyperpod_cluster": "ml-cluster"})))
        .unwrap();
        assert_eq!(s.common.policy, crate::fleet::spec::Policy::TakeOut);
        assert_eq!(
            s.replace_through,
            Some(Through::HyperPod("ml-cluster".into()))
        );
        assert_eq!(s.replace_timeout, replacement::DEFAULT_REPLACE_TIMEOUT);
        let s = Spec::from_values(&v(json!({"partition": "p", "policy": "replace",
            "check": check, "pcluster_cluster": "ml-p5", "replace_timeout": "20m"})))
        .unwrap();
        assert_eq!(
            s.replace_through,
            Some(Through::ParallelCluster("ml-p5".into()))
        );
        assert_eq!(s.replace_timeout, Duration::from_secs(20 * 60));
        let both = problems(
            &known(
                json!({"partition": "p", "policy": "replace", "check": check,
                "hyperpod_cluster": "a", "pcluster_cluster": "b", "replace_timeout": "soon"}),
            ),
            &dir.path().into(),
        );
        let paths: Vec<String> = both.iter().map(|p| p.path.join(".")).collect();
        assert_eq!(paths, ["pcluster_cluster", "replace_timeout"], "{both:?}");
        let idle = problems(
            &known(json!({"partition": "p", "policy": "drain", "check": check,
                "replace_timeout": "20m"})),
            &dir.path().into(),
        );
        assert_eq!(idle.len(), 1, "{idle:?}");
        assert!(
            idle[0].message.contains("is for policy `replace`"),
            "{idle:?}"
        );
        let e = Spec::from_values(&v(json!({"partition": "p", "policy": "replace",
            "check": check})))
        .unwrap_err();
        assert!(e.message.contains("policy `replace`"), "{}", e.message);
    }

    #[test]
    fn apply_needs_nodes_or_a_partition() {
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        let e = Spec::from_values(&v(json!({"check": {"script": "c"}}))).unwrap_err();
        assert!(e.message.contains("give `nodes`"), "{}", e.message);
        let s =
            Spec::from_values(&v(json!({"partition": "gpu", "check": {"script": "c"}}))).unwrap();
        assert_eq!(s.what(), "partition `gpu`");
    }
}
