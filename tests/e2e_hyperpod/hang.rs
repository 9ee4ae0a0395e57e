//! A node whose rank hangs, planted on a HyperPod cluster of hosts (issue
//! 40 part 5): the stand-in training of `restarts`
//! (tests/fixtures/slurm/restarts/train-ranks.sbatch, FAULT=hang) runs an
//! all_reduce across both workers on every attempt, a rank per node
//! launched by a real `srun` (tests/fixtures/slurm/restarts/all-reduce-rank:
//! a barrier on the shared folder). The rank on the planted node never
//! arrives and says nothing; the other prints NCCL's warning naming it and
//! no loss, so `hang_without_loss` fires, flow cancels the job, names the
//! node from the warnings, checks it (the shipped node-health.sbatch:
//! its stand-in `dcgmi diag` fails PCIe there), drains it (slurmctld's
//! log says so), replaces it through
//! BatchReplaceClusterNodes, and attempt 2 runs on the new node, passes
//! the same all_reduce and resumes from the newest checkpoint.

use std::time::Instant;

use serde_json::json;

use super::hyperpod_hosts::HostCluster;
use super::replace::ON_CREATE;
use super::restarts::{attempts, cluster_with, training_jobs};
use crate::support::workspace_root;

#[test]
fn a_node_whose_rank_hangs_is_named_by_nccl_checked_drained_replaced_through_hyperpod_and_the_training_resumes()
 {
    let t = HostCluster::new(ON_CREATE, &[]);
    let faults = tempfile::NamedTempFile::new().expect("faults");
    let root = workspace_root();
    let check = std::fs::read_to_string(root.join("workflows/slurm/node-health.sbatch"))
        .expect("workflows/slurm/node-health.sbatch");
    t.a.p.write("node-health.sbatch", &check);
    let env = format!(
        ", FAULT = \"hang\", ALL_REDUCE = \"{}\", FLOW_TEST_FAULTS = \"{}\"",
        root.join("tests/fixtures/slurm/restarts/all-reduce-rank")
            .display(),
        faults.path().display()
    );
    let more = format!(
        "hang_after = \"1m\"\nhang_without_loss = \"5s\"\nparse = \"torchrun\"\n\
         [steps.train.inputs.check]\nscript = \"node-health.sbatch\"\nargs = [\"2\"]\ngpus = 8\ndcgm = true\n\
         environment = {{ PATH = \"{}:/usr/sbin:/usr/bin:/sbin:/bin\", FLOW_TEST_FAULTS = \"{}\" }}\n",
        root.join("tests/fixtures/slurm/fleet").display(),
        faults.path().display()
    );
    cluster_with(&t, &env, &more);
    // The later worker by name hangs; its machine's DCGM fails PCIe.
    let mut workers: Vec<(String, String)> = t
        .nodes()
        .into_iter()
        .filter(|n| n.1 == "worker-group-1")
        .map(|n| (n.3.split('.').next().unwrap_or_default().to_string(), n.0))
        .collect();
    workers.sort();
    let (hung, hung_id) = workers.last().cloned().expect("a worker");
    std::fs::write(faults.path(), format!("{hung} hang 1\n{hung} dcgm PCIe\n")).expect("plant");

    let began = Instant::now();
    let run = t.a.apply();
    eprintln!(
        "hyperpod hang: hung, named, checked, replaced and resumed in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(run.code, 0, "{}", run.all());
    // Slurm's word (slurmctld's log): the hung node, and it alone, drained
    // with flow's reason.
    let drained = t.drained_in_slurm();
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, hung, "{drained:?}");
    assert!(
        drained[0].1.starts_with("flow: train job ")
            && drained[0].1.contains("dcgmi diag: PCIe Fail"),
        "{drained:?}"
    );
    let all = run.all();
    assert!(
        all.contains(&format!("check {hung}: bad: dcgmi diag: PCIe Fail")),
        "{all}"
    );
    // Attempt 1 hung and named the node by NCCL's warnings; replaced.
    let a = attempts(&t);
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0]["state"], "HUNG", "{}", a[0]);
    let cause = a[0]["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("no new loss for 5s"), "{}", a[0]);
    assert_eq!(a[0]["suspect_nodes"], json!([hung]), "{}", a[0]);
    assert!(
        a[0]["suspects"]
            .to_string()
            .contains(&format!("NCCL names peer {hung}")),
        "{}",
        a[0]
    );
    let r = &a[0]["replaced"];
    assert_eq!(r.as_array().map(Vec::len), Some(1), "{}", a[0]);
    assert_eq!(
        (&r[0]["node"], &r[0]["instance_id"]),
        (&json!(hung), &json!(hung_id))
    );
    // The local cloud replaced that instance, once, and no other.
    assert_eq!(t.proxy.forwarded("BatchReplaceClusterNodes"), 1);
    let nodes = t.nodes();
    assert!(!nodes.iter().any(|n| n.0 == hung_id), "{nodes:?}");
    let survivor = &workers[0];
    assert!(nodes.iter().any(|n| n.0 == survivor.1), "{nodes:?}");
    let by = r[0]["by"].as_str().expect("by").to_string();
    let by_id = r[0]["by_instance_id"].as_str().expect("by_instance_id");
    assert!(
        nodes
            .iter()
            .any(|n| n.0 == by_id && n.1 == "worker-group-1"),
        "{nodes:?}"
    );
    // Slurm's jobs: attempt 1 cancelled, attempt 2 (one job) on the
    // survivor and the new node, done.
    let jobs = training_jobs(&t);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let first = jobs
        .iter()
        .find(|j| j.0 == a[0]["job_id"].as_str().unwrap_or_default())
        .expect("attempt 1's job");
    assert_eq!(first.3, "CANCELLED", "{jobs:?}");
    let second = jobs
        .iter()
        .find(|j| j.0 == a[1]["job_id"].as_str().unwrap_or_default())
        .expect("attempt 2's job");
    assert!(second.1.ends_with("-a2"), "{second:?}");
    assert_eq!(second.3, "COMPLETED", "{second:?}");
    let hosts = t.on_controller(&format!("scontrol show hostnames '{}'", second.2));
    let hosts: Vec<&str> = hosts.lines().collect();
    assert!(
        hosts.contains(&by.as_str()) && hosts.contains(&survivor.0.as_str()),
        "{hosts:?}"
    );
    // The training's own word: the warnings naming the hung peer, attempt
    // 2's all_reduce passed on the new node, resumed from the checkpoint.
    assert_eq!(a[1]["state"], "COMPLETED", "{}", a[1]);
    let resumed = a[1]["resumed_from"].as_str().expect("resumed_from");
    let ckpt = t.a.p.path().join("shared/ckpt");
    assert_eq!(resumed, ckpt.join("step-2").display().to_string());
    let log = t.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(
        log.contains(&format!(
            "AllReduce: no data from remote peer {hung}<45678>"
        )),
        "{log}"
    );
    assert!(log.contains(&format!("rank on {by}")), "{log}");
    assert!(
        log.contains(&format!("resumed from {resumed} at epoch 3")),
        "{log}"
    );
    assert_eq!(
        log.matches("all_reduce across 2 nodes").count(),
        2,
        "attempt 1's, hung, and attempt 2's: {log}"
    );
    assert!(log.contains("training done at epoch 5"), "{log}");
}
