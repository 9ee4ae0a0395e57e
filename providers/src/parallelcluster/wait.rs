//! Following a cluster through `describe-cluster` until an operation ends,
//! and what state keeps of a cluster that is up.

use serde_json::{Value, json};

use super::cli::Pcluster;
use super::config::Summary;
use crate::aws::poll::{Pace, Waiter};
use crate::contract::{Applied, DeclaredOutputs, OpContext, ProviderError};

/// Where a cluster's status says an operation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Still working.
    InProgress,
    /// Done and healthy.
    Complete,
    /// Ended in failure.
    Failed,
}

/// The stage of `status` (`clusterStatus`).
pub(crate) fn stage(status: &str) -> Stage {
    match status {
        "CREATE_COMPLETE" | "UPDATE_COMPLETE" => Stage::Complete,
        s if s.ends_with("_FAILED") => Stage::Failed,
        _ => Stage::InProgress,
    }
}

/// The cluster's `clusterStatus`.
pub(crate) fn status(cluster: &Value) -> &str {
    cluster
        .get("clusterStatus")
        .and_then(Value::as_str)
        .unwrap_or("UNKNOWN")
}

/// The value of the cluster's tag `key`.
pub(crate) fn tag<'a>(cluster: &'a Value, key: &str) -> Option<&'a str> {
    cluster
        .get("tags")
        .and_then(Value::as_array)?
        .iter()
        .find(|t| t.get("key").and_then(Value::as_str) == Some(key))
        .and_then(|t| t.get("value").and_then(Value::as_str))
}

/// Why a failed cluster failed, as pcluster says.
pub(crate) fn failure(cluster: &Value) -> String {
    let reasons: Vec<String> = cluster
        .get("failures")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let code = f.get("failureCode").and_then(Value::as_str).unwrap_or("");
            let reason = f.get("failureReason").and_then(Value::as_str)?;
            Some(if code.is_empty() {
                reason.to_string()
            } else {
                format!("{code}: {reason}")
            })
        })
        .collect();
    if reasons.is_empty() {
        format!("the cluster is {}", status(cluster))
    } else {
        reasons.join("; ")
    }
}

/// Waits until cluster `name` ends its operation; the cluster when it
/// completed, the failure otherwise.
pub(crate) async fn until_done(
    ctx: &OpContext,
    pc: &Pcluster,
    name: &str,
) -> Result<Value, ProviderError> {
    let what = format!("cluster `{name}`");
    let mut waiter = Waiter::new(
        Pace::LONG.within(ctx.timeout),
        ctx.reporter.as_ref(),
        what.clone(),
    );
    loop {
        match pc.describe(name).await {
            Ok(Some(cluster)) => {
                waiter.looked();
                let st = status(&cluster).to_string();
                let fleet = cluster
                    .get("computeFleetStatus")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                waiter.report([format!("{what}: {st} (compute fleet {fleet})")]);
                match stage(&st) {
                    Stage::Complete => return Ok(cluster),
                    Stage::Failed => {
                        return Err(ProviderError::fatal(format!(
                            "{what} is {st}: {}",
                            failure(&cluster)
                        ))
                        .with_help("`pcluster describe-cluster` and `pcluster get-cluster-stack-events` show what failed; fix the configuration and apply again"));
                    }
                    Stage::InProgress => {}
                }
            }
            Ok(None) => {
                return Err(ProviderError::vanished(format!(
                    "{what} disappeared while flow waited for it"
                )));
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

/// Waits until cluster `name` is gone.
pub(crate) async fn until_gone(
    ctx: &OpContext,
    pc: &Pcluster,
    name: &str,
) -> Result<(), ProviderError> {
    let what = format!("cluster `{name}`");
    let mut waiter = Waiter::new(
        Pace::LONG.within(ctx.timeout),
        ctx.reporter.as_ref(),
        what.clone(),
    );
    loop {
        match pc.describe(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(cluster)) => {
                waiter.looked();
                let st = status(&cluster);
                if st == "DELETE_FAILED" {
                    return Err(ProviderError::fatal(format!(
                        "{what} could not be deleted: {}",
                        failure(&cluster)
                    ))
                    .with_help("something outside the cluster may still use its resources (an ENI, a security group); `pcluster get-cluster-stack-events` names it"));
                }
                waiter.report([format!("{what}: {st}")]);
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

/// Waits until the compute fleet of cluster `name` reports `wanted`.
pub(crate) async fn until_fleet(
    ctx: &OpContext,
    pc: &Pcluster,
    name: &str,
    wanted: &str,
) -> Result<(), ProviderError> {
    let what = format!("the compute fleet of `{name}`");
    let mut waiter = Waiter::new(
        Pace::LONG.within(ctx.timeout),
        ctx.reporter.as_ref(),
        what.clone(),
    );
    loop {
        match pc.describe(name).await {
            Ok(Some(cluster)) => {
                waiter.looked();
                let fleet = cluster
                    .get("computeFleetStatus")
                    .and_then(Value::as_str)
                    .unwrap_or("UNKNOWN");
                waiter.report([format!("{what}: {fleet}")]);
                if fleet == wanted {
                    return Ok(());
                }
            }
            Ok(None) => {
                return Err(ProviderError::vanished(format!(
                    "cluster `{name}` disappeared while flow waited for its compute fleet"
                )));
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

/// The outputs of every cluster ([`applied`] puts each in).
pub(crate) const OUTPUT_KEYS: [&str; 10] = [
    "cluster_name",
    "status",
    "region",
    "version",
    "scheduler",
    "compute_fleet_status",
    "head_node_instance_id",
    "head_node_ip",
    "head_node_public_ip",
    "ssh_user",
];

/// The outputs every parallelcluster.cluster step has, for validate.
pub(crate) fn declared() -> DeclaredOutputs {
    DeclaredOutputs::fixed("parallelcluster.cluster", &OUTPUT_KEYS)
}

/// What state keeps of a cluster that is up.
pub(crate) fn applied(name: &str, cluster: &Value, summary: &Summary) -> Applied {
    let head = cluster.get("headNode").cloned().unwrap_or(Value::Null);
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let outputs = json!({
        "cluster_name": name,
        "status": status(cluster),
        "region": text(cluster, "region"),
        "version": text(cluster, "version"),
        "scheduler": summary.scheduler,
        "compute_fleet_status": text(cluster, "computeFleetStatus"),
        "head_node_instance_id": text(&head, "instanceId"),
        "head_node_ip": text(&head, "privateIpAddress"),
        "head_node_public_ip": text(&head, "publicIpAddress"),
        "ssh_user": summary.ssh_user(),
    });
    Applied {
        id: Some(name.to_string()),
        outputs: outputs.as_object().cloned().unwrap_or_default(),
        // The queues it was applied with: the next plan compares an edited
        // configuration file with them (state keeps only its digest).
        private: json!({ "queues": summary.queues }),
    }
}

/// The queues a cluster was last applied with, as [`applied`] kept them.
pub(crate) fn recorded_queues(private: &Value) -> Option<Vec<super::config::Queue>> {
    serde_json::from_value(private.get("queues")?.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys validate expects are those `applied` puts in.
    #[test]
    fn declared_outputs_are_the_outputs_a_cluster_has() {
        let summary = Summary {
            head_node_type: "c5.xlarge".into(),
            os: "alinux2023".into(),
            scheduler: "slurm".into(),
            queues: Vec::new(),
            storage: Vec::new(),
        };
        let applied = applied("c", &json!({}), &summary);
        let keys: std::collections::BTreeSet<&String> = applied.outputs.keys().collect();
        assert_eq!(keys, declared().keys.iter().collect());
    }

    /// The queues an apply kept come back as they were, for the next plan
    /// to compare an edited file with; a record without them gives none.
    #[test]
    fn the_queues_an_apply_kept_are_read_back() {
        let text = "HeadNode:\n  InstanceType: c5.xlarge\nScheduling:\n  Scheduler: slurm\n  SlurmQueues:\n  - Name: gpu\n    ComputeResources:\n    - Name: p5\n      InstanceType: p5.48xlarge\n      MinCount: 0\n      MaxCount: 4\n";
        let summary = crate::parallelcluster::config::summary(
            &crate::parallelcluster::config::parse(text).unwrap(),
        );
        assert_eq!(summary.queues[0].resources[0].max, 4);
        let applied = applied("c", &json!({}), &summary);
        assert_eq!(recorded_queues(&applied.private), Some(summary.queues));
        assert_eq!(recorded_queues(&Value::Null), None);
    }

    #[test]
    fn statuses_map_to_stages_and_failures_are_named() {
        assert_eq!(stage("CREATE_IN_PROGRESS"), Stage::InProgress);
        assert_eq!(stage("UPDATE_COMPLETE"), Stage::Complete);
        assert_eq!(stage("CREATE_FAILED"), Stage::Failed);
        let cluster = json!({"clusterStatus": "CREATE_FAILED", "failures": [
            {"failureCode": "HeadNodeBootstrapFailure", "failureReason": "Cluster creation timed out."}],
            "tags": [{"key": "flow:token", "value": "t"}]});
        assert_eq!(
            failure(&cluster),
            "HeadNodeBootstrapFailure: Cluster creation timed out."
        );
        assert_eq!(tag(&cluster, "flow:token"), Some("t"));
        assert_eq!(
            failure(&json!({"clusterStatus": "DELETE_FAILED"})),
            "the cluster is DELETE_FAILED"
        );
    }
}
