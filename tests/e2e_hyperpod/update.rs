//! A count change of `sagemaker.hyperpod` carried out end to end against
//! moto with the local cloud's UpdateCluster
//! (scripts/local-cloud/cloud_hyperpod.py): up, down, refused with nothing
//! half-applied, and resumed after kill -9 with one UpdateCluster in all.

use std::time::Duration;

use super::{record, workflow};
use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;
use crate::support::{finish, signal, wait_until};

/// The cluster's nodes straight from moto: (instance id, group, status).
fn nodes(moto: &Moto) -> Vec<(String, String, String)> {
    let out = moto.json_call(
        "sagemaker",
        "SageMaker.ListClusterNodes",
        r#"{"ClusterName": "ml-cluster"}"#,
    );
    out["ClusterNodeSummaries"]
        .as_array()
        .expect("ClusterNodeSummaries")
        .iter()
        .map(|n| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&n["InstanceId"]),
                s(&n["InstanceGroupName"]),
                s(&n["InstanceStatus"]["Status"]),
            )
        })
        .collect()
}

/// The worker group's nodes, each `Running`.
fn workers(moto: &Moto) -> Vec<String> {
    let all = nodes(moto);
    assert!(all.iter().all(|n| n.2 == "Running"), "{all:?}");
    all.into_iter()
        .filter(|n| n.1 == "worker-group-1")
        .map(|n| n.0)
        .collect()
}

/// A cluster of one controller and `from` workers, applied through a proxy
/// that counts the calls.
fn applied(moto: &Moto, from: u32) -> (FaultProxy, Aws) {
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", &workflow(from));
    a.apply().expect(0);
    (proxy, a)
}

/// Applies `to` workers and checks it was carried out: one UpdateCluster,
/// the cluster's nodes and the step's outputs at the new count, and a plan
/// with nothing left to do.
fn change_count(moto: &Moto, proxy: &FaultProxy, a: &Aws, from: u32, to: u32) {
    a.p.write("wf.toml", &workflow(to));
    let run = a.apply().expect(0);
    assert!(
        run.stdout.contains(&format!(
            "HyperPod cluster `ml-cluster`: updating (worker-group-1 {from} → {to})"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "HyperPod cluster `ml-cluster`: {} node(s)",
            to + 1
        )),
        "{}",
        run.stdout
    );
    assert_eq!(proxy.forwarded("UpdateCluster"), 1);
    assert_eq!(workers(moto).len(), to as usize);
    let rec = record(a);
    assert_eq!(rec["outputs"]["instance_counts"]["worker-group-1"], to);
    assert_eq!(rec["outputs"]["node_count"], to + 1);
    let ids: Vec<String> = serde_json::from_value(rec["outputs"]["node_ids"].clone()).unwrap();
    let mut real: Vec<String> = nodes(moto).into_iter().map(|n| n.0).collect();
    let mut recorded = ids.clone();
    real.sort();
    recorded.sort();
    assert_eq!(recorded, real, "state records the cluster's nodes");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

#[test]
fn a_count_up_is_carried_out_and_waited_for() {
    let moto = Moto::start();
    let (proxy, a) = applied(&moto, 1);
    let before = workers(&moto);
    change_count(&moto, &proxy, &a, 1, 4);
    // The node that was there stays; three are added.
    assert!(workers(&moto).contains(&before[0]));
}

#[test]
fn a_count_down_is_carried_out_and_the_newest_nodes_go() {
    let moto = Moto::start();
    let (proxy, a) = applied(&moto, 3);
    let before = workers(&moto);
    change_count(&moto, &proxy, &a, 3, 1);
    assert_eq!(workers(&moto), [before[0].clone()]);
}

#[test]
fn an_update_sagemaker_refuses_fails_with_its_words_and_changes_nothing() {
    let moto = Moto::start();
    let (proxy, a) = applied(&moto, 2);
    let before = record(&a);
    // A type flow's offline check lets through (it starts with `ml.`) but
    // UpdateCluster's enum does not, with a count change beside it.
    a.p.write(
        "wf.toml",
        &workflow(4).replace("\"ml.p5.48xlarge\"", "\"ml.p5.48xlarg\""),
    );
    let run = a.apply().expect(1);
    let all = run.all();
    assert!(
        all.contains("update HyperPod cluster `ml-cluster`")
            && all.contains(
                "Value 'ml.p5.48xlarg' at 'instanceGroups.2.member.instanceType' failed to satisfy constraint"
            )
            && all.contains("(in the workflow: instance_groups[1].instance_type)"),
        "{all}"
    );
    // The failure points at the input in the workflow file.
    let text = a.p.read("wf.toml");
    let (line, col) = text
        .lines()
        .enumerate()
        .find_map(|(i, l)| {
            l.find("\"ml.p5.48xlarg\"")
                .map(|c| (i + 1, l[..c].chars().count() + 1))
        })
        .expect("the mistyped type in the file");
    assert!(all.contains(&format!("--> wf.toml:{line}:{col}")), "{all}");
    // Refused once, not retried.
    assert_eq!(proxy.forwarded("UpdateCluster"), 1);
    // Nothing half-applied: the cluster, its nodes and the record as before.
    assert_eq!(workers(&moto).len(), 2);
    let described = moto.json_call(
        "sagemaker",
        "SageMaker.DescribeCluster",
        r#"{"ClusterName": "ml-cluster"}"#,
    );
    let group = &described["InstanceGroups"][1];
    assert_eq!(group["TargetCount"], 2, "{described}");
    assert_eq!(group["InstanceType"], "ml.p5.48xlarge", "{described}");
    assert_eq!(described["ClusterStatus"], "InService");
    let after = record(&a);
    assert_eq!(after["outputs"], before["outputs"]);
    assert_eq!(after["inputs"], before["inputs"]);
    // The change is still to be made.
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("~ hp"), "{}", plan.stdout);
}

#[test]
fn kill_9_while_the_update_is_waited_for_then_apply_again_sends_no_second_update() {
    // The local cloud's latency model, with an update that lasts 15 s.
    let table = tempfile::NamedTempFile::new().expect("table");
    std::fs::write(
        table.path(),
        "scale = 60\n[operations]\n\"sagemaker.hyperpod.update\" = 900\n",
    )
    .expect("write table");
    let moto = Moto::start_with(&[("FLOW_LATENCY_MODEL", &table.path().to_string_lossy())]);
    let (proxy, a) = applied(&moto, 1);
    a.p.write("wf.toml", &workflow(3));
    let child = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let described = || proxy.forwarded("DescribeCluster");
    wait_until(
        Duration::from_secs(30),
        "flow to send UpdateCluster",
        || proxy.forwarded("UpdateCluster") == 1,
    );
    let seen = described();
    wait_until(
        Duration::from_secs(10),
        "flow to look at the update",
        || described() > seen,
    );
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    // moto is still updating: the nodes to add are Pending.
    let pending = nodes(&moto);
    assert!(
        pending.iter().filter(|n| n.2 == "Pending").count() == 2,
        "{pending:?}"
    );

    let run = a.apply().expect(0);
    assert!(
        run.stdout
            .contains("HyperPod cluster `ml-cluster` is Updating: waiting for it"),
        "{}",
        run.all()
    );
    assert!(
        run.stdout
            .contains("already has the step's instance groups: no UpdateCluster to send"),
        "{}",
        run.all()
    );
    assert_eq!(proxy.forwarded("UpdateCluster"), 1);
    assert_eq!(workers(&moto).len(), 3);
    let rec = record(&a);
    assert_eq!(rec["status"], "applied");
    assert_eq!(rec["outputs"]["node_count"], 4);
    assert_eq!(rec["outputs"]["status"], "InService");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

#[test]
fn a_group_added_then_dropped_is_made_then_deleted_in_place() {
    let moto = Moto::start();
    let (proxy, a) = applied(&moto, 1);
    let extra = format!(
        r#"  {{ name = "extra-group", instance_type = "ml.c5.xlarge", count = 2, lifecycle_s3_uri = "s3://sagemaker-lifecycle-flow/src/", execution_role = "{}" }},
]"#,
        super::ROLE
    );
    let with_extra = workflow(1).replacen("\n]", &format!("\n{extra}"), 1);
    a.p.write("wf.toml", &with_extra);
    let run = a.apply().expect(0);
    assert!(
        run.stdout
            .contains("updating (add extra-group (ml.c5.xlarge × 2))"),
        "{}",
        run.all()
    );
    let groups = |moto: &Moto| -> Vec<String> {
        let mut g: Vec<String> = nodes(moto).into_iter().map(|n| n.1).collect();
        g.sort();
        g
    };
    assert_eq!(
        groups(&moto),
        [
            "controller-machine",
            "extra-group",
            "extra-group",
            "worker-group-1"
        ]
    );
    a.p.write("wf.toml", &workflow(1));
    let run = a.apply().expect(0);
    assert!(
        run.stdout.contains("updating (delete extra-group)"),
        "{}",
        run.all()
    );
    assert_eq!(groups(&moto), ["controller-machine", "worker-group-1"]);
    let described = moto.json_call(
        "sagemaker",
        "SageMaker.DescribeCluster",
        r#"{"ClusterName": "ml-cluster"}"#,
    );
    assert_eq!(described["InstanceGroups"].as_array().unwrap().len(), 2);
    assert_eq!(proxy.forwarded("UpdateCluster"), 2);
    assert_eq!(record(&a)["outputs"]["node_count"], 2);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}
