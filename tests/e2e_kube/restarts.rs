//! kube.job restarts (issue 40 item 4): a PyTorchJob of 4 ranks on a group
//! of 6 GPU nodes that a nodeSelector sends it to (the test driver binds
//! the pods as kube-scheduler would: `support/kube/training.rs`), with
//! `restarts`, `policy = "cordon"` and `check`. A node whose kubelet stops
//! mid-training (the node lifecycle controller sets it NotReady; the other
//! ranks exit 1 with NCCL naming the lost peer; the job fails), and a
//! training that hangs on a node whose nvidia-smi lists 7 GPUs: the bad
//! node cordoned, attempt 2 (`train-a2`) run on other nodes, the attempts
//! in the outputs and `flow runs`; kill -9 of flow while the suspects'
//! checks run, and the resumed apply creates attempt 2 once (the API
//! server's audit log counts the creations).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixture;
use crate::support::kube::KubeServer;
use crate::support::kube::training::{ready, stop_kubelet};
use crate::support::{Project, finish, signal, wait_until};

pub(super) const TRAIN: &str = r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: train
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          nodeSelector:
            eks.amazonaws.com/nodegroup: gpu
          containers:
            - name: pytorch
              image: train:latest
              command: ["torchrun", "ddp.py", "6", "2"]
              volumeMounts:
                - name: fsx
                  mountPath: /fsx
          volumes:
            - name: fsx
              hostPath:
                path: HOST_DIR
    Worker:
      replicas: 3
      restartPolicy: Never
      template:
        spec:
          nodeSelector:
            eks.amazonaws.com/nodegroup: gpu
          containers:
            - name: pytorch
              image: train:latest
              command: ["torchrun", "ddp.py", "6", "2"]
              volumeMounts:
                - name: fsx
                  mountPath: /fsx
          volumes:
            - name: fsx
              hostPath:
                path: HOST_DIR
"#;

const NODES: usize = 6;

fn node(i: usize) -> String {
    format!("gpu-node-{i}")
}

/// The test cluster of 6 Ready GPU nodes and the project training on it.
pub(super) struct Cluster {
    pub k: KubeServer,
    pub p: Project,
}

impl Cluster {
    /// The cluster, its nodes Ready, and the workflow (`extra` inputs).
    pub(super) fn new(extra: &str) -> Cluster {
        let k = KubeServer::start();
        k.driver().schedule();
        for i in 0..NODES {
            k.post("/api/v1/nodes", &json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node(i), "labels": {"eks.amazonaws.com/nodegroup": "gpu",
                    "kubernetes.io/hostname": node(i), "node.kubernetes.io/instance-type": "p4d.24xlarge"}}}));
            ready(&k, &node(i));
        }
        let p = Project::new();
        fixture(&p, "pytorchjob-crd.yaml");
        // The training's shared volume: a host folder, with the checkpoints
        // the training wrote before it failed, the newest last (by time, not
        // by name: epoch-10 sorts before epoch-9).
        let fsx = p.path().join("fsx");
        std::fs::create_dir_all(fsx.join("ckpt")).unwrap();
        let epoch = std::time::SystemTime::now() - Duration::from_secs(600);
        for (i, name) in ["epoch-9.pt", "epoch-10.pt"].iter().enumerate() {
            let f = std::fs::File::create(fsx.join("ckpt").join(name)).unwrap();
            f.set_modified(epoch + Duration::from_secs(60 * i as u64))
                .unwrap();
        }
        p.write(
            "train.yaml",
            &TRAIN.replace("HOST_DIR", &fsx.to_string_lossy()),
        );
        p.write("node-check.yaml", super::fleet::CHECK);
        p.write(
            "wf.toml",
            &format!(
                r#"
[workflow]
name = "wf"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

[steps.train]
provider = "kube.job"
depends_on = ["operator"]
[steps.train.inputs]
kubeconfig = "{kc}"
files = ["train.yaml"]
restarts = 2
checkpoint_dir = "/fsx/ckpt"
policy = "cordon"
drain_timeout = "30s"
{extra}
[steps.train.inputs.check]
files = ["node-check.yaml"]
gpus = "instance-type"
success_pattern = "NVIDIA-SMI"
"#,
                kc = k.kubeconfig_path()
            ),
        );
        Cluster { k, p }
    }

    pub(super) fn pods(&self, job: &str) -> Vec<Value> {
        self.k
            .get(&format!(
                "/api/v1/namespaces/default/pods?labelSelector=training.kubeflow.org/job-name={job}"
            ))
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
    }

    pub(super) fn nodes_of(&self, job: &str) -> Vec<String> {
        let mut n: Vec<String> = self
            .pods(job)
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect();
        n.sort();
        n
    }

    pub(super) fn node(&self, name: &str) -> Value {
        self.k.get(&format!("/api/v1/nodes/{name}")).expect("node")
    }

    pub(super) fn cordoned(&self) -> Vec<String> {
        (0..NODES)
            .map(node)
            .filter(|n| self.node(n)["spec"]["unschedulable"] == true)
            .collect()
    }

    pub(super) fn attempts(&self) -> Vec<Value> {
        let out = self
            .p
            .run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
        serde_json::from_str::<Value>(out.stdout.trim()).unwrap()["attempts"]
            .as_array()
            .cloned()
            .or_else(|| {
                serde_json::from_str::<Value>(out.stdout.trim())
                    .unwrap()
                    .as_array()
                    .cloned()
            })
            .unwrap()
    }

    /// How many times the API server created job `name` (201 answers).
    pub(super) fn created(&self, name: &str) -> usize {
        self.k
            .job_writes()
            .iter()
            .filter(|e| e["objectRef"]["name"] == name && e["responseStatus"]["code"] == 201)
            // A plan's server-side dry run of a job not there answers 201
            // too, and makes nothing.
            .filter(|e| {
                !e["requestURI"]
                    .as_str()
                    .is_some_and(|u| u.contains("dryRun="))
            })
            .count()
    }

    pub(super) fn job(&self, name: &str) -> Option<Value> {
        self.k.get(&format!(
            "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/{name}"
        ))
    }
}

fn env_of(job: &Value) -> Value {
    job.pointer("/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env")
        .cloned()
        .unwrap_or(Value::Null)
}

/// A node dies under the training: the time from its kubelet's stop to
/// attempt 2's 4 ranks running elsewhere, flow untouched.
#[test]
fn a_node_that_dies_mid_training_is_found_by_kubernetes_word_and_training_resumes() {
    let c = Cluster::new("");
    c.k.driver().hold("train");
    c.k.driver().hold("train-a2");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "train's 4 pods running", || {
        let pods = c.pods("train");
        pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
    });
    let dead = c.nodes_of("train")[3].clone();
    let died = Instant::now();
    stop_kubelet(&c.k, &dead);
    wait_until(
        Duration::from_secs(60),
        "attempt 2's 4 pods running",
        || {
            let pods = c.pods("train-a2");
            pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
        },
    );
    let resumed = died.elapsed();
    println!(
        "node death to attempt 2 running: {:.2} s (the test driver's controllers pass every 150 ms; no replacement)",
        resumed.as_secs_f64()
    );
    c.k.driver().release("train-a2");
    let run = finish(child).expect(0);
    assert!(!c.nodes_of("train-a2").contains(&dead), "{}", run.all());
    assert_eq!(c.cordoned(), vec![dead.clone()]);
    let attempts = c.attempts();
    assert_eq!(attempts[0]["cordoned"], json!([dead]), "{attempts:?}");
    assert_eq!(attempts[1]["resumed_from"], "/fsx/ckpt/epoch-10.pt");
    // The step runs again (an input changed): the earlier run's attempt 2
    // is deleted, and the new run's first attempt succeeds.
    c.k.driver().release("train");
    let wf =
        c.p.read("wf.toml")
            .replace("drain_timeout = \"30s\"", "drain_timeout = \"31s\"");
    c.p.write("wf.toml", &wf);
    let again = c.p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(c.job("train-a2").is_none(), "{}", again.all());
    assert!(c.job("train").is_some());
    assert_eq!(c.attempts().len(), 1);
}

/// A node dies under the training; flow is killed -9 while the suspects'
/// checks run, and the resumed apply cordons the dead node (Kubernetes'
/// word: NotReady) and creates attempt 2 once, on other nodes.
#[test]
fn a_node_that_dies_mid_training_is_cordoned_and_attempt_2_runs_elsewhere_once() {
    let c = Cluster::new("");
    let plan = c.p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("up to 2 restarts, each a new job NAME-aN"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("a node found bad is cordoned"),
        "{}",
        plan.stdout
    );
    c.k.driver().hold("train");
    // The first suspect's check waits: flow is killed then.
    c.k.driver().hold("gpu-check-a1-node-0");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(
        Duration::from_secs(60),
        "train's 4 pods bound and running",
        || {
            let pods = c.pods("train");
            pods.len() == 4
                && pods
                    .iter()
                    .all(|p| p["status"]["phase"] == "Running" && p["spec"]["nodeName"].is_string())
        },
    );
    let first = c.nodes_of("train");
    assert_eq!(first.len(), 4, "one rank per node: {first:?}");
    let dead = first[1].clone();
    let died = Instant::now();
    stop_kubelet(&c.k, &dead);
    wait_until(Duration::from_secs(60), "the suspects' checks", || {
        c.k.get("/apis/batch/v1/namespaces/default/jobs/gpu-check-a1-node-0")
            .is_some()
    });
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "{}", killed.all());
    // Where the kill landed: attempt 1 failed, its suspects being checked,
    // no attempt 2 yet; the failed job still there.
    assert_eq!(
        c.created("train-a2"),
        0,
        "attempt 2 not created before the kill"
    );
    assert!(c.job("train").is_some());
    assert!(
        c.cordoned().is_empty(),
        "nothing cordoned yet: {:?}",
        c.cordoned()
    );
    c.k.driver().release("gpu-check-a1-node-0");
    let resumed = c.p.run(&["apply", "wf.toml", "--auto-approve"]);
    let resumed = resumed.expect(0);
    let out = resumed.all();
    assert!(
        out.contains("was already started by this operation")
            || out.contains("from the interrupted run"),
        "{out}"
    );
    println!(
        "node death to attempt 2 done, with a kill -9 and a resume between: {:.1} s",
        died.elapsed().as_secs_f64()
    );
    assert_eq!(c.cordoned(), vec![dead.clone()], "only the dead node");
    let taint = c.node(&dead)["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taint
            .iter()
            .any(|t| t["key"] == "flow.dev/unhealthy" && t["value"] == "node-not-ready"),
        "{taint:?}"
    );
    let second = c.nodes_of("train-a2");
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(
        !second.contains(&dead),
        "attempt 2 ran on {second:?}, the dead node {dead} among them"
    );
    assert_eq!(
        c.created("train-a2"),
        1,
        "attempt 2 created once: {:?}",
        c.k.job_writes()
    );
    assert_eq!(c.created("train"), 1, "attempt 1 created once");
    assert!(c.job("train").is_none(), "attempt 1 deleted");
    let env = env_of(&c.job("train-a2").expect("attempt 2"));
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!({"name": "FLOW_ATTEMPT", "value": "2"})),
        "{env}"
    );
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!({"name": "FLOW_CHECKPOINT_DIR", "value": "/fsx/ckpt"})),
        "{env}"
    );
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!({"name": "FLOW_RESUME_FROM", "value": "/fsx/ckpt/epoch-10.pt"})),
        "the newest checkpoint, listed on the training's volume: {env}"
    );
    let attempts = c.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "Failed", "{attempts:?}");
    assert_eq!(attempts[0]["cordoned"], json!([dead]));
    let suspects = attempts[0]["suspects"].as_str().unwrap();
    assert!(
        suspects.contains(&format!("node {dead} is NotReady")),
        "{suspects}"
    );
    assert!(
        suspects.contains("check "),
        "the live suspects were checked: {suspects}"
    );
    assert_eq!(attempts[1]["state"], "Succeeded");
    assert_eq!(attempts[1]["resumed_from"], "/fsx/ckpt/epoch-10.pt");
    let runs = c.p.run(&["runs", "wf.toml"]).expect(0);
    assert!(runs.stdout.contains("attempts=2"), "{}", runs.stdout);
    assert!(
        runs.stdout.contains(&format!("cordoned {dead}")),
        "{}",
        runs.stdout
    );
}

/// A training that hangs (its pods run, its logs say nothing) on a node
/// whose nvidia-smi lists 7 GPUs: deleted after hang_after, its nodes
/// checked, the 7-GPU node (and only it) cordoned, attempt 2 elsewhere;
/// destroy deletes attempt 2's job.
#[test]
fn a_hung_training_is_deleted_its_bad_node_found_by_the_check_and_cordoned() {
    let c = Cluster::new("hang_after = \"3s\"");
    c.k.driver().hold("train");
    // The scheduler binds the first 4 nodes by name: node 2 is among them.
    c.k.merge_patch(
        &format!("/api/v1/nodes/{}", node(2)),
        &json!({"metadata": {"annotations": {"test.flow/nvidia-smi": super::fleet::seven_gpus()}}}),
    );
    let run = c.p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let out = run.all();
    assert!(out.contains("hung: no new log line for 3s"), "{out}");
    assert_eq!(c.cordoned(), vec![node(2)]);
    let second = c.nodes_of("train-a2");
    assert_eq!(second.len(), 4);
    assert!(!second.contains(&node(2)), "{second:?}");
    let attempts = c.attempts();
    assert_eq!(attempts[0]["state"], "Hung");
    assert_eq!(attempts[0]["cordoned"], json!([node(2)]));
    assert!(
        attempts[0]["suspects"]
            .as_str()
            .unwrap()
            .contains(&format!("check {}: bad", node(2))),
        "{attempts:?}"
    );
    // The hung attempt's job is gone; destroy deletes the last attempt's.
    assert!(c.job("train").is_none());
    c.p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(c.job("train-a2").is_none(), "destroy deletes attempt 2");
    assert!(c.pods("train-a2").is_empty());
}

/// Two of the training's 4 nodes die at once (a partition, say): more than
/// max_bad_fraction (0.25) of its nodes bad, so the step fails naming
/// them, cordons none and starts no attempt 2.
#[test]
fn more_bad_nodes_than_the_fraction_stop_without_taking_any_out() {
    let c = Cluster::new("");
    c.k.driver().hold("train");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "train's 4 pods running", || {
        let pods = c.pods("train");
        pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
    });
    let on = c.nodes_of("train");
    // At once: one pass of the driver sees both kubelets stopped (two
    // passes apart, the first death alone fails the attempt: 1 of 4).
    let paused = c.k.driver().pause();
    stop_kubelet(&c.k, &on[0]);
    stop_kubelet(&c.k, &on[1]);
    drop(paused);
    let run = finish(child).expect(1);
    let out = run.all();
    assert!(
        out.contains(&format!(
            "2 of its 4 nodes found bad ({}, {}), more than max_bad_fraction 0.25 — none was taken out",
            on[0], on[1]
        )),
        "{out}"
    );
    assert!(c.cordoned().is_empty(), "{:?}", c.cordoned());
    assert!(c.job("train-a2").is_none());
    assert_eq!(c.created("train-a2"), 0);
}

/// Policies the platform cannot carry out, and restart inputs without
/// what they need, are refused at validate at their entries.
#[test]
fn validate_refuses_what_restarts_cannot_do() {
    let p = Project::new();
    p.write("train.yaml", &TRAIN.replace("HOST_DIR", "/tmp/fsx"));
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "wf"

[steps.train]
provider = "kube.job"
[steps.train.inputs]
kubeconfig = "/nonexistent"
files = ["train.yaml"]
policy = "drain"
checkpoint_dir = "/fsx"
hang_without_loss = "30m"
"#,
    );
    let out = p.run(&["validate", "wf.toml"]).expect(1).all();
    assert!(out.contains("policy `drain` is Slurm's"), "{out}");
    assert!(out.contains("`checkpoint_dir` is for restarts"), "{out}");
    assert!(out.contains("`hang_without_loss` needs a `parse`"), "{out}");
    let wf = p.read("wf.toml").replace(
        "policy = \"drain\"\ncheckpoint_dir = \"/fsx\"\nhang_without_loss = \"30m\"",
        "restarts = 1\ncheckpoint_dir = \"/data/ckpt\"",
    );
    p.write("wf.toml", &wf);
    let out = p.run(&["validate", "wf.toml"]).expect(1).all();
    assert!(
        out.contains(
            "`checkpoint_dir` /data/ckpt is on no volume of PyTorchJob train's containers"
        ),
        "{out}"
    );
}
