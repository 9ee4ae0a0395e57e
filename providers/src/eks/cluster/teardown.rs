//! A cluster's destroy: what it made, deleted in order, and the sweep of
//! its VPC for what controllers left there (the VPC being the cluster's own
//! answer while it exists, else what state recorded: the VPC made for it,
//! or the VPC of its subnets).

use serde_json::Value;

use super::super::shared_error as error;
use super::super::shared_inputs::opt_str;
use super::super::{nodegroup, stack, waiting};
use super::lifecycle::recorded_nodegroups;
use crate::aws::ec2::Ec2;
use crate::aws::leftovers::{Scope, Sweep};
use crate::contract::{OpContext, Prior, ProviderError, Values};

/// The cluster's VPC: from `found` (the cluster as EKS describes it), else
/// the recorded `vpc_id` output, else the VPC of its first recorded subnet
/// that EC2 still has; `None` when nothing names one (the VPC is gone).
async fn vpc_of(
    ctx: &OpContext,
    found: Option<&aws_sdk_eks::types::Cluster>,
    outputs: &Values,
) -> Result<Option<String>, ProviderError> {
    if let Some(vpc) = found
        .and_then(|c| c.resources_vpc_config())
        .and_then(|v| v.vpc_id())
        .filter(|v| !v.is_empty())
    {
        return Ok(Some(vpc.to_string()));
    }
    if let Some(vpc) = outputs.get("vpc_id").and_then(Value::as_str) {
        return Ok(Some(vpc.to_string()));
    }
    let subnets: Vec<&str> = outputs
        .get("subnet_ids")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if subnets.is_empty() {
        return Ok(None);
    }
    let ec2 = Ec2::new(&crate::aws::config::sdk_config(ctx).await?);
    for subnet in subnets {
        if let Some(vpc) = ec2.vpc_of_subnet(subnet).await? {
            return Ok(Some(vpc));
        }
    }
    Ok(None)
}

/// Deletes what the cluster step made, in the order that lets each go: the
/// eksctl file's node groups, the OIDC stack, the cluster, what controllers
/// left in its VPC (see [`crate::aws::leftovers`]), the role stack, then
/// the VPC stack made for it.
pub(super) async fn delete(ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
    let name = prior
        .outputs
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| opt_str(prior.inputs, "name").ok().flatten())
        .ok_or_else(|| ProviderError::fatal("no cluster name recorded").with_help("the step's record is incomplete (written by an older flow, or edited by hand): look at it with `flow state show FILE STEP`, or restore a backup with `flow state restore`"))?;
    let eks = super::super::client(ctx).await?;
    let cfn = stack::client(ctx).await?;
    let found = waiting::find_cluster(&eks, &name).await?;
    let vpc = vpc_of(ctx, found.as_ref(), prior.outputs).await?;
    for (ng, _) in recorded_nodegroups(prior.private) {
        nodegroup::delete(ctx, &eks, &name, &ng).await?;
    }
    stack::delete(ctx, &cfn, &stack::name(&name, "oidc")).await?;
    if found.is_some() {
        ctx.reporter.event(&format!("deleting cluster {name}"));
        match eks.delete_cluster().name(&name).send().await {
            Ok(_) => {}
            Err(e) if error::code(&e) == Some("ResourceNotFoundException") => {}
            Err(e) => return Err(error::aws(&format!("delete cluster `{name}`"), e)),
        }
        waiting::await_gone(
            ctx,
            &format!("cluster `{name}`"),
            super::super::shared_pacing::expected::EKS_CLUSTER_DELETE,
            || waiting::find_cluster(&eks, &name),
            |c| c.status().map(|s| s.as_str()),
        )
        .await?;
    }
    // What controllers made for the cluster in its VPC (load balancers
    // for Services, their groups, interfaces), before the VPC goes.
    if let Some(vpc) = &vpc {
        Sweep::of(ctx, prior.inputs, vpc, Scope::Cluster(name.clone()))?
            .run()
            .await?;
    }
    stack::delete(ctx, &cfn, &stack::name(&name, "role")).await?;
    // The VPC made for an eksctl file without subnets, last, as eksctl
    // deletes it (a no-op when there is none), once nothing else is left
    // in it.
    let vpc_stack = stack::name(&name, "vpc");
    if let (Some(vpc), Some(_)) = (&vpc, stack::outputs_of(&cfn, &vpc_stack).await?) {
        Sweep::of(ctx, prior.inputs, vpc, Scope::Vpc)?.run().await?;
    }
    stack::delete(ctx, &cfn, &vpc_stack).await
}
