//! A HyperPod cluster's nodes as another kind needs them (slurm.node_check's
//! policy `replace`): each node's instance id, group, status, hostname and
//! launch time (ListClusterNodes, then DescribeClusterNode for the
//! hostname), and BatchReplaceClusterNodes.

use super::super::error;
use super::lifecycle::client;
use crate::contract::{OpContext, ProviderError};

/// One node of a HyperPod cluster.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    /// Its EC2 instance id (`i-` and 17 hex digits).
    pub instance_id: String,
    /// Its instance group.
    pub group: String,
    /// Its status (`Running`, `Pending`, `ShuttingDown`, `Failure`, …).
    pub status: String,
    /// Why, when its status has a message (a failed lifecycle script).
    pub message: String,
    /// Its private DNS hostname (`ip-10-1-2-3.ec2.internal`), once it has one.
    pub hostname: Option<String>,
    /// When it was launched, seconds since the epoch.
    pub launched: f64,
}

impl Node {
    /// Its hostname's first label: the name Slurm knows it by on HyperPod
    /// (`ip-10-1-2-3`).
    pub fn short_name(&self) -> Option<&str> {
        self.hostname
            .as_deref()
            .map(|h| h.split('.').next().unwrap_or(h))
    }
}

/// Every node of `cluster` (its name or ARN), with its hostname.
pub(crate) async fn list(ctx: &OpContext, cluster: &str) -> Result<Vec<Node>, ProviderError> {
    let client = client(ctx).await?;
    let mut out = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page = client
            .list_cluster_nodes()
            .cluster_name(cluster)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| {
                error::aws(
                    &format!("list the nodes of HyperPod cluster `{cluster}`"),
                    e,
                )
            })?;
        for n in page.cluster_node_summaries() {
            let id = n.instance_id().unwrap_or_default().to_string();
            let status = n.instance_status();
            let described = match client
                .describe_cluster_node()
                .cluster_name(cluster)
                .node_id(&id)
                .send()
                .await
                .map_err(|e| {
                    error::aws(
                        &format!("describe node {id} of HyperPod cluster `{cluster}`"),
                        e,
                    )
                }) {
                Ok(described) => described,
                // It left the cluster between the listing and this call (a
                // replaced or deleted node ending its ShuttingDown): it is
                // no longer one of the cluster's nodes.
                Err(e) if left_the_cluster(&e) => continue,
                Err(e) => return Err(e),
            };
            let details = described.node_details();
            out.push(Node {
                group: n.instance_group_name().unwrap_or_default().to_string(),
                status: status
                    .and_then(|s| s.status())
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                message: status
                    .and_then(|s| s.message())
                    .unwrap_or_default()
                    .to_string(),
                hostname: details
                    .and_then(|d| d.private_dns_hostname())
                    .map(str::to_string),
                launched: n.launch_time().map_or(0.0, |t| t.as_secs_f64()),
                instance_id: id,
            });
        }
        match page.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

/// Whether `e` (of DescribeClusterNode) says the node is not in the
/// cluster: SageMaker's ValidationException `Could not find node '…' in
/// cluster '…'`.
fn left_the_cluster(e: &ProviderError) -> bool {
    e.kind == crate::contract::ErrorKind::NotFound || e.message.contains("Could not find node")
}

/// A node BatchReplaceClusterNodes would not replace: its Failed entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refused {
    /// The node asked for.
    pub node_id: String,
    /// SageMaker's code (`InvalidInstanceStatus`, `InstanceIdNotFound`).
    pub code: String,
    /// SageMaker's message.
    pub message: String,
}

impl Refused {
    /// `i-…: message (code)`.
    pub fn said(&self) -> String {
        format!("{}: {} ({})", self.node_id, self.message, self.code)
    }
}

/// BatchReplaceClusterNodes for `ids` of `cluster`: the nodes SageMaker
/// would not replace (its per-node Failed answer), each with its code and
/// message; an error for a call refused whole.
pub(crate) async fn replace(
    ctx: &OpContext,
    cluster: &str,
    ids: &[String],
) -> Result<Vec<Refused>, ProviderError> {
    let out = client(ctx)
        .await?
        .batch_replace_cluster_nodes()
        .cluster_name(cluster)
        .set_node_ids(Some(ids.to_vec()))
        .send()
        .await
        .map_err(|e| {
            error::aws(
                &format!(
                    "replace node(s) {} of HyperPod cluster `{cluster}`",
                    ids.join(", ")
                ),
                e,
            )
        })?;
    Ok(out
        .failed()
        .iter()
        .map(|f| Refused {
            node_id: f.node_id().unwrap_or("?").to_string(),
            code: f.error_code().map_or("?", |c| c.as_str()).to_string(),
            message: f.message().unwrap_or_default().to_string(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_gone_between_list_and_describe_is_told_from_other_errors() {
        let gone = ProviderError::fatal(
            "describe node i-beb4c96cf71670d5a of HyperPod cluster `ml-cluster`: Could not find node 'i-beb4c96cf71670d5a' in cluster 'ml-cluster'. (ValidationException)",
        );
        assert!(left_the_cluster(&gone));
        assert!(left_the_cluster(&ProviderError::not_found("no such node")));
        assert!(!left_the_cluster(&ProviderError::fatal(
            "describe node i-1 of HyperPod cluster `ml-cluster`: AccessDenied"
        )));
    }
}
