//! The EKS providers: `eks.cluster` (optionally from an eksctl `ClusterConfig`
//! file, making its managed node groups too) and `eks.nodegroup` (managed
//! node groups, with EFA launch templates for p4d, p5 and p6-b200).
//!
//! They reach AWS the way every AWS provider does (the shared SDK
//! configuration, error mapping, polling and token tags of [`crate::aws`]).
//! What EKS needs besides the EKS API itself (an IAM role when none is
//! given, a launch template for EFA or a capacity reservation, the OIDC
//! provider) is made the way eksctl makes it: a small CloudFormation stack
//! per cluster or node group, named `flow-eks-…`, deleted with it.

mod cluster;
mod eksctl;
pub(crate) mod nodegroup;
mod stack;
mod vpc;
mod waiting;

use std::sync::Arc;

use crate::contract::Provider;

pub use crate::eks_access::{endpoint, token};
pub use cluster::EksCluster;
pub use nodegroup::EksNodegroup;

// The AWS providers' shared pieces: SDK configuration, error mapping,
// input readers, polling and token tags.
pub(crate) use crate::aws::{
    config as shared_config, error as shared_error, inputs as shared_inputs,
    pacing as shared_pacing, poll as shared_poll, tags as shared_tags,
};

/// Every EKS provider kind, for [`Registry::builtin`](crate::Registry::builtin).
pub fn providers() -> Vec<Arc<dyn Provider>> {
    vec![Arc::new(EksCluster::new()), Arc::new(EksNodegroup::new())]
}

/// An EKS client for `ctx`'s region and profile.
async fn client(
    ctx: &crate::contract::OpContext,
) -> Result<aws_sdk_eks::Client, crate::contract::ProviderError> {
    Ok(aws_sdk_eks::Client::new(
        &shared_config::sdk_config(ctx).await?,
    ))
}

/// The SDK configuration for `ctx` (shared with the other AWS providers).
pub(crate) async fn sdk_config(
    ctx: &crate::contract::OpContext,
) -> Result<aws_types::SdkConfig, crate::contract::ProviderError> {
    shared_config::sdk_config(ctx).await
}

/// The client request token for one object of an operation: the
/// operation's token and a short digest of the object's name, so that one
/// operation creating several objects (an eksctl config's node groups) is
/// idempotent for each.
fn request_token(token: &str, object: &str) -> String {
    use sha2::{Digest, Sha256};
    format!(
        "{token}-{}",
        hex::encode(&Sha256::digest(object.as_bytes())[..6])
    )
}
