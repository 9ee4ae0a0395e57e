//! Where an EKS token may go: the cluster's own API endpoint and
//! certificate authority as DescribeCluster returns them now, never what a
//! step's inputs (or state) say they were.

use aws_config::SdkConfig;

use aws_sdk_eks::types::Cluster;

use crate::aws::error;
use crate::contract::ProviderError;

/// The API endpoint (`https://…`) and base64 PEM certificate authority of
/// the cluster `name`, read from EKS with `config`'s credentials and region.
pub async fn described(config: &SdkConfig, name: &str) -> Result<(String, String), ProviderError> {
    let eks = aws_sdk_eks::Client::new(config);
    let cluster = find_cluster(&eks, name).await?.ok_or_else(|| {
        ProviderError::fatal(format!(
            "EKS cluster `{name}` does not exist in {}: no token is sent to a cluster EKS does not describe",
            config.region().map_or("the configured region".to_string(), |r| r.to_string())
        ))
        .with_help("pass the `connection` output of the eks.cluster step that made the cluster, and apply that step first")
    })?;
    let endpoint = cluster.endpoint().filter(|e| !e.is_empty());
    let ca = cluster
        .certificate_authority()
        .and_then(|c| c.data())
        .filter(|d| !d.is_empty());
    match (endpoint, ca) {
        (Some(endpoint), Some(ca)) if endpoint.starts_with("https://") => {
            Ok((endpoint.to_string(), ca.to_string()))
        }
        (Some(endpoint), Some(_)) => Err(ProviderError::fatal(format!(
            "EKS cluster `{name}` describes its endpoint as {endpoint}, which is not https: no token is sent there"
        ))),
        _ => Err(ProviderError::retryable(format!(
            "EKS cluster `{name}` has no API endpoint yet (status {})",
            cluster.status().map_or("unknown", |s| s.as_str())
        ))
        .with_help("wait for the cluster to be ACTIVE: apply its eks.cluster step first")),
    }
}

/// The cluster `name`, if EKS describes one.
async fn find_cluster(
    eks: &aws_sdk_eks::Client,
    name: &str,
) -> Result<Option<Cluster>, ProviderError> {
    match eks.describe_cluster().name(name).send().await {
        Ok(out) => Ok(out.cluster().cloned()),
        Err(e) if error::code(&e) == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe cluster `{name}`"), e)),
    }
}
