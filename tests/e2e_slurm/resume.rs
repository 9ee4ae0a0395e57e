//! kill -9 of flow inside each call a slurm.job makes, then a resume that
//! must adopt the job, never submit a second one; Ctrl-C and destroy
//! cancel a running job.
//!
//! The kill lands at a known point: a stand-in in front of sbatch
//! (tests/fixtures/slurm/kill/sbatch) marks when it was entered and when
//! the real sbatch queued the job, and holds there; the controller
//! (`squeue`) and the step's intent (`flow state show`) show afterwards
//! what each kill left, and accounting (`sacct`, slurmdbd on MariaDB)
//! counts the submissions.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::slurm::{Features, Slurm};
use crate::support::{Project, finish, signal, wait_until};
use crate::{env_for, fixture, flow, log, project, record};

/// A job of about `secs` seconds that prints its end.
pub(crate) fn workflow(name: &str, secs: u32) -> String {
    format!(
        r#"
[workflow]
name = "slurm-resume"

[steps.job]
provider = "slurm.job"
[steps.job.inputs]
script = "job.sbatch"
job_name = "{name}"
environment = {{ SECS = "{secs}" }}
success_pattern = "finished after"
"#
    )
}

/// The job: prints its start, sleeps `$SECS`, prints its end, into
/// `job_<id>.out` in the workflow's folder.
pub(crate) const SCRIPT: &str = "#!/bin/bash\n#SBATCH --output=job_%j.out\necho started\nsleep \"$SECS\"\necho \"finished after $SECS s\"\n";

/// `flow apply` started in the background, with the sbatch stand-in first
/// on PATH and `extra` in its environment.
pub(crate) fn spawn_apply(
    p: &Project,
    slurm: &Slurm,
    extra: &[(&str, String)],
) -> std::process::Child {
    let mut cmd = p.cmd(&["apply", "--auto-approve", "wf.toml"]);
    for (k, v) in env_for(slurm, Some(&fixture("kill"))) {
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flow")
}

/// Where a kill landed, and what the resume did.
#[derive(Debug)]
struct Landing {
    window: &'static str,
    job_at_kill: bool,
    intent_id: bool,
    submissions: usize,
    resumed_by: &'static str,
}

/// One kill in `window`: `hold` is the stand-in's environment, `ready`
/// says when to kill.
fn kill_once(
    name: &'static str,
    window: &'static str,
    hold: &[(&str, String)],
    ready: impl Fn(&Path, &Slurm) -> bool,
) -> Landing {
    let slurm = Slurm::start_with(Features {
        accounting: true,
        ..Features::default()
    });
    let p = project(&workflow(name, 2));
    p.write("job.sbatch", SCRIPT);
    let marks = tempfile::tempdir().unwrap();
    let mut env: Vec<(&str, String)> =
        vec![("FLOW_TEST_MARKS", marks.path().display().to_string())];
    env.extend(hold.iter().cloned());
    let child = spawn_apply(&p, &slurm, &env);
    wait_until(Duration::from_secs(30), window, || {
        ready(marks.path(), &slurm)
    });
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "flow was killed: {}", killed.all());
    let job_at_kill = !slurm.jobs_named(name).is_empty();
    let intent = record(&p, "job")["in_flight"].clone();
    assert!(intent.is_object(), "the intent survives the kill: {intent}");
    let intent_id = intent["id"].is_string();
    // Let the stand-in finish what it holds, as a real sbatch would.
    std::thread::sleep(Duration::from_secs(3));
    let resumed = flow(&p, &slurm, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(resumed.code, 0, "{}\n{}", resumed.all(), slurm.logs());
    // Accounting records every submission, whatever the controller keeps;
    // slurmctld hands the records to slurmdbd on its own time (seconds on a
    // busy machine), so wait for the first before counting.
    wait_until(
        Duration::from_secs(60),
        "accounting to record the job",
        || {
            slurm
                .accounted_named(name)
                .iter()
                .any(|j| j.1 == "COMPLETED")
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let jobs = slurm.accounted_named(name);
    assert_eq!(
        jobs.len(),
        1,
        "{window}: one submission, never two: {jobs:?}"
    );
    assert_eq!(jobs[0].1, "COMPLETED", "{jobs:?}");
    assert!(jobs[0].2.starts_with("flow:"), "{jobs:?}");
    assert_eq!(record(&p, "job")["resource_id"], jobs[0].0.as_str());
    assert!(record(&p, "job")["in_flight"].is_null());
    let text = log(&p, "job");
    let resumed_by = if text.contains("following it instead of submitting again") {
        "read: followed the running job"
    } else if text.contains("the interrupted create had completed: adopting it") {
        "read: adopted the finished job"
    } else if text.contains("already submitted by this operation") {
        "create: found by its token"
    } else {
        "create: submitted"
    };
    Landing {
        window,
        job_at_kill,
        intent_id,
        submissions: jobs.len(),
        resumed_by,
    }
}

#[test]
fn kill_9_inside_each_call_then_resume_submits_once() {
    let landings = [
        // Inside the sbatch call, before the controller has the job: flow
        // dies, so the stand-in submits nothing.
        kill_once(
            "k-before",
            "inside sbatch, before the job is queued",
            &[("FLOW_TEST_BEFORE", "5".into())],
            |m, _| m.join("sbatch-started").exists(),
        ),
        // Inside the sbatch call, after the controller queued the job,
        // before its answer (the job id) reached flow: the lost answer.
        kill_once(
            "k-answer",
            "inside sbatch, the job queued, its id not yet printed",
            &[("FLOW_TEST_AFTER", "5".into())],
            |m, _| m.join("sbatch-submitted").exists(),
        ),
        // In the wait: the id is in the intent, the job runs.
        kill_once(
            "k-wait",
            "waiting on the running job (scontrol polls)",
            &[],
            |_, s| s.jobs_named("k-wait").iter().any(|j| j.2 == "RUNNING"),
        ),
    ];
    for l in &landings {
        eprintln!(
            "kill {:<62} job at kill: {:<5} id in intent: {:<5} resume: {:<28} submissions: {}",
            l.window, l.job_at_kill, l.intent_id, l.resumed_by, l.submissions
        );
    }
    let [before, answer, wait] = &landings;
    assert!(!before.job_at_kill && !before.intent_id);
    assert_eq!(before.resumed_by, "create: submitted");
    assert!(answer.job_at_kill && !answer.intent_id, "{answer:?}");
    assert_ne!(answer.resumed_by, "create: submitted", "{answer:?}");
    assert!(wait.job_at_kill && wait.intent_id, "{wait:?}");
    assert!(wait.resumed_by.starts_with("read:"), "{wait:?}");
}

#[test]
fn ctrl_c_cancels_the_running_job() {
    let slurm = Slurm::start();
    let p = project(&workflow("interrupted", 300));
    p.write("job.sbatch", SCRIPT);
    let marks = tempfile::tempdir().unwrap();
    let child = spawn_apply(
        &p,
        &slurm,
        &[("FLOW_TEST_MARKS", marks.path().display().to_string())],
    );
    wait_until(Duration::from_secs(30), "the job to run", || {
        slurm
            .jobs_named("interrupted")
            .iter()
            .any(|j| j.2 == "RUNNING")
    });
    signal(&child, libc::SIGINT);
    let run = finish(child);
    assert_ne!(run.code, 0);
    assert!(
        run.all()
            .contains("cancelled because the run was interrupted"),
        "{}",
        run.all()
    );
    wait_until(Duration::from_secs(20), "the job to be cancelled", || {
        let jobs = slurm.jobs_named("interrupted");
        jobs.len() == 1 && jobs[0].2 == "CANCELLED"
    });
}

#[test]
fn destroy_cancels_a_job_a_killed_apply_left_running() {
    let slurm = Slurm::start();
    let p = project(&workflow("orphan", 300));
    p.write("job.sbatch", SCRIPT);
    let marks = tempfile::tempdir().unwrap();
    let child = spawn_apply(
        &p,
        &slurm,
        &[("FLOW_TEST_MARKS", marks.path().display().to_string())],
    );
    wait_until(Duration::from_secs(30), "the job to run", || {
        slurm.jobs_named("orphan").iter().any(|j| j.2 == "RUNNING")
    });
    signal(&child, libc::SIGKILL);
    finish(child);
    let started = Instant::now();
    let run = flow(&p, &slurm, &["destroy", "--auto-approve", "wf.toml"]);
    assert_eq!(run.code, 0, "{}", run.all());
    // Destroy does not wait out the job's 300 s: it cancels it.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let jobs = slurm.jobs_named("orphan");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].2, "CANCELLED", "{jobs:?}");
    assert!(
        p.run(&["state", "list", "wf.toml"])
            .stdout
            .lines()
            .all(|l| !l.contains(" job "))
    );
}
