//! What a training job meets on a cluster of GPU nodes, which the test
//! cluster lacks, played through the real API (see `support::kube`):
//!
//! - **The scheduler's bind**, once a test asks for it
//!   (`Driver::schedule`). A job's pods that a `nodeSelector` (not on
//!   the hostname: those are pinned, see `driver.rs`) sends to a group of
//!   nodes are bound, one per node (a training pod asks for all of a GPU
//!   node's GPUs), to nodes the selector picks that are Ready,
//!   schedulable and carry no `NoSchedule`/`NoExecute` taint, skipping
//!   nodes a live pod of another scheduled job holds; too few such nodes
//!   leave the whole job pending (gang scheduling, as the training
//!   operator does it with Volcano or the scheduler plugins), as
//!   kube-scheduler's filters would
//!   (https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/,
//!   https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/).
//! - **A node that dies.** A test stops a node's kubelet
//!   ([`stop_kubelet`]): the node lifecycle controller then sets the
//!   node's `Ready` condition to `Unknown` (`NodeStatusUnknown`, "Kubelet
//!   stopped posting node status."), taints it
//!   `node.kubernetes.io/unreachable` (`NoSchedule` and `NoExecute`) and
//!   marks its pods not ready
//!   (https://kubernetes.io/docs/concepts/architecture/nodes/#node-status,
//!   https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#taint-based-evictions).
//!   Its pods keep the last status their kubelet posted (`Running`), and a
//!   pod deleted there stays terminating: no kubelet confirms its end
//!   (`disruption.rs` leaves it). The training's other ranks lose their
//!   NCCL peer and exit 1 with NCCL's warning naming it, and the job fails
//!   as the training operator fails a job whose worker failed
//!   (`restartPolicy: Never`).
//! - **A volume on the host.** A container whose command is `find DIR …`
//!   and whose volume holding DIR is a `hostPath` runs that `find` here,
//!   on the host folder, its paths told as the container sees them: what
//!   the kubelet does when it mounts the host folder into the container
//!   (https://kubernetes.io/docs/concepts/storage/volumes/#hostpath). The
//!   tests' trainings keep their checkpoints on such a volume.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The annotation that says a node's kubelet was stopped by the test.
pub const KUBELET_STOPPED: &str = "test.flow/kubelet-stopped";

/// Stops the kubelet of node `name` (see the module's comment).
pub fn stop_kubelet(k: &super::KubeServer, name: &str) {
    k.merge_patch(
        &format!("/api/v1/nodes/{name}"),
        &json!({"metadata": {"annotations": {KUBELET_STOPPED: "true"}}}),
    );
}

/// Makes node `name` Ready as its kubelet would on registering (the
/// `not-ready` taint the API server put on it lifted).
pub fn ready(k: &super::KubeServer, name: &str) {
    k.merge_patch(
        &format!("/api/v1/nodes/{name}/status"),
        &json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}}),
    );
    k.merge_patch(
        &format!("/api/v1/nodes/{name}"),
        &json!({"spec": {"taints": null}}),
    );
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Whether the kubelet of `n` was stopped.
pub(super) fn stopped(n: &Node) -> bool {
    n.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(KUBELET_STOPPED))
}

/// The nodes whose kubelet was stopped, by name.
pub(super) async fn dead_nodes(client: &kube::Client) -> BTreeSet<String> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(stopped)
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// The `nodeSelector` of a job's pod templates (the first that has one),
/// when it does not pin a hostname.
pub(super) fn group_selector(job: &Value) -> Option<serde_json::Map<String, Value>> {
    let mut specs: Vec<&Value> = job.pointer("/spec/template/spec").into_iter().collect();
    if let Some(spec) = job["spec"].as_object() {
        for (_, r) in spec.iter().filter(|(k, _)| k.ends_with("ReplicaSpecs")) {
            let replicas = r.as_object().into_iter().flat_map(|r| r.values());
            specs.extend(replicas.filter_map(|r| r.pointer("/template/spec")));
        }
    }
    specs
        .into_iter()
        .filter_map(|s| s["nodeSelector"].as_object())
        .find(|s| !s.contains_key("kubernetes.io/hostname"))
        .cloned()
}

/// The nodes `count` pods of job `job` (labelled `label=job`) are bound
/// to, one per node, or `None` while too few nodes fit.
pub(super) async fn bind(
    client: &kube::Client,
    selector: &serde_json::Map<String, Value>,
    label: &str,
    job: &str,
    count: usize,
) -> Option<Vec<String>> {
    let wanted: Vec<String> = selector
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&wanted.join(",")))
        .await
        .ok()?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?
        .items;
    let held: BTreeSet<String> = pods
        .iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            let labels = p.metadata.labels.clone().unwrap_or_default();
            labels.get(label).is_none_or(|j| j != job)
                && p.metadata.deletion_timestamp.is_none()
                && !matches!(phase, Some("Succeeded" | "Failed"))
                && labels.contains_key("flow.test/scheduled")
        })
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let mut fit: Vec<String> = nodes
        .into_iter()
        .filter(|n| node_ready(n) && !stopped(n))
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        })
        // The `not-ready` taint the API server puts on a new Node is one
        // the node lifecycle controller lifts once the node is Ready.
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| {
                    t.iter().any(|t| {
                        (t.effect == "NoSchedule" || t.effect == "NoExecute")
                            && t.key != "node.kubernetes.io/not-ready"
                    })
                })
        })
        .filter_map(|n| n.metadata.name)
        .filter(|n| !held.contains(n))
        .collect();
    fit.sort();
    (fit.len() >= count).then(|| fit.into_iter().take(count).collect())
}

/// One pass of the node lifecycle controller over nodes whose kubelet
/// stopped, and of the trainings that ran there.
pub(super) async fn tick(client: &kube::Client) {
    let dead = dead_nodes(client).await;
    if dead.is_empty() {
        return;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &dead {
        let Ok(Some(n)) = nodes.get_opt(name).await else {
            continue;
        };
        if !node_ready(&n)
            && n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/unreachable"))
        {
            continue;
        }
        let _ = nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "message": "Kubelet stopped posting node status."}]}})),
            )
            .await;
        let mut taints: Vec<Value> = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect();
        for effect in ["NoSchedule", "NoExecute"] {
            taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": effect}));
        }
        let _ = nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"taints": taints}})),
            )
            .await;
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for p in &pods {
        let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let Some(peer) = on.filter(|n| dead.contains(n)) else {
            continue;
        };
        if !running {
            continue;
        }
        // The ranks of the same job on live nodes lose their peer.
        let labels = p.metadata.labels.clone().unwrap_or_default();
        let Some((key, job)) = ["training.kubeflow.org/job-name", "job-name"]
            .iter()
            .find_map(|k| labels.get(*k).map(|j| (k.to_string(), j.clone())))
        else {
            continue;
        };
        let ns = p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let name = p.metadata.name.clone().unwrap_or_default();
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let _ = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&not_ready))
            .await;
        for other in pods.iter().filter(|o| {
            o.metadata.labels.as_ref().and_then(|l| l.get(&key)) == Some(&job)
                && o.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| !dead.contains(n))
                && o.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        }) {
            let oname = other.metadata.name.clone().unwrap_or_default();
            let container = other
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone())
                .unwrap_or_default();
            let message = format!(
                "{oname}: NCCL WARN NET/Socket : Connection closed by remote peer {peer}<43562>\n{oname}: NCCL WARN Call to recv from {peer}<43562> failed : Connection reset by peer\nRuntimeError: NCCL communicator was aborted on rank 0."
            );
            let status = json!({"status": {"phase": "Failed", "containerStatuses": [{
                "name": container, "image": "test/image", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}}]}});
            let _ = api
                .patch_status(&oname, &PatchParams::default(), &Patch::Merge(&status))
                .await;
        }
        fail_job(client, &ns, &key, &job).await;
    }
}

/// What `find DIR ARGS…`, the first container of a batch Job, prints and
/// whether it succeeded, when DIR is on a `hostPath` volume (see the
/// module's comment); `None` for any other job.
pub(super) fn listing(job: &Value) -> Option<(String, bool)> {
    let spec = job.pointer("/spec/template/spec")?;
    let c = spec.pointer("/containers/0")?;
    let cmd: Vec<&str> = c["command"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if cmd.first() != Some(&"find") || cmd.len() < 2 {
        return None;
    }
    let dir = cmd[1];
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    let mounted = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|m| {
            let at = m["mountPath"].as_str()?.trim_end_matches('/');
            let host = volumes
                .iter()
                .find(|v| v["name"] == m["name"])?
                .pointer("/hostPath/path")?
                .as_str()?;
            (dir == at || dir.starts_with(&format!("{at}/")))
                .then(|| (at.to_string(), host.to_string()))
        });
    let Some((at, host)) = mounted else {
        return Some((format!("find: '{dir}': No such file or directory"), false));
    };
    let local = format!("{host}{}", &dir[at.len()..]);
    let out = std::process::Command::new("find")
        .arg(&local)
        .args(&cmd[2..])
        .output()
        .ok()?;
    let said = |b: &[u8]| String::from_utf8_lossy(b).replace(&host, &at);
    let text = format!("{}{}", said(&out.stdout), said(&out.stderr));
    Some((text, out.status.success()))
}

/// Fails the running job `name` whose pods carry `label` (`job-name`: a
/// batch Job; else a PyTorchJob), as its controller does when a pod of it
/// failed.
async fn fail_job(client: &kube::Client, ns: &str, label: &str, name: &str) {
    let (r, status) = if label == "job-name" {
        (
            super::driver::ar("batch", "v1", "Job", "jobs"),
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
        )
    } else {
        (
            super::driver::ar("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
            json!({"conditions": [
                {"type": "Created", "status": "True", "reason": "Created"},
                {"type": "Running", "status": "False", "reason": "Running"},
                {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
                 "message": format!("PyTorchJob {name} is failed because 1 Worker replica(s) failed.")}]}),
        )
    };
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &r);
    if let Ok(Some(job)) = api.get_opt(name).await {
        super::driver::set_status(client, &r, &job, status).await;
    }
}
