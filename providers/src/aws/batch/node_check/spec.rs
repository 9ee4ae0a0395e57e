//! The inputs of `batch.node_check`, read for apply and checked for
//! validate: the shared `check`, `max_bad_fraction` and their rules through
//! [`crate::fleet::spec`], the job's own entries, and the policies Batch
//! cannot carry out refused at their entry.

use serde_json::Value;

use crate::contract::{InputValue, Problem, ProviderError, Values};
use crate::fleet::spec::{Common, Platform};

/// Batch's node check platform: a table's job is a container command, and
/// no node is taken out (see [`policy_problem`]).
const BATCH: Platform = Platform {
    kind: "batch.node_check",
    take_out: "fail",
    take_out_means: "the step fails naming each bad node with its instance",
    elsewhere: ("cordon", "EKS's (kube.node_check)"),
    replace_later: "a replacement of an instance Batch placed",
    job_keys: &["command", "environment"],
    job_needs: &["command"],
    job_needs_text: "`command`: the container's command on each node",
};

/// Why a node cannot be taken out on Batch, for the refusals.
const NO_TAKE_OUT: &str = "a Batch job's nodes are instances of its compute environment, which Batch places and scales itself: a job cannot cordon, drain or replace one";

/// What is done with a bad node on Batch, for the plan and the refusals.
pub(super) const POLICY_HELP: &str = "use `policy = \"fail\"` (the default: the step fails naming each bad node with its instance and evidence); take a bad instance out of the compute environment by hand (terminate it, or set the environment's desired vCPUs down)";

/// A step's inputs, read.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    /// The job's name.
    pub job_name: String,
    /// The job queue.
    pub job_queue: String,
    /// The multi-node job definition.
    pub job_definition: String,
    /// The nodes of the job: each runs the check.
    pub num_nodes: i32,
    /// The check's table (`command`, `environment`, its matchers and rules).
    pub check: Values,
    /// What every node check kind reads.
    pub common: Common,
}

impl Spec {
    /// The inputs of an apply (validated before); `step` names the job
    /// when `job_name` does not.
    pub fn from_values(v: &Values, step: &str) -> Result<Spec, ProviderError> {
        let invalid = |m: String| ProviderError::invalid(m).before_acting();
        if let Some(p) = v
            .get("policy")
            .and_then(Value::as_str)
            .and_then(policy_problem)
        {
            return Err(invalid(p.message));
        }
        if v.get("pairs").is_some_and(|p| !p.is_null()) {
            return Err(invalid(pairs_problem().message));
        }
        let mut shared = v.clone();
        shared.remove("policy");
        let common = BATCH.common(&shared)?;
        let check = common
            .check
            .clone()
            .ok_or_else(|| invalid("give `check`: the command each node runs".into()))?;
        let num_nodes = crate::inputs::opt_int(v, "num_nodes")?.unwrap_or(0);
        if !(1..=1000).contains(&num_nodes) {
            return Err(invalid(format!(
                "`num_nodes` is {num_nodes}: a multi-node job has 1 to 1000 nodes"
            )));
        }
        Ok(Spec {
            job_name: crate::inputs::opt_str(v, "job_name")?
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("{}-node-check", step.replace('.', "-"))),
            job_queue: crate::inputs::req_str(v, "job_queue")?,
            job_definition: crate::inputs::req_str(v, "job_definition")?,
            num_nodes: num_nodes as i32,
            check,
            common,
        })
    }
}

/// The refusal of a policy Batch cannot carry out (every one but `fail`),
/// at the `policy` entry.
pub(super) fn policy_problem(policy: &str) -> Option<Problem> {
    let at = |m: String| Some(Problem::at("policy", m).with_help(POLICY_HELP));
    match policy {
        "fail" => None,
        "cordon" => at(format!(
            "policy `cordon` is EKS's (kube.node_check): {NO_TAKE_OUT}"
        )),
        "drain" => at(format!(
            "policy `drain` is Slurm's (slurm.node_check): {NO_TAKE_OUT}"
        )),
        "replace" => at(format!(
            "policy `replace` cannot be carried out on Batch: {NO_TAKE_OUT}"
        )),
        other => {
            let mut p = Problem::at(
                "policy",
                format!(
                    "`{other}` is not a policy: on batch.node_check a bad node's policy is `fail`"
                ),
            )
            .with_help(POLICY_HELP);
            if let Some(c) = crate::suggest::closest(other, ["fail"]) {
                p = p.with_help(format!("did you mean `{c}`?"));
            }
            Some(p)
        }
    }
}

/// The refusal of `pairs`: Batch cannot pin a job to two chosen nodes.
fn pairs_problem() -> Problem {
    Problem::at(
        "pairs",
        "batch.node_check runs no NCCL pairs: Batch places a job's nodes itself, so a job cannot be held to two chosen instances",
    )
    .with_help("check each node alone with a single-node all_reduce in `check` (`parse = \"nccl-tests\"`, `expect = { busbw = \">= FLOOR\" }`); a batch.job across all the nodes measures the fabric")
}

/// The problems of a step's inputs, for validate, each at its entry.
pub(super) fn problems(inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let known = crate::contract::known_inputs(inputs);
    let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
    let shared: Vec<(String, InputValue)> = inputs
        .iter()
        .filter(|(n, _)| n != "policy" && n != "pairs")
        .cloned()
        .collect();
    let mut out: Vec<Problem> = BATCH
        .problems(&shared)
        .into_iter()
        .map(|p| match p.path.is_empty() {
            // The shared "give check or pairs": only `check` is Batch's.
            true if !has("pairs") => Problem::at_path(
                &[],
                "give `check`: the command each node of the multi-node job runs",
            ),
            _ => p,
        })
        .filter(|p| !(p.path.is_empty() && has("pairs")))
        .collect();
    if let Some(p) = known
        .get("policy")
        .and_then(Value::as_str)
        .and_then(policy_problem)
    {
        out.push(p);
    }
    if has("pairs") {
        out.push(pairs_problem());
    }
    if let Some(n) = known.get("num_nodes").and_then(Value::as_i64)
        && !(1..=1000).contains(&n)
    {
        out.push(Problem::at(
            "num_nodes",
            format!("`num_nodes` is {n}: a multi-node job has 1 to 1000 nodes"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::known;
    use serde_json::json;

    #[test]
    fn only_fail_is_a_policy_and_the_others_are_refused_at_the_entry() {
        for (policy, says) in [
            ("cordon", "policy `cordon` is EKS's"),
            ("drain", "policy `drain` is Slurm's"),
            ("replace", "policy `replace` cannot be carried out on Batch"),
        ] {
            let p = problems(&known(json!({
                "policy": policy, "num_nodes": 2,
                "check": {"command": ["nvidia-smi"], "gpus": "instance-type"},
            })));
            assert_eq!(p.len(), 1, "{p:?}");
            assert_eq!(p[0].path, ["policy"]);
            assert!(p[0].message.starts_with(says), "{}", p[0].message);
            assert!(p[0].message.contains("Batch places and scales itself"));
            assert!(p[0].help.as_deref().unwrap().contains("policy = \"fail\""));
        }
        let misspelt = policy_problem("fial").unwrap();
        assert_eq!(misspelt.help.as_deref(), Some("did you mean `fail`?"));
        assert!(policy_problem("fail").is_none());
    }

    #[test]
    fn pairs_and_a_check_without_a_command_are_refused() {
        let p = problems(&known(json!({
            "num_nodes": 0,
            "pairs": {"command": ["all_reduce_perf"], "floor": 10},
        })));
        let paths: Vec<String> = p.iter().map(|p| p.path.join(".")).collect();
        assert_eq!(paths, ["pairs", "num_nodes"], "{p:?}");
        let p = problems(&known(
            json!({"num_nodes": 2, "check": {"gpus": 8, "scrpt": 1}}),
        ));
        let paths: Vec<String> = p.iter().map(|p| p.path.join(".")).collect();
        assert!(paths.contains(&"check".to_string()), "{paths:?}");
        assert!(paths.contains(&"check.scrpt".to_string()), "{paths:?}");
        let none = problems(&known(json!({"num_nodes": 2})));
        assert_eq!(
            none[0].message,
            "give `check`: the command each node of the multi-node job runs"
        );
    }

    #[test]
    fn apply_reads_the_job_and_refuses_what_validate_could_not_see() {
        let v = |j: Value| serde_json::from_value::<Values>(j).unwrap();
        let s = Spec::from_values(
            &v(
                json!({"job_queue": "q", "job_definition": "d", "num_nodes": 4,
                "check": {"command": ["nvidia-smi"], "gpus": "instance-type"}}),
            ),
            "fleet.health",
        )
        .unwrap();
        assert_eq!(
            (s.job_name.as_str(), s.num_nodes),
            ("fleet-health-node-check", 4)
        );
        assert_eq!(s.common.policy, crate::fleet::spec::Policy::Fail);
        let e = Spec::from_values(
            &v(
                json!({"job_queue": "q", "job_definition": "d", "num_nodes": 2,
                "policy": "replace", "check": {"command": ["x"]}}),
            ),
            "s",
        )
        .unwrap_err();
        assert!(
            e.message.contains("cannot be carried out on Batch"),
            "{}",
            e.message
        );
    }
}
