//! Faults planted on a HyperPod cluster of hosts beyond the 7-GPU node of
//! `replace` (issue 40 part 5): each node a host with its own network
//! namespace, sshd, munge and slurmd, the controller's slurmctld over
//! them. A slow node, found only by `slurm.node_check`'s NCCL pairs (the
//! stand-in all_reduce_perf of tests/fixtures/slurm/fleet, launched by a
//! real `srun` on both nodes of a pair, scales its bus bandwidth by the
//! fault table), is named with its evidence, drained (read from Slurm
//! while HyperPod replaces it) and replaced through the local cloud's
//! BatchReplaceClusterNodes, and its replacement is paired with a healthy
//! node and found healthy.

use std::time::Instant;

use serde_json::json;

use super::hyperpod_hosts::HostCluster;
use super::replace::{ON_CREATE, last_run_of_the_replacement, output, planted_with, replaced_once};
use crate::support::workspace_root;

/// The `pairs` table: the srun NCCL script, a floor the stand-in's
/// published 17.9 GB/s passes and a quarter of it does not.
const PAIRS: &str = r#"[steps.fleet.inputs.pairs]
script = "nccl-pair.sbatch"
floor = 10
environment = { PATH = "{fleet}:/usr/sbin:/usr/bin:/sbin:/bin", FLOW_TEST_FAULTS = "{faults}" }
"#;

#[test]
fn a_slow_node_of_4_is_named_by_its_nccl_pairs_drained_replaced_through_hyperpod_and_its_replacement_paired_healthy()
 {
    // The replaced instance stays ShuttingDown for 5 s, its node drained in
    // Slurm meanwhile, where the test reads it.
    let table = tempfile::NamedTempFile::new().expect("table");
    std::fs::write(
        table.path(),
        "scale = 60\n[operations]\n\"sagemaker.hyperpod.replace\" = 300\n",
    )
    .expect("write table");
    let t = HostCluster::new(
        ON_CREATE,
        &[("FLOW_LATENCY_MODEL", &table.path().to_string_lossy())],
    );
    let script = workspace_root().join("tests/fixtures/slurm/hosts/nccl-pair.sbatch");
    t.a.p.write(
        "nccl-pair.sbatch",
        &std::fs::read_to_string(script).expect("nccl-pair.sbatch"),
    );
    let faults = tempfile::NamedTempFile::new().unwrap();
    let (slow, slow_id) = planted_with(&t, &faults, 4, 1, "busbw 0.25", PAIRS);
    let began = Instant::now();
    // Slurm's word while HyperPod replaces it: the slow node, and it alone,
    // drained with flow's reason.
    let (run, seen) = t.apply_watching_the_drain_of(&slow);
    eprintln!(
        "hyperpod planted: slow node of 4 found, drained, replaced and its replacement paired in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(
        !seen.is_empty(),
        "the slow node was never drained: {}",
        run.all()
    );
    for (n, s, reason) in &seen {
        if *n == slow {
            assert!(
                reason.starts_with("flow: busbw 4.4763 GB/s < 10 (floor) with healthy node ip-"),
                "{reason}"
            );
        } else {
            assert_eq!((s.as_str(), reason.as_str()), ("idle", "none"), "{seen:?}");
        }
    }
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
