//! A static node whose rank hangs a training, planted on a ParallelCluster
//! cluster whose head node and 4 static nodes are hosts (issue 40 part 5),
//! as tests/e2e_hyperpod/hang.rs plants one on HyperPod's: the stand-in
//! training (tests/fixtures/slurm/restarts/train-ranks.sbatch, FAULT=hang)
//! runs an all_reduce across the 4 nodes on every attempt, a rank per node
//! launched by a real `srun` (tests/fixtures/slurm/restarts/
//! all-reduce-rank: a barrier on the shared folder). The rank on the
//! planted machine never arrives and says nothing; the others print
//! NCCL's warning naming its node and no loss, so `hang_without_loss`
//! fires, flow cancels the job, names the node from the warnings, checks
//! it (the shipped node-health.sbatch: its stand-in `dcgmi diag` fails
//! PCIe on that machine), drains it (slurmctld's log says so) and sets it
//! DOWN; the local cloud's clustermgtd (its loop every 5 s) replaces it
//! once, under its name on a new machine, and attempt 2 runs on the 4
//! nodes, the new machine among them, passes the same all_reduce and
//! resumes from the newest checkpoint. The faults are the machine's
//! (keyed by its hostname): the new machine has none.

use std::time::Instant;

use serde_json::{Value, json};

use super::job_replace::{on_head, training_jobs, up_with};
use super::planted::{drained_in_slurm, machine};
use super::support::workspace_root;

#[test]
fn a_static_node_whose_rank_hangs_is_named_by_nccl_checked_drained_replaced_by_clustermgtd_and_the_training_resumes()
 {
    let began = Instant::now();
    let faults = tempfile::NamedTempFile::new().expect("faults");
    let root = workspace_root();
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
    let c = up_with(&env, &more, &[("FLOW_CLUSTERMGTD_LOOP_S", "5")]);
    let _log = super::live::LogOnFailure(&c.moto);
    let check = std::fs::read_to_string(root.join("workflows/slurm/node-health.sbatch"))
        .expect("workflows/slurm/node-health.sbatch");
    c.a.p.write("node-health.sbatch", &check);
    // The fourth node's machine hangs its rank; its DCGM fails PCIe.
    let hung = "compute-gpu-st-distributed-ml-4";
    let (old, old_ip, hostname) = machine(&c, hung);
    let short = hostname.split('.').next().expect("a hostname");
    std::fs::write(
        faults.path(),
        format!("{short} hang 1\n{hostname} dcgm PCIe\n"),
    )
    .expect("plant");

    let applied = Instant::now();
    let run = c.a.apply();
    eprintln!(
        "pcluster hang: hung, named, checked, replaced by clustermgtd and resumed in {:.1} s (the test so far {:.1} s)",
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
    // Slurm's word (slurmctld's log): the hung node, and it alone, drained
    // with flow's reason.
    let drained = drained_in_slurm(&c);
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, hung, "{drained:?}");
    assert!(
        drained[0].1.starts_with("flow: train job ")
            && drained[0].1.contains("dcgmi diag: PCIe Fail"),
        "{drained:?}"
    );
    assert!(
        all.contains(&format!("check {hung}: bad: dcgmi diag: PCIe Fail")),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "set node {hung} ({old}) DOWN for ParallelCluster to replace"
        )),
        "{all}"
    );
    // Attempt 1 hung and named the node by NCCL's warnings; replaced.
    let out =
        c.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
    let a: Vec<Value> = serde_json::from_str(out.stdout.trim()).expect("JSON");
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
        (&r[0]["node"], &r[0]["instance_id"], &r[0]["by"]),
        (&json!(hung), &json!(old), &json!(hung)),
        "{}",
        a[0]
    );
    let new = r[0]["by_instance_id"].as_str().expect("by_instance_id");
    // clustermgtd replaced that node once (its old instance terminated,
    // one launch, the new one), and no other.
    let log = c.clustermgtd_log();
    assert_eq!(log.matches("set DOWN; terminating").count(), 1, "{log}");
    assert!(
        log.contains(&format!("{hung}: set DOWN; terminating {old} ({old_ip})")),
        "{log}"
    );
    assert_eq!(log.matches(": launched i-").count(), 1, "{log}");
    assert!(
        log.contains(&format!("{hung}: launched {new} at ")),
        "{log}"
    );
    assert_eq!(c.instance_state(&old), "terminated");
    let (_, new_state, new_ip) = c
        .computes()
        .into_iter()
        .find(|i| i.0 == new)
        .expect("the new instance");
    assert_eq!(new_state, "running");
    assert_ne!(new_ip, old_ip);
    // Slurm's jobs: attempt 1 cancelled, attempt 2 (one job) on the 4
    // nodes, done.
    let jobs = training_jobs(&c);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let job = |n: usize| {
        jobs.iter()
            .find(|j| j.0 == a[n]["job_id"].as_str().unwrap_or_default())
            .unwrap_or_else(|| panic!("attempt {}'s job: {jobs:?}", n + 1))
    };
    assert_eq!(job(0).3, "CANCELLED", "{jobs:?}");
    assert!(job(1).1.ends_with("-a2"), "{jobs:?}");
    assert_eq!(job(1).3, "COMPLETED", "{jobs:?}");
    let hosts = on_head(&c, &format!("scontrol show hostnames '{}'", job(1).2));
    assert_eq!(hosts.lines().count(), 4, "{hosts}");
    assert!(hosts.lines().any(|h| h == hung), "{hosts}");
    // The training's own word: the warnings naming the hung node, attempt
    // 2's all_reduce passed on the new machine, resumed from the
    // checkpoint.
    assert_eq!(a[1]["state"], "COMPLETED", "{}", a[1]);
    let resumed = a[1]["resumed_from"].as_str().expect("resumed_from");
    let ckpt = c.a.p.path().join("shared/ckpt");
    assert_eq!(resumed, ckpt.join("step-2").display().to_string());
    let text = c.a.run(&["logs", "wf.toml", "train"]).expect(0).stdout;
    assert!(
        text.contains(&format!(
            "AllReduce: no data from remote peer {hung}<45678>"
        )),
        "{text}"
    );
    let new_host = c.hosts.at(&new_ip).expect("the new instance's host");
    let new_short = new_host["hostname"]
        .as_str()
        .and_then(|h| h.split('.').next())
        .expect("hostname");
    assert_ne!(new_short, short);
    assert!(text.contains(&format!("rank on {new_short}")), "{text}");
    assert!(
        text.contains(&format!("resumed from {resumed} at epoch 3")),
        "{text}"
    );
    assert_eq!(
        text.matches("all_reduce across 4 nodes").count(),
        2,
        "attempt 1's, hung, and attempt 2's: {text}"
    );
    assert!(text.contains("training done at epoch 5"), "{text}");
    eprintln!(
        "pcluster hang: the test in {:.1} s",
        began.elapsed().as_secs_f64()
    );
}
