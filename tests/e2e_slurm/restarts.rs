//! slurm.job with restarts on a real Slurm of 4 nodes (one slurmd each,
//! all on this host), each a ParallelCluster static p4d.24xlarge node. The
//! training is a stand-in (tests/fixtures/slurm/restarts/train.sbatch) that
//! writes a checkpoint file per step and prints where it resumed from;
//! faults are planted through its environment: an Xid line naming one
//! node (whose nvidia-smi then lists 7 GPUs), a hang, a failure on every
//! attempt. What flow did to the nodes is read from Slurm (`scontrol show
//! node`, `squeue`), what the training did from its own output.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::slurm::{Features, Slurm};
use crate::support::{Project, Run, finish, signal, wait_until};
use crate::{fixture, fleet_env, log, p4d_fleet, project, record, write_shipped};

/// The nodes: gpu-1 … gpu-4.
const NODES: usize = 4;

/// A 4-node cluster, a project holding the training and the check, and
/// the fault table the fleet's nvidia-smi stand-in reads.
struct Test {
    slurm: Slurm,
    p: Project,
    faults: tempfile::NamedTempFile,
}

impl Test {
    /// The step `train` with `inputs` (TOML lines) besides the script,
    /// its job name and checkpoint folder; `env` its environment's entries.
    fn new(inputs: &str, env: &str) -> Test {
        Test::with(inputs, env, Features::default())
    }

    /// [`Test::new`] on a cluster with `features` besides its nodes.
    fn with(inputs: &str, env: &str, features: Features) -> Test {
        let slurm = p4d_fleet(NODES, features);
        let faults = tempfile::NamedTempFile::new().unwrap();
        let p = project("");
        let ckpt = p.path().join("ckpt");
        p.write(
            "wf.toml",
            &format!(
                r#"[workflow]
name = "slurm-restarts"

[steps.train]
provider = "slurm.job"
[steps.train.inputs]
script = "train.sbatch"
job_name = "train"
checkpoint_dir = "{ckpt}"
success_pattern = "training done"
{inputs}
environment = {{ CKPT = "{ckpt}", STEPS = "5", FLOW_TEST_FAULTS = "{faults}", {env} }}
"#,
                ckpt = ckpt.display(),
                faults = faults.path().display(),
            ),
        );
        p.write(
            "train.sbatch",
            &std::fs::read_to_string(fixture("restarts").join("train.sbatch")).unwrap(),
        );
        // The check a suspect node runs: the shipped per-node check.
        write_shipped(&p, "nvidia-smi.sbatch");
        Test { slurm, p, faults }
    }

    /// The environment flow runs with: the fleet's stand-ins first on PATH
    /// (and `extra` before them), the fault table.
    fn env(&self, extra: Option<&std::path::Path>) -> Vec<(String, String)> {
        let mut env = fleet_env(&self.slurm, self.faults.path());
        if let Some(extra) = extra {
            let path = env.iter_mut().find(|(k, _)| k == "PATH").unwrap();
            path.1 = format!("{}:{}", extra.display(), path.1);
        }
        env
    }

    fn flow(&self, args: &[&str]) -> Run {
        let env = self.env(None);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.p.run_env(args, &env)
    }

    fn attempts(&self) -> Vec<Value> {
        let out = self
            .p
            .run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0);
        serde_json::from_str(out.stdout.trim()).unwrap()
    }

    /// `scontrol show node NAME`'s `State=` and `Reason=`.
    fn node(&self, name: &str) -> (String, String) {
        let out = self.slurm.output("scontrol", &["show", "node", name]);
        let field = |key: &str| {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_default()
                .to_string()
        };
        let reason = out
            .split_once("Reason=")
            .map(|(_, r)| r.lines().next().unwrap_or_default().to_string())
            .unwrap_or_default();
        (field("State="), reason)
    }

    /// The training's jobs the controller knows: (id, comment, nodes).
    fn training_jobs(&self) -> Vec<(String, String, String)> {
        self.slurm
            .output(
                "squeue",
                &["-h", "--states=all", "-n", "train", "-o", "%i|%k|%N"],
            )
            .lines()
            .filter_map(|l| {
                let mut p = l.split('|');
                Some((p.next()?.into(), p.next()?.into(), p.next()?.into()))
            })
            .collect()
    }
}

/// Attempt 1 prints an Xid line for its second node and exits 1: flow
/// checks that node (its nvidia-smi lists 7 GPUs), drains it (Slurm says
/// so), resubmits excluding it, and attempt 2 resumes from the newest
/// checkpoint (its own output says so) and finishes; `flow runs` shows
/// both attempts with the first one's cause.
#[test]
fn a_node_with_an_xid_is_checked_drained_and_the_training_resumes() {
    let t = Test::new(
        "nodes = 2\nrestarts = 2\npolicy = \"drain\"\ncheck = { script = \"slurm/nvidia-smi.sbatch\", gpus = \"instance-type\" }",
        "FAULT = \"xid\"",
    );
    let plan = t.flow(&["plan", "wf.toml"]).expect(0).all();
    let ckpt = t.p.path().join("ckpt").display().to_string();
    assert!(
        plan.contains(&format!(
            "up to 2 restarts, resuming from the newest checkpoint in {ckpt}"
        )),
        "{plan}"
    );
    let run = t.flow(&["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), t.slurm.logs());
    let attempts = t.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!(first["state"], "FAILED", "{first}");
    let bad = first["suspect_nodes"][0].as_str().unwrap().to_string();
    assert_eq!(first["drained"], json!([bad]), "{first}");
    assert!(
        first["suspects"].as_str().unwrap().contains("Xid 79 on"),
        "{first}"
    );
    // Slurm says the node is drained, with flow's reason.
    let (state, reason) = t.node(&bad);
    assert!(state.contains("DRAIN"), "{bad}: {state}");
    assert!(reason.starts_with("flow: train job"), "{bad}: {reason}");
    // The second attempt ran elsewhere and resumed from step 2.
    let newest = format!("{ckpt}/step-2");
    assert_eq!(second["state"], "COMPLETED");
    assert_eq!(second["resumed_from"], json!(newest));
    let jobs = t.training_jobs();
    assert_eq!(jobs.len(), 2, "one job per attempt: {jobs:?}");
    let again = jobs
        .iter()
        .find(|j| j.0 == second["job_id"].as_str().unwrap())
        .unwrap();
    assert!(again.1.ends_with("-a2"), "{jobs:?}");
    let listed = t.slurm.output("scontrol", &["show", "hostnames", &again.2]);
    assert!(!listed.lines().any(|n| n == bad), "{again:?} ran on {bad}");
    let text = log(&t.p, "train");
    assert!(
        text.contains(&format!("resumed from {newest} at step 3")),
        "{text}"
    );
    assert!(text.contains("training done at step 5"), "{text}");
    // Every step's checkpoint is there, none written twice by a restart
    // from scratch.
    for step in 1..=5 {
        assert!(t.p.path().join(format!("ckpt/step-{step}")).exists());
    }
    let runs = t.flow(&["runs", "wf.toml"]).expect(0).stdout;
    assert!(runs.contains("attempts=2"), "{runs}");
    assert!(runs.contains("Xid 79 on"), "{runs}");
}

/// Attempt 1 prints nothing after its second step: hang_after cancels it,
/// no node is named (none drained: a hang names no node), and attempt 2
/// resumes and finishes.
#[test]
fn a_hung_attempt_is_cancelled_and_resubmitted() {
    let t = Test::new("restarts = 1\nhang_after = \"4s\"", "FAULT = \"hang\"");
    let run = t.flow(&["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), t.slurm.logs());
    let attempts = t.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "HUNG");
    assert!(
        attempts[0]["cause"]
            .as_str()
            .unwrap()
            .starts_with("hung: no new output for 4s"),
        "{attempts:?}"
    );
    assert_eq!(attempts[0]["drained"], json!([]));
    assert!(
        attempts[0]["suspects"]
            .as_str()
            .unwrap()
            .starts_with("no line names a node"),
        "{attempts:?}"
    );
    // Slurm ended the hung job as cancelled, long before its sleep.
    let jobs = t.slurm.jobs_named("train");
    assert!(jobs.iter().any(|j| j.2 == "CANCELLED"), "{jobs:?}");
    for i in 1..=NODES {
        let (state, _) = t.node(&format!("gpu-{i}"));
        assert!(!state.contains("DRAIN"), "gpu-{i}: {state}");
    }
    let text = log(&t.p, "train");
    assert!(text.contains("cancelling it as hung"), "{text}");
    assert!(text.contains("resumed from"), "{text}");
}

/// A node that dies under the training (its slurmd killed -9 while attempt
/// 1 waits after its second checkpoint, the stand-in's `hang` without
/// `hang_after`): Slurm sets it down and ends the job NODE_FAIL
/// (`--no-requeue`, or Slurm would requeue it itself); flow names the dead
/// node bad from Slurm's own word, drains it, and attempt 2 runs without it,
/// resumed from the newest checkpoint, to the end.
#[test]
fn a_node_that_dies_mid_training_is_drained_and_the_training_resumes() {
    let mut t = Test::with(
        "nodes = 2\nrestarts = 1\npolicy = \"drain\"\nsbatch_args = [\"--no-requeue\"]",
        "FAULT = \"hang\"",
        Features {
            slurmd_timeout: Some(6),
            ..Features::default()
        },
    );
    let env = t.env(None);
    let mut cmd = t.p.cmd(&["apply", "--auto-approve", "wf.toml"]);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flow");
    // The job's second node, once the second checkpoint is written.
    let ckpt = t.p.path().join("ckpt");
    let mut nodes = String::new();
    wait_until(Duration::from_secs(60), "the second checkpoint", || {
        let running = t.training_jobs();
        nodes = running.first().map(|j| j.2.clone()).unwrap_or_default();
        ckpt.join("step-2").exists() && !nodes.is_empty()
    });
    let listed = t.slurm.output("scontrol", &["show", "hostnames", &nodes]);
    let dead = listed.lines().last().unwrap().to_string();
    t.slurm.kill_slurmd_of(&dead);
    let run = finish(child);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), t.slurm.logs());
    let attempts = t.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!(first["state"], "NODE_FAIL", "{first}");
    assert_eq!(first["suspect_nodes"], json!([dead]), "{first}");
    assert_eq!(first["drained"], json!([dead]), "{first}");
    let (state, reason) = t.node(&dead);
    assert!(state.contains("DRAIN"), "{dead}: {state}");
    assert!(reason.starts_with("flow: train job"), "{dead}: {reason}");
    let resumed = second["resumed_from"].as_str().unwrap().to_string();
    assert!(
        resumed.starts_with(&ckpt.join("step-").display().to_string()),
        "{second}"
    );
    assert_eq!(second["state"], "COMPLETED");
    let again = t
        .training_jobs()
        .into_iter()
        .find(|j| j.0 == second["job_id"].as_str().unwrap())
        .unwrap();
    let listed = t.slurm.output("scontrol", &["show", "hostnames", &again.2]);
    assert!(
        !listed.lines().any(|n| n == dead),
        "{again:?} ran on {dead}"
    );
    let text = log(&t.p, "train");
    assert!(text.contains(&format!("resumed from {resumed}")), "{text}");
    assert!(text.contains("training done at step 5"), "{text}");
}

/// Attempt 1 keeps printing (a heartbeat every half second, as ranks
/// waiting on a dead peer print NCCL warnings) but logs no loss after its
/// second epoch: `hang_after` alone never fires, `hang_without_loss` reads
/// the losses with `parse = "torchrun"` and cancels it; attempt 2 resumes
/// and finishes, and the step's `loss` is the last epoch's.
#[test]
fn a_training_that_prints_but_logs_no_loss_is_hung() {
    let t = Test::new(
        "restarts = 1\nhang_after = \"1m\"\nhang_without_loss = \"5s\"\nparse = \"torchrun\"",
        "FAULT = \"stall\"",
    );
    let plan = t.flow(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("no new loss (as `parse = \"torchrun\"` reads it) for 5s is a hang"),
        "{}",
        plan.stdout
    );
    let run = t.flow(&["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), t.slurm.logs());
    let attempts = t.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "HUNG");
    assert_eq!(
        attempts[0]["cause"], "hung: no new loss for 5s (after 2 logged), cancelled",
        "{attempts:?}"
    );
    let text = log(&t.p, "train");
    // It printed all along: the heartbeat reached flow before the cancel.
    assert!(text.contains("(heartbeat 3)"), "{text}");
    assert!(
        text.contains("no new loss for 5s (after 2 logged): cancelling it as hung"),
        "{text}"
    );
    assert!(text.contains("resumed from"), "{text}");
    let jobs = t.slurm.jobs_named("train");
    assert!(jobs.iter().any(|j| j.2 == "CANCELLED"), "{jobs:?}");
    let loss =
        t.p.run(&["output", "wf.toml", "train.loss"])
            .expect(0)
            .stdout;
    assert_eq!(loss.trim(), "0.95", "epoch 5's loss");
}

/// kill -9 of flow once it has cancelled a hung attempt (Slurm lists it
/// CANCELLED), before it records that attempt: the next apply tells
/// attempt 1 as flow found it (HUNG, with its cause, recorded before the
/// cancel), not as the CANCELLED job it finds; one job per attempt.
#[test]
fn kill_9_after_a_hung_attempt_is_cancelled_keeps_why_it_hung() {
    let t = Test::new(
        "restarts = 1\nhang_after = \"1m\"\nhang_without_loss = \"5s\"\nparse = \"torchrun\"",
        "FAULT = \"stall\"",
    );
    let mut cmd = t.p.cmd(&["apply", "--auto-approve", "wf.toml"]);
    for (k, v) in t.env(None) {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn flow");
    wait_until(
        Duration::from_secs(120),
        "attempt 1 cancelled as hung",
        || {
            t.slurm
                .jobs_named("train")
                .iter()
                .any(|j| j.2 == "CANCELLED")
        },
    );
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "{}", killed.all());
    let resumed = t.flow(&["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(resumed.code, 0, "{}\n{}", resumed.all(), t.slurm.logs());
    let attempts = t.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "HUNG", "{attempts:?}");
    assert_eq!(
        attempts[0]["cause"], "hung: no new loss for 5s (after 2 logged), cancelled",
        "{attempts:?}"
    );
    assert_eq!(t.training_jobs().len(), 2, "one job per attempt");
}

/// A training that fails on every attempt: the step fails after
/// `restarts` + 1 attempts, naming each one's cause.
#[test]
fn exhausted_restarts_fail_naming_every_attempt() {
    let t = Test::new("restarts = 1", "FAULT = \"fail\", FAULT_ALWAYS = \"1\"");
    let run = t.flow(&["apply", "--auto-approve", "wf.toml"]);
    assert_ne!(run.code, 0, "{}", run.all());
    let all = run.all();
    assert!(all.contains("failed on every attempt (2 of 2)"), "{all}");
    for n in 1..=2 {
        assert!(all.contains(&format!("attempt {n}: job ")), "{all}");
    }
    assert!(all.matches("exit code 3:0").count() >= 2, "{all}");
    assert_eq!(t.training_jobs().len(), 2);
    let runs = t.flow(&["runs", "wf.toml"]).expect(0).stdout;
    assert!(runs.contains("failed"), "{runs}");
    assert!(runs.contains("attempt_2="), "{runs}");
}

/// kill -9 of flow while the resubmission's sbatch holds its answer (the
/// controller has attempt 2, flow has no id yet): the intent records the
/// attempt as being submitted, and the next apply finds attempt 2 by its
/// comment and follows it; one job per attempt, never two.
#[test]
fn kill_9_after_the_resubmission_follows_that_attempt() {
    let t = Test::new("restarts = 1", "FAULT = \"fail\"");
    let marks = tempfile::tempdir().unwrap();
    let mut cmd = t.p.cmd(&["apply", "--auto-approve", "wf.toml"]);
    for (k, v) in t.env(Some(&fixture("kill"))) {
        cmd.env(k, v);
    }
    cmd.env("FLOW_TEST_MARKS", marks.path())
        .env("FLOW_TEST_AFTER", "6")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn flow");
    wait_until(
        Duration::from_secs(90),
        "the resubmission to be queued",
        || t.training_jobs().iter().any(|j| j.1.ends_with("-a2")),
    );
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "{}", killed.all());
    let intent = record(&t.p, "train")["in_flight"].clone();
    let id = intent["id"].as_str().unwrap_or_default().to_string();
    assert!(
        id.contains(",-@") && id.ends_with("/ckpt/step-2"),
        "the attempt is recorded before its sbatch: {intent}"
    );
    std::thread::sleep(Duration::from_secs(7));
    let resumed = t.flow(&["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(resumed.code, 0, "{}\n{}", resumed.all(), t.slurm.logs());
    let jobs = t.training_jobs();
    assert_eq!(jobs.len(), 2, "one submission per attempt: {jobs:?}");
    let comments: Vec<&str> = jobs.iter().map(|j| j.1.as_str()).collect();
    assert!(comments.iter().any(|c| c.ends_with("-a2")), "{jobs:?}");
    let text = log(&t.p, "train");
    assert!(
        text.contains("(attempt 2) was already submitted by this operation: following it"),
        "{text}"
    );
    assert!(text.contains("resumed from"), "{text}");
    let attempts = t.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[1]["state"], "COMPLETED");
    assert!(record(&t.p, "train")["in_flight"].is_null());
}

/// Bad restart inputs are refused by validate at their line and column,
/// before anything runs.
#[test]
fn validate_refuses_bad_restart_inputs_at_their_entry() {
    let p = project(
        r#"[workflow]
name = "slurm-restarts"

[steps.train]
provider = "slurm.job"
[steps.train.inputs]
script = "train.sbatch"
restarts = -1
hang_after = "soon"
policy = "cordon"
check = { script = "c.sbatch", gpus = "all" }
"#,
    );
    p.write("train.sbatch", "#!/bin/bash\necho hi\n");
    let v = p
        .run_env(&["validate", "wf.toml"], &[("COLUMNS", "400")])
        .expect(1)
        .all();
    for (at, says) in [
        ("wf.toml:8:12", "`restarts` -1 is not a count from 0 to 100"),
        ("wf.toml:9:14", "`hang_after` \"soon\" is not a duration"),
        (
            "wf.toml:10:10",
            "policy `cordon` is EKS's (kube.node_check): on slurm.job a bad node is drained",
        ),
        (
            "wf.toml:11:",
            "is neither a GPU count nor \"instance-type\"",
        ),
    ] {
        assert!(v.contains(at) && v.contains(says), "{at} {says}: {v}");
    }
    assert!(!p.path().join(".flow").exists());
}
