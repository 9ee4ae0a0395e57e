//! The disruption controller and the kubelets' part in pod deletion, which
//! the test cluster lacks (see `support::kube`): each PodDisruptionBudget's
//! status is worked out from the pods its selector matches, as the
//! controller does (the eviction API refuses with 429 until it is observed),
//! and a pod deleted off a node is removed once it is marked terminating.

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

/// policy/v1beta1 PodDisruptionBudget, the version Kubernetes 1.20 serves.
fn budgets() -> ApiResource {
    ApiResource {
        group: "policy".into(),
        version: "v1beta1".into(),
        api_version: "policy/v1beta1".into(),
        kind: "PodDisruptionBudget".into(),
        plural: "poddisruptionbudgets".into(),
    }
}

/// Whether `pod` counts as healthy: running, ready and not terminating.
fn healthy(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Whether `labels` has every pair of `wanted`.
fn matches(labels: &Value, wanted: &Value) -> bool {
    wanted
        .as_object()
        .is_some_and(|w| w.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// One pass: every budget's status, and terminating pods on nodes removed.
pub(super) async fn tick(client: &kube::Client, held: &super::pace::Held) {
    let pods: Vec<Value> = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    )
    .list(&ListParams::default())
    .await
    .map(|l| l.items)
    .unwrap_or_default()
    .into_iter()
    .filter_map(|p| serde_json::to_value(p).ok())
    .collect();
    // A node whose kubelet stopped confirms no pod's end (`training.rs`).
    let dead = super::training::dead_nodes(client).await;
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        if !pod["metadata"]["deletionTimestamp"].is_null()
            && pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !dead.contains(n))
            && !held.contains(name)
        {
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
            let _ = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
                .delete(name, &DeleteParams::default().grace_period(0))
                .await;
        }
    }
    let r = budgets();
    let Ok(list) = Api::<DynamicObject>::all_with(client.clone(), &r)
        .list(&ListParams::default())
        .await
    else {
        return;
    };
    for pdb in list.items {
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        let name = pdb.metadata.name.clone().unwrap_or_default();
        if held.contains(&name) {
            continue;
        }
        let spec = &pdb.data["spec"];
        let status = &pdb.data["status"];
        let disrupted = status["disruptedPods"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let selected: Vec<&Value> = pods
            .iter()
            .filter(|p| p["metadata"]["namespace"] == ns.as_str())
            .filter(|p| matches(&p["metadata"]["labels"], &spec["selector"]["matchLabels"]))
            .collect();
        let expected = selected.len() as i64;
        let current = selected
            .iter()
            .filter(|p| healthy(p))
            .filter(|p| !disrupted.contains_key(p["metadata"]["name"].as_str().unwrap_or("")))
            .count() as i64;
        let desired = match (
            spec["minAvailable"].as_i64(),
            spec["maxUnavailable"].as_i64(),
        ) {
            (Some(min), _) => min,
            (None, Some(max)) => (expected - max).max(0),
            (None, None) => expected,
        };
        let allowed = (current - desired).max(0);
        // Disrupted pods stay listed until they are gone or terminating.
        let still: serde_json::Map<String, Value> = disrupted
            .into_iter()
            .map(|(pod, at)| {
                let live = selected.iter().any(|p| {
                    p["metadata"]["name"] == pod.as_str()
                        && p["metadata"]["deletionTimestamp"].is_null()
                });
                (pod, if live { at } else { Value::Null })
            })
            .collect();
        let generation = pdb.metadata.generation.unwrap_or(1);
        let unchanged = status["observedGeneration"].as_i64() == Some(generation)
            && status["disruptionsAllowed"].as_i64() == Some(allowed)
            && status["currentHealthy"].as_i64() == Some(current)
            && status["expectedPods"].as_i64() == Some(expected)
            && still.values().all(|v| !v.is_null());
        if unchanged {
            continue;
        }
        // Against the version read: an eviction in between wins.
        let patch = json!({
            "metadata": {"resourceVersion": pdb.metadata.resource_version},
            "status": {
                "observedGeneration": generation, "disruptionsAllowed": allowed,
                "currentHealthy": current, "desiredHealthy": desired, "expectedPods": expected,
                "disruptedPods": still,
            }
        });
        let _ = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &r)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
}
