//! End-to-end: `sagemaker.hyperpod` against moto, which implements
//! CreateCluster, DescribeCluster, ListClusterNodes, DeleteCluster and
//! ListTags for HyperPod clusters (it makes a cluster `InService` at once,
//! with one node per instance), and the local cloud's UpdateCluster
//! (scripts/local-cloud/cloud_hyperpod.py): count changes in `update`,
//! the node calls (reboot, replace, delete, software) in `nodes`; nodes
//! that are hosts running the lifecycle scripts and Slurm in
//! `hyperpod_hosts`; slurm.node_check's policy `replace` through
//! BatchReplaceClusterNodes in `replace`; slurm.job's restarts with policy
//! `replace` (a worker that dies mid-training) in `restarts`; a slow node
//! found by NCCL pairs and replaced in `planted`; a node whose rank hangs
//! a training in `hang`.

#[path = "e2e_hyperpod/auto_recovery.rs"]
mod auto_recovery;
#[path = "e2e_hyperpod/hang.rs"]
mod hang;
// The hosts harness; ImportKeyPair is not used here (HyperPod nodes take
// no key pair).
#[allow(dead_code)]
#[path = "support/hosts.rs"]
mod hosts;
#[path = "e2e_hyperpod/hosts.rs"]
mod hyperpod_hosts;
#[path = "e2e_hyperpod/nodes.rs"]
mod nodes;
#[path = "e2e_hyperpod/planted.rs"]
mod planted;
#[path = "e2e_hyperpod/replace.rs"]
mod replace;
#[path = "e2e_hyperpod/restarts.rs"]
mod restarts;
mod support;
#[path = "e2e_hyperpod/update.rs"]
mod update;

use support::aws::Aws;
use support::moto::Moto;

const ROLE: &str = "arn:aws:iam::123456789012:role/hyperpod";

/// A Slurm HyperPod cluster: a controller and `workers` worker nodes.
fn workflow(workers: u32) -> String {
    format!(
        r#"
[workflow]
name = "hyperpod"
region = "us-east-1"

[steps.hp]
provider = "sagemaker.hyperpod"
[steps.hp.inputs]
cluster_name = "ml-cluster"
node_recovery = "Automatic"
instance_groups = [
  {{ name = "controller-machine", instance_type = "ml.m5.2xlarge", count = 1, lifecycle_s3_uri = "s3://sagemaker-lifecycle-flow/src/", execution_role = "{ROLE}" }},
  {{ name = "worker-group-1", instance_type = "ml.p5.48xlarge", count = {workers}, threads_per_core = 2, lifecycle_s3_uri = "s3://sagemaker-lifecycle-flow/src/", execution_role = "{ROLE}" }},
]
"#
    )
}

fn record(a: &Aws) -> serde_json::Value {
    let show = a.run(&["state", "show", "wf.toml", "hp"]).expect(0);
    serde_json::from_str(&show.stdout).expect("JSON")
}

/// DescribeCluster straight from moto.
fn describe(moto: &Moto, name: &str) -> (u16, String) {
    moto.try_json_call(
        "sagemaker",
        "SageMaker.DescribeCluster",
        &format!(r#"{{"ClusterName": "{name}"}}"#),
    )
}

#[test]
fn a_cluster_is_planned_created_listed_and_destroyed() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &workflow(2));
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    for line in [
        "instance group controller-machine: ml.m5.2xlarge × 1 (lifecycle s3://sagemaker-lifecycle-flow/src/on_create.sh, 1 thread per core)",
        "instance group worker-group-1: ml.p5.48xlarge × 2 (lifecycle s3://sagemaker-lifecycle-flow/src/on_create.sh, 2 threads per core)",
        "orchestrator: Slurm",
        "(1 × ml.m5.2xlarge, 2 × ml.p5.48xlarge)",
    ] {
        assert!(
            plan.stdout.contains(line),
            "plan lacks {line:?}:\n{}",
            plan.stdout
        );
    }
    let run = a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(
        run.stdout
            .contains("HyperPod cluster `ml-cluster`: 3 node(s)"),
        "{}",
        run.stdout
    );
    let rec = record(&a);
    assert_eq!(rec["outputs"]["status"], "InService");
    assert_eq!(rec["outputs"]["node_count"], 3);
    assert_eq!(rec["outputs"]["instance_counts"]["worker-group-1"], 2);
    assert!(
        rec["resource_id"]
            .as_str()
            .unwrap()
            .ends_with("cluster/ml-cluster")
    );
    // The cluster carries the operation token.
    let arn = rec["resource_id"].as_str().unwrap().to_string();
    let tags = moto.json_call(
        "sagemaker",
        "SageMaker.ListTags",
        &format!(r#"{{"ResourceArn": "{arn}"}}"#),
    );
    assert!(tags.to_string().contains("flow:token"), "{tags}");
    // Nothing changed: the plan reads the cluster and has nothing to do.
    let again = a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.all());
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let (status, body) = describe(&moto, "ml-cluster");
    assert_eq!(status, 400, "the cluster is gone: {body}");
}

#[test]
fn a_cluster_of_that_name_made_elsewhere_is_refused_then_imported() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &workflow(1));
    let groups = r#"[{"InstanceGroupName": "controller-machine", "InstanceType": "ml.m5.2xlarge", "InstanceCount": 1, "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle-flow/src/", "OnCreate": "on_create.sh"}, "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod", "ThreadsPerCore": 1}]"#;
    moto.json_call(
        "sagemaker",
        "SageMaker.CreateCluster",
        &format!(r#"{{"ClusterName": "ml-cluster", "InstanceGroups": {groups}}}"#),
    );
    let run = a.apply().expect(1);
    assert!(
        run.all().contains(
            "HyperPod cluster `ml-cluster` already exists and was not created by this step"
        ),
        "{}",
        run.all()
    );
    // Another project adopts it instead, and then has nothing to do.
    let b = Aws::new(&moto, None);
    b.p.write("wf.toml", &workflow(1));
    b.run(&["import", "wf.toml", "hp", "ml-cluster"]).expect(0);
    let rec = record(&b);
    assert_eq!(rec["status"], "applied");
    assert_eq!(rec["outputs"]["node_count"], 1);
    let plan = b.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(plan.code, 0, "{}", plan.all());
}

#[test]
fn instance_groups_are_checked_before_anything_runs() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write(
        "wf.toml",
        &workflow(2).replace("\"ml.p5.48xlarge\"", "\"p5.48xlarge\""),
    );
    let run = a.run(&["plan", "wf.toml"]).expect(1);
    assert!(
        run.all()
            .contains("HyperPod instance types start with `ml.`: did you mean `ml.p5.48xlarge`?"),
        "{}",
        run.all()
    );
    assert!(a.p.state_files().is_empty());
}
