//! Faults planted on a HyperPod cluster of hosts beyond the 7-GPU node of
//! `replace` (issue 40 part 5): each node a host with its own network
//! namespace, sshd, munge and slurmd, the controller's slurmctld over
//! them. A slow node, found only by `slurm.node_check`'s NCCL pairs (the
//! stand-in all_reduce_perf of tests/fixtures/slurm/fleet, launched by a
//! real `srun` on both nodes of a pair, scales its bus bandwidth by the
//! fault table), is named with its evidence, drained (slurmctld's log
//! says so) and replaced through the local cloud's
//! BatchReplaceClusterNodes, and its replacement is paired with a healthy
//! node and found healthy. A node whose `fi_info` lists one EFA device
//! too few (the stand-in of tests/fixtures/slurm/fleet, by the node it
//! runs on), found by the shipped node-health.sbatch with `check.efa`, is
//! named, drained and replaced the same way, across a kill -9 of flow
//! while HyperPod replaces it; its replacement is checked and paired.

use std::time::{Duration, Instant};

use serde_json::json;

use super::hyperpod_hosts::HostCluster;
use super::replace::{ON_CREATE, last_run_of_the_replacement, output, planted_with, replaced_once};
use crate::support::{finish, signal, wait_until, workspace_root};

/// The `pairs` table: the srun NCCL script, a floor the stand-in's
/// published 17.9 GB/s passes and a quarter of it does not.
const PAIRS: &str = r#"[steps.fleet.inputs.pairs]
script = "nccl-pair.sbatch"
floor = 10
environment = { PATH = "{fleet}:/usr/sbin:/usr/bin:/sbin:/bin", FLOW_TEST_FAULTS = "{faults}" }
"#;

/// The pairs' script, written into the project.
fn write_pair_script(t: &HostCluster) {
    let script = workspace_root().join("tests/fixtures/slurm/hosts/nccl-pair.sbatch");
    t.a.p.write(
        "nccl-pair.sbatch",
        &std::fs::read_to_string(script).expect("nccl-pair.sbatch"),
    );
}

#[test]
fn a_slow_node_of_4_is_named_by_its_nccl_pairs_drained_replaced_through_hyperpod_and_its_replacement_paired_healthy()
 {
    let t = HostCluster::new(ON_CREATE, &[]);
    write_pair_script(&t);
    let faults = tempfile::NamedTempFile::new().unwrap();
    let (slow, slow_id) = planted_with(&t, &faults, 4, 1, "busbw 0.25", PAIRS);
    let began = Instant::now();
    let run = t.a.apply();
    eprintln!(
        "hyperpod planted: slow node of 4 found, drained, replaced and its replacement paired in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(run.code, 0, "{}", run.all());
    // Slurm's word (slurmctld's log): the slow node, and it alone, drained
    // with flow's reason.
    let drained = t.drained_in_slurm();
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, slow, "{drained:?}");
    assert!(
        drained[0]
            .1
            .starts_with("flow: busbw 4.4763 GB/s < 10 (floor) with healthy node ip-"),
        "{drained:?}"
    );
    let all = run.all();
    assert!(all.contains("NCCL round 1: "), "{all}");
    assert!(all.contains("NCCL round 2: "), "{all}");
    // The pairs' evidence: the value, the floor, the partner, the line.
    let verdicts = output(&t, "verdicts");
    let v = &verdicts[&slow];
    assert_eq!(
        (&v["status"], &v["by"]),
        (&json!("bad"), &json!("pairs")),
        "{v}"
    );
    assert_eq!(v["value"], json!(4.4763), "{v}");
    assert_eq!(
        (&v["threshold"], &v["against"]),
        (&json!(10.0), &json!("floor")),
        "{v}"
    );
    assert_eq!(v["line"], "# Avg bus bandwidth    : 4.4763", "{v}");
    let partner = v["partner"].as_str().expect("partner");
    assert_eq!(verdicts[partner]["status"], "healthy", "{verdicts}");
    assert_eq!(output(&t, "bad"), json!([slow]));
    assert_eq!(output(&t, "healthy").as_array().map(Vec::len), Some(4));
    // One BatchReplaceClusterNodes, for the slow node's instance alone.
    let by = replaced_once(&t, &slow, &slow_id, 4);
    assert!(
        all.contains(&format!("BatchReplaceClusterNodes for {slow_id}")),
        "{all}"
    );
    // Its replacement ran the check and an NCCL pair with a healthy node.
    let new = &verdicts[&by];
    assert_eq!(
        (&new["status"], &new["by"]),
        (&json!("healthy"), &json!("pairs")),
        "{new}"
    );
    assert_eq!(new["value"], json!(17.9053), "{new}");
    assert_eq!(new["check"]["status"], "healthy", "{new}");
    assert_ne!(new["partner"], json!(slow), "{new}");
    assert!(
        all.contains(&format!(
            "NCCL pairs of the new nodes with healthy ones: {by}+"
        )),
        "{all}"
    );
    last_run_of_the_replacement(&t, &slow, &by);
}

/// The EFA node found by its check, with `pairs` too (the other three
/// measured healthy), and flow killed (-9) while HyperPod replaces it:
/// the next apply takes the recorded replacement up (no second call),
/// checks the new node and pairs it with a node Slurm lists usable, held
/// to the floor (the resumed run measured no median).
#[test]
fn a_node_missing_an_efa_device_is_named_drained_replaced_once_across_a_kill_9_and_its_replacement_paired()
 {
    // The replaced instance stays ShuttingDown for 10 s.
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
    write_pair_script(&t);
    let faults = tempfile::NamedTempFile::new().unwrap();
    let (bad, bad_id) = planted_with(&t, &faults, 4, 2, "efa 3", PAIRS);
    // The shipped node health script, with its EFA rule: 4 devices, a
    // p4d's (the hosts' instance type has none).
    let health =
        std::fs::read_to_string(workspace_root().join("workflows/slurm/node-health.sbatch"))
            .expect("workflows/slurm/node-health.sbatch");
    t.a.p.write("node-health.sbatch", &health);
    let wf = t.a.p.read("wf.toml");
    let line = "script = \"nvidia-smi.sbatch\"\n";
    assert!(wf.contains(line));
    t.a.p.write(
        "wf.toml",
        &wf.replace(line, "script = \"node-health.sbatch\"\nefa = 4\n"),
    );
    let began = Instant::now();
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(
        Duration::from_secs(60),
        "flow to send BatchReplaceClusterNodes",
        || t.proxy.forwarded("BatchReplaceClusterNodes") == 1,
    );
    let listed = t.proxy.forwarded("ListClusterNodes");
    wait_until(
        Duration::from_secs(20),
        "flow to wait for the replacement",
        || t.proxy.forwarded("ListClusterNodes") > listed,
    );
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1);
    let first = killed.all();
    assert!(
        first.contains(&format!(
            "bad node {bad}: fi_info lists 3 EFA devices, check.efa is 4 (line: `domain: efa_2-rdm`)"
        )),
        "{first}"
    );
    assert!(first.contains("NCCL round 1: "), "{first}");
    let run = t.a.apply();
    eprintln!(
        "hyperpod planted: EFA node of 4 found, drained, replaced across a kill -9 and its replacement checked and paired in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(run.code, 0, "{}", run.all());
    let all = run.all();
    assert!(
        all.contains(&format!("resuming the replacement of {bad} ({bad_id})")),
        "{all}"
    );
    // Slurm's word (slurmctld's log): that node, and it alone, drained with
    // flow's reason, once.
    let drained = t.drained_in_slurm();
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, bad, "{drained:?}");
    assert!(
        drained[0]
            .1
            .starts_with("flow: fi_info lists 3 EFA devices, check.efa is 4"),
        "{drained:?}"
    );
    // One BatchReplaceClusterNodes in all, for its instance alone.
    let by = replaced_once(&t, &bad, &bad_id, 4);
    let verdicts = output(&t, "verdicts");
    let v = &verdicts[&bad];
    assert_eq!(v["status"], "bad", "{v}");
    assert!(
        v["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("fi_info lists 3 EFA devices, check.efa is 4")),
        "{v}"
    );
    // The new node: its check, then its pair with a node Slurm lists
    // usable (not the replaced one), held to the floor.
    let new = &verdicts[&by];
    assert_eq!(
        (&new["status"], &new["by"]),
        (&json!("healthy"), &json!("pairs")),
        "{new}"
    );
    assert_eq!(new["check"]["status"], "healthy", "{new}");
    assert_eq!(new["value"], json!(17.9053), "{new}");
    assert_ne!(new["partner"], json!(bad), "{new}");
    last_run_of_the_replacement(&t, &bad, &by);
}
