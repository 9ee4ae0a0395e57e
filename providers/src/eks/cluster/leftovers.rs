//! Which VPC a cluster's destroy sweeps for what controllers left: the
//! cluster's own answer while it exists, else what state recorded (the VPC
//! made for it, or the VPC of its subnets).

use serde_json::Value;

use crate::aws::ec2::Ec2;
use crate::contract::{OpContext, ProviderError, Values};

/// The cluster's VPC: from `found` (the cluster as EKS describes it), else
/// the recorded `vpc_id` output, else the VPC of its first recorded subnet
/// that EC2 still has; `None` when nothing names one (the VPC is gone).
pub(super) async fn vpc_of(
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
