//! A `sagemaker.hyperpod` step's inputs, read and checked offline: the
//! instance groups (name, type, count, lifecycle scripts in S3, execution
//! role, threads per core), the orchestrator (Slurm, or an EKS cluster),
//! the VPC; and what the plan shows and prices of them.

use serde_json::Value;

use crate::contract::{Capacity, Problem, ProviderError, Values};
use crate::inputs;

/// The lifecycle script HyperPod runs on each new node when the step names none.
pub(crate) const DEFAULT_ON_CREATE: &str = "on_create.sh";

/// One instance group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// Its name, unique in the cluster.
    pub name: String,
    /// An `ml.*` instance type.
    pub instance_type: String,
    /// Instances wanted.
    pub count: i32,
    /// The S3 folder of the lifecycle scripts (`s3://bucket/prefix/`).
    pub lifecycle_s3_uri: String,
    /// The script run on each new node, inside that folder.
    pub on_create: String,
    /// The IAM role the nodes run as.
    pub execution_role: String,
    /// 1 (hyperthreading off) or 2.
    pub threads_per_core: i32,
}

/// Who schedules the cluster's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Orchestrator {
    /// HyperPod's own Slurm.
    Slurm,
    /// An EKS cluster, by ARN.
    Eks(String),
}

/// Everything a create needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spec {
    /// The cluster's name.
    pub name: String,
    /// Its instance groups.
    pub groups: Vec<Group>,
    /// Slurm or EKS.
    pub orchestrator: Orchestrator,
    /// Subnets of the nodes (none: HyperPod's own network).
    pub subnet_ids: Vec<String>,
    /// Security groups of the nodes.
    pub security_group_ids: Vec<String>,
    /// `Automatic` or `None`.
    pub node_recovery: Option<String>,
}

/// Why one instance group is wrong, as a problem at its place.
fn group_problem(index: usize, key: &str, message: String) -> Problem {
    let index = index.to_string();
    Problem::at_path(&["instance_groups", &index, key], message)
}

/// The instance groups of `values`, or the first problem with them.
fn groups(values: &Values) -> Result<Vec<Group>, Problem> {
    let Some(list) = values.get("instance_groups").and_then(Value::as_array) else {
        return Err(Problem::at(
            "instance_groups",
            "give at least one instance group",
        ));
    };
    if list.is_empty() {
        return Err(Problem::at(
            "instance_groups",
            "give at least one instance group",
        ));
    }
    let mut out = Vec::new();
    for (i, g) in list.iter().enumerate() {
        let Some(g) = g.as_object() else {
            return Err(Problem::at_path(
                &["instance_groups", &i.to_string()],
                "an instance group is a table: { name, instance_type, count, lifecycle_s3_uri, execution_role }",
            ));
        };
        let text = |k: &str| g.get(k).and_then(Value::as_str).map(str::to_string);
        let need =
            |k: &str| text(k).ok_or_else(|| group_problem(i, k, format!("`{k}` is required")));
        for key in g.keys() {
            if ![
                "name",
                "instance_type",
                "count",
                "lifecycle_s3_uri",
                "on_create",
                "execution_role",
                "threads_per_core",
            ]
            .contains(&key.as_str())
            {
                return Err(group_problem(i, key, format!("unknown key `{key}`")).on_key().with_help(
                    "an instance group has name, instance_type, count, lifecycle_s3_uri, on_create, execution_role and threads_per_core",
                ));
            }
        }
        let instance_type = need("instance_type")?;
        if !instance_type.starts_with("ml.") {
            return Err(group_problem(
                i,
                "instance_type",
                format!(
                    "HyperPod instance types start with `ml.`: did you mean `ml.{instance_type}`?"
                ),
            ));
        }
        let count = g.get("count").and_then(Value::as_i64).unwrap_or(1);
        if !(0..=i64::from(i32::MAX)).contains(&count) {
            return Err(group_problem(
                i,
                "count",
                "`count` must be 0 or more".into(),
            ));
        }
        let lifecycle = need("lifecycle_s3_uri")?;
        if !lifecycle.starts_with("s3://") {
            return Err(group_problem(
                i,
                "lifecycle_s3_uri",
                format!("`{lifecycle}` is not an S3 URI (s3://bucket/prefix/)"),
            ));
        }
        // SageMaker refuses any other bucket (CreateCluster's
        // ValidationException), and the instance role's managed policy
        // reads only those.
        if !lifecycle.starts_with("s3://sagemaker") {
            return Err(group_problem(
                i,
                "lifecycle_s3_uri",
                format!(
                    "`{lifecycle}`: HyperPod reads lifecycle scripts only from buckets whose name starts with `sagemaker`"
                ),
            ));
        }
        let threads = g
            .get("threads_per_core")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if !(1..=2).contains(&threads) {
            return Err(group_problem(
                i,
                "threads_per_core",
                "`threads_per_core` is 1 or 2".into(),
            ));
        }
        out.push(Group {
            name: need("name")?,
            instance_type,
            count: count as i32,
            lifecycle_s3_uri: lifecycle,
            on_create: text("on_create").unwrap_or_else(|| DEFAULT_ON_CREATE.into()),
            execution_role: need("execution_role")?,
            threads_per_core: threads as i32,
        });
    }
    let mut names: Vec<&str> = out.iter().map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(Problem::at(
            "instance_groups",
            format!("two instance groups are called `{}`", w[0]),
        ));
    }
    Ok(out)
}

/// The orchestrator of `values`.
fn orchestrator(values: &Values) -> Result<Orchestrator, Problem> {
    match values
        .get("orchestrator")
        .and_then(Value::as_str)
        .unwrap_or("slurm")
    {
        "slurm" => Ok(Orchestrator::Slurm),
        "eks" => values
            .get("eks_cluster_arn")
            .and_then(Value::as_str)
            .filter(|a| a.starts_with("arn:"))
            .map(|a| Orchestrator::Eks(a.to_string()))
            .ok_or_else(|| {
                Problem::at(
                    "eks_cluster_arn",
                    "an EKS orchestrator needs the EKS cluster's ARN",
                )
                .with_help("e.g. eks_cluster_arn = \"${steps.eks.outputs.arn}\"")
            }),
        other => Err(Problem::at(
            "orchestrator",
            format!("`{other}` is not an orchestrator: \"slurm\" or \"eks\""),
        )),
    }
}

impl Spec {
    /// The spec of fully known inputs.
    pub fn from_values(values: &Values) -> Result<Spec, ProviderError> {
        let to_error = |p: Problem| ProviderError::bad_input(p.message);
        Ok(Spec {
            name: inputs::req_str(values, "cluster_name")?,
            groups: groups(values).map_err(to_error)?,
            orchestrator: orchestrator(values).map_err(to_error)?,
            subnet_ids: inputs::str_list(values, "subnet_ids")?,
            security_group_ids: inputs::str_list(values, "security_group_ids")?,
            node_recovery: inputs::opt_str(values, "node_recovery")?,
        })
    }

    /// The offline problems of the known inputs (unknown ones skipped).
    pub fn problems(known: &Values) -> Vec<Problem> {
        let mut out = Vec::new();
        if known.contains_key("instance_groups")
            && let Err(p) = groups(known)
        {
            out.push(p);
        }
        if known.contains_key("orchestrator")
            && let Err(p) = orchestrator(known)
        {
            out.push(p);
        }
        if let Some(r) = known.get("node_recovery").and_then(Value::as_str)
            && r != "Automatic"
            && r != "None"
        {
            out.push(Problem::at(
                "node_recovery",
                "`node_recovery` is \"Automatic\" or \"None\"",
            ));
        }
        let subnets = known
            .get("subnet_ids")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let groups = known
            .get("security_group_ids")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if (subnets == 0) != (groups == 0)
            && known.contains_key("subnet_ids")
            && known.contains_key("security_group_ids")
        {
            out.push(Problem::at(
                "subnet_ids",
                "give both `subnet_ids` and `security_group_ids`, or neither",
            ));
        }
        out
    }
}

/// The plan's lines of known inputs: each instance group, the orchestrator.
pub(crate) fn plan_lines(known: &Values) -> Vec<String> {
    let Ok(groups) = groups(known) else {
        return Vec::new();
    };
    let mut lines: Vec<String> = groups
        .iter()
        .map(|g| {
            format!(
                "instance group {}: {} × {} (lifecycle {}{}{}, {} thread{} per core)",
                g.name,
                g.instance_type,
                g.count,
                g.lifecycle_s3_uri,
                if g.lifecycle_s3_uri.ends_with('/') {
                    ""
                } else {
                    "/"
                },
                g.on_create,
                g.threads_per_core,
                if g.threads_per_core == 1 { "" } else { "s" }
            )
        })
        .collect();
    lines.push(match orchestrator(known) {
        Ok(Orchestrator::Eks(arn)) => format!("orchestrator: EKS cluster {arn}"),
        Ok(Orchestrator::Slurm) => "orchestrator: Slurm".into(),
        Err(_) => "orchestrator: (known after apply)".into(),
    });
    lines
}

/// What the cluster keeps running: every group at its count.
pub(crate) fn capacity(known: &Values) -> Vec<Capacity> {
    groups(known)
        .map(|gs| {
            gs.into_iter()
                .map(|g| Capacity::Instances {
                    instance_type: g.instance_type,
                    count: g.count.max(0) as u32,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    fn inputs() -> Values {
        values(json!({
            "cluster_name": "ml",
            "instance_groups": [
                {"name": "controller", "instance_type": "ml.m5.2xlarge", "count": 1,
                 "lifecycle_s3_uri": "s3://sagemaker-lifecycle/scripts/", "execution_role": "arn:aws:iam::1:role/hp"},
                {"name": "workers", "instance_type": "ml.p5.48xlarge", "count": 4, "threads_per_core": 2,
                 "lifecycle_s3_uri": "s3://sagemaker-lifecycle/scripts", "on_create": "setup.sh",
                 "execution_role": "arn:aws:iam::1:role/hp"}
            ]
        }))
    }

    #[test]
    fn groups_plan_and_price() {
        let spec = Spec::from_values(&inputs()).unwrap();
        assert_eq!(spec.groups[0].on_create, DEFAULT_ON_CREATE);
        assert_eq!(spec.orchestrator, Orchestrator::Slurm);
        assert_eq!(
            plan_lines(&inputs()),
            [
                "instance group controller: ml.m5.2xlarge × 1 (lifecycle s3://sagemaker-lifecycle/scripts/on_create.sh, 1 thread per core)",
                "instance group workers: ml.p5.48xlarge × 4 (lifecycle s3://sagemaker-lifecycle/scripts/setup.sh, 2 threads per core)",
                "orchestrator: Slurm",
            ]
        );
        assert_eq!(
            capacity(&inputs())[1],
            Capacity::Instances {
                instance_type: "ml.p5.48xlarge".into(),
                count: 4
            }
        );
    }

    #[test]
    fn wrong_groups_are_named_at_their_place() {
        let mut bad = inputs();
        bad["instance_groups"][1]["instance_type"] = json!("p5.48xlarge");
        let p = &Spec::problems(&bad)[0];
        assert_eq!(p.path, ["instance_groups", "1", "instance_type"]);
        assert!(p.message.contains("ml.p5.48xlarge"));
        let mut eks = inputs();
        eks.insert("orchestrator".into(), json!("eks"));
        assert_eq!(Spec::problems(&eks)[0].path, ["eks_cluster_arn"]);
        let mut bucket = inputs();
        bucket["instance_groups"][0]["lifecycle_s3_uri"] = json!("s3://my-scripts/hp/");
        let p = &Spec::problems(&bucket)[0];
        assert_eq!(p.path, ["instance_groups", "0", "lifecycle_s3_uri"]);
        assert!(
            p.message.contains("starts with `sagemaker`"),
            "{}",
            p.message
        );
        let mut twice = inputs();
        twice["instance_groups"][1]["name"] = json!("controller");
        assert!(
            Spec::problems(&twice)[0]
                .message
                .contains("two instance groups")
        );
    }
}
