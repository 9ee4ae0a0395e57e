//! Before a stack that holds a VPC is deleted: sweep the VPC for what
//! Kubernetes controllers left in it (see [`crate::aws::leftovers`]), which
//! would otherwise fail the delete with `DependencyViolation`.

use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::Stack;

use super::stack::{describe, resources, status};
use crate::aws::leftovers::{Scope, Sweep};
use crate::contract::{OpContext, ProviderError, Values};

/// The CloudFormation type of a VPC.
const VPC: &str = "AWS::EC2::VPC";

/// Sweeps each VPC stack `stack` holds, unless the stack is gone or already
/// being deleted; `inputs` are the step's recorded inputs. Gives the stack
/// as it described it first (`None`: there is none).
pub(super) async fn sweep_vpcs(
    ctx: &OpContext,
    client: &Client,
    stack: &str,
    inputs: &Values,
) -> Result<Option<Stack>, ProviderError> {
    let Some(current) = describe(client, stack).await? else {
        return Ok(None);
    };
    if matches!(status(&current), "DELETE_COMPLETE" | "DELETE_IN_PROGRESS") {
        return Ok(Some(current));
    }
    for vpc in vpcs(client, stack).await? {
        Sweep::of(ctx, inputs, &vpc, Scope::Vpc)?.run().await?;
    }
    Ok(Some(current))
}

/// The ids of the VPCs stack `stack` made and still has.
async fn vpcs(client: &Client, stack: &str) -> Result<Vec<String>, ProviderError> {
    Ok(resources(client, stack)
        .await?
        .iter()
        .filter(|r| r.resource_type() == Some(VPC))
        .filter(|r| {
            r.resource_status()
                .is_none_or(|s| s.as_str() != "DELETE_COMPLETE")
        })
        .filter_map(|r| r.physical_resource_id())
        .filter(|id| id.starts_with("vpc-"))
        .map(str::to_string)
        .collect())
}
