//! `slurm.job` restarts with policy `replace` on a HyperPod cluster of
//! hosts (issue 40 parts 3–4): a training across the two workers (the
//! stand-in tests/fixtures/slurm/restarts/train-ranks.sbatch: a rank per
//! node, a checkpoint per epoch in a shared folder) loses a worker
//! mid-training: the test stops that worker's host (the manager's `stop`:
//! its slurmd, its ranks and its address gone at once), Slurm ends the job
//! NODE_FAIL after SlurmdTimeout, flow names the dead node from Slurm's own
//! word, drains it, replaces it through the local cloud's
//! BatchReplaceClusterNodes (scripts/local-cloud/cloud_hyperpod_nodes.py: a
//! new instance of the group, a new host that runs the lifecycle script
//! and joins Slurm under its own hostname), waits for it, and submits
//! attempt 2, which runs on the new node and resumes from the newest
//! checkpoint. What happened is read from the local cloud (the proxy's
//! request log, ListClusterNodes), from Slurm (`squeue`) and from the
//! training's own output.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::hyperpod_hosts::{Controller, HostCluster, workflow};
use crate::support::{finish, signal, wait_until, workspace_root};

/// The lifecycle script: the test's key for ubuntu.
pub(super) const ON_CREATE: &str = "#!/bin/bash\nset -euo pipefail\nmkdir -p ~ubuntu/.ssh\n\
    cat authorized_keys >> ~ubuntu/.ssh/authorized_keys\necho \"on_create: $(hostname)\"\n";

/// The training step: both workers, one restart, bad nodes replaced
/// through the cluster; `env` more of its environment's entries, `more`
/// more inputs.
fn train(c: &Controller, shared: &std::path::Path, env: &str, more: &str) -> String {
    format!(
        r#"
[steps.train]
provider = "slurm.job"
depends_on = ["hp"]
[steps.train.inputs]
script = "train.sbatch"
job_name = "train"
nodes = 2
sbatch_args = ["--no-requeue"]
host = "{ip}"
ssh_user = "ubuntu"
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
chdir = "{shared}"
restarts = 1
checkpoint_dir = "{shared}/ckpt"
policy = "replace"
hyperpod_cluster = "${{steps.hp.outputs.cluster_name}}"
replace_timeout = "5m"
success_pattern = "training done"
environment = {{ CKPT = "{shared}/ckpt", EPOCHS = "5", EPOCH_SECS = "1"{env} }}
{more}"#,
        ip = c.ip,
        host_key = c.host["host_key"].as_str().expect("host key"),
        shared = shared.display(),
    )
}

/// A cluster of 1 controller and 2 workers, up, and the workflow with the
/// training written (`env` and `more` as [`train`] takes them).
pub(super) fn cluster_with(t: &HostCluster, env: &str, more: &str) {
    cluster_recovering(t, env, more, None);
}

/// [`cluster_with`], the cluster made with `node_recovery` (HyperPod's
/// automatic node recovery with `"Automatic"`) when given.
pub(super) fn cluster_recovering(t: &HostCluster, env: &str, more: &str, recovery: Option<&str>) {
    let shared = t.a.p.path().join("shared");
    let workflow =
        |workers: u32, controller: Option<&Controller>, shared: &std::path::Path, more: &str| {
            let wf = workflow(workers, controller, shared, more);
            match recovery {
                Some(r) => wf.replacen(
                    "cluster_name = \"ml-cluster\"\n",
                    &format!("cluster_name = \"ml-cluster\"\nnode_recovery = \"{r}\"\n"),
                    1,
                ),
                None => wf,
            }
        };
    t.a.p.write("wf.toml", &workflow(2, None, &shared, ""));
    let began = Instant::now();
    t.a.apply().expect(0);
    eprintln!(
        "hyperpod restarts: 1 controller + 2 workers with Slurm in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let script = workspace_root().join("tests/fixtures/slurm/restarts/train-ranks.sbatch");
    t.a.p.write(
        "train.sbatch",
        &std::fs::read_to_string(&script).expect("the stand-in training"),
    );
    let controller = t.controller();
    let mut wf = workflow(2, None, &shared, "");
    wf.push_str(&train(&controller, &shared, env, more));
    t.a.p.write("wf.toml", &wf);
}

/// The training's jobs Slurm knows (MinJobAge keeps them): (id, comment,
/// nodes, state).
pub(super) fn training_jobs(t: &HostCluster) -> Vec<(String, String, String, String)> {
    t.on_controller("squeue -h --states=all -n train -o '%i|%k|%N|%T'")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 4).then(|| (f[0].into(), f[1].into(), f[2].into(), f[3].into()))
        })
        .collect()
}

/// [`cluster_with`] the training as it is.
fn cluster_with_training(t: &HostCluster) {
    cluster_with(t, "", "");
}

/// Once attempt 1 has written its second checkpoint and waits in its
/// all-ranks step: the host of the job's last node stopped. Its Slurm name
/// and instance id.
pub(super) fn kill_a_worker_mid_training(t: &HostCluster) -> (String, String, Instant) {
    let ckpt = t.a.p.path().join("shared/ckpt");
    let mut nodes = String::new();
    wait_until(
        Duration::from_secs(120),
        "attempt 1's second checkpoint",
        || {
            nodes = training_jobs(t)
                .first()
                .filter(|j| j.3 == "RUNNING")
                .map(|j| j.2.clone())
                .unwrap_or_default();
            ckpt.join("step-2").exists() && !nodes.is_empty()
        },
    );
    let listed = t.on_controller(&format!("scontrol show hostnames '{nodes}'"));
    let dead = listed.lines().last().expect("a node").trim().to_string();
    let host = t
        .hosts
        .list()
        .into_iter()
        .find(|h| h["hostname"].as_str().unwrap_or_default().split('.').next() == Some(&dead))
        .unwrap_or_else(|| panic!("no host for node {dead}"));
    let id = host["id"].as_str().expect("id").to_string();
    t.hosts.call(&json!({"op": "stop", "ids": [id]}));
    eprintln!("hyperpod restarts: stopped the host of {dead} ({id}) mid-training");
    (dead, id, Instant::now())
}

pub(super) fn attempts(t: &HostCluster) -> Vec<Value> {
    let out =
        t.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
    serde_json::from_str(out.stdout.trim()).expect("JSON")
}

/// What is true once the dead node was replaced and the training resumed,
/// however the run went: `calls` BatchReplaceClusterNodes (one, for its
/// instance, unless HyperPod replaced it on its own);
/// attempt 1 NODE_FAIL naming it, its replacement recorded; attempt 2 (one
/// job) on the new node, resumed from a checkpoint, to the end; the run
/// history's attempt line naming the replacement.
pub(super) fn replaced_once_and_resumed(t: &HostCluster, dead: &str, dead_id: &str, calls: usize) {
    assert_eq!(t.proxy.forwarded("BatchReplaceClusterNodes"), calls);
    let nodes = t.nodes();
    assert!(!nodes.iter().any(|n| n.0 == dead_id), "{nodes:?}");
    let a = attempts(t);
    assert_eq!(a.len(), 2, "{a:?}");
    let (first, second) = (&a[0], &a[1]);
    assert_eq!(first["state"], "NODE_FAIL", "{first}");
    assert_eq!(first["suspect_nodes"], json!([dead]), "{first}");
    let replaced = &first["replaced"];
    assert_eq!(replaced.as_array().map(Vec::len), Some(1), "{first}");
    assert_eq!(replaced[0]["node"], dead, "{first}");
    assert_eq!(replaced[0]["instance_id"], dead_id, "{first}");
    let by = replaced[0]["by"].as_str().expect("by").to_string();
    let by_id = replaced[0]["by_instance_id"]
        .as_str()
        .expect("by_instance_id");
    let new = nodes
        .iter()
        .find(|n| n.0 == by_id)
        .expect("the new instance");
    assert_eq!(new.1, "worker-group-1");
    assert_eq!(new.3.split('.').next(), Some(by.as_str()));
    assert_eq!(second["state"], "COMPLETED", "{second}");
    let ckpt = t.a.p.path().join("shared/ckpt");
    let resumed = second["resumed_from"].as_str().expect("resumed_from");
    assert!(
        resumed.starts_with(&ckpt.join("step-").display().to_string()),
        "{second}"
    );
    // One job per attempt, attempt 2's on the new node and not the dead one.
    let jobs = training_jobs(t);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let again = jobs
        .iter()
        .find(|j| j.0 == second["job_id"].as_str().unwrap_or_default())
        .expect("attempt 2's job");
    assert!(again.1.ends_with("-a2"), "{again:?}");
    let hosts = t.on_controller(&format!("scontrol show hostnames '{}'", again.2));
    assert!(hosts.lines().any(|h| h == by), "{again:?} {hosts}");
    assert!(!hosts.lines().any(|h| h == dead), "{again:?} {hosts}");
    // The training's own word: a rank on the new node, resumed, done.
    let log = t.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(log.contains(&format!("rank on {by}")), "{log}");
    assert!(
        log.contains(&format!("resumed from {resumed} at epoch")),
        "{log}"
    );
    assert!(log.contains("training done at epoch 5"), "{log}");
    let runs = t.a.run(&["runs", "wf.toml", "train", "--json"]).expect(0);
    let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let last = runs.as_array().and_then(|r| r.last()).expect("a run");
    let line = last["values"]["attempt_1"].as_str().unwrap_or_default();
    assert!(
        line.contains(&format!("replaced {dead} ({dead_id}) by {by} ({by_id})")),
        "{last}"
    );
}

#[test]
fn a_worker_that_dies_mid_training_is_replaced_through_hyperpod_and_the_training_resumes_on_its_replacement()
 {
    let t = HostCluster::new(ON_CREATE, &[]);
    cluster_with_training(&t);
    let plan = t.a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("then its instance replaced through HyperPod cluster `ml-cluster` (BatchReplaceClusterNodes, once), the new node waited for (up to 5m); the next attempt is submitted once it is in service"),
        "{}",
        plan.stdout
    );
    let began = Instant::now();
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let (dead, dead_id, killed) = kill_a_worker_mid_training(&t);
    let run = finish(child);
    assert_eq!(run.code, 0, "{}", run.all());
    eprintln!(
        "hyperpod restarts: node death to training done in {:.1} s (apply {:.1} s)",
        killed.elapsed().as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    let all = run.all();
    assert!(
        all.contains(&format!("BatchReplaceClusterNodes for {dead_id}")),
        "{all}"
    );
    assert!(
        all.contains(&format!("drained node {dead}: flow: train job")),
        "{all}"
    );
    replaced_once_and_resumed(&t, &dead, &dead_id, 1);
    // flow's events, as they were timed, for the measure of each phase.
    let log = t.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    for line in log.lines().filter(|l| l.contains("[event]")) {
        eprintln!("hyperpod restarts: {line}");
    }
}

/// An Xid line names the job's second worker, whose nvidia-smi then lists
/// 7 GPUs (the fault table, by hostname): the attempt fails, flow runs the
/// check (the shipped nvidia-smi.sbatch) on the named node alone, which
/// finds it bad; it is drained and replaced through HyperPod (a live node:
/// Slurm had it idle), and attempt 2 runs on the new node, whose check
/// the fault does not follow, resumed from the checkpoint.
#[test]
fn an_xid_node_the_check_finds_bad_is_replaced_through_hyperpod_and_the_training_resumes() {
    let t = HostCluster::new(ON_CREATE, &[]);
    let faults = tempfile::NamedTempFile::new().expect("faults");
    let fleet = workspace_root().join("tests/fixtures/slurm/fleet");
    let check = std::fs::read_to_string(workspace_root().join("workflows/slurm/nvidia-smi.sbatch"))
        .expect("workflows/slurm/nvidia-smi.sbatch");
    t.a.p.write("nvidia-smi.sbatch", &check);
    let env = format!(
        ", FAULT = \"xid\", FLOW_TEST_FAULTS = \"{}\"",
        faults.path().display()
    );
    let more = format!(
        "[steps.train.inputs.check]\nscript = \"nvidia-smi.sbatch\"\ngpus = 8\nsuccess_pattern = \"NVIDIA-SMI\"\n\
         environment = {{ PATH = \"{}:/usr/sbin:/usr/bin:/sbin:/bin\", FLOW_TEST_FAULTS = \"{}\" }}\n",
        fleet.display(),
        faults.path().display()
    );
    cluster_with(&t, &env, &more);
    let began = Instant::now();
    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    eprintln!(
        "hyperpod restarts: Xid, check, replacement and attempt 2 in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let planted = std::fs::read_to_string(faults.path()).expect("faults");
    let bad = planted
        .split_whitespace()
        .next()
        .expect("the node the training named")
        .to_string();
    let bad_id = t
        .hosts
        .list()
        .iter()
        .find(|h| h["hostname"].as_str().unwrap_or_default().split('.').next() == Some(&bad))
        .map(|h| h["id"].as_str().unwrap_or_default().to_string());
    assert!(bad_id.is_none(), "{bad}'s host is gone: {bad_id:?}");
    let all = run.all();
    assert!(
        all.contains(&format!("check {bad}: bad: nvidia-smi lists 7 GPUs")),
        "{all}"
    );
    let a = attempts(&t);
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0]["state"], "FAILED", "{}", a[0]);
    assert_eq!(a[0]["suspect_nodes"], json!([bad]), "{}", a[0]);
    let r = &a[0]["replaced"][0];
    assert_eq!(r["node"], bad, "{}", a[0]);
    let old = r["instance_id"].as_str().expect("instance_id");
    assert!(
        all.contains(&format!("BatchReplaceClusterNodes for {old}")),
        "{all}"
    );
    assert_eq!(t.proxy.forwarded("BatchReplaceClusterNodes"), 1);
    let by = r["by"].as_str().expect("by").to_string();
    assert_eq!(a[1]["state"], "COMPLETED", "{}", a[1]);
    let log = t.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(log.contains(&format!("{bad}: NVRM: Xid")), "{log}");
    assert!(log.contains(&format!("rank on {by}")), "{log}");
    assert!(log.contains("resumed from "), "{log}");
    assert!(log.contains("training done at epoch 5"), "{log}");
}

/// Both workers die under the training: Slurm ends the job NODE_FAIL
/// with both down, more than `max_bad_fraction` (0.25 of 2 nodes, one
/// always allowed) lets flow replace: the step fails naming them, and
/// nothing is asked of HyperPod.
#[test]
fn more_dead_nodes_than_max_bad_fraction_allows_fail_the_step_replacing_none() {
    let t = HostCluster::new(ON_CREATE, &[]);
    cluster_with_training(&t);
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let ckpt = t.a.p.path().join("shared/ckpt");
    wait_until(
        Duration::from_secs(120),
        "attempt 1's second checkpoint",
        || ckpt.join("step-2").exists(),
    );
    let workers: Vec<(String, String)> = t
        .nodes()
        .into_iter()
        .filter(|n| n.1 == "worker-group-1")
        .map(|n| (n.0, n.3.split('.').next().unwrap_or_default().to_string()))
        .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let ids: Vec<&str> = workers.iter().map(|w| w.0.as_str()).collect();
    t.hosts.call(&json!({"op": "stop", "ids": ids}));
    let run = finish(child);
    assert_eq!(run.code, 1, "{}", run.all());
    let all = run.all();
    assert!(
        all.contains("stops at attempt 1: 2 of its 2 nodes found bad ("),
        "{all}"
    );
    assert!(
        all.contains("more than max_bad_fraction 0.25 allows (1): none was replaced"),
        "{all}"
    );
    for (_, name) in &workers {
        assert!(
            all.contains(&format!("NODE_FAIL: Slurm ended the job for node {name}")),
            "{all}"
        );
    }
    assert_eq!(t.proxy.forwarded("BatchReplaceClusterNodes"), 0);
    assert_eq!(training_jobs(&t).len(), 1, "no attempt 2");
}

/// Where the kill lands.
#[derive(Clone, Copy, PartialEq)]
enum KillIn {
    /// In the wait for the replacement: BatchReplaceClusterNodes answered
    /// and recorded, flow's ListClusterNodes seen after it.
    Wait,
    /// Inside BatchReplaceClusterNodes: HyperPod took the call (the old
    /// instance ShuttingDown), its answer held by the proxy, so flow has
    /// recorded the call about to go out but not that it was answered.
    Call,
}

/// The training with its second worker dying, flow killed -9 where `kill`
/// says, then applied again: the replacement is taken up (one
/// BatchReplaceClusterNodes in all) and attempt 2 submitted once.
fn killed_then_applied_again(kill: KillIn) {
    // BatchReplaceClusterNodes' old instance stays ShuttingDown for 10 s.
    let table = tempfile::NamedTempFile::new().expect("table");
    std::fs::write(
        table.path(),
        "scale = 60\n[operations]\n\"sagemaker.hyperpod.replace\" = 600\n",
    )
    .expect("write table");
    let t = HostCluster::new(
        ON_CREATE,
        &[("FLOW_LATENCY_MODEL", &table.path().to_string_lossy())],
    );
    cluster_with_training(&t);
    if kill == KillIn::Call {
        t.proxy
            .hold("BatchReplaceClusterNodes", Duration::from_secs(120));
    }
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let (dead, dead_id, _) = kill_a_worker_mid_training(&t);
    wait_until(
        Duration::from_secs(180),
        "flow to send BatchReplaceClusterNodes",
        || t.proxy.forwarded("BatchReplaceClusterNodes") == 1,
    );
    let status = || t.nodes().into_iter().find(|n| n.0 == dead_id).map(|n| n.2);
    match kill {
        KillIn::Wait => {
            let listed = t.proxy.forwarded("ListClusterNodes");
            wait_until(
                Duration::from_secs(20),
                "flow to wait for the replacement",
                || t.proxy.forwarded("ListClusterNodes") > listed,
            );
        }
        KillIn::Call => wait_until(Duration::from_secs(20), "HyperPod to take the call", || {
            status().as_deref() == Some("ShuttingDown")
        }),
    }
    let at = Instant::now();
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    let in_flight = t.proxy.in_flight_at(at);
    assert_eq!(
        in_flight
            .iter()
            .any(|o| o.contains("BatchReplaceClusterNodes")),
        kill == KillIn::Call,
        "{in_flight:?}"
    );
    t.proxy.calm();
    assert_eq!(
        status().as_deref(),
        Some("ShuttingDown"),
        "still being replaced"
    );
    assert_eq!(training_jobs(&t).len(), 1, "no attempt 2 yet");

    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(
        run.all()
            .contains(&format!("resuming the replacement of {dead} ({dead_id})")),
        "{}",
        run.all()
    );
    assert!(
        !run.all().contains("BatchReplaceClusterNodes for"),
        "asked again: {}",
        run.all()
    );
    if kill == KillIn::Call {
        assert!(
            run.all().contains(&format!(
                "node {dead} ({dead_id}) is already being replaced: not asking again"
            )),
            "{}",
            run.all()
        );
    }
    replaced_once_and_resumed(&t, &dead, &dead_id, 1);
    let again = t.a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.all());
}

#[test]
fn kill_9_while_the_replacement_is_waited_for_then_apply_again_replaces_once_and_submits_attempt_2_once()
 {
    killed_then_applied_again(KillIn::Wait);
}

#[test]
fn kill_9_inside_batch_replace_cluster_nodes_after_hyperpod_took_it_then_apply_again_asks_no_more()
{
    killed_then_applied_again(KillIn::Call);
}
