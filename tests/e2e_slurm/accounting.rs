//! A job the controller has forgotten (finished longer ago than
//! `MinJobAge`, here 2 s) while flow was dead: the resume finds it through
//! accounting (`sacct`, slurmdbd on MariaDB), reads its output file where
//! sbatch's `--output` pattern put it, judges it, and never submits it
//! again. Once with the job's id in the intent (killed while waiting), once
//! without (killed inside sbatch after the job was queued: found by the
//! operation token's comment, which accounting keeps with
//! `AccountingStoreFlags=job_comment`).

use std::time::Duration;

use crate::resume::{SCRIPT, spawn_apply, workflow};
use crate::support::slurm::{Features, Slurm};
use crate::support::{Project, finish, signal, wait_until};
use crate::{flow, log, project, record};

/// A project running job `name`, and its apply killed once `ready` holds.
fn killed_apply(
    slurm: &Slurm,
    name: &str,
    hold: &[(&str, String)],
    ready: impl Fn(&std::path::Path) -> bool,
) -> (Project, tempfile::TempDir) {
    let p = project(&workflow(name, 1));
    p.write("job.sbatch", SCRIPT);
    let marks = tempfile::tempdir().unwrap();
    let mut env = vec![("FLOW_TEST_MARKS", marks.path().display().to_string())];
    env.extend(hold.iter().cloned());
    let child = spawn_apply(&p, slurm, &env);
    wait_until(Duration::from_secs(30), name, || ready(marks.path()));
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    (p, marks)
}

#[test]
fn a_job_the_controller_forgot_is_adopted_from_accounting() {
    let slurm = Slurm::start_with(Features {
        accounting: true,
        min_job_age: Some(2),
        ..Features::default()
    });
    // Killed while waiting: the id is in the intent.
    let (waited, _m1) = killed_apply(&slurm, "forgot-wait", &[], |_| {
        slurm
            .jobs_named("forgot-wait")
            .iter()
            .any(|j| j.2 == "RUNNING")
    });
    assert!(record(&waited, "job")["in_flight"]["id"].is_string());
    // Killed inside sbatch, the job queued, its id never printed.
    let (lost, _m2) = killed_apply(
        &slurm,
        "forgot-answer",
        &[("FLOW_TEST_AFTER", "3".into())],
        |m| m.join("sbatch-submitted").exists(),
    );
    assert!(record(&lost, "job")["in_flight"]["id"].is_null());
    // Both jobs end; the controller purges them (about once a minute).
    wait_until(
        Duration::from_secs(150),
        "the controller to forget both jobs",
        || {
            slurm.jobs_named("forgot-wait").is_empty()
                && slurm.jobs_named("forgot-answer").is_empty()
        },
    );
    for (p, name) in [(&waited, "forgot-wait"), (&lost, "forgot-answer")] {
        let jobs = slurm.accounted_named(name);
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        let (id, state, _) = &jobs[0];
        assert_eq!(state, "COMPLETED");
        let run = flow(p, &slurm, &["apply", "--auto-approve", "wf.toml"]);
        assert_eq!(run.code, 0, "{name}: {}\n{}", run.all(), slurm.logs());
        assert!(
            !run.all().contains(": submitted on"),
            "{name}: {}",
            run.all()
        );
        let text = log(p, "job");
        assert!(
            text.contains("the interrupted create had completed: adopting it")
                || text.contains("already submitted by this operation"),
            "{name}: {text}"
        );
        // The output came from job_<id>.out, found by the script's pattern.
        assert!(text.contains("finished after 1 s"), "{name}: {text}");
        let rec = record(p, "job");
        assert_eq!(rec["resource_id"], id.as_str());
        assert_eq!(rec["outputs"]["state"], "COMPLETED");
        assert!(rec["in_flight"].is_null());
        assert_eq!(
            slurm.accounted_named(name).len(),
            1,
            "{name}: submitted once"
        );
    }
}
