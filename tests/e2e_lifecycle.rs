//! End-to-end: the `flow` binary through whole lifecycles — plan, apply,
//! re-plan, change, failure and resume, kill -9, Ctrl-C, locks, saved plans,
//! destroy order.

mod support;

use std::time::Duration;

use support::{Project, finish, signal, wait_until};

/// Three exec steps: `net` and `data` independent, `train` needing both.
/// Each appends its name to `runs.log` when it runs and to `destroyed.log`
/// when it is destroyed.
const CHAIN: &str = r#"
[workflow]
name = "chain"

[vars.size]
type = "integer"
default = 1

[steps.net]
provider = "exec"
[steps.net.inputs]
run = "echo net >> runs.log; echo subnet=subnet-${vars.size} >> $FLOW_OUTPUT"
destroy = "echo net >> destroyed.log"

[steps.data]
provider = "exec"
[steps.data.inputs]
run = "echo data >> runs.log; echo bucket=data-bucket >> $FLOW_OUTPUT"
destroy = "echo data >> destroyed.log"

[steps.train]
provider = "exec"
[steps.train.inputs]
run = "echo train >> runs.log; echo job=$SUBNET-$BUCKET >> $FLOW_OUTPUT"
destroy = "echo train >> destroyed.log"
env = { SUBNET = "${steps.net.outputs.subnet}", BUCKET = "${steps.data.outputs.bucket}" }
"#;

#[test]
fn whole_cycle_validate_plan_apply_replan_change_destroy() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let v = p.run(&["validate", "wf.toml"]).expect(0);
    assert!(v.stdout.contains("3 steps"), "{}", v.stdout);

    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(plan.stdout.contains("Plan: 3 to create"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("(known after apply)"),
        "{}",
        plan.stdout
    );
    assert!(
        !p.path().join(".flow").exists(),
        "plan must not create state"
    );

    let json = p.run(&["plan", "wf.toml", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan json");
    let actions: Vec<(&str, &str)> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["step"].as_str().unwrap(), c["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [("data", "create"), ("net", "create"), ("train", "create")]
    );

    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        apply.stdout.contains("Apply complete: 3 created"),
        "{}",
        apply.stdout
    );
    assert_eq!(p.lines("runs.log"), 3);
    let out = p.run(&["output", "wf.toml", "train.job"]).expect(0);
    assert_eq!(out.stdout.trim(), "subnet-1-data-bucket");

    // Nothing changed: plan says so, apply does nothing.
    let again = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert!(again.stdout.contains("No changes"), "{}", again.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(p.lines("runs.log"), 3, "an unchanged apply re-ran a step");

    // A variable change updates `net` and, through its output, `train`.
    let changed = p
        .run(&["plan", "wf.toml", "--var", "size=2", "--detailed-exitcode"])
        .expect(2);
    assert!(changed.stdout.contains("~ net"), "{}", changed.stdout);
    assert!(changed.stdout.contains("\"echo net >> runs.log; echo subnet=subnet-1 >> $FLOW_OUTPUT\" → \"echo net >> runs.log; echo subnet=subnet-2 >> $FLOW_OUTPUT\""), "{}", changed.stdout);
    assert!(changed.stdout.contains("~ train"), "{}", changed.stdout);
    assert!(!changed.stdout.contains("~ data"), "{}", changed.stdout);
    p.run(&["apply", "wf.toml", "--var", "size=2", "--auto-approve"])
        .expect(0);
    assert_eq!(
        p.read("runs.log"),
        "net\ndata\ntrain\nnet\ntrain\n".replace("net\ndata", &first_two(&p))
    );
    let out = p.run(&["output", "wf.toml", "train.job"]).expect(0);
    assert_eq!(out.stdout.trim(), "subnet-2-data-bucket");
    p.run(&["plan", "wf.toml", "--var", "size=2", "--detailed-exitcode"])
        .expect(0);

    // Destroy goes in reverse dependency order: train before net and data.
    let d = p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(d.stdout.contains("3 deleted"), "{}", d.stdout);
    let order: Vec<String> = p.read("destroyed.log").lines().map(String::from).collect();
    assert_eq!(order.len(), 3);
    assert_eq!(order[0], "train", "destroy order: {order:?}");
    let listed = p.run(&["state", "list", "wf.toml"]).expect(0);
    assert!(
        listed.stdout.contains("State is empty"),
        "{}",
        listed.stdout
    );
}

/// The order the two independent steps happened to run in, as logged.
fn first_two(p: &Project) -> String {
    p.read("runs.log")
        .lines()
        .take(2)
        .collect::<Vec<_>>()
        .join("\n")
}

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
fn saved_plans_apply_exactly_and_stale_ones_are_refused() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let planned = p.run(&["plan", "wf.toml", "--out", "p1.plan"]).expect(0);
    assert!(
        planned.stdout.contains("Saved the plan"),
        "{}",
        planned.stdout
    );
    p.run(&["apply", "p1.plan"]).expect(0);
    assert_eq!(p.lines("runs.log"), 3);

    // Two plans made from the same state: the first applied makes the second stale.
    p.run(&["plan", "wf.toml", "--var", "size=5", "--out", "p2.plan"])
        .expect(0);
    p.run(&["plan", "wf.toml", "--var", "size=6", "--out", "p3.plan"])
        .expect(0);
    p.run(&["apply", "p2.plan"]).expect(0);
    let out = p.run(&["output", "wf.toml", "net.subnet"]).expect(0);
    assert_eq!(out.stdout.trim(), "subnet-5");
    let stale = p.run(&["apply", "p3.plan"]).expect(1);
    assert!(stale.stderr.contains("stale"), "{}", stale.stderr);
    assert!(stale.stderr.contains("state changed"), "{}", stale.stderr);

    // A plan whose workflow file changed afterwards is refused too.
    p.run(&["plan", "wf.toml", "--var", "size=7", "--out", "p4.plan"])
        .expect(0);
    p.write(
        "wf.toml",
        &CHAIN.replace("bucket=data-bucket", "bucket=other"),
    );
    let changed = p.run(&["apply", "p4.plan"]).expect(1);
    assert!(
        changed.stderr.contains("changed since the plan was made"),
        "{}",
        changed.stderr
    );
    let out = p.run(&["output", "wf.toml", "net.subnet"]).expect(0);
    assert_eq!(
        out.stdout.trim(),
        "subnet-5",
        "a refused plan changed state"
    );
}

#[test]
fn apply_without_a_terminal_needs_auto_approve() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let r = p.run(&["apply", "wf.toml"]).expect(1);
    assert!(r.stderr.contains("--auto-approve"), "{}", r.stderr);
    assert!(!p.path().join("runs.log").exists());
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

#[test]
fn removed_steps_are_deleted_and_destroy_works_from_state_after_the_file_changed() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    // Drop `train` from the file: the plan deletes it.
    let without_train = CHAIN[..CHAIN.find("[steps.train]").unwrap()].to_string();
    p.write("wf.toml", &without_train);
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("- train"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("removed from the workflow"),
        "{}",
        plan.stdout
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(p.read("destroyed.log"), "train\n");

    // Rewrite the file completely: destroy still removes what state holds.
    p.write("wf.toml", "[workflow]\nname = \"other\"\n");
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let mut destroyed: Vec<String> = p.read("destroyed.log").lines().map(String::from).collect();
    destroyed.sort();
    assert_eq!(destroyed, ["data", "net", "train"]);
}

#[test]
fn destroy_refuses_protected_steps_and_targets_that_others_depend_on() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.bucket]
provider = "null"
lifecycle = { prevent_destroy = true }
[steps.bucket.inputs]
name = "data"

[steps.job]
provider = "null"
[steps.job.inputs]
bucket = "${steps.bucket.outputs.name}"
"#,
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let r = p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(1);
    assert!(r.stderr.contains("prevent_destroy"), "{}", r.stderr);
    let r = p
        .run(&[
            "destroy",
            "wf.toml",
            "--auto-approve",
            "--target",
            "bucket",
            "--allow-protected",
        ])
        .expect(1);
    assert!(
        r.stderr.contains("`job` depends on `bucket`"),
        "{}",
        r.stderr
    );
    p.run(&["destroy", "wf.toml", "--auto-approve", "--target", "job"])
        .expect(0);
    let listed = p.run(&["state", "list", "wf.toml"]).expect(0);
    assert!(
        listed.stdout.contains("bucket") && !listed.stdout.contains("job "),
        "{}",
        listed.stdout
    );
    p.run(&["destroy", "wf.toml", "--auto-approve", "--allow-protected"])
        .expect(0);
}

#[test]
fn target_applies_a_step_with_what_it_needs_only() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let r = p
        .run(&["apply", "wf.toml", "--auto-approve", "--target", "net"])
        .expect(0);
    assert!(r.stdout.contains("1 created"), "{}", r.stdout);
    assert_eq!(p.read("runs.log"), "net\n");
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("2 to create"), "{}", plan.stdout);
}

#[test]
fn secrets_never_reach_state_logs_or_output() {
    let p = Project::new();
    let secret = "hf_SuperSecretToken_123";
    p.write(
        "wf.toml",
        r#"
[vars.hf_token]
sensitive = true
env = "HF_TOKEN"

[steps.login]
provider = "exec"
[steps.login.inputs]
run = "echo using token $TOKEN; echo echoed=$TOKEN >> $FLOW_OUTPUT"
env = { TOKEN = "${vars.hf_token}" }

[steps.echo]
provider = "null"
[steps.echo.inputs]
token = "${vars.hf_token}"
"#,
    );
    let env = [("HF_TOKEN", secret)];
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let outputs = p.run_env(&["output", "wf.toml", "--json"], &env).expect(0);
    let show = p
        .run_env(&["state", "show", "wf.toml", "login"], &env)
        .expect(0);
    for r in [&plan, &apply, &outputs, &show] {
        assert!(!r.all().contains(secret), "secret printed:\n{}", r.all());
    }
    assert!(
        apply.stdout.contains("using token (sensitive)"),
        "{}",
        apply.stdout
    );
    let files = p.state_files();
    assert!(!files.is_empty());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let hay = String::from_utf8_lossy(&bytes);
        assert!(!hay.contains(secret), "secret in {}", f.display());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", f.display());
    }
    // Unchanged secret: nothing to do. Changed secret: the digest differs.
    p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    let changed = p
        .run_env(
            &["plan", "wf.toml", "--detailed-exitcode"],
            &[("HF_TOKEN", "another-token-456")],
        )
        .expect(2);
    assert!(
        changed.stdout.contains("(sensitive) → (sensitive)"),
        "{}",
        changed.stdout
    );
}

#[test]
fn digests_are_values_and_secrets_stay_sealed() {
    let p = Project::new();
    // An image digest, as `docker push` prints it: a value, not a secret.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let secret = "secret-token-1";
    p.write(
        "wf.toml",
        &r#"
[vars.token]
sensitive = true
env = "API_TOKEN"

[steps.build]
provider = "exec"
[steps.build.inputs]
run = "echo digest=DIGEST >> $FLOW_OUTPUT; echo echoed=$TOKEN >> $FLOW_OUTPUT"
env = { TOKEN = "${vars.token}" }

[steps.deploy]
provider = "exec"
[steps.deploy.inputs]
run = "echo deploying $IMAGE"
env = { IMAGE = "${steps.build.outputs.digest}", REGION = "x", TOKEN = "${vars.token}" }
"#
        .replace("DIGEST", &digest),
    );
    let env = [("API_TOKEN", secret)];
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);

    // `flow output` shows the digest; the output carrying the secret stays masked.
    let o = p.run(&["output", "wf.toml", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["build"]["digest"], digest.as_str(), "{}", o.stdout);
    assert_eq!(v["build"]["echoed"], "(sensitive)", "{}", o.stdout);
    let one = p.run(&["output", "wf.toml", "build.digest"]).expect(0);
    assert_eq!(one.stdout.trim(), digest, "{}", one.stdout);
    let text = p.run(&["output", "wf.toml"]).expect(0);
    assert!(
        text.stdout.contains(&format!("digest = {digest}")),
        "{}",
        text.stdout
    );

    // The digest passed on as an input is recorded and shown as it is; the
    // secret beside it is sealed (`sealed:sha256:`) and shown masked.
    let show = p.run(&["state", "show", "wf.toml", "deploy"]).expect(0);
    assert!(
        show.stdout.contains(&format!("\"IMAGE\": \"{digest}\"")),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout.contains("\"TOKEN\": \"(sensitive)\""),
        "{}",
        show.stdout
    );
    let sealed_in_state = p.state_files().iter().any(|f| {
        let bytes = std::fs::read(f).unwrap_or_default();
        String::from_utf8_lossy(&bytes).contains("sealed:sha256:")
    });
    assert!(sealed_in_state, "no seal found in state");

    // Unchanged: nothing to do (the plain digest compares equal).
    p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    // A changed secret: the plan shows it as (sensitive) on both sides, and
    // the digest in the before-value as it is.
    let changed = p
        .run_env(
            &["plan", "wf.toml", "--detailed-exitcode"],
            &[("API_TOKEN", "secret-token-2")],
        )
        .expect(2);
    assert!(
        changed
            .stdout
            .contains(r#"env = {"TOKEN":"(sensitive)"} → {"TOKEN":"(sensitive)"}"#),
        "{}",
        changed.stdout
    );
    assert!(
        changed.stdout.contains(&format!(
            r#"{{"IMAGE":"{digest}","REGION":"x","TOKEN":"(sensitive)"}}"#
        )),
        "{}",
        changed.stdout
    );
    for r in [&o, &one, &text, &show, &changed] {
        assert!(
            !r.all().contains("secret-token"),
            "secret printed:\n{}",
            r.all()
        );
    }
}

#[test]
fn graph_prints_dot_and_output_prints_json() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let g = p.run(&["graph", "wf.toml"]).expect(0);
    assert!(g.stdout.starts_with("digraph"), "{}", g.stdout);
    assert!(g.stdout.contains("\"net\" -> \"train\""), "{}", g.stdout);
    assert!(g.stdout.contains("\"data\" -> \"train\""), "{}", g.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let o = p.run(&["output", "wf.toml", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["data"]["bucket"], "data-bucket");
    let s = p.run(&["output", "wf.toml", "net", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(v["subnet"], "subnet-1");
    let missing = p.run(&["output", "wf.toml", "net.nope"]).expect(1);
    assert!(
        missing.stderr.contains("its outputs are: subnet"),
        "{}",
        missing.stderr
    );
}

#[test]
fn destroy_commands_get_secrets_back_from_the_workflow_when_it_has_them() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[vars.token]
sensitive = true
env = "API_TOKEN"

[steps.svc]
provider = "exec"
[steps.svc.inputs]
run = "true"
destroy = "echo \"token-length=${#TOKEN}\" >> destroyed.log"
env = { TOKEN = "${vars.token}" }
"#,
    );
    let env = [("API_TOKEN", "abcdefgh")];
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    // With the secret available, destroy sees the real value (8 characters),
    // not the 78-character seal kept in state.
    p.run_env(&["destroy", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert_eq!(p.read("destroyed.log"), "token-length=8\n");

    // Without it, destroy still runs, without the variable, and says so in the log.
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(p.read("destroyed.log"), "token-length=8\ntoken-length=0\n");
    let log = p.read(".flow/wf/logs/svc.log");
    assert!(log.contains("runs without TOKEN:"), "{log}");
}

#[test]
fn backups_are_kept_and_restorable() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let newest = p.newest_backup("wf.toml");
    // The newest backup was taken just before destroy: all three steps.
    let restored = p.run(&["state", "restore", "wf.toml", &newest]).expect(0);
    assert!(
        restored.stdout.contains("Restored 3 steps"),
        "{}",
        restored.stdout
    );
    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.stdout);
}
