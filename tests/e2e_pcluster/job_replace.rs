//! `slurm.job` restarts with policy `replace` on a ParallelCluster cluster
//! whose head node and 4 static nodes are hosts (issue 40 parts 3–4): a
//! training across the 4 nodes (the stand-in
//! tests/fixtures/slurm/restarts/train-ranks.sbatch: a rank per node, a
//! checkpoint per epoch in a shared folder) loses a node mid-training: the
//! test stops that node's host, Slurm ends the job NODE_FAIL after
//! SlurmdTimeout and sets the node DOWN; flow names it from Slurm's own
//! word, drains it and has ParallelCluster replace it (a static node DOWN
//! is replaced by clustermgtd: scripts/local-cloud/cloud_pcluster_static.py
//! terminates its instance and launches one under the same Slurm node name
//! at a new address), waits for the node back in service on its new
//! instance, and attempt 2 runs on all 4 nodes, the new machine among them,
//! resumed from the newest checkpoint.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::node_replace::{Cluster, cluster_with};
use super::support::{finish, signal, wait_until, workspace_root};
use super::workflow;

/// The training step over SSH on the head node, bad nodes replaced by
/// ParallelCluster; `env` more of its environment's entries, `more` more
/// inputs.
fn train(c: &Cluster, env: &str, more: &str) -> String {
    let shared = c.a.p.path().join("shared");
    format!(
        r#"
[vars.ssh_key]
description = "The head node's SSH private key"
sensitive = true
env = "HEAD_NODE_SSH_KEY"

[steps.train]
provider = "slurm.job"
depends_on = ["cluster"]
[steps.train.inputs]
script = "train.sbatch"
job_name = "train"
nodes = 4
partition = "compute-gpu"
sbatch_args = ["--no-requeue"]
host = "${{steps.cluster.outputs.head_node_ip}}"
ssh_user = "{user}"
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
chdir = "{shared}"
restarts = 1
checkpoint_dir = "{shared}/ckpt"
policy = "replace"
pcluster_cluster = "${{steps.cluster.outputs.cluster_name}}"
replace_timeout = "10m"
success_pattern = "training done"
environment = {{ CKPT = "{shared}/ckpt", EPOCHS = "5", EPOCH_SECS = "1"{env} }}
{more}"#,
        user = c.head["user"].as_str().expect("user"),
        host_key = c.head["host_key"].as_str().expect("host key"),
        shared = shared.display(),
    )
}

/// `COMMAND` over SSH on the head node: its stdout.
pub(super) fn on_head(c: &Cluster, command: &str) -> String {
    let out = c.hosts.ssh(&c.head, &c.key, command);
    assert!(out.status.success(), "{command}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The training's jobs Slurm knows: (id, comment, nodes, state).
pub(super) fn training_jobs(c: &Cluster) -> Vec<(String, String, String, String)> {
    on_head(c, "squeue -h --states=all -n train -o '%i|%k|%N|%T'")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 4).then(|| (f[0].into(), f[1].into(), f[2].into(), f[3].into()))
        })
        .collect()
}

/// The cluster made by flow, its head node known, and the workflow with
/// the training (`env` and `more` as [`train`] takes them).
fn up(env: &str, more: &str) -> Cluster {
    up_with(env, more, &[])
}

/// [`up`], `moto_env` more of the local cloud's environment.
pub(super) fn up_with(env: &str, more: &str, moto_env: &[(&str, &str)]) -> Cluster {
    let mut c = cluster_with(moto_env);
    let began = Instant::now();
    c.a.apply().expect(0);
    eprintln!(
        "pcluster job restarts: 4 static nodes on hosts in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let ip =
        c.a.run(&["output", "wf.toml", "cluster.head_node_ip"])
            .expect(0)
            .stdout
            .trim()
            .to_string();
    c.head = c.hosts.at(&ip).expect("the head node's host");
    std::fs::create_dir_all(c.a.p.path().join("shared")).expect("mkdir shared");
    let script = workspace_root().join("tests/fixtures/slurm/restarts/train-ranks.sbatch");
    c.a.p.write(
        "train.sbatch",
        &std::fs::read_to_string(&script).expect("the stand-in training"),
    );
    c.a.p.write(
        "wf.toml",
        &format!("{}{}", workflow(&c.values), train(&c, env, more)),
    );
    c
}

#[test]
fn a_static_node_that_dies_mid_training_is_replaced_by_clustermgtd_and_the_training_resumes_on_it()
{
    let c = up("", "");
    let _log = super::live::LogOnFailure(&c.moto);
    let plan = c.a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("then its instance replaced by ParallelCluster cluster `flow-p5` (the node set DOWN, once"),
        "{}",
        plan.stdout
    );

    let began = Instant::now();
    let child = c.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let ckpt = c.a.p.path().join("shared/ckpt");
    let mut nodes = String::new();
    wait_until(
        Duration::from_secs(120),
        "attempt 1's second checkpoint",
        || {
            nodes = training_jobs(&c)
                .first()
                .filter(|j| j.3 == "RUNNING")
                .map(|j| j.2.clone())
                .unwrap_or_default();
            ckpt.join("step-2").exists() && !nodes.is_empty()
        },
    );
    let listed = on_head(&c, &format!("scontrol show hostnames '{nodes}'"));
    let dead = listed.lines().last().expect("a node").trim().to_string();
    let sinfo = c.sinfo();
    let old_ip = sinfo
        .iter()
        .find(|s| s.0 == dead)
        .map(|s| s.1.clone())
        .expect("the node's address");
    let host = c.hosts.at(&old_ip).expect("the node's host");
    let old = host["id"].as_str().expect("id").to_string();
    c.hosts.call(&json!({"op": "stop", "ids": [old]}));
    let killed = Instant::now();
    eprintln!("pcluster job restarts: stopped the host of {dead} ({old}, {old_ip})");
    let run = finish(child);
    assert_eq!(
        run.code,
        0,
        "{}\nclustermgtd: {}",
        run.all(),
        c.clustermgtd_log()
    );
    eprintln!(
        "pcluster job restarts: node death to training done in {:.1} s (apply {:.1} s)",
        killed.elapsed().as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    for line in run.all().lines().filter(|l| {
        ["attempt", "NODE_FAIL", "replac", "DOWN", "drained"]
            .iter()
            .any(|w| l.contains(w))
    }) {
        eprintln!("pcluster job restarts: {line}");
    }

    // ParallelCluster replaced it once: one instance launched for the
    // node, its old one terminated, the node idle at the new address.
    let log = c.clustermgtd_log();
    assert_eq!(
        log.matches(&format!("{dead}: launched i-")).count(),
        1,
        "{log}"
    );
    assert!(
        log.contains(&format!("{dead}: set DOWN; terminating {old} ({old_ip})")),
        "{log}"
    );
    let out =
        c.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
    let attempts: Vec<Value> = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!(first["state"], "NODE_FAIL", "{first}");
    assert_eq!(first["suspect_nodes"], json!([dead]), "{first}");
    let r = &first["replaced"][0];
    assert_eq!(r["node"], dead, "{first}");
    // flow found the node on its old instance, or clustermgtd (whose 60 s
    // loop may fall right after the death) had replaced it before flow
    // looked: then the old instance is no longer at the node's address,
    // and the record says so (`-`), naming what flow saw.
    let recorded_old = r["instance_id"].as_str().expect("instance_id").to_string();
    if recorded_old == "-" {
        assert!(
            first["suspects"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!(
                    "ParallelCluster replaced node {dead} since the job started"
                )),
            "{first}"
        );
    } else {
        assert_eq!(recorded_old, old, "{first}");
    }
    eprintln!("pcluster job restarts: the old instance as recorded: {recorded_old}");
    assert_eq!(r["by"], dead, "the node keeps its name: {first}");
    let new = r["by_instance_id"].as_str().expect("by_instance_id");
    assert_ne!(new, old);
    assert!(
        log.contains(&format!("{dead}: launched {new} at ")),
        "{log}"
    );
    let computes = c.computes();
    let (_, new_state, new_ip) = computes
        .iter()
        .find(|i| i.0 == new)
        .cloned()
        .expect("the new instance");
    assert_eq!(new_state, "running");
    assert!(
        c.sinfo()
            .iter()
            .any(|(n, addr, s)| *n == dead && *addr == new_ip && s == "idle"),
        "{:?}",
        c.sinfo()
    );
    // Attempt 2: one job, on the 4 nodes, a rank on the new machine,
    // resumed from a checkpoint, to the end.
    assert_eq!(second["state"], "COMPLETED", "{second}");
    let resumed = second["resumed_from"].as_str().expect("resumed_from");
    assert!(
        resumed.starts_with(&ckpt.join("step-").display().to_string()),
        "{second}"
    );
    let jobs = training_jobs(&c);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let new_host = c.hosts.at(&new_ip).expect("the new instance's host");
    let short = new_host["hostname"]
        .as_str()
        .and_then(|h| h.split('.').next())
        .expect("hostname")
        .to_string();
    let text = c.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(text.contains(&format!("rank on {short}")), "{text}");
    assert!(
        text.contains(&format!("resumed from {resumed} at epoch")),
        "{text}"
    );
    assert!(text.contains("training done at epoch 5"), "{text}");
    let runs = c.a.run(&["runs", "wf.toml", "train", "--json"]).expect(0);
    let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let last = runs.as_array().and_then(|r| r.last()).expect("a run");
    let line = last["values"]["attempt_1"].as_str().unwrap_or_default();
    assert!(
        line.contains(&format!(
            "replaced {dead} ({recorded_old}) by {dead} ({new})"
        )),
        "{last}"
    );
}

/// A live node an Xid line names, found bad by the check (its stand-in
/// nvidia-smi lists 7 GPUs): flow drains it and sets it DOWN for
/// clustermgtd, and is killed -9 once Slurm has it DOWN; the next apply
/// takes the recorded replacement up without setting it DOWN again,
/// clustermgtd replaces it once, and attempt 2 (one job) resumes.
#[test]
fn a_static_node_the_check_finds_bad_is_replaced_once_across_a_kill_9_and_the_training_resumes() {
    let faults = tempfile::NamedTempFile::new().expect("faults");
    let fleet = workspace_root().join("tests/fixtures/slurm/fleet");
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
    let c = up(&env, &more);
    let _log = super::live::LogOnFailure(&c.moto);
    let addresses: Vec<(String, String)> = c.sinfo().into_iter().map(|s| (s.0, s.1)).collect();
    let child = c.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let mut bad = String::new();
    wait_until(Duration::from_secs(120), "the Xid line's node", || {
        bad = std::fs::read_to_string(faults.path())
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        !bad.is_empty()
    });
    let old_ip = addresses
        .iter()
        .find(|a| a.0 == bad)
        .map(|a| a.1.clone())
        .expect("the node's address");
    let old = c.hosts.at(&old_ip).expect("its host")["id"]
        .as_str()
        .expect("id")
        .to_string();
    wait_until(
        Duration::from_secs(120),
        "flow to set the node DOWN",
        || c.state(&bad).contains("DOWN"),
    );
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1);
    assert!(
        killed.all().contains(&format!(
            "set node {bad} ({old}) DOWN for ParallelCluster to replace"
        )),
        "{}",
        killed.all()
    );
    assert_eq!(training_jobs(&c).len(), 1, "no attempt 2 yet");

    let run = c.a.apply();
    assert_eq!(
        run.code,
        0,
        "{}\nclustermgtd: {}",
        run.all(),
        c.clustermgtd_log()
    );
    assert!(
        run.all()
            .contains(&format!("resuming the replacement of {bad} ({old})")),
        "{}",
        run.all()
    );
    assert!(
        !run.all().contains(&format!("set node {bad} (")),
        "set DOWN again: {}",
        run.all()
    );
    let log = c.clustermgtd_log();
    assert_eq!(
        log.matches(&format!("{bad}: launched i-")).count(),
        1,
        "{log}"
    );
    let out =
        c.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
    let attempts: Vec<Value> = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "FAILED", "{}", attempts[0]);
    let r = &attempts[0]["replaced"][0];
    assert_eq!(r["node"], bad, "{}", attempts[0]);
    assert_eq!(r["instance_id"], old, "{}", attempts[0]);
    assert_eq!(r["by"], bad, "{}", attempts[0]);
    let new = r["by_instance_id"].as_str().expect("by_instance_id");
    assert!(log.contains(&format!("{bad}: launched {new} at ")), "{log}");
    assert_eq!(attempts[1]["state"], "COMPLETED", "{}", attempts[1]);
    assert_eq!(training_jobs(&c).len(), 2, "one job per attempt");
    let text = c.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(text.contains("resumed from "), "{text}");
    assert!(text.contains("training done at epoch 5"), "{text}");
}

/// Once attempt 1 has written its second checkpoint: the host of the
/// job's last node stopped. Its Slurm name, instance and address.
pub(super) fn stop_a_node_mid_training(c: &Cluster) -> (String, String, String) {
    let ckpt = c.a.p.path().join("shared/ckpt");
    let mut nodes = String::new();
    wait_until(
        Duration::from_secs(120),
        "attempt 1's second checkpoint",
        || {
            nodes = training_jobs(c)
                .first()
                .filter(|j| j.3 == "RUNNING")
                .map(|j| j.2.clone())
                .unwrap_or_default();
            ckpt.join("step-2").exists() && !nodes.is_empty()
        },
    );
    let listed = on_head(c, &format!("scontrol show hostnames '{nodes}'"));
    let dead = listed.lines().last().expect("a node").trim().to_string();
    let old_ip = c
        .sinfo()
        .into_iter()
        .find(|s| s.0 == dead)
        .map(|s| s.1)
        .expect("the node's address");
    let old = c.hosts.at(&old_ip).expect("the node's host")["id"]
        .as_str()
        .expect("id")
        .to_string();
    c.hosts.call(&json!({"op": "stop", "ids": [old]}));
    (dead, old, old_ip)
}

/// flow killed -9 while attempt 1 runs, then a node dies and clustermgtd
/// replaces it (DOWN: unasked) while flow is away: the next apply finds
/// attempt 1 NODE_FAIL with no node down, and the node of the job on an
/// instance launched since the job started is the one ParallelCluster
/// replaced; it is recorded (its old instance no longer at its address:
/// `-`), nothing is set DOWN, and attempt 2 runs on it, resumed.
#[test]
fn a_node_clustermgtd_replaced_while_flow_was_killed_is_named_and_the_training_resumes() {
    let c = up("", "");
    let _log = super::live::LogOnFailure(&c.moto);
    let child = c.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let (dead, old, old_ip) = stop_a_node_mid_training(&c);
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    wait_until(
        Duration::from_secs(240),
        "clustermgtd to replace the dead node",
        || {
            c.clustermgtd_log()
                .contains(&format!("{dead}: resumed on i-"))
        },
    );
    let run = c.a.apply();
    assert_eq!(
        run.code,
        0,
        "{}\nclustermgtd: {}",
        run.all(),
        c.clustermgtd_log()
    );
    let all = run.all();
    assert!(
        all.contains(&format!(
            "node {dead}: NODE_FAIL: ParallelCluster replaced node {dead} since the job started"
        )),
        "{all}"
    );
    assert!(!all.contains(&format!("set node {dead} (")), "{all}");
    let (log, _) = resumed_after_unknown_replacement(&c, &dead);
    assert!(
        log.contains(&format!("{dead}: set DOWN; terminating {old} ({old_ip})")),
        "{log}"
    );
}

/// What is true once clustermgtd replaced `dead` and the training went on:
/// one launch for it in clustermgtd's log, attempt 1 NODE_FAIL naming it
/// with its replacement recorded, its old instance unknown (`-`), attempt
/// 2 completed and resumed from a checkpoint, one Slurm job per attempt.
/// clustermgtd's log, and the new instance's id.
pub(super) fn resumed_after_unknown_replacement(c: &Cluster, dead: &str) -> (String, String) {
    let log = c.clustermgtd_log();
    assert_eq!(
        log.matches(&format!("{dead}: launched i-")).count(),
        1,
        "{log}"
    );
    let out =
        c.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
    let attempts: Vec<Value> = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "NODE_FAIL", "{}", attempts[0]);
    assert_eq!(
        attempts[0]["suspect_nodes"],
        json!([dead]),
        "{}",
        attempts[0]
    );
    let r = &attempts[0]["replaced"][0];
    assert_eq!(r["node"], dead, "{}", attempts[0]);
    assert_eq!(r["instance_id"], "-", "{}", attempts[0]);
    let new = r["by_instance_id"]
        .as_str()
        .expect("by_instance_id")
        .to_string();
    assert!(
        log.contains(&format!("{dead}: launched {new} at ")),
        "{log}"
    );
    assert_eq!(attempts[1]["state"], "COMPLETED", "{}", attempts[1]);
    assert_eq!(training_jobs(c).len(), 2, "one job per attempt");
    let text = c.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(text.contains("resumed from "), "{text}");
    assert!(text.contains("training done at epoch 5"), "{text}");
    (log, new)
}
