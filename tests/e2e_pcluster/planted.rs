//! A slow static node, then a node short of an EFA device, planted on a
//! ParallelCluster cluster whose head node and 4 static nodes are hosts
//! (issue 40 part 5), as tests/e2e_hyperpod/planted.rs plants them on
//! HyperPod's. The slow node is found only by `slurm.node_check`'s NCCL
//! pairs (the stand-in all_reduce_perf of tests/fixtures/slurm/fleet,
//! launched by a real `srun` on both nodes of a pair, scales its bus
//! bandwidth by the fault table, here keyed by the node's machine: its
//! NodeHostName); the EFA node by its check (the shipped node-health.sbatch
//! with `efa = "instance-type"`: the stand-in fi_info lists one device fewer
//! than a p5.48xlarge's 32 on that machine), in a second apply once the
//! first converged (with it out of the pairs in the same apply, the slow
//! node's 3 would leave its pair no healthy node to compare with). Each is
//! named alone with its evidence, drained with flow's reason (slurmctld's
//! log says so) and set DOWN; the local cloud's clustermgtd
//! (scripts/local-cloud/cloud_pcluster_static.py, its loop every 5 s)
//! replaces it once, under its name on a new machine, and the new node
//! passes its check and an NCCL pair with a healthy node.

use std::time::Instant;

use serde_json::{Value, json};

use super::job_replace::up_with;
use super::node_replace::{Cluster, node_check, replaced_once};
use super::support::slurm::slurmctld_log;
use super::support::workspace_root;

/// The `pairs` table: the srun NCCL script, a floor the stand-in's
/// published 17.9 GB/s passes and a quarter of it does not.
fn pairs(faults: &std::path::Path) -> String {
    let fleet = workspace_root().join("tests/fixtures/slurm/fleet");
    format!(
        r#"[steps.fleet.inputs.pairs]
script = "nccl-pair.sbatch"
floor = 10
environment = {{ PATH = "{}:/usr/sbin:/usr/bin:/sbin:/bin", FLOW_TEST_FAULTS = "{}" }}
"#,
        fleet.display(),
        faults.display()
    )
}

/// The nodes slurmctld's own log says were drained, with their reasons.
pub(super) fn drained_in_slurm(c: &Cluster) -> Vec<(String, String)> {
    slurmctld_log::drained(&c.log("slurmctld.log"))
}

/// Node `node`'s machine as Slurm lists it: (instance id, address, full
/// hostname).
pub(super) fn machine(c: &Cluster, node: &str) -> (String, String, String) {
    let sinfo = c.sinfo();
    let addr = sinfo
        .iter()
        .find(|s| s.0 == node)
        .map(|s| s.1.clone())
        .unwrap_or_else(|| panic!("{node} in {sinfo:?}"));
    let host = c.hosts.at(&addr).expect("the node's host");
    (
        host["id"].as_str().expect("id").to_string(),
        addr,
        host["hostname"].as_str().expect("hostname").to_string(),
    )
}

/// The node check: the shipped node-health.sbatch, each node's GPUs and
/// EFA devices held to its instance type's (a p5.48xlarge: 8 and 32), run
/// `round` (a new round re-runs the step).
fn health_check(c: &Cluster, faults: &std::path::Path, round: u32) -> String {
    let health =
        std::fs::read_to_string(workspace_root().join("workflows/slurm/node-health.sbatch"))
            .expect("workflows/slurm/node-health.sbatch");
    c.a.p.write("node-health.sbatch", &health);
    let step = node_check(&c.head, faults, round);
    let script = "script = \"nvidia-smi.sbatch\"\n";
    assert!(step.contains(script), "{step}");
    step.replace(
        script,
        "script = \"node-health.sbatch\"\nefa = \"instance-type\"\n",
    )
}

#[test]
fn a_slow_static_node_named_by_its_nccl_pairs_then_one_short_of_an_efa_device_named_by_its_check_are_each_drained_replaced_by_clustermgtd_and_their_replacements_paired_healthy()
 {
    let began = Instant::now();
    let c = up_with("", "", &[("FLOW_CLUSTERMGTD_LOOP_S", "5")]);
    let _log = super::live::LogOnFailure(&c.moto);
    let script = workspace_root().join("tests/fixtures/slurm/hosts/nccl-pair.sbatch");
    c.a.p.write(
        "nccl-pair.sbatch",
        &std::fs::read_to_string(script).expect("nccl-pair.sbatch"),
    );
    // The third node's machine is slow: a quarter of the bus bandwidth in
    // any pair it is in.
    let slow = "compute-gpu-st-distributed-ml-3";
    let (old, old_ip, hostname) = machine(&c, slow);
    let faults = tempfile::NamedTempFile::new().expect("faults");
    std::fs::write(faults.path(), format!("{hostname} busbw 0.25\n")).expect("plant");
    c.write(&format!(
        "{}{}",
        health_check(&c, faults.path(), 1),
        pairs(faults.path())
    ));
    let applied = Instant::now();
    let run = c.a.apply();
    eprintln!(
        "pcluster planted: slow node of 4 found, drained, replaced by clustermgtd and its replacement paired in {:.1} s (the test so far {:.1} s)",
        applied.elapsed().as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    assert_eq!(
        run.code,
        0,
        "{}\nclustermgtd: {}",
        run.all(),
        c.clustermgtd_log()
    );
    let all = run.all();
    assert!(all.contains("NCCL round 1: "), "{all}");
    assert!(all.contains("NCCL round 2: "), "{all}");
    // Slurm's word (slurmctld's log): the slow node, and it alone, drained
    // with flow's reason.
    let drained = drained_in_slurm(&c);
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, slow, "{drained:?}");
    assert!(
        drained[0]
            .1
            .starts_with("flow: busbw 4.4763 GB/s < 10 (floor) with healthy node compute-gpu-st-"),
        "{drained:?}"
    );
    assert!(
        all.contains(&format!(
            "set node {slow} ({old}) DOWN for ParallelCluster to replace"
        )),
        "{all}"
    );
    // The pairs' evidence: the value, the floor, the partner, the line.
    let verdicts = c.output("verdicts");
    let v = &verdicts[slow];
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
    assert_ne!(partner, slow);
    assert_eq!(verdicts[partner]["status"], "healthy", "{verdicts}");
    assert_eq!(c.output("bad"), json!([slow]));
    // The other nodes' checks passed: fi_info lists a p5.48xlarge's 32 EFA
    // devices where nothing is planted.
    for n in [1, 2, 4] {
        let node = format!("compute-gpu-st-distributed-ml-{n}");
        assert_eq!(verdicts[&node]["check"]["status"], "healthy", "{verdicts}");
    }
    // clustermgtd replaced that node once (one DOWN and termination of its
    // old instance, one launch), and no other.
    let new = replaced_once(&c, slow, &old, &old_ip);
    let log = c.clustermgtd_log();
    assert_eq!(log.matches("set DOWN; terminating").count(), 1, "{log}");
    // Its replacement ran the check and an NCCL pair with a healthy node,
    // and passed both at the published figure (the new machine is not
    // slow).
    let by = &verdicts[format!("{slow}@{new}")];
    assert_eq!(
        (&by["status"], &by["by"]),
        (&json!("healthy"), &json!("pairs")),
        "{by}"
    );
    assert_eq!(by["value"], json!(17.9053), "{by}");
    assert_eq!(by["check"]["status"], "healthy", "{by}");
    assert_ne!(by["partner"], json!(slow), "{by}");
    assert!(
        all.contains(&format!(
            "NCCL pairs of the new nodes with healthy ones: {slow}+"
        )),
        "{all}"
    );
    let runs = c.a.run(&["runs", "wf.toml", "fleet", "--json"]).expect(0);
    let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let last = runs.as_array().and_then(|r| r.last()).expect("a run");
    assert_eq!(last["values"][slow]["status"], "bad", "{last}");
    assert_eq!(
        last["values"][format!("{slow}@{new}")]["status"],
        "healthy",
        "{last}"
    );
    eprintln!(
        "pcluster planted: the slow node's part in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    efa_node_of_4(&c, faults.path());
    eprintln!(
        "pcluster planted: the slow and EFA nodes' test in {:.1} s",
        began.elapsed().as_secs_f64()
    );
}

/// The second apply on the converged cluster: the first node's machine
/// lists 31 EFA devices; its check names it alone (the type's 32, fi_info's
/// line), slurmctld drains it with flow's reason, clustermgtd replaces it
/// once and the new node passes its check and an NCCL pair.
fn efa_node_of_4(c: &Cluster, faults: &std::path::Path) {
    let efa = "compute-gpu-st-distributed-ml-1";
    let (old, old_ip, hostname) = machine(c, efa);
    let planted = std::fs::read_to_string(faults).expect("faults");
    std::fs::write(faults, format!("{planted}{hostname} efa 31\n")).expect("plant");
    c.write(&format!("{}{}", health_check(c, faults, 2), pairs(faults)));
    let applied = Instant::now();
    // The cluster step is unchanged since the first apply converged: not
    // refreshed again (pcluster's describe-cluster).
    let run =
        c.a.run(&["apply", "wf.toml", "--auto-approve", "--refresh", "false"]);
    eprintln!(
        "pcluster planted: EFA node of 4 found, drained, replaced by clustermgtd and its replacement checked and paired in {:.1} s",
        applied.elapsed().as_secs_f64()
    );
    assert_eq!(
        run.code,
        0,
        "{}\nclustermgtd: {}",
        run.all(),
        c.clustermgtd_log()
    );
    let all = run.all();
    let said = format!(
        "bad node {efa}: fi_info lists 31 EFA devices, the EFA interfaces of a p5.48xlarge is 32 (line: `domain: efa_30-rdm`)"
    );
    assert!(all.contains(&said), "{all}");
    // Named alone: the other three passed their checks and pairs.
    let named: Vec<&str> = all
        .lines()
        .filter(|l| {
            l.split_once(" fleet ")
                .is_some_and(|(_, r)| r.trim_start().starts_with("bad node "))
        })
        .collect();
    assert_eq!(named.len(), 1, "{all}");
    assert!(
        all.contains(&format!(
            "set node {efa} ({old}) DOWN for ParallelCluster to replace"
        )),
        "{all}"
    );
    // Slurm's word: it drained with flow's reason, the slow node before it,
    // and no other.
    let drained = drained_in_slurm(c);
    assert_eq!(drained.len(), 2, "{drained:?}");
    assert_eq!(drained[1].0, efa, "{drained:?}");
    assert!(
        drained[1].1.starts_with(
            "flow: fi_info lists 31 EFA devices, the EFA interfaces of a p5.48xlarge is 32"
        ),
        "{drained:?}"
    );
    // The check's evidence: fi_info's count, the type's, its line.
    let verdicts = c.output("verdicts");
    let v = &verdicts[efa];
    assert_eq!(
        (&v["status"], &v["by"]),
        (&json!("bad"), &json!("check")),
        "{v}"
    );
    assert_eq!(
        (&v["value"], &v["threshold"]),
        (&json!(31), &json!(32)),
        "{v}"
    );
    assert_eq!(v["against"], "the EFA interfaces of a p5.48xlarge", "{v}");
    assert_eq!(v["line"], "domain: efa_30-rdm", "{v}");
    assert_eq!(c.output("bad"), json!([efa]));
    // clustermgtd replaced it once: one more DOWN and termination, its own.
    let new = replaced_once(c, efa, &old, &old_ip);
    let log = c.clustermgtd_log();
    assert_eq!(log.matches("set DOWN; terminating").count(), 2, "{log}");
    assert_eq!(
        log.matches(&format!("{efa}: set DOWN; terminating"))
            .count(),
        1,
        "{log}"
    );
    // The new node: its check (32 devices), then an NCCL pair with a
    // healthy node.
    let by = &verdicts[format!("{efa}@{new}")];
    assert_eq!(
        (&by["status"], &by["by"]),
        (&json!("healthy"), &json!("pairs")),
        "{by}"
    );
    assert_eq!(by["check"]["status"], "healthy", "{by}");
    assert_eq!(by["value"], json!(17.9053), "{by}");
    assert_ne!(by["partner"], json!(efa), "{by}");
    assert!(
        all.contains(&format!(
            "NCCL pairs of the new nodes with healthy ones: {efa}+"
        )),
        "{all}"
    );
    let runs = c.a.run(&["runs", "wf.toml", "fleet", "--json"]).expect(0);
    let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let last = runs.as_array().and_then(|r| r.last()).expect("a run");
    assert_eq!(last["values"][efa]["status"], "bad", "{last}");
    assert_eq!(
        last["values"][format!("{efa}@{new}")]["status"],
        "healthy",
        "{last}"
    );
}
