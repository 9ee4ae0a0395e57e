//! `slurm.job` restarts with policy `replace` on a HyperPod cluster made
//! with `node_recovery = "Automatic"` (issue 40 part 3): HyperPod replaces
//! a worker that died on its own (the local cloud's model of automatic
//! node recovery, scripts/local-cloud/cloud_hyperpod_recovery.py), before
//! flow looks. flow must see the node being replaced or replaced already,
//! ask nothing of HyperPod, wait for the new node, record the replacement
//! and resume the training on it from the checkpoint; a kill -9 in that
//! window resumes with no second job and no replacement asked for.
//!
//! The set-up (a cluster of 1 controller and 2 workers, the stand-in
//! training across both, a worker's host stopped after the second
//! checkpoint) and the checks of what happened are restarts.rs's. What
//! HyperPod did is read from moto's log (one line per automatic
//! recovery), what flow asked from the proxy's count.

use std::time::{Duration, Instant};

use super::hyperpod_hosts::HostCluster;
use super::restarts::{
    ON_CREATE, cluster_recovering, kill_a_worker_mid_training, replaced_once_and_resumed,
    training_jobs,
};
use crate::support::{finish, signal, wait_until};

/// The automatic recoveries of instance `id` in moto's log.
fn recoveries_of(t: &HostCluster, id: &str) -> usize {
    let log = std::fs::read_to_string(&t.moto.log).unwrap_or_default();
    let mark = format!("automatic node recovery: {id} (");
    log.lines().filter(|l| l.contains(&mark)).count()
}

/// The cluster with automatic node recovery and the training written;
/// `moto_env` more of moto's environment.
fn recovering_cluster(moto_env: &[(&str, &str)]) -> HostCluster {
    let t = HostCluster::new(ON_CREATE, moto_env);
    cluster_recovering(&t, "", "", Some("Automatic"));
    t
}

/// The worker's host stopped mid-training, then (once Slurm has the node
/// down and the job ended, with `after_slurm`) a look at the cluster
/// (ListClusterNodes, straight to the local cloud): HyperPod finds the
/// node faulty there, if flow's own look has not already, and replaces
/// it. The node, its instance and its status after that look.
fn a_worker_dies_and_hyperpod_notices(
    t: &HostCluster,
    after_slurm: bool,
) -> (String, String, String) {
    let (dead, dead_id, _) = kill_a_worker_mid_training(t);
    if after_slurm {
        wait_until(Duration::from_secs(90), "Slurm to end the job", || {
            training_jobs(t).first().is_some_and(|j| j.3 == "NODE_FAIL")
        });
    }
    let status = t
        .nodes()
        .into_iter()
        .find(|n| n.0 == dead_id)
        .map_or("gone".to_string(), |n| n.2);
    assert_eq!(recoveries_of(t, &dead_id), 1, "HyperPod replaces it");
    eprintln!("hyperpod auto-recovery: {dead} ({dead_id}) {status} after HyperPod's look");
    (dead, dead_id, status)
}

/// HyperPod replaced the dead worker before flow looked (no latency table:
/// its replacement is over by the look): the old instance is gone, so flow
/// records it `-`, asks nothing, waits for the new node and resumes.
/// Before the fix the step failed: Slurm had the dead node out of its
/// configuration, so nothing was found bad and attempt 2 went without a
/// replacement (or, with Slurm's DOWN first, "no instance of HyperPod
/// cluster").
#[test]
fn a_worker_hyperpod_replaced_on_its_own_before_flow_looked_is_recorded_and_the_training_resumes() {
    let t = recovering_cluster(&[]);
    let began = Instant::now();
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let (dead, dead_id, status) = a_worker_dies_and_hyperpod_notices(&t, false);
    assert_eq!(status, "gone");
    let run = finish(child);
    assert_eq!(run.code, 0, "{}", run.all());
    eprintln!(
        "hyperpod auto-recovery: replaced before flow looked, apply {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let all = run.all();
    assert!(all.contains("HyperPod replaced it already"), "{all}");
    assert!(!all.contains("BatchReplaceClusterNodes for"), "{all}");
    replaced_once_and_resumed(&t, &dead, "-", 0);
    assert_eq!(recoveries_of(&t, &dead_id), 1);
}

/// The replacement state of `dead` in the step's intent: (asked for or
/// taken, its new node recorded).
fn recorded(t: &HostCluster, dead: &str, dead_id: &str) -> (bool, bool) {
    let show = t.a.run(&["state", "show", "wf.toml", "train"]);
    if show.code != 0 {
        return (false, false);
    }
    let record: serde_json::Value = serde_json::from_str(&show.stdout).unwrap_or_default();
    let id = record["in_flight"]["id"].as_str().unwrap_or_default();
    let Some(at) = id.find(&format!("{dead}={dead_id}@")) else {
        return (false, false);
    };
    let entry = id[at..].split([',', '|']).next().unwrap_or_default();
    let fields: Vec<&str> = entry.split('@').collect();
    let sent = fields.get(2).is_some_and(|f| f.ends_with('+'));
    (sent, fields.len() > 4)
}

/// Slurm notices first (the node down after SlurmdTimeout, the job
/// NODE_FAIL), HyperPod at the next look, its replacement held
/// `ShuttingDown` for 10 s (a latency table of the test's own): flow
/// finds the dead node's instance ShuttingDown, records it taken (with
/// its instance id) and waits; killed -9 there, before the new node is
/// recorded, the next apply resumes the wait: no BatchReplaceClusterNodes
/// at all, one recovery, one job per attempt, attempt 2 on the new node
/// from the checkpoint. Before the fix flow failed the step at that look:
/// "Slurm node … is no instance of HyperPod cluster `ml-cluster`".
#[test]
fn kill_9_while_flow_waits_for_hyperpods_own_replacement_then_apply_asks_nothing_and_submits_attempt_2_once()
 {
    let table = tempfile::NamedTempFile::new().expect("table");
    std::fs::write(
        table.path(),
        "scale = 60\n[operations]\n\"sagemaker.hyperpod.replace\" = 600\n",
    )
    .expect("write table");
    let t = recovering_cluster(&[("FLOW_LATENCY_MODEL", &table.path().to_string_lossy())]);
    let began = Instant::now();
    let mut child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let (dead, dead_id, status) = a_worker_dies_and_hyperpod_notices(&t, true);
    assert_eq!(status, "ShuttingDown");
    let mut ended = false;
    wait_until(
        Duration::from_secs(60),
        "flow to record the replacement HyperPod took",
        || {
            ended = matches!(child.try_wait(), Ok(Some(_)));
            ended || recorded(&t, &dead, &dead_id).0
        },
    );
    if ended {
        panic!("flow ended before recording it: {}", finish(child).all());
    }
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1);
    for line in killed
        .all()
        .lines()
        .filter(|l| l.contains("attempt 1") || l.contains("node "))
    {
        eprintln!("hyperpod auto-recovery: killed run: {line}");
    }
    assert_eq!(
        recorded(&t, &dead, &dead_id),
        (true, false),
        "killed before the new node was recorded"
    );
    assert_eq!(training_jobs(&t).len(), 1, "no attempt 2 yet");
    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    eprintln!(
        "hyperpod auto-recovery: kill -9 in the wait and resume, {:.1} s in all",
        began.elapsed().as_secs_f64()
    );
    let all = run.all();
    assert!(
        all.contains(&format!("resuming the replacement of {dead} ({dead_id})")),
        "{all}"
    );
    assert!(!all.contains("BatchReplaceClusterNodes for"), "{all}");
    replaced_once_and_resumed(&t, &dead, &dead_id, 0);
    assert_eq!(recoveries_of(&t, &dead_id), 1);
    let again = t.a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.all());
}
