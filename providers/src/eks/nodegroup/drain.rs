//! Retiring a node group that a create-before-destroy replacement
//! superseded: wait until the new group's nodes are Ready, cordon the old
//! group's nodes, then evict their pods through the Eviction API, so that
//! PodDisruptionBudgets set the pace; all within `drain_timeout`.
//!
//! Pods a DaemonSet owns and mirror pods are left (they go with their
//! node), as are pods that have finished. A pod whose eviction a budget
//! refuses (HTTP 429) is tried again until the deadline; the error then
//! names the pod and the budget.

use std::time::{Duration, Instant};

use ::kube::Client;
use ::kube::api::{Api, ListParams, Patch, PatchParams};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use super::spec::NodegroupSpec;
use crate::contract::{OpContext, Prior, ProviderError};
use crate::kube::connection::Connection;
use crate::kube::errors::kube as kube_error;
use crate::kube::eviction::{Evicted, budget_of, evict, eviction_version, pods_on};

/// The label EKS puts on the nodes of a managed node group.
pub const GROUP_LABEL: &str = "eks.amazonaws.com/nodegroup";

/// How long retiring a group waits when `drain_timeout` is not set.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// How often nodes and refused evictions are looked at again.
const POLL: Duration = Duration::from_secs(1);

/// The group to retire and its replacement.
#[derive(Debug, Clone)]
pub struct Retirement {
    /// The cluster's name.
    pub cluster: String,
    /// The group to drain.
    pub old: String,
    /// The group replacing it.
    pub new: String,
    /// How many Ready nodes the new group must have first (its desired size).
    pub new_nodes: usize,
    /// How long waiting for the new nodes and draining may take in all.
    pub timeout: Duration,
}

impl Retirement {
    /// Retiring the group `old` records for `new`, with the new group's
    /// `drain_timeout`.
    pub fn of(old: Prior<'_>, new: Prior<'_>) -> Result<Retirement, ProviderError> {
        let old = NodegroupSpec::from_values(old.inputs)?;
        let new = NodegroupSpec::from_values(new.inputs)?;
        Ok(Retirement {
            cluster: old.cluster,
            old: old.name,
            new: new.name,
            new_nodes: new.desired_size.max(0) as usize,
            timeout: new.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT),
        })
    }
}

/// Waits for the new group's nodes, cordons the old group's nodes and
/// evicts their pods.
pub async fn retire(ctx: &OpContext, r: &Retirement) -> Result<(), ProviderError> {
    let client = Connection::eks(ctx, &r.cluster)
        .without_server_retry()
        .client()
        .await
        .map_err(|e| cannot_reach(r, e))?;
    let deadline = Instant::now() + r.timeout;
    // The first call tells whether the cluster can be reached at all.
    group_nodes(&client, &r.new)
        .await
        .map_err(|e| cannot_reach(r, e))?;
    wait_new_nodes(ctx, &client, r, deadline).await?;
    let nodes = cordon(ctx, &client, &r.old).await?;
    evict_all(ctx, &client, r, &nodes, deadline).await
}

/// The error for a cluster flow cannot reach to drain.
fn cannot_reach(r: &Retirement, e: ProviderError) -> ProviderError {
    let help = format!(
        "the new group `{}` is made and the old group `{}` is kept until its nodes are drained: make the \
         cluster's API server reachable with these AWS credentials, then run `flow apply` again; or set \
         `lifecycle.create_before_destroy = false` on the step to delete the old group without a drain",
        r.new, r.old
    );
    ProviderError::new(
        e.kind,
        format!("cannot drain node group `{}`: {}", r.old, e.message),
    )
    .with_help(help)
}

/// The nodes of group `name`.
async fn group_nodes(client: &Client, name: &str) -> Result<Vec<Node>, ProviderError> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={name}")))
        .await
        .map(|l| l.items)
        .map_err(|e| kube_error(&format!("list the nodes of node group `{name}`"), e))
}

/// Whether `node` reports the `Ready` condition.
fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the new group has as many Ready nodes as it wants.
async fn wait_new_nodes(
    ctx: &OpContext,
    client: &Client,
    r: &Retirement,
    deadline: Instant,
) -> Result<(), ProviderError> {
    let mut said = None;
    loop {
        let ready = group_nodes(client, &r.new)
            .await?
            .iter()
            .filter(|n| is_ready(n))
            .count();
        if ready >= r.new_nodes {
            ctx.reporter.event(&format!(
                "node group {}: {ready} of {} nodes Ready",
                r.new, r.new_nodes
            ));
            return Ok(());
        }
        if said != Some(ready) {
            ctx.reporter.event(&format!(
                "waiting for node group {}: {ready} of {} nodes Ready",
                r.new, r.new_nodes
            ));
            said = Some(ready);
        }
        if Instant::now() >= deadline {
            return Err(ProviderError::fatal(format!(
                "node group `{}` has {ready} of {} nodes Ready after {}: the old group `{}` is kept and nothing was drained",
                r.new,
                r.new_nodes,
                humantime::format_duration(r.timeout),
                r.old
            ))
            .with_help(format!(
                "look at the new nodes (kubectl get nodes -l {GROUP_LABEL}={}), then run `flow apply` again to go on waiting, or raise the step's `drain_timeout`",
                r.new
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Marks every node of group `name` unschedulable; their names.
async fn cordon(
    ctx: &OpContext,
    client: &Client,
    name: &str,
) -> Result<Vec<String>, ProviderError> {
    let api = Api::<Node>::all(client.clone());
    let mut names = Vec::new();
    for node in group_nodes(client, name).await? {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if !cordoned {
            api.patch(
                &node_name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"unschedulable": true}})),
            )
            .await
            .map_err(|e| kube_error(&format!("cordon node `{node_name}`"), e))?;
            ctx.reporter.event(&format!("cordoned node {node_name}"));
        }
        names.push(node_name);
    }
    Ok(names)
}

/// `ns/name` of a pod.
fn pod_name(pod: &Pod) -> (String, String) {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// Evicts every pod on `nodes` that must move, trying refused ones again,
/// and waits until they are gone.
async fn evict_all(
    ctx: &OpContext,
    client: &Client,
    r: &Retirement,
    nodes: &[String],
    deadline: Instant,
) -> Result<(), ProviderError> {
    let version = eviction_version(client).await?;
    ctx.reporter.log(&format!("evicting through {version}"));
    let mut refused: Option<(String, String)> = None;
    loop {
        let pods = pods_on(client, nodes).await?;
        ctx.reporter.log(&format!("{} pods to move", pods.len()));
        if pods.is_empty() {
            ctx.reporter.event(&format!(
                "drained node group {}: {} nodes",
                r.old,
                nodes.len()
            ));
            return Ok(());
        }
        let mut now_refused = None;
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let (ns, name) = pod_name(pod);
            ctx.reporter.log(&format!("evicting pod {ns}/{name}"));
            match evict(client, &version, &ns, &name).await? {
                Evicted::Done => ctx.reporter.event(&format!("evicted pod {ns}/{name}")),
                Evicted::Refused(why) => {
                    now_refused.get_or_insert((format!("{ns}/{name}"), why));
                }
            }
        }
        if let Some((pod, why)) = &now_refused
            && refused.as_ref().is_none_or(|(p, _)| p != pod)
        {
            ctx.reporter.event(&format!(
                "eviction of pod {pod} waits for its disruption budget: {why}"
            ));
        }
        refused = now_refused;
        if Instant::now() >= deadline {
            return Err(drain_timed_out(r, &pods, refused.as_ref()));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The error for a drain that did not finish within `drain_timeout`.
fn drain_timed_out(
    r: &Retirement,
    pods: &[Pod],
    refused: Option<&(String, String)>,
) -> ProviderError {
    let waited = humantime::format_duration(r.timeout);
    let kept = format!(
        "the old group `{}` is kept (cordoned) and the new group `{}` is in service",
        r.old, r.new
    );
    match refused {
        Some((pod, why)) => {
            let budget = budget_of(why).unwrap_or("its PodDisruptionBudget");
            ProviderError::fatal(format!(
                "draining node group `{}` timed out after {waited}: the eviction of pod `{pod}` is refused by PodDisruptionBudget `{budget}` ({why})",
                r.old
            ))
            .with_help(format!(
                "{kept}: let the budget allow the eviction (scale the workload up so that the new nodes run more of its pods, or relax `{budget}`), or raise the step's `drain_timeout`, then run `flow apply` again"
            ))
        }
        None => {
            let left: Vec<String> = pods
                .iter()
                .map(|p| {
                    let (ns, name) = pod_name(p);
                    format!("{ns}/{name}")
                })
                .collect();
            ProviderError::fatal(format!(
                "draining node group `{}` timed out after {waited}: pods still terminating: {}",
                r.old,
                left.join(", ")
            ))
            .with_help(format!(
                "{kept}: look at why the pods do not stop (kubectl describe pod), or raise the step's `drain_timeout`, then run `flow apply` again"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_drain_names_the_pod_the_budget_and_the_fix() {
        let r = Retirement {
            cluster: "c".into(),
            old: "gpu".into(),
            new: "gpu-3f9a".into(),
            new_nodes: 1,
            timeout: Duration::from_secs(90),
        };
        let why =
            "The disruption budget web-pdb needs 2 healthy pods and has 2 currently".to_string();
        let e = drain_timed_out(&r, &[], Some(&("default/web-0".into(), why)));
        assert!(e.message.contains("after 1m 30s"), "{}", e.message);
        assert!(e.message.contains("pod `default/web-0`"), "{}", e.message);
        assert!(
            e.message.contains("PodDisruptionBudget `web-pdb`"),
            "{}",
            e.message
        );
        let help = e.help.unwrap();
        assert!(
            help.contains("drain_timeout") && help.contains("`gpu` is kept"),
            "{help}"
        );
    }

    #[test]
    fn readiness_is_the_ready_condition() {
        let node = |status: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n"},
                "status": {"conditions": [{"type": "Ready", "status": status}]}}))
            .unwrap()
        };
        assert!(is_ready(&node("True")));
        assert!(!is_ready(&node("False")));
        assert!(!is_ready(
            &serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap()
        ));
    }
}
