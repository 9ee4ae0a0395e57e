//! `slurm.job` restarts with policy `replace` on ParallelCluster when
//! clustermgtd is replacing the dead node already as flow looks: its old
//! instance terminated and gone from the cluster's listing in EC2 (EC2
//! drops a terminated instance's tags: scripts/local-cloud/
//! cloud_pcluster_static.py), its new one not launched yet (EC2 has no
//! capacity for it until the test gives it back,
//! FLOW_CLUSTERMGTD_NO_CAPACITY), the node DOWN at its old address.
//! flow must neither fail nor set the node DOWN again (a second
//! replacement): it records the replacement (old instance `-`), waits for
//! clustermgtd's new instance, and resumes the training; killed -9 in that
//! wait, the next apply carries it on with no second job.
//!
//! The cluster (a head node and 4 static nodes on hosts, clustermgtd's
//! loop every 10 s) and the training are job_replace.rs's.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::job_replace::{
    resumed_after_unknown_replacement, stop_a_node_mid_training, training_jobs, up_with,
};
use super::node_replace::Cluster;
use super::support::{finish, signal, wait_until};

/// The recorded replacement of `dead` in the step's intent: (taken as
/// asked for with its old instance `-`, its new node recorded).
fn recorded(c: &Cluster, dead: &str) -> (bool, bool) {
    let show = c.a.run(&["state", "show", "wf.toml", "train"]);
    if show.code != 0 {
        return (false, false);
    }
    let record: Value = serde_json::from_str(&show.stdout).unwrap_or_default();
    let id = record["in_flight"]["id"].as_str().unwrap_or_default();
    let Some(at) = id.find(&format!("{dead}=-@")) else {
        return (false, false);
    };
    let entry = id[at..].split([',', '|']).next().unwrap_or_default();
    let fields: Vec<&str> = entry.split('@').collect();
    (
        fields.get(2).is_some_and(|f| f.ends_with('+')),
        fields.len() > 4,
    )
}

/// flow killed -9 while attempt 1 runs; a node dies; once clustermgtd has
/// terminated its instance (and before it launches the new one) flow is
/// applied again: it finds attempt 1 NODE_FAIL, the node DOWN with no
/// instance at its address, records it taken (`-`) and waits; killed -9
/// there, the next apply resumes the wait. One DOWN (clustermgtd's), one
/// launch, one job per attempt, attempt 2 resumed on the new instance.
/// Before the fix the second apply failed: "Slurm node … is no instance of
/// ParallelCluster cluster".
#[test]
fn a_node_whose_instance_clustermgtd_terminated_before_flow_looked_is_waited_for_across_a_kill_9() {
    let began = Instant::now();
    // EC2 has no capacity for the new instance until flow's second apply
    // is killed: the kill lands in the wait, however slow the machine.
    let capacity = tempfile::tempdir().expect("a temporary folder");
    let no_capacity = capacity.path().join("no-capacity");
    std::fs::write(&no_capacity, "").expect("take EC2's capacity away");
    let c = up_with(
        "",
        "",
        &[
            ("FLOW_CLUSTERMGTD_LOOP_S", "10"),
            (
                "FLOW_CLUSTERMGTD_NO_CAPACITY",
                no_capacity.to_str().expect("a UTF-8 path"),
            ),
        ],
    );
    let _log = super::live::LogOnFailure(&c.moto);
    let child = c.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let (dead, old, old_ip) = stop_a_node_mid_training(&c);
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    wait_until(
        Duration::from_secs(120),
        "clustermgtd to terminate the dead node's instance",
        || {
            c.clustermgtd_log()
                .contains(&format!("{dead}: set DOWN; terminating {old} ({old_ip})"))
        },
    );
    assert!(
        !c.clustermgtd_log()
            .contains(&format!("{dead}: launched i-")),
        "the new instance not launched yet"
    );
    let mut again = c.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    // Looked at only once the apply holds the state (and answers reads):
    // a look first would hold the lock the apply takes.
    let lock = c.a.p.path().join(".flow/wf/lock");
    wait_until(
        Duration::from_secs(30),
        "the apply to hold the state",
        || {
            std::fs::read_to_string(&lock)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|l| l["pid"] == again.id() && l["answers_reads"] == true)
        },
    );
    // Until flow records the replacement; flow ending first, or taking a
    // minute, fails with what it said.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !recorded(&c, &dead).0 {
        let ended = matches!(again.try_wait(), Ok(Some(_)));
        if ended || Instant::now() > deadline {
            if !ended {
                signal(&again, libc::SIGKILL);
            }
            panic!(
                "flow did not record the replacement{}: {}\nclustermgtd: {}",
                if ended { " and ended" } else { " in a minute" },
                finish(again).all(),
                c.clustermgtd_log()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    signal(&again, libc::SIGKILL);
    let killed = finish(again);
    assert_eq!(killed.code, -1);
    assert_eq!(
        recorded(&c, &dead),
        (true, false),
        "killed before the new node was recorded"
    );
    assert!(
        killed.all().contains(&format!(
            "node {dead}: ParallelCluster is replacing it already"
        )),
        "{}",
        killed.all()
    );
    assert_eq!(training_jobs(&c).len(), 1, "no attempt 2 yet");
    std::fs::remove_file(&no_capacity).expect("give EC2's capacity back");
    let run = c.a.apply();
    assert_eq!(
        run.code,
        0,
        "{}\nclustermgtd: {}",
        run.all(),
        c.clustermgtd_log()
    );
    eprintln!(
        "pcluster gone instance: set-up, two kills and the resume in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert!(
        run.all()
            .contains(&format!("resuming the replacement of {dead} (-)")),
        "{}",
        run.all()
    );
    for out in [killed.all(), run.all()] {
        assert!(!out.contains(&format!("set node {dead} (")), "{out}");
    }
    let log = c.clustermgtd_log();
    assert_eq!(
        log.matches(&format!("{dead}: set DOWN;")).count(),
        1,
        "{log}"
    );
    let (_, new) = resumed_after_unknown_replacement(&c, &dead);
    let runs = c.a.run(&["runs", "wf.toml", "train", "--json"]).expect(0);
    let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let last = runs.as_array().and_then(|r| r.last()).expect("a run");
    let line = last["values"]["attempt_1"].as_str().unwrap_or_default();
    assert!(
        line.contains(&format!("replaced {dead} (-) by {dead} ({new})")),
        "{last}"
    );
}
