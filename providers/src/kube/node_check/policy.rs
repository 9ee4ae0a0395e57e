//! Taking a bad node out (policy `cordon`): cordoned, tainted
//! `flow.dev/unhealthy:NoSchedule` with the reason, then drained through
//! the Eviction API as a retired node group is (`eks::nodegroup::drain`).

use std::time::{Duration, Instant};

use ::kube::Client;
use ::kube::api::{Api, Patch, PatchParams};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

use crate::contract::{OpContext, ProviderError};
use crate::kube::errors::kube as kube_error;
use crate::kube::eviction::{Evicted, evict, eviction_version, pods_on};

/// The taint (and annotation) a bad node gets.
pub const TAINT: &str = "flow.dev/unhealthy";

/// A taint value (a label value: 63 characters of `[A-Za-z0-9_.-]`,
/// alphanumeric at both ends) saying in short why: `busbw-below-median`.
pub(super) fn taint_value(short: &str) -> String {
    let v: String = short
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '.' | '-' => c,
            _ => '-',
        })
        .take(63)
        .collect();
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// Cordons and taints `node` (once: a second call changes nothing) and
/// notes the whole `reason` in its annotation.
pub(super) async fn cordon(
    ctx: &OpContext,
    client: &Client,
    node: &str,
    short: &str,
    reason: &str,
) -> Result<(), ProviderError> {
    let api = Api::<Node>::all(client.clone());
    let current = api
        .get(node)
        .await
        .map_err(|e| kube_error(&format!("read node `{node}`"), e))?;
    let spec = current.spec.unwrap_or_default();
    let mut taints: Vec<serde_json::Value> = spec
        .taints
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != TAINT)
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .collect();
    taints.push(json!({"key": TAINT, "value": taint_value(short), "effect": "NoSchedule"}));
    api.patch(
        node,
        &PatchParams::default(),
        &Patch::Merge(&json!({
            "metadata": {"annotations": {TAINT: reason}},
            "spec": {"unschedulable": true, "taints": taints},
        })),
    )
    .await
    .map_err(|e| kube_error(&format!("cordon node `{node}`"), e))?;
    ctx.reporter.event(&format!(
        "cordoned node {node}, tainted {TAINT}={}:NoSchedule",
        taint_value(short)
    ));
    Ok(())
}

/// Evicts the pods on `nodes` that must move (not a DaemonSet's, not
/// finished), trying ones a disruption budget refuses again until
/// `timeout`.
pub(super) async fn drain(
    ctx: &OpContext,
    client: &Client,
    nodes: &[String],
    timeout: Duration,
) -> Result<(), ProviderError> {
    let deadline = Instant::now() + timeout;
    let version = eviction_version(client).await?;
    let unreachable = not_ready(client, nodes).await?;
    loop {
        let mut pods = pods_on(client, nodes).await?;
        // A pod being deleted on a node that is not Ready stays so until
        // its kubelet comes back or the node is deleted: nobody can
        // confirm its end, so it is not waited for.
        let left = pods.len();
        pods.retain(|p| {
            p.metadata.deletion_timestamp.is_none()
                || !p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| unreachable.contains(n))
        });
        if pods.is_empty() {
            let stuck = match left {
                0 => String::new(),
                n => format!(
                    " ({n} pod(s) left terminating on NotReady node(s) {}: their kubelet cannot confirm their end)",
                    unreachable.join(", ")
                ),
            };
            ctx.reporter
                .event(&format!("drained node(s) {}{stuck}", nodes.join(", ")));
            return Ok(());
        }
        let mut refused = None;
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let ns = pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = pod.metadata.name.clone().unwrap_or_default();
            match evict(client, &version, &ns, &name).await? {
                Evicted::Done => ctx.reporter.event(&format!("evicted pod {ns}/{name}")),
                Evicted::Refused(why) => refused = Some(format!("pod {ns}/{name}: {why}")),
            }
        }
        if Instant::now() >= deadline {
            return Err(ProviderError::fatal(format!(
                "draining node(s) {} timed out after {}: {}",
                nodes.join(", "),
                humantime::format_duration(timeout),
                refused.unwrap_or_else(|| format!("{} pods still terminating", pods.len()))
            ))
            .with_help("the nodes stay cordoned and tainted: let the pods go (or raise `drain_timeout`), then run `flow apply` again"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Those of `nodes` whose `Ready` condition is there and not `True`.
async fn not_ready(client: &Client, nodes: &[String]) -> Result<Vec<String>, ProviderError> {
    let api = Api::<Node>::all(client.clone());
    let mut out = Vec::new();
    for n in nodes {
        let node = api
            .get_opt(n)
            .await
            .map_err(|e| kube_error(&format!("read node `{n}`"), e))?;
        let ready = node
            .as_ref()
            .and_then(|n| n.status.as_ref()?.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        if ready.is_some_and(|c| c.status != "True") {
            out.push(n.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_values_are_label_values() {
        assert_eq!(taint_value("busbw below median"), "busbw-below-median");
        assert_eq!(taint_value("gpus 7 < 8"), "gpus-7---8");
        assert_eq!(taint_value("-x-"), "x");
        assert_eq!(taint_value(&"a".repeat(80)).len(), 63);
    }
}
