//! kube.node_check (issue 40): every node of a group of 8 checked alone
//! (nvidia-smi against the instance type's GPUs) and in NCCL pairs (the
//! pairwise search), faults planted on Node objects the test driver reads
//! (`test.flow/nvidia-smi`: what nvidia-smi prints there;
//! `test.flow/all_reduce_perf`: what the NCCL test prints on a pair with
//! it; `test.flow/busbw-factor`: its pairs' bus bandwidth scaled), the bad
//! nodes named with their evidence and failed on or cordoned.

use serde_json::{Value, json};

use crate::support::Project;
use crate::support::kube::KubeServer;
use crate::{fixture, log};

/// The check each node runs: the runbook's nvidia-smi Job.
pub(super) const CHECK: &str = include_str!("../fixtures/kube/node-check.yaml");

/// The test each pair runs: all_reduce_perf across the two nodes.
pub(super) const PAIR: &str = include_str!("../fixtures/kube/nccl-pair.yaml");

const NODES: usize = 8;

fn node(i: usize) -> String {
    format!("gpu-node-{i}")
}

/// A cluster with 8 p4d nodes in group `gpu` (and one system node the
/// selector leaves out), and a project whose workflow checks them.
struct Fleet {
    k: KubeServer,
    p: Project,
}

impl Fleet {
    fn new(policy: &str, extra: &str) -> Fleet {
        let k = KubeServer::start();
        for (name, group) in (0..NODES)
            .map(|i| (node(i), "gpu"))
            .chain([("sys-0".into(), "sys")])
        {
            k.post("/api/v1/nodes", &json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"eks.amazonaws.com/nodegroup": group,
                    "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "p4d.24xlarge"}}}));
        }
        let p = Project::new();
        fixture(&p, "pytorchjob-crd.yaml");
        p.write("node-check.yaml", CHECK);
        p.write("nccl-pair.yaml", PAIR);
        p.write("wf.toml", &workflow(&k, policy, extra));
        Fleet { k, p }
    }

    /// Plants annotation `key` = `value` on node `i`.
    fn plant(&self, i: usize, key: &str, value: &str) {
        self.k.merge_patch(
            &format!("/api/v1/nodes/{}", node(i)),
            &json!({"metadata": {"annotations": {key: value}}}),
        );
    }

    fn node(&self, i: usize) -> Value {
        self.k
            .get(&format!("/api/v1/nodes/{}", node(i)))
            .expect("node")
    }

    fn output(&self, key: &str) -> Value {
        let out = self
            .p
            .run(&["output", "wf.toml", &format!("fleet.{key}"), "--json"])
            .expect(0);
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!(out.stdout.trim()))
    }

    /// No node but those of `except` has been cordoned or tainted by flow
    /// (the API server's own `node.kubernetes.io/not-ready` taint stays).
    fn untouched(&self, except: &[usize]) {
        for i in (0..NODES).filter(|i| !except.contains(i)) {
            let n = self.node(i);
            assert!(
                n["spec"]["unschedulable"].is_null(),
                "{} cordoned: {n}",
                node(i)
            );
            assert!(flow_taint(&n).is_none(), "{} tainted: {n}", node(i));
        }
    }
}

/// The flow.dev/unhealthy taint of node `n`.
fn flow_taint(n: &Value) -> Option<Value> {
    n["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == "flow.dev/unhealthy")
        .cloned()
}

fn workflow(k: &KubeServer, policy: &str, extra: &str) -> String {
    format!(
        r#"
[workflow]
name = "fleet"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

# Every GPU node alone, then in NCCL pairs; a bad node is {policy}ed.
[steps.fleet]
provider = "kube.node_check"
depends_on = ["operator"]
[steps.fleet.inputs]
kubeconfig = "{kc}"
nodes = "eks.amazonaws.com/nodegroup=gpu"
policy = "{policy}"
{extra}
[steps.fleet.inputs.check]
files = ["node-check.yaml"]
gpus = "instance-type"
success_pattern = "NVIDIA-SMI"
capture = {{ driver_version = "Driver Version:\\s*([0-9.]+)" }}

[steps.fleet.inputs.pairs]
files = ["nccl-pair.yaml"]
floor = 10
"#,
        kc = k.kubeconfig_path()
    )
}

/// The emulated nvidia-smi with GPU 7's row gone.
pub(super) fn seven_gpus() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/local-cloud/outputs/nvidia-smi.txt"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("00000000:A0:1D.0"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Eight healthy nodes: the plan says what will be checked before the
/// nodes are known; apply checks each (8 check jobs), tests 4 pairs in one
/// round and touches no node; the system node is not checked.
#[test]
fn a_healthy_fleet_passes_in_one_round() {
    let f = Fleet::new("cordon", "");
    let plan = f.p.run(&["plan", "wf.toml"]).expect(0).all();
    assert!(
        plan.contains("checks each node of `eks.amazonaws.com/nodegroup=gpu` (the nodes are known after apply)"),
        "{plan}"
    );
    assert!(
        plan.contains("a bad node is cordoned, tainted flow.dev/unhealthy:NoSchedule and drained"),
        "{plan}"
    );
    f.p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let nodes: Vec<String> = (0..NODES).map(node).collect();
    assert_eq!(f.output("healthy"), json!(nodes));
    assert_eq!(f.output("bad"), json!([]));
    assert_eq!(f.output("unknown"), json!([]));
    assert_eq!(f.output("rounds"), json!(1));
    let verdicts = f.output("verdicts");
    assert_eq!(
        verdicts["gpu-node-3"]["value"],
        json!(17.9053),
        "{verdicts}"
    );
    assert_eq!(
        verdicts["gpu-node-3"]["check"]["values"]["driver_version"],
        "550.127.05"
    );
    let l = log(&f.p, "fleet");
    assert!(
        l.contains("checking 8 nodes of eks.amazonaws.com/nodegroup=gpu"),
        "{l}"
    );
    assert!(!l.contains("sys-0"), "{l}");
    assert_eq!(
        l.matches("started Job default/gpu-check-node-").count(),
        8,
        "{l}"
    );
    assert_eq!(
        l.matches("started PyTorchJob default/nccl-pair-r1-p")
            .count(),
        4,
        "{l}"
    );
    assert!(
        l.contains("NCCL round 1: gpu-node-0+gpu-node-1 17.9053"),
        "{l}"
    );
    f.untouched(&[]);
    // The jobs were deleted once read.
    let left = f.k.get("/apis/batch/v1/namespaces/default/jobs").unwrap();
    assert!(
        left["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["metadata"]["deletionTimestamp"].is_string()),
        "{left}"
    );
}

/// Three planted faults, policy fail: a node listing 7 GPUs (found by its
/// check, kept out of the pairs), a slow node (its pairs at a quarter of
/// the bandwidth: found in round 1, named in round 2 against a healthy
/// partner) and a node whose NCCL output holds no figure (unknown, not
/// healthy). The step fails naming the two bad ones with their evidence;
/// no node is touched.
#[test]
fn planted_faults_are_found_and_named_with_their_evidence() {
    let f = Fleet::new("fail", "");
    f.plant(2, "test.flow/nvidia-smi", &seven_gpus());
    f.plant(5, "test.flow/busbw-factor", "0.25");
    f.plant(
        6,
        "test.flow/all_reduce_perf",
        "NCCL WARN NET/OFI Couldn't open a fabric provider\n",
    );
    let all =
        f.p.run(&["apply", "wf.toml", "--auto-approve"])
            .expect(1)
            .all();
    assert!(all.contains("bad node(s) gpu-node-2, gpu-node-5"), "{all}");
    assert!(
        all.contains("gpu-node-2: nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8 (line: `|   6  NVIDIA A100-SXM4-40GB"),
        "{all}"
    );
    let slow = all.split("gpu-node-5: ").nth(1).unwrap_or_default();
    // 0.8 of the fleet's median (17.9053) is above the floor of 10.
    assert!(
        slow.starts_with("busbw 4.4763 GB/s < 14.3242 (median) with healthy node gpu-node-"),
        "{all}"
    );
    assert!(
        slow.contains("(line: `# Avg bus bandwidth    : 4.4763`)"),
        "{all}"
    );
    let l = log(&f.p, "fleet");
    assert!(l.contains("unknown node gpu-node-6: its NCCL test printed no bus bandwidth (line: `NCCL WARN NET/OFI Couldn't open a fabric provider`)"), "{l}");
    assert!(l.contains("NCCL round 2: "), "{l}");
    assert!(
        !l.contains("gpu-node-2+") && !l.contains("+gpu-node-2 "),
        "the 7-GPU node is kept out of the pairs: {l}"
    );
    f.untouched(&[]);
}

/// Policy cordon, one slow node: exactly that node is cordoned, tainted
/// flow.dev/unhealthy:NoSchedule with the reason, and drained (its pod
/// evicted); the other nodes and their pods are untouched; the outputs
/// record the verdicts.
#[test]
fn cordon_takes_out_exactly_the_bad_node() {
    let f = Fleet::new("cordon", "");
    f.plant(3, "test.flow/busbw-factor", "0.3");
    for (pod, i) in [("web-3", 3), ("web-4", 4)] {
        f.k.post("/api/v1/namespaces/default/pods", &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod}, "spec": {"nodeName": node(i), "containers": [{"name": "c", "image": "test/image"}]}}));
        f.k.merge_patch(&format!("/api/v1/namespaces/default/pods/{pod}/status"),
            &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}));
    }
    f.p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let n = f.node(3);
    assert_eq!(n["spec"]["unschedulable"], true, "{n}");
    assert_eq!(
        flow_taint(&n),
        Some(
            json!({"key": "flow.dev/unhealthy", "value": "busbw-below-median", "effect": "NoSchedule"})
        ),
        "{n}"
    );
    let reason = n["metadata"]["annotations"]["flow.dev/unhealthy"]
        .as_str()
        .unwrap();
    assert!(
        reason.starts_with("gpu-node-3: busbw 5.3716 GB/s < 14.3242 (median) with healthy node"),
        "{reason}"
    );
    f.untouched(&[3]);
    assert!(
        f.k.get("/api/v1/namespaces/default/pods/web-3").is_none(),
        "web-3 was evicted"
    );
    assert!(
        f.k.get("/api/v1/namespaces/default/pods/web-4").is_some(),
        "web-4 stays"
    );
    assert_eq!(f.output("bad"), json!(["gpu-node-3"]));
    assert_eq!(f.output("cordoned"), json!(["gpu-node-3"]));
    let v = f.output("verdicts");
    assert_eq!(v["gpu-node-3"]["status"], "bad");
    assert_eq!(v["gpu-node-3"]["value"], json!(5.3716));
    assert_eq!(v["gpu-node-3"]["line"], "# Avg bus bandwidth    : 5.3716");
    assert_eq!(v["gpu-node-4"]["status"], "healthy");
}

/// Three nodes with 7 GPUs of 8 nodes is more than max_bad_fraction 0.25
/// allows (2): the step fails naming them, and cordons none.
#[test]
fn too_many_bad_nodes_fail_without_cordoning_any() {
    let f = Fleet::new("cordon", "");
    for i in [1, 4, 7] {
        f.plant(i, "test.flow/nvidia-smi", &seven_gpus());
    }
    let all =
        f.p.run(&["apply", "wf.toml", "--auto-approve"])
            .expect(1)
            .all();
    assert!(
        all.contains("3 of 8 nodes are bad, more than max_bad_fraction 0.25 allows (2): no node was taken out"),
        "{all}"
    );
    assert!(all.contains("gpu-node-7: nvidia-smi lists 7 GPUs"), "{all}");
    f.untouched(&[]);
}

/// A policy the step cannot carry out (Slurm's `drain`), an unknown one and
/// a fraction out of range are refused at validate at their entries'
/// line:column, before anything runs.
#[test]
fn validate_refuses_bad_policies_at_their_entries() {
    let f = Fleet::new("drain", "max_bad_fraction = 1.5");
    let v =
        f.p.run_env(&["validate", "wf.toml"], &[("COLUMNS", "400")])
            .expect(1)
            .all();
    assert!(v.contains("wf.toml:18:10"), "policy's line:column: {v}");
    assert!(
        v.contains("policy `drain` is Slurm's (slurm.node_check): on kube.node_check a bad node is cordoned"),
        "{v}"
    );
    assert!(
        v.contains("wf.toml:19:20"),
        "max_bad_fraction's line:column: {v}"
    );
    assert!(v.contains("1.5 is not a fraction of the fleet"), "{v}");
    f.p.write("wf.toml", &workflow(&f.k, "cordn", ""));
    let v =
        f.p.run_env(&["validate", "wf.toml"], &[("COLUMNS", "400")])
            .expect(1)
            .all();
    assert!(
        v.contains("wf.toml:18:10") && v.contains("`cordn` is not a policy"),
        "{v}"
    );
    assert!(v.contains("did you mean `cordon`?"), "{v}");
    assert!(!f.p.path().join(".flow").exists());
}
