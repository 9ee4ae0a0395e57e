//! The ways Slurm ends a job that flow did not expect, each produced for
//! real on the one-node cluster and named by the step with what it means
//! and the tail of the job's output:
//! - `OUT_OF_MEMORY`: a job over its `--mem`, killed by the cgroup (task/cgroup
//!   on the cgroup v1 memory controller);
//! - `TIMEOUT`: a job past `--time=1` (Slurm's limits count in minutes, and the
//!   controller looks about every 30 s: this takes 60 to 100 s);
//! - `NODE_FAIL`: slurmd killed under a running `--no-requeue` job, the node
//!   set down after `SlurmdTimeout` (6 s here).

use std::time::Duration;

use crate::support::slurm::{Features, Slurm};
use crate::support::{finish, wait_until};
use crate::{env_for, flow, project, record};

#[test]
fn out_of_memory_and_timeout_are_named_with_the_output_tail() {
    let slurm = Slurm::start_with(Features {
        memory_limits: true,
        ..Features::default()
    });
    let p = project(
        r#"
[workflow]
name = "slurm-limits"

[steps.oom]
provider = "slurm.job"
[steps.oom.inputs]
script = "oom.sbatch"
job_name = "over-memory"
sbatch_args = ["--mem=50M"]

[steps.slow]
provider = "slurm.job"
[steps.slow.inputs]
script = "slow.sbatch"
job_name = "over-time"
time_limit = "1"
sbatch_args = ["--mem=50M"]
"#,
    );
    p.write(
        "oom.sbatch",
        "#!/bin/bash\n#SBATCH --output=oom_%j.out\necho 'allocating 300 MiB'\npython3 -c 'x = bytearray(300 << 20); import time; time.sleep(30)'\necho 'still here'\n",
    );
    p.write(
        "slow.sbatch",
        "#!/bin/bash\n#SBATCH --output=slow_%j.out\necho 'epoch 1 of 1000'\nsleep 600\n",
    );
    let run = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]).expect(1);
    let all = run.all();
    assert!(
        all.contains("ended OUT_OF_MEMORY, exit code 0:125: a process was killed for using more memory than allowed — last lines: allocating 300 MiB"),
        "{all}\n{}",
        slurm.logs()
    );
    assert!(
        all.contains("ended TIMEOUT, exit code 0:15: it ran past its time limit (--time) — last lines: epoch 1 of 1000 | slurmstepd-"),
        "{all}\n{}",
        slurm.logs()
    );
    for (step, name, state) in [
        ("oom", "over-memory", "OUT_OF_MEMORY"),
        ("slow", "over-time", "TIMEOUT"),
    ] {
        let jobs = slurm.jobs_named(name);
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        assert_eq!(jobs[0].2, state, "{jobs:?}");
        assert_eq!(record(&p, step)["status"], "failed");
    }
}

#[test]
fn a_node_that_dies_under_a_job_is_named_node_fail() {
    let mut slurm = Slurm::start_with(Features {
        slurmd_timeout: Some(6),
        ..Features::default()
    });
    let p = project(
        r#"
[workflow]
name = "slurm-node-fail"

[steps.train]
provider = "slurm.job"
[steps.train.inputs]
script = "train.sbatch"
job_name = "on-a-dying-node"
sbatch_args = ["--no-requeue"]
"#,
    );
    p.write(
        "train.sbatch",
        "#!/bin/bash\n#SBATCH --output=train_%j.out\necho 'rank 0 ready'\nsleep 600\n",
    );
    let mut cmd = p.cmd(&["apply", "--auto-approve", "wf.toml"]);
    for (k, v) in env_for(&slurm, None) {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flow");
    // RUNNING is set when the controller hands the job to slurmd, before
    // the script has run: wait for its first line in the output file, or
    // the kill can land before there is a tail to show.
    wait_until(Duration::from_secs(30), "the job's first line", || {
        slurm
            .jobs_named("on-a-dying-node")
            .iter()
            .filter(|j| j.2 == "RUNNING")
            .any(|j| {
                p.read(&format!("train_{}.out", j.0))
                    .contains("rank 0 ready")
            })
    });
    slurm.kill_slurmd();
    let run = finish(child);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.all().contains(
            "ended NODE_FAIL, exit code 0:0: a node it ran on failed — last lines: rank 0 ready"
        ),
        "{}\n{}",
        run.all(),
        slurm.logs()
    );
    assert_eq!(slurm.jobs_named("on-a-dying-node")[0].2, "NODE_FAIL");
}
