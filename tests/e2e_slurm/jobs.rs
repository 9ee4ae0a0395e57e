//! slurm.job runs: the reference NCCL sbatch judged by its numbers, a
//! failing job, an array job, and input flow refuses before anything runs.

use crate::support::slurm::Slurm;
use crate::{emulators, flow, log, project, record};

/// The reference NCCL script on the one-node test cluster: `nodes = 1` and
/// one task per node override its `--nodes=2` and `--ntasks-per-node 8`
/// (command-line options beat #SBATCH lines), and its first argument names
/// the stand-in all_reduce_perf.
fn nccl_workflow() -> String {
    format!(
        r#"
[workflow]
name = "slurm-nccl"

[steps.nccl]
provider = "slurm.job"
[steps.nccl.inputs]
script = "slurm/nccl-tests.sbatch"
nodes = 1
sbatch_args = ["--ntasks-per-node=1"]
args = ["{bin}/all_reduce_perf"]
success_pattern = "Out of bounds values : 0 OK"
capture = {{ busbw = "Avg bus bandwidth\\s*:\\s*([0-9.]+)" }}
"#,
        bin = emulators().display()
    )
}

#[test]
fn the_reference_nccl_sbatch_runs_and_its_busbw_is_captured() {
    let slurm = Slurm::start();
    let p = project(&nccl_workflow());
    let plan = flow(&p, &slurm, &["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("nccl  (slurm.job)  create"),
        "{}",
        plan.stdout
    );
    let run = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), slurm.logs());
    assert!(
        run.stdout.contains("captured busbw = 17.9053"),
        "{}",
        run.stdout
    );
    let out = p.run(&["output", "wf.toml", "nccl.busbw"]).expect(0);
    assert_eq!(out.stdout.trim(), "17.9053");
    // One job, named by the script, carrying the operation token.
    let jobs = slurm.jobs_named("nccl-all_reduce_perf");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let (id, _, state, comment) = &jobs[0];
    assert_eq!(state, "COMPLETED");
    assert!(comment.starts_with("flow:"), "{comment}");
    let rec = record(&p, "nccl");
    assert_eq!(rec["resource_id"], id.as_str());
    assert_eq!(rec["outputs"]["state"], "COMPLETED");
    assert_eq!(rec["outputs"]["nodes"], slurm.node.as_str());
    // The output file (the script's `--output %x_%j.out`, in the workflow's
    // folder) was streamed into the step's log line by line.
    let file = p.read(&format!("nccl-all_reduce_perf_{id}.out"));
    assert!(file.contains("# Avg bus bandwidth    : 17.9053"), "{file}");
    let logged = log(&p, "nccl");
    for line in file.lines().filter(|l| !l.trim().is_empty()) {
        assert!(logged.contains(line), "log lacks {line:?}:\n{logged}");
    }
    // A second apply has nothing to do; the job is not run again.
    let again = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]).expect(0);
    assert!(again.stdout.contains("No changes"), "{}", again.stdout);
    assert_eq!(slurm.jobs_named("nccl-all_reduce_perf").len(), 1);
}

#[test]
fn a_failed_job_names_slurms_state_and_the_output_tail() {
    let slurm = Slurm::start();
    let p = project(
        r#"
[workflow]
name = "slurm-fail"

[steps.train]
provider = "slurm.job"
[steps.train.inputs]
script = "train.sbatch"
job_name = "train-fails"

[steps.after]
provider = "null"
depends_on = ["train"]
"#,
    );
    p.write(
        "train.sbatch",
        "#!/bin/bash\n#SBATCH --output=train_%j.out\necho 'loading shard 7'\necho 'CUDA error: out of memory' >&2\nexit 3\n",
    );
    let run = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]).expect(1);
    let all = run.all();
    assert!(
        all.contains("ended FAILED, exit code 3:0: the script exited with a non-zero code — last lines: loading shard 7 | CUDA error: out of memory"),
        "{all}"
    );
    assert!(
        all.contains("after"),
        "the dependent is reported as skipped: {all}"
    );
    assert_eq!(slurm.jobs_named("train-fails").len(), 1);
    assert_eq!(slurm.jobs_named("train-fails")[0].2, "FAILED");
    // The failure is recorded; the next apply submits a new job.
    assert_eq!(record(&p, "train")["status"], "failed");
    flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]).expect(1);
    assert_eq!(slurm.jobs_named("train-fails").len(), 2);
}

#[test]
fn array_jobs_and_nodes_pass_through() {
    let slurm = Slurm::start();
    let p = project(
        r#"
[workflow]
name = "slurm-array"

[steps.sweep]
provider = "slurm.job"
[steps.sweep.inputs]
script = "sweep.sbatch"
job_name = "sweep"
array = "0-2"
nodes = 1
output = "sweep_%A_%a.out"
environment = { LR = "3e-4" }
capture = { last = "task (\\d+) done" }
"#,
    );
    p.write(
        "sweep.sbatch",
        "#!/bin/bash\n#SBATCH --time=5\necho \"task $SLURM_ARRAY_TASK_ID on $SLURM_JOB_NUM_NODES node(s) lr=$LR\"\necho \"task $SLURM_ARRAY_TASK_ID done\"\n",
    );
    let run = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), slurm.logs());
    let jobs = slurm.jobs_named("sweep");
    assert_eq!(jobs.len(), 3, "three array tasks: {jobs:?}");
    assert!(jobs.iter().all(|j| j.2 == "COMPLETED"), "{jobs:?}");
    let logged = log(&p, "sweep");
    let array_id = record(&p, "sweep")["resource_id"]
        .as_str()
        .unwrap()
        .to_string();
    for task in 0..3 {
        let line = format!("[{array_id}_{task}] task {task} on 1 node(s) lr=3e-4");
        assert!(logged.contains(&line), "log lacks {line:?}:\n{logged}");
    }
}

#[test]
fn a_script_outside_the_workflow_folder_is_refused_before_anything_runs() {
    let slurm = Slurm::start();
    let p = project(
        "[workflow]\nname = \"slurm-escape\"\n\n[steps.x]\nprovider = \"slurm.job\"\n[steps.x.inputs]\nscript = \"../escape.sbatch\"\n",
    );
    std::fs::write(p.path().join("../escape.sbatch"), "#!/bin/sh\necho hi\n").ok();
    let run = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]).expect(1);
    let all = run.all();
    assert!(
        all.contains("`../escape.sbatch` is outside the workflow's folder"),
        "{all}"
    );
    assert!(
        all.contains("wf.toml:7:10"),
        "points at the line and column: {all}"
    );
    assert!(slurm.jobs().is_empty());
    assert!(
        p.state_files().is_empty(),
        "state untouched: {:?}",
        p.state_files()
    );
    let abs = project(
        "[workflow]\nname = \"slurm-abs\"\n\n[steps.x]\nprovider = \"slurm.job\"\n[steps.x.inputs]\nscript = \"/etc/hostname\"\n",
    );
    let run = flow(&abs, &slurm, &["plan", "wf.toml"]).expect(1);
    assert!(
        run.all()
            .contains("`/etc/hostname` is outside the workflow's folder"),
        "{}",
        run.all()
    );
}

#[test]
fn a_missing_sbatch_is_one_line_naming_what_to_install() {
    let slurm = Slurm::start();
    let p = project(&nccl_workflow());
    // PATH without Slurm's commands.
    let empty = tempfile::tempdir().unwrap();
    let mut env = slurm.env();
    env.push(("PATH".into(), empty.path().display().to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let run = p
        .run_env(&["apply", "--auto-approve", "wf.toml"], &env)
        .expect(1);
    let all = run.all();
    // The first Slurm command flow runs is the look for a job this
    // operation may already have queued (`scontrol`), then `sbatch`: both
    // come with slurm-client.
    assert!(
        all.contains("`scontrol` is not installed on this machine (not found on PATH)"),
        "{all}"
    );
    assert_eq!(
        all.matches("is not installed").count(),
        2,
        "one line, and its summary: {all}"
    );
    assert!(all.contains("apt-get install slurm-client"), "{all}");
    // Nothing was submitted, so no intent is left to check next time.
    assert!(record(&p, "nccl")["in_flight"].is_null());
    assert!(slurm.jobs().is_empty());
}

/// The DDP test case's training script (workflows/slurm/ddp-train.sbatch,
/// after 1.conda-train.sbatch) on the one-node cluster: its `srun` of
/// `hostname --ip-address` for the rendezvous and its `srun` of torchrun,
/// here a stand-in in pt_cpu/bin (tests/fixtures/slurm/torchrun), with
/// the epochs as the script's first argument, as workflows/pcluster-p5.toml
/// runs it.
#[test]
fn the_ddp_training_script_runs_with_its_rendezvous_and_epochs() {
    let slurm = Slurm::start();
    let p = project("");
    // The job's folder on the "cluster": what ddp-setup.sbatch leaves
    // there, logs/ and the conda environment's torchrun.
    let chdir = p.path().join("fsx/cpu-ddp");
    std::fs::create_dir_all(chdir.join("logs")).unwrap();
    std::fs::create_dir_all(chdir.join("pt_cpu/bin")).unwrap();
    std::fs::copy(
        crate::fixture("torchrun"),
        chdir.join("pt_cpu/bin/torchrun"),
    )
    .unwrap();
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "slurm-ddp"

[steps.train]
provider = "slurm.job"
[steps.train.inputs]
script = "slurm/ddp-train.sbatch"
args = ["3"]
nodes = 1
sbatch_args = ["--cpus-per-task=1"]
chdir = "{dir}"
# As workflows/pcluster-p5.toml judges it: the exit status, and rank 0
# at the last epoch (ddp.py counts from 0 and prints no closing line).
capture = {{ last_epoch = "\\[RANK 0\\] Epoch (\\d+) \\|" }}
expect = {{ last_epoch = ">= 2" }}
"#,
            dir = chdir.display()
        ),
    );
    p.write(
        "slurm/ddp-train.sbatch",
        &std::fs::read_to_string(
            crate::support::workspace_root().join("workflows/slurm/ddp-train.sbatch"),
        )
        .unwrap(),
    );
    let run = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), slurm.logs());
    assert_eq!(
        p.run(&["output", "wf.toml", "train.last_epoch"])
            .expect(0)
            .stdout
            .trim(),
        "2"
    );
    let logged = log(&p, "train");
    assert!(logged.contains("Node IP: 127.0.0.1"), "{logged}");
    // ddp.py's own lines: epochs 0 to 2 (the script's second argument,
    // 10 by default, saves at epoch 0 only), nothing after the last.
    assert!(
        logged.contains("[RANK 0] Epoch 0 | Batchsize: 32 | Steps: 16")
            && logged.contains("Epoch 0 | Training snapshot saved at ./snapshot.pt")
            && !logged.contains("Epoch 3")
            && !logged.contains("finished"),
        "{logged}"
    );
}
