//! What refresh reads of a cluster: its status and version, and the node
//! groups its eksctl file declared (existence and scaling), recorded with
//! the cluster. A group deleted or rescaled outside flow is drift; the
//! private data handed back records what was found, so the update that
//! follows creates the group again or scales it back to the file.

use aws_sdk_eks::types::Cluster;
use serde_json::{Value, json};

use super::super::waiting;
use super::lifecycle::recorded_shapes;
use crate::contract::{Drift, Prior, ProviderError, Refreshed, attribute_drift, input_drift};

/// The cluster `found`, and the node groups `prior` recorded, as they are now.
pub(super) async fn refresh(
    eks: &aws_sdk_eks::Client,
    found: &Cluster,
    prior: Prior<'_>,
) -> Result<Refreshed, ProviderError> {
    let name = found.name().unwrap_or_default();
    let mut drift = Vec::new();
    let st = found.status().map(|s| s.as_str()).unwrap_or_default();
    if st != "UPDATING" {
        drift.extend(attribute_drift("status", json!("ACTIVE"), json!(st)));
    }
    if let Some(v) = found.version() {
        drift.extend(input_drift(prior.inputs, "version", json!(v)));
    }
    let mut private = prior.private.clone();
    let mut kept = Vec::new();
    let recorded = private
        .get("nodegroups")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for ((group, _, scaling), mut entry) in recorded_shapes(prior.private).into_iter().zip(recorded)
    {
        let Some(ng) = waiting::find_nodegroup(eks, name, &group).await? else {
            drift.push(Drift::of_attribute(
                format!("node group {group}"),
                json!("present"),
                Value::Null,
            ));
            continue;
        };
        if let Some(real) = ng
            .scaling_config()
            .and_then(|s| Some([s.min_size()?, s.desired_size()?, s.max_size()?]))
            && real != scaling
        {
            drift.push(Drift::of_attribute(
                format!("node group {group} scaling (min, desired, max)"),
                json!(scaling),
                json!(real),
            ));
            entry["scaling"] = json!(real);
        }
        kept.push(entry);
    }
    if private.get("nodegroups").is_some() {
        private["nodegroups"] = Value::Array(kept);
    }
    Ok(Refreshed::Present {
        drift,
        outputs: None,
        private: Some(private),
    })
}
