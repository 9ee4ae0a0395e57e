//! The node calls of the local cloud's HyperPod
//! (scripts/local-cloud/cloud_hyperpod_nodes.py, cloud_hyperpod.py) on a
//! cluster `flow` made: BatchRebootClusterNodes, BatchReplaceClusterNodes,
//! BatchDeleteClusterNodes and UpdateClusterSoftware answer in the API
//! reference's shapes and hold their states for the latency table's
//! lengths; a node deleted outside flow shows as drift, and apply brings
//! the count back with UpdateCluster.

use std::time::Duration;

use serde_json::{Value, json};

use super::{record, workflow};
use crate::support::aws::Aws;
use crate::support::moto::Moto;
use crate::support::wait_until;

/// A SageMaker call straight to moto.
fn call(moto: &Moto, op: &str, body: Value) -> Value {
    moto.json_call("sagemaker", &format!("SageMaker.{op}"), &body.to_string())
}

/// The cluster's nodes: (instance id, group, status).
fn nodes(moto: &Moto) -> Vec<(String, String, String)> {
    let out = call(
        moto,
        "ListClusterNodes",
        json!({"ClusterName": "ml-cluster"}),
    );
    out["ClusterNodeSummaries"]
        .as_array()
        .expect("ClusterNodeSummaries")
        .iter()
        .map(|n| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&n["InstanceId"]),
                s(&n["InstanceGroupName"]),
                s(&n["InstanceStatus"]["Status"]),
            )
        })
        .collect()
}

/// The status of node `id`, or None once it is gone.
fn status(moto: &Moto, id: &str) -> Option<String> {
    nodes(moto).into_iter().find(|n| n.0 == id).map(|n| n.2)
}

/// Waits until every node is `Running` and the cluster `InService`.
fn until_quiet(moto: &Moto) {
    wait_until(Duration::from_secs(20), "the cluster to be quiet", || {
        let c = call(
            moto,
            "DescribeCluster",
            json!({"ClusterName": "ml-cluster"}),
        );
        c["ClusterStatus"] == "InService" && nodes(moto).iter().all(|n| n.2 == "Running")
    });
}

const UNKNOWN: &str = "i-0123456789abcdef0";

#[test]
fn reboot_replace_delete_and_software_update_of_nodes_then_apply_brings_the_count_back() {
    let table = tempfile::NamedTempFile::new().expect("table");
    std::fs::write(
        table.path(),
        "scale = 60\n[operations]\n\"sagemaker.hyperpod.update\" = 120\n\
         \"sagemaker.hyperpod.software\" = 120\n\"sagemaker.hyperpod.reboot\" = 120\n\
         \"sagemaker.hyperpod.replace\" = 120\n",
    )
    .expect("write table");
    let moto = Moto::start_with(&[("FLOW_LATENCY_MODEL", &table.path().to_string_lossy())]);
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &workflow(3));
    a.apply().expect(0);
    let workers: Vec<String> = nodes(&moto)
        .into_iter()
        .filter(|n| n.1 == "worker-group-1")
        .map(|n| n.0)
        .collect();
    assert_eq!(workers.len(), 3);
    assert!(
        workers
            .iter()
            .all(|id| id.len() == 19 && id.starts_with("i-")),
        "{workers:?}"
    );

    // Reboot: the node keeps its id and is Pending until the reboot ends.
    let rebooted = call(
        &moto,
        "BatchRebootClusterNodes",
        json!({"ClusterName": "ml-cluster", "NodeIds": [workers[0], UNKNOWN]}),
    );
    assert_eq!(rebooted["Successful"], json!([workers[0]]), "{rebooted}");
    assert_eq!(rebooted["Failed"][0]["NodeId"], UNKNOWN, "{rebooted}");
    assert_eq!(
        rebooted["Failed"][0]["ErrorCode"], "InstanceIdNotFound",
        "{rebooted}"
    );
    assert_eq!(status(&moto, &workers[0]).as_deref(), Some("Pending"));
    let again = call(
        &moto,
        "BatchRebootClusterNodes",
        json!({"ClusterName": "ml-cluster", "NodeIds": [workers[0]]}),
    );
    assert_eq!(
        again["Failed"][0]["ErrorCode"], "InvalidInstanceStatus",
        "{again}"
    );
    until_quiet(&moto);
    assert_eq!(status(&moto, &workers[0]).as_deref(), Some("Running"));

    // Replace: the node shuts down, a new one of its group takes its place.
    let replaced = call(
        &moto,
        "BatchReplaceClusterNodes",
        json!({"ClusterName": "ml-cluster", "NodeIds": [workers[1]]}),
    );
    assert_eq!(replaced["Successful"], json!([workers[1]]), "{replaced}");
    assert_eq!(status(&moto, &workers[1]).as_deref(), Some("ShuttingDown"));
    let pending: Vec<_> = nodes(&moto)
        .into_iter()
        .filter(|n| n.2 == "Pending")
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].1, "worker-group-1");
    until_quiet(&moto);
    assert_eq!(status(&moto, &workers[1]), None);
    assert_eq!(status(&moto, &pending[0].0).as_deref(), Some("Running"));

    // Delete: Successful / Failed, the group's target lowered.
    let deleted = call(
        &moto,
        "BatchDeleteClusterNodes",
        json!({"ClusterName": "ml-cluster", "NodeIds": [workers[2], UNKNOWN]}),
    );
    assert_eq!(deleted["Successful"], json!([workers[2]]), "{deleted}");
    assert_eq!(deleted["Failed"][0]["Code"], "NodeIdNotFound", "{deleted}");
    assert_eq!(deleted["Failed"][0]["NodeId"], UNKNOWN, "{deleted}");
    until_quiet(&moto);
    assert_eq!(status(&moto, &workers[2]), None);
    let described = call(
        &moto,
        "DescribeCluster",
        json!({"ClusterName": "ml-cluster"}),
    );
    assert_eq!(
        described["InstanceGroups"][1]["TargetCount"], 2,
        "{described}"
    );

    // Software: SystemUpdating, then each node's LastSoftwareUpdateTime.
    call(
        &moto,
        "UpdateClusterSoftware",
        json!({"ClusterName": "ml-cluster"}),
    );
    let described = call(
        &moto,
        "DescribeCluster",
        json!({"ClusterName": "ml-cluster"}),
    );
    assert_eq!(described["ClusterStatus"], "SystemUpdating", "{described}");
    until_quiet(&moto);
    let node = call(
        &moto,
        "DescribeClusterNode",
        json!({"ClusterName": "ml-cluster", "NodeId": workers[0]}),
    );
    assert!(
        node["NodeDetails"]["LastSoftwareUpdateTime"].is_number(),
        "{node}"
    );

    // The node deleted outside flow is drift; apply brings the count back.
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(plan.code, 2, "{}", plan.all());
    let run = a.apply().expect(0);
    assert!(
        run.stdout
            .contains("HyperPod cluster `ml-cluster`: updating (worker-group-1 2 → 3)"),
        "{}",
        run.all()
    );
    assert_eq!(
        record(&a)["outputs"]["instance_counts"]["worker-group-1"],
        3
    );
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}
