//! A HyperPod cluster through the SageMaker API: create, describe and wait
//! for `InService`, list its nodes, update its instance groups, delete, and
//! the tag that says whose it is.

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::operation::describe_cluster::DescribeClusterOutput;
use aws_sdk_sagemaker::types::{
    ClusterInstanceGroupSpecification, ClusterInstanceType, ClusterLifeCycleConfig,
    ClusterNodeRecovery, ClusterOrchestrator, ClusterOrchestratorEksConfig, Tag, VpcConfig,
};
use serde_json::{Value, json};

use super::super::poll::{Pace, Waiter};
use super::super::{config, error, tags};
use super::spec::{Group, Orchestrator, Spec};
use crate::contract::{Applied, OpContext, ProviderError};

/// A SageMaker client for `ctx`.
pub(crate) async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

/// The SDK's form of one instance group.
fn group_spec(g: &Group) -> ClusterInstanceGroupSpecification {
    ClusterInstanceGroupSpecification::builder()
        .instance_group_name(&g.name)
        .instance_type(ClusterInstanceType::from(g.instance_type.as_str()))
        .instance_count(g.count)
        .life_cycle_config(
            ClusterLifeCycleConfig::builder()
                .source_s3_uri(&g.lifecycle_s3_uri)
                .on_create(&g.on_create)
                .build(),
        )
        .execution_role(&g.execution_role)
        .threads_per_core(g.threads_per_core)
        .build()
}

/// CreateCluster for `spec`, tagged with the operation token; the ARN.
pub(crate) async fn create(
    client: &Client,
    spec: &Spec,
    token: &str,
) -> Result<String, ProviderError> {
    let mut request = client.create_cluster().cluster_name(&spec.name);
    for g in &spec.groups {
        request = request.instance_groups(group_spec(g));
    }
    if !spec.subnet_ids.is_empty() {
        request = request.vpc_config(
            VpcConfig::builder()
                .set_subnets(Some(spec.subnet_ids.clone()))
                .set_security_group_ids(Some(spec.security_group_ids.clone()))
                .build(),
        );
    }
    if let Orchestrator::Eks(arn) = &spec.orchestrator {
        request = request.orchestrator(
            ClusterOrchestrator::builder()
                .eks(
                    ClusterOrchestratorEksConfig::builder()
                        .cluster_arn(arn)
                        .build(),
                )
                .build(),
        );
    }
    if let Some(r) = &spec.node_recovery {
        request = request.node_recovery(ClusterNodeRecovery::from(r.as_str()));
    }
    for (k, v) in tags::with_token(&Default::default(), token) {
        request = request.tags(Tag::builder().key(k).value(v).build());
    }
    let out = request
        .send()
        .await
        .map_err(|e| error::refused(&format!("create HyperPod cluster `{}`", spec.name), e))?;
    Ok(out.cluster_arn().unwrap_or_default().to_string())
}

/// Whether `e` says the cluster does not exist.
fn is_missing(e: &ProviderError) -> bool {
    e.kind == crate::contract::ErrorKind::NotFound
        || e.message.contains("Could not find cluster")
        || e.message.contains("does not exist")
}

/// DescribeCluster, or `None` when there is no such cluster.
pub(crate) async fn describe(
    client: &Client,
    name: &str,
) -> Result<Option<DescribeClusterOutput>, ProviderError> {
    match client.describe_cluster().cluster_name(name).send().await {
        Ok(out) => Ok(Some(out)),
        Err(e) => {
            let err = error::aws(&format!("describe HyperPod cluster `{name}`"), e);
            if is_missing(&err) { Ok(None) } else { Err(err) }
        }
    }
}

/// The cluster's status as SageMaker writes it.
pub(crate) fn status(cluster: &DescribeClusterOutput) -> &str {
    cluster.cluster_status().map_or("Unknown", |s| s.as_str())
}

/// The value of the cluster's tag `flow:token`.
pub(crate) async fn token_of(client: &Client, arn: &str) -> Result<Option<String>, ProviderError> {
    let out = client
        .list_tags()
        .resource_arn(arn)
        .send()
        .await
        .map_err(|e| error::aws(&format!("list the tags of `{arn}`"), e))?;
    Ok(out
        .tags()
        .iter()
        .find(|t| t.key() == Some(tags::TOKEN))
        .and_then(|t| t.value().map(str::to_string)))
}

/// Waits until cluster `name` is `InService`; a `Failed` one fails.
pub(crate) async fn until_in_service(
    ctx: &OpContext,
    client: &Client,
    name: &str,
) -> Result<DescribeClusterOutput, ProviderError> {
    until(ctx, client, name, |_| true).await
}

/// Waits until cluster `name` is `InService` and `settled` says it is as
/// wanted (an update's counts reached); a `Failed` one fails.
pub(crate) async fn until(
    ctx: &OpContext,
    client: &Client,
    name: &str,
    settled: impl Fn(&DescribeClusterOutput) -> bool,
) -> Result<DescribeClusterOutput, ProviderError> {
    let what = format!("HyperPod cluster `{name}`");
    let mut waiter = Waiter::new(
        Pace::LONG.within(ctx.timeout),
        ctx.reporter.as_ref(),
        what.clone(),
    );
    loop {
        match describe(client, name).await {
            Ok(Some(cluster)) => {
                waiter.looked();
                let st = status(&cluster).to_string();
                let counts: Vec<String> = cluster
                    .instance_groups()
                    .iter()
                    .map(|g| {
                        format!(
                            "{} {}/{}",
                            g.instance_group_name().unwrap_or("?"),
                            g.current_count().unwrap_or(0),
                            g.target_count().unwrap_or(0)
                        )
                    })
                    .collect();
                waiter.report([format!("{what}: {st} ({})", counts.join(", "))]);
                match st.as_str() {
                    "InService" if settled(&cluster) => return Ok(cluster),
                    "Failed" | "RollingBack" => {
                        let why = cluster
                            .failure_message()
                            .filter(|m| !m.is_empty())
                            .unwrap_or("no reason given");
                        return Err(ProviderError::fatal(format!("{what} is {st}: {why}")).with_help(
                            "the lifecycle scripts' logs are in CloudWatch (/aws/sagemaker/Clusters/NAME/ID); a script that failed on a node fails the cluster",
                        ));
                    }
                    _ => {}
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

/// UpdateCluster to `spec`'s instance groups, deleting the groups
/// `to_delete`.
pub(crate) async fn update(
    client: &Client,
    spec: &Spec,
    to_delete: &[String],
) -> Result<(), ProviderError> {
    let mut request = client.update_cluster().cluster_name(&spec.name);
    for g in &spec.groups {
        request = request.instance_groups(group_spec(g));
    }
    for g in to_delete {
        request = request.instance_groups_to_delete(g);
    }
    if let Some(r) = &spec.node_recovery {
        request = request.node_recovery(ClusterNodeRecovery::from(r.as_str()));
    }
    request
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error::aws(&format!("update HyperPod cluster `{}`", spec.name), e))
}

/// DeleteCluster, then waits until it is gone.
pub(crate) async fn delete(
    ctx: &OpContext,
    client: &Client,
    name: &str,
) -> Result<(), ProviderError> {
    if let Err(e) = client.delete_cluster().cluster_name(name).send().await {
        let err = error::aws(&format!("delete HyperPod cluster `{name}`"), e);
        if is_missing(&err) {
            return Ok(());
        }
        return Err(err);
    }
    let what = format!("HyperPod cluster `{name}`");
    let mut waiter = Waiter::new(
        Pace::LONG.within(ctx.timeout),
        ctx.reporter.as_ref(),
        what.clone(),
    );
    loop {
        match describe(client, name).await {
            Ok(None) => return Ok(()),
            Ok(Some(cluster)) => {
                waiter.looked();
                waiter.report([format!("{what}: {}", status(&cluster))]);
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

/// The cluster's nodes: `(instance id, group, status)`.
pub(crate) async fn nodes(
    client: &Client,
    name: &str,
) -> Result<Vec<(String, String, String)>, ProviderError> {
    let mut out = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page = client
            .list_cluster_nodes()
            .cluster_name(name)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws(&format!("list the nodes of HyperPod cluster `{name}`"), e))?;
        for n in page.cluster_node_summaries() {
            out.push((
                n.instance_id().unwrap_or_default().to_string(),
                n.instance_group_name().unwrap_or_default().to_string(),
                n.instance_status()
                    .and_then(|s| s.status())
                    .map(|st| st.as_str().to_string())
                    .unwrap_or_default(),
            ));
        }
        match page.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

/// The outputs of every cluster ([`applied`] puts each in).
pub(crate) const OUTPUT_KEYS: [&str; 6] = [
    "cluster_name",
    "cluster_arn",
    "status",
    "instance_counts",
    "node_count",
    "node_ids",
];

/// What state keeps of a cluster in service, with its nodes.
pub(crate) fn applied(
    cluster: &DescribeClusterOutput,
    nodes: &[(String, String, String)],
) -> Applied {
    let counts: serde_json::Map<String, Value> = cluster
        .instance_groups()
        .iter()
        .map(|g| {
            (
                g.instance_group_name().unwrap_or("?").to_string(),
                json!(g.current_count().unwrap_or(0)),
            )
        })
        .collect();
    let outputs = json!({
        "cluster_name": cluster.cluster_name(),
        "cluster_arn": cluster.cluster_arn(),
        "status": status(cluster),
        "instance_counts": counts,
        "node_count": nodes.len(),
        "node_ids": nodes.iter().map(|n| n.0.clone()).collect::<Vec<_>>(),
    });
    Applied {
        id: cluster.cluster_arn().map(str::to_string),
        outputs: outputs.as_object().cloned().unwrap_or_default(),
        private: Value::Null,
    }
}
