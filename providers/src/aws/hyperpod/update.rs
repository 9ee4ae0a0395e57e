//! Carrying out a change of a HyperPod cluster's instance groups: what
//! UpdateCluster still has to change (nothing when the cluster already is
//! as the step wants it, so that an update resumed after flow was killed
//! sends no second one), the call, and the wait until the cluster is
//! `InService` with every group's nodes at the step's count.

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::operation::describe_cluster::DescribeClusterOutput;
use serde_json::Value;

use super::lifecycle;
use super::spec::{Group, Spec};
use crate::contract::{OpContext, ProviderError, Values};

/// One instance group as DescribeCluster shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Live {
    /// The group's name.
    pub name: String,
    /// Its instance type.
    pub instance_type: String,
    /// The count it is being brought to.
    pub target: i32,
    /// The instances it has now.
    pub current: i32,
    /// The lifecycle scripts' S3 folder.
    pub source_s3_uri: String,
    /// The script run on each new node.
    pub on_create: String,
    /// The nodes' IAM role.
    pub execution_role: String,
    /// Threads per core.
    pub threads_per_core: i32,
}

/// The instance groups of a described cluster.
pub(crate) fn live_groups(cluster: &DescribeClusterOutput) -> Vec<Live> {
    cluster
        .instance_groups()
        .iter()
        .map(|g| Live {
            name: g.instance_group_name().unwrap_or_default().to_string(),
            instance_type: g
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            target: g.target_count().unwrap_or(0),
            current: g.current_count().unwrap_or(0),
            source_s3_uri: g
                .life_cycle_config()
                .and_then(|l| l.source_s3_uri())
                .unwrap_or_default()
                .to_string(),
            on_create: g
                .life_cycle_config()
                .and_then(|l| l.on_create())
                .unwrap_or_default()
                .to_string(),
            execution_role: g.execution_role().unwrap_or_default().to_string(),
            threads_per_core: g.threads_per_core().unwrap_or(1),
        })
        .collect()
}

/// What UpdateCluster still has to change.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    /// Each change, in words (`worker-group-1 1 → 4`).
    pub changes: Vec<String>,
    /// The groups to delete (the step had them, and has them no more).
    pub to_delete: Vec<String>,
}

impl Pending {
    /// Whether the cluster already is as the step wants it.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.to_delete.is_empty()
    }
}

/// How `live` differs from `want` (a group of the step), in words.
fn group_changes(live: &Live, want: &Group) -> Vec<String> {
    let mut out = Vec::new();
    if live.target != want.count {
        out.push(format!("{} {} → {}", want.name, live.target, want.count));
    }
    if live.instance_type != want.instance_type {
        out.push(format!(
            "{} instance type {} → {}",
            want.name, live.instance_type, want.instance_type
        ));
    }
    if live.source_s3_uri != want.lifecycle_s3_uri || live.on_create != want.on_create {
        out.push(format!(
            "{} lifecycle {}{} → {}{}",
            want.name, live.source_s3_uri, live.on_create, want.lifecycle_s3_uri, want.on_create
        ));
    }
    if live.execution_role != want.execution_role {
        out.push(format!(
            "{} execution role → {}",
            want.name, want.execution_role
        ));
    }
    if live.threads_per_core != want.threads_per_core {
        out.push(format!(
            "{} threads per core {} → {}",
            want.name, live.threads_per_core, want.threads_per_core
        ));
    }
    out
}

/// What UpdateCluster has to change for the cluster (`live`, its node
/// recovery `live_recovery`) to be as `spec` says; `prior_groups` are the
/// groups the step had before, whose absence from `spec` deletes them.
pub(crate) fn pending(
    live: &[Live],
    live_recovery: Option<&str>,
    spec: &Spec,
    prior_groups: &[String],
) -> Pending {
    let mut out = Pending::default();
    for want in &spec.groups {
        match live.iter().find(|l| l.name == want.name) {
            Some(l) => out.changes.extend(group_changes(l, want)),
            None => out.changes.push(format!(
                "add {} ({} × {})",
                want.name, want.instance_type, want.count
            )),
        }
    }
    if let Some(r) = &spec.node_recovery
        && live_recovery != Some(r.as_str())
    {
        out.changes.push(format!("node recovery → {r}"));
    }
    out.to_delete = prior_groups
        .iter()
        .filter(|p| !spec.groups.iter().any(|g| &g.name == *p))
        .filter(|p| live.iter().any(|l| &l.name == *p))
        .cloned()
        .collect();
    out
}

/// Whether the cluster's groups (`live`) are at `spec`'s counts, every
/// node there, and the groups `gone` deleted.
pub(crate) fn settled(live: &[Live], spec: &Spec, gone: &[String]) -> bool {
    spec.groups.iter().all(|want| {
        live.iter()
            .any(|l| l.name == want.name && l.target == want.count && l.current == want.count)
    }) && !live.iter().any(|l| gone.contains(&l.name))
}

/// The step's input that an AWS validation message names by its place in
/// the request (`instanceGroups.2.member.instanceType` →
/// `instance_groups[1].instance_type`), when it names one.
pub(crate) fn input_named(message: &str) -> Option<String> {
    let at = message.find("'instanceGroups.")? + "'instanceGroups.".len();
    let rest = &message[at..];
    let (index, rest) = rest.split_once(".member.")?;
    let index: usize = index.parse().ok()?;
    let field = rest.split(['\'', '.']).next()?;
    let input = match field {
        "instanceType" => "instance_type",
        "instanceCount" => "count",
        "instanceGroupName" => "name",
        "executionRole" => "execution_role",
        "threadsPerCore" => "threads_per_core",
        "lifeCycleConfig" => "lifecycle_s3_uri",
        _ => return Some(format!("instance_groups[{}]", index.checked_sub(1)?)),
    };
    Some(format!(
        "instance_groups[{}].{input}",
        index.checked_sub(1)?
    ))
}

/// The group names of the step's recorded inputs.
pub(crate) fn group_names(inputs: &Values) -> Vec<String> {
    inputs
        .get("instance_groups")
        .and_then(Value::as_array)
        .map(|gs| {
            gs.iter()
                .filter_map(|g| g.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Brings the cluster to `spec`: waits out an operation in progress (an
/// update this step started before flow was stopped), sends UpdateCluster
/// only if something is still to change, then waits until the cluster is
/// `InService` with every group at its count.
pub(crate) async fn carry_out(
    ctx: &OpContext,
    client: &Client,
    spec: &Spec,
    prior_groups: &[String],
) -> Result<DescribeClusterOutput, ProviderError> {
    let what = format!("HyperPod cluster `{}`", spec.name);
    let Some(mut cluster) = lifecycle::describe(client, &spec.name).await? else {
        return Err(ProviderError::vanished(format!(
            "{what} no longer exists: there is nothing to update"
        )));
    };
    let status = lifecycle::status(&cluster).to_string();
    if status != "InService" {
        ctx.reporter.event(&format!(
            "{what} is {status}: waiting for it before changing it"
        ));
        cluster = lifecycle::until_in_service(ctx, client, &spec.name).await?;
    }
    let live = live_groups(&cluster);
    let recovery = cluster.node_recovery().map(|r| r.as_str().to_string());
    let todo = pending(&live, recovery.as_deref(), spec, prior_groups);
    let gone: Vec<String> = prior_groups
        .iter()
        .filter(|p| !spec.groups.iter().any(|g| &g.name == *p))
        .cloned()
        .collect();
    if todo.is_empty() {
        ctx.reporter.event(&format!(
            "{what} already has the step's instance groups: no UpdateCluster to send"
        ));
    } else {
        let mut words = todo.changes.clone();
        words.extend(todo.to_delete.iter().map(|g| format!("delete {g}")));
        lifecycle::update(client, spec, &todo.to_delete)
            .await
            .map_err(|mut e| {
                if let Some(input) = input_named(&e.message) {
                    e.message = format!("{} (in the workflow: {input})", e.message);
                    // `instance_groups[1].instance_type` as a path the
                    // engine shows the workflow's line and column of.
                    let path: Vec<String> = input
                        .split(['.', '[', ']'])
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect();
                    e = e.at_input(path);
                }
                e
            })?;
        ctx.reporter
            .event(&format!("{what}: updating ({})", words.join(", ")));
    }
    lifecycle::until(ctx, client, &spec.name, |c| {
        settled(&live_groups(c), spec, &gone)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    fn spec(workers: i32, recovery: Option<&str>) -> Spec {
        let mut v = values(json!({
            "cluster_name": "ml",
            "instance_groups": [
                {"name": "controller", "instance_type": "ml.m5.2xlarge", "count": 1,
                 "lifecycle_s3_uri": "s3://sagemaker-l/src/", "execution_role": "arn:aws:iam::1:role/hp"},
                {"name": "workers", "instance_type": "ml.p5.48xlarge", "count": workers, "threads_per_core": 2,
                 "lifecycle_s3_uri": "s3://sagemaker-l/src/", "execution_role": "arn:aws:iam::1:role/hp"}
            ]
        }));
        if let Some(r) = recovery {
            v.insert("node_recovery".into(), json!(r));
        }
        Spec::from_values(&v).unwrap()
    }

    fn live(spec: &Spec, current: &[i32]) -> Vec<Live> {
        spec.groups
            .iter()
            .zip(current)
            .map(|(g, &c)| Live {
                name: g.name.clone(),
                instance_type: g.instance_type.clone(),
                target: g.count,
                current: c,
                source_s3_uri: g.lifecycle_s3_uri.clone(),
                on_create: g.on_create.clone(),
                execution_role: g.execution_role.clone(),
                threads_per_core: g.threads_per_core,
            })
            .collect()
    }

    #[test]
    fn a_cluster_already_as_wanted_needs_no_update() {
        let want = spec(4, Some("Automatic"));
        let now = live(&want, &[1, 4]);
        let names = group_names(&values(
            json!({"instance_groups": [{"name": "controller"}, {"name": "workers"}]}),
        ));
        assert!(pending(&now, Some("Automatic"), &want, &names).is_empty());
        assert!(settled(&now, &want, &[]));
        // Still on its way: the update was sent, the nodes are not all there.
        assert!(!settled(&live(&want, &[1, 2]), &want, &[]));
    }

    #[test]
    fn counts_types_recovery_and_dropped_groups_are_changes() {
        let was = spec(1, None);
        let now = live(&was, &[1, 1]);
        let mut want = spec(4, Some("Automatic"));
        want.groups[0].instance_type = "ml.m5.4xlarge".into();
        want.groups.push(Group {
            name: "extra".into(),
            ..want.groups[1].clone()
        });
        let todo = pending(&now, None, &want, &["controller".into(), "workers".into()]);
        assert_eq!(
            todo.changes,
            [
                "controller instance type ml.m5.2xlarge → ml.m5.4xlarge",
                "workers 1 → 4",
                "add extra (ml.p5.48xlarge × 4)",
                "node recovery → Automatic",
            ]
        );
        // A group the step no longer has goes, if the cluster still has it.
        let mut fewer = spec(1, None);
        fewer.groups.truncate(1);
        let todo = pending(&now, None, &fewer, &["controller".into(), "workers".into()]);
        assert_eq!(todo.to_delete, ["workers"]);
        assert!(!settled(&now, &fewer, &["workers".into()]));
        assert!(settled(&now[..1], &fewer, &["workers".into()]));
        // One the step never had is someone else's: left alone.
        assert!(pending(&now, None, &fewer, &["controller".into()]).is_empty());
    }

    #[test]
    fn an_aws_place_in_the_request_is_named_as_the_input() {
        let aws = "1 validation error detected: Value 'ml.x' at 'instanceGroups.2.member.instanceType' failed";
        assert_eq!(
            input_named(aws).as_deref(),
            Some("instance_groups[1].instance_type")
        );
        let role = "Value null at 'instanceGroups.1.member.executionRole' failed";
        assert_eq!(
            input_named(role).as_deref(),
            Some("instance_groups[0].execution_role")
        );
        assert_eq!(input_named("Cluster is Updating"), None);
    }
}
