//! Moving pods off nodes through the Eviction API, so that
//! PodDisruptionBudgets set the pace: which pods must move, the Eviction's
//! API version, one eviction and what a refusal names. Used by a node
//! group's retirement (`eks::nodegroup::drain`) and by a node taken out of
//! a fleet (`kube::node_check`).

use ::kube::Client;
use ::kube::api::{Api, ListParams};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::errors::kube as kube_error;
use crate::contract::ProviderError;

/// Whether draining must move `pod`: not a DaemonSet's, not a mirror pod,
/// not finished.
pub(crate) fn must_move(pod: &Pod) -> bool {
    let daemon = pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|o| o.kind == "DaemonSet"));
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !daemon && !mirror && !finished
}

/// The pods on `nodes` that draining must move.
pub(crate) async fn pods_on(client: &Client, nodes: &[String]) -> Result<Vec<Pod>, ProviderError> {
    let api = Api::<Pod>::all(client.clone());
    let mut out = Vec::new();
    for node in nodes {
        let pods = api
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .map_err(|e| kube_error(&format!("list the pods on node `{node}`"), e))?;
        out.extend(pods.items.into_iter().filter(must_move));
    }
    Ok(out)
}

/// The `apiVersion` of the Eviction the server takes (`policy/v1` from
/// Kubernetes 1.22, `policy/v1beta1` before), as its discovery says.
pub(crate) async fn eviction_version(client: &Client) -> Result<String, ProviderError> {
    let req = http::Request::get("/api/v1")
        .body(Vec::new())
        .expect("a valid request");
    let found: Value = client
        .request(req)
        .await
        .map_err(|e| kube_error("read the API server's resources", e))?;
    let eviction = found["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == "pods/eviction");
    Ok(match eviction {
        Some(r) => format!(
            "{}/{}",
            r["group"].as_str().unwrap_or("policy"),
            r["version"].as_str().unwrap_or("v1")
        ),
        None => "policy/v1".into(),
    })
}

/// What asking to evict a pod came to.
pub(crate) enum Evicted {
    /// Evicted, or already gone.
    Done,
    /// A disruption budget refused it for now: the server's reason.
    Refused(String),
}

/// Asks the API server to evict pod `ns/name`.
pub(crate) async fn evict(
    client: &Client,
    version: &str,
    ns: &str,
    name: &str,
) -> Result<Evicted, ProviderError> {
    let body = json!({"apiVersion": version, "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns}});
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"))
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("a valid request");
    match client.request::<Value>(req).await {
        Ok(_) => Ok(Evicted::Done),
        Err(::kube::Error::Api(s)) if s.code == 404 => Ok(Evicted::Done),
        Err(::kube::Error::Api(s)) if s.code == 429 => {
            let causes: Vec<&str> = s
                .details
                .as_ref()
                .map(|d| d.causes.iter().map(|c| c.message.as_str()).collect())
                .unwrap_or_default();
            Ok(Evicted::Refused(if causes.is_empty() {
                s.message.clone()
            } else {
                causes.join("; ")
            }))
        }
        Err(e) => Err(kube_error(&format!("evict pod {ns}/{name}"), e)),
    }
}

/// The budget a refusal names (`The disruption budget web needs …`).
pub(crate) fn budget_of(reason: &str) -> Option<&str> {
    reason
        .split("disruption budget ")
        .nth(1)?
        .split_whitespace()
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn daemon_set_mirror_and_finished_pods_stay() {
        assert!(must_move(&pod(json!({"metadata": {"name": "web"}}))));
        assert!(!must_move(&pod(json!({"metadata": {"name": "dns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "1"}]}}))));
        assert!(!must_move(&pod(json!({"metadata": {"name": "m",
            "annotations": {"kubernetes.io/config.mirror": "x"}}}))));
        assert!(!must_move(&pod(
            json!({"metadata": {"name": "done"}, "status": {"phase": "Succeeded"}})
        )));
        // A ReplicaSet's pod moves.
        assert!(must_move(&pod(json!({"metadata": {"name": "rs",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "2"}]}}))));
    }

    #[test]
    fn a_refusal_names_its_budget() {
        assert_eq!(
            budget_of("The disruption budget web-pdb needs 2 healthy pods and has 2 currently"),
            Some("web-pdb")
        );
        assert_eq!(
            budget_of("The disruption budget web-pdb is still being processed by the server."),
            Some("web-pdb")
        );
        assert_eq!(budget_of("Too many requests"), None);
    }
}
