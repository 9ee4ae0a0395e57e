//! End-to-end: the `flow` binary through whole lifecycles — plan, apply,
//! re-plan, change, failure and resume, kill -9, Ctrl-C, locks, saved plans,
//! destroy order. This file: the whole cycle, --target, graph and output, the
//! huge-page policy commands inherit; `resume`, `plans_and_destroy`,
//! `read_while_applying` and `secrets` the rest.

#[path = "../support/mod.rs"]
mod support;

mod gpu_health;
mod leaks;
mod names;
mod plans_and_destroy;
mod read_commands;
mod read_while_applying;
mod resume;
mod secrets;

use support::Project;

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
fn apply_without_a_terminal_needs_auto_approve() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let r = p.run(&["apply", "wf.toml"]).expect(1);
    assert!(r.stderr.contains("--auto-approve"), "{}", r.stderr);
    assert!(!p.path().join("runs.log").exists());
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

/// flow's allocator (mimalloc, see `engine/src/main.rs`) must leave the
/// huge-page policy alone: a build that disables transparent huge pages for
/// its process (`prctl(PR_SET_THP_DISABLE)`, inherited across `exec`) would
/// turn them off for every exec step, pcluster and kubectl too; a build that
/// asks for them (`madvise(MADV_HUGEPAGE)`, mimalloc's default) made start-up
/// stall and doubled the heap (docs/performance/engine.md, round 9).
#[test]
fn commands_run_with_the_huge_page_policy_flow_was_started_with() {
    let ours = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let ours = ours
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .expect("this kernel shows no THP_enabled in /proc/PID/status: it appeared in Linux 5.0, and the test compares flow's with its own");
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "thp"

[steps.probe]
provider = "exec"
[steps.probe.inputs]
run = """
grep THP_enabled /proc/self/status > child.txt
grep THP_enabled /proc/$PPID/status > parent.txt
echo parent=$(cat /proc/$PPID/comm) >> $FLOW_OUTPUT
echo advised=$(grep -c '^VmFlags:.* hg' /proc/$PPID/smaps || true) >> $FLOW_OUTPUT
"""
"#,
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let out = |name: &str| {
        let r = p.run(&["output", "wf.toml", &format!("probe.{name}")]);
        r.expect(0).stdout.trim().to_string()
    };
    // The kernel keeps the first 15 bytes of a process's name.
    let bin = support::flow_bin();
    let name: String = bin
        .file_name()
        .unwrap()
        .to_string_lossy()
        .chars()
        .take(15)
        .collect();
    assert_eq!(out("parent"), name, "the step's shell is flow's child");
    assert_eq!(p.read("parent.txt").trim(), ours.trim(), "flow itself");
    assert_eq!(
        p.read("child.txt").trim(),
        ours.trim(),
        "the step's command"
    );
    assert_eq!(out("advised"), "0", "flow's memory asked for huge pages");
}
