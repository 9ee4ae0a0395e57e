//! Failure and resume: a failed step stops only its dependents, kill -9
//! and Ctrl-C mid-run, retries and timeouts, and the lock a second process
//! meets.

use crate::support::{Project, finish, signal, wait_until};
use std::time::Duration;

#[test]
fn a_failure_stops_only_its_dependents_and_resume_runs_only_what_is_left() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[vars.broken]
type = "bool"
default = true

[steps.ok]
provider = "exec"
[steps.ok.inputs]
run = "echo ok >> runs.log"

[steps.slow_ok]
provider = "exec"
[steps.slow_ok.inputs]
run = "sleep 0.5; echo slow_ok >> runs.log"

[steps.bad]
provider = "exec"
[steps.bad.inputs]
run = "echo bad >> runs.log; echo 'something broke: quota exceeded' >&2; if ${vars.broken}; then exit 3; fi"

[steps.after_bad]
provider = "exec"
depends_on = ["bad"]
[steps.after_bad.inputs]
run = "echo after_bad >> runs.log"

[steps.after_ok]
provider = "exec"
depends_on = ["ok", "slow_ok"]
[steps.after_ok.inputs]
run = "echo after_ok >> runs.log"
"#,
    );
    let r = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let log = p.read("runs.log");
    for step in ["ok", "slow_ok", "bad", "after_ok"] {
        assert!(log.lines().any(|l| l == step), "{step} did not run: {log}");
    }
    assert!(!log.contains("after_bad"), "{log}");
    assert!(r.stdout.contains("exited with status 3"), "{}", r.stdout);
    assert!(
        r.stdout.contains("something broke: quota exceeded"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("skipped: `bad` did not complete"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("3 created, 0 unchanged, 1 failed, 1 skipped"),
        "{}",
        r.stdout
    );

    let plan = p
        .run(&["plan", "wf.toml", "--var", "broken=false"])
        .expect(0);
    assert!(plan.stdout.contains("+ bad"), "{}", plan.stdout);
    assert!(plan.stdout.contains("+ after_bad"), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("2 to create, 0 to update, 0 to replace, 0 to delete, 3 unchanged"),
        "{}",
        plan.stdout
    );

    let fixed = p
        .run(&[
            "apply",
            "wf.toml",
            "--var",
            "broken=false",
            "--auto-approve",
        ])
        .expect(0);
    assert!(
        fixed.stdout.contains("2 created, 3 unchanged"),
        "{}",
        fixed.stdout
    );
    let log = p.read("runs.log");
    let count = |s: &str| log.lines().filter(|l| *l == s).count();
    assert_eq!(
        (count("ok"), count("slow_ok"), count("after_ok")),
        (1, 1, 1),
        "{log}"
    );
    assert_eq!((count("bad"), count("after_bad")), (2, 1), "{log}");
}

#[test]
fn kill_9_during_a_long_step_then_resume_finishes_without_repeating_work() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.first]
provider = "exec"
[steps.first.inputs]
run = "echo first >> runs.log; echo v=1 >> $FLOW_OUTPUT"

[steps.long]
provider = "exec"
[steps.long.inputs]
run = "echo $FLOW_OPERATION_TOKEN >> long-start.log; sleep 30; echo long >> runs.log; echo v=$V >> $FLOW_OUTPUT"
env = { V = "${steps.first.outputs.v}" }

[steps.last]
provider = "null"
[steps.last.inputs]
v = "${steps.long.outputs.v}"
"#,
    );
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(20), "the long step to start", || {
        p.lines("long-start.log") == 1
    });
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "flow should have died by SIGKILL");

    let listed = p.run(&["state", "list", "wf.toml"]).expect(0);
    assert!(
        listed.stdout.contains("create…"),
        "the intent must be durable: {}",
        listed.stdout
    );
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("resumes an interrupted create"),
        "{}",
        plan.stdout
    );
    let token = p.read("long-start.log").trim().to_string();
    assert!(
        plan.stdout.contains(&token),
        "plan shows the token: {}",
        plan.stdout
    );

    // Resume with a quicker command: the step's inputs changed, so it is
    // re-created, but `first` is not run again.
    p.write(
        "wf.toml",
        &p.read("wf.toml").replace("sleep 30", "sleep 0.1"),
    );
    let resumed = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        resumed.stdout.contains("Apply complete"),
        "{}",
        resumed.stdout
    );
    assert_eq!(p.read("runs.log"), "first\nlong\n");
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    let out = p.run(&["output", "wf.toml", "last.v"]).expect(0);
    assert_eq!(out.stdout.trim(), "1");
}

#[test]
fn kill_9_then_resume_reissues_the_same_operation_token() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.long]
provider = "exec"
[steps.long.inputs]
run = "echo $FLOW_OPERATION_TOKEN >> tokens.log; if [ ! -f resumed ]; then sleep 30; fi"
"#,
    );
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(20), "the step to start", || {
        p.lines("tokens.log") == 1
    });
    signal(&child, libc::SIGKILL);
    finish(child);
    p.write("resumed", "");
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let tokens: Vec<String> = p.read("tokens.log").lines().map(String::from).collect();
    assert_eq!(tokens.len(), 2);
    assert_eq!(
        tokens[0], tokens[1],
        "resume must re-issue with the same token"
    );
}

#[test]
fn ctrl_c_lets_running_steps_finish_and_starts_nothing_new() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.running]
provider = "exec"
[steps.running.inputs]
run = "echo started >> runs.log; sleep 1; echo running >> runs.log"

[steps.next]
provider = "exec"
depends_on = ["running"]
[steps.next.inputs]
run = "echo next >> runs.log"
"#,
    );
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(20), "the step to start", || {
        p.lines("runs.log") == 1
    });
    signal(&child, libc::SIGINT);
    let r = finish(child);
    assert_eq!(r.code, 130, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Interrupted"), "{}", r.stdout);
    assert_eq!(p.read("runs.log"), "started\nrunning\n");
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("1 to create"), "{}", plan.stdout);
    assert!(plan.stdout.contains("+ next"), "{}", plan.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(p.read("runs.log"), "started\nrunning\nnext\n");
}

#[test]
fn a_second_process_is_refused_by_the_lock_naming_the_holder() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.hold]
provider = "exec"
[steps.hold.inputs]
run = "echo started > started; sleep 3"
"#,
    );
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(20), "the step to start", || {
        p.path().join("started").exists()
    });
    let second = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(second.stderr.contains("locked"), "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!("pid {}", child.id())),
        "{}",
        second.stderr
    );
    assert!(second.stderr.contains("flow apply"), "{}", second.stderr);
    // The state error's next step is printed under it.
    assert!(
        second
            .stderr
            .contains("help: wait for that command to finish"),
        "{}",
        second.stderr
    );
    let destroy = p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(1);
    assert!(destroy.stderr.contains("locked"), "{}", destroy.stderr);
    finish(child).expect(0);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
}

#[test]
fn retries_absorb_transient_errors_and_timeouts_fail_the_step() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.flaky]
provider = "null"
retries = 3
[steps.flaky.inputs]
fail_times = 2

[steps.stubborn]
provider = "null"
retries = 1
[steps.stubborn.inputs]
fail_times = 5

[steps.slow]
provider = "exec"
timeout = "1s"
[steps.slow.inputs]
run = "sleep 20"
"#,
    );
    let r = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(
        r.stdout.contains("flaky") && r.stdout.contains("✓ created"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("timed out after 1s"), "{}", r.stdout);
    // The failure's next step is printed under it in the summary.
    assert!(
        r.stdout
            .contains("help: raise the step's `timeout` if the operation needs longer"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("transient failure 2 of 5"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("1 created, 0 unchanged, 2 failed"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("3 retries"), "{}", r.stdout);
    let show = p.run(&["state", "show", "wf.toml", "flaky"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["attempts"], 3);
    assert_eq!(v["status"], "applied");
}
