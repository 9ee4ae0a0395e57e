//! Saved plans, removed steps, destroy (order, protection, secrets from
//! the workflow) and backups.

use super::CHAIN;
use crate::support::Project;

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
