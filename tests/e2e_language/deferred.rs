//! A `for_each` over a step's outputs, as the multi-AZ VPC template gives
//! them (`PrivateSubnets`, one comma-joined string): unknown until the VPC
//! step has applied, so the plan defers the step and what needs it, and
//! apply plans them in a second round, once the outputs are in state.

use super::lines_in_order;
use crate::support::Project;

/// `vpc` writes its subnets as an output; `fsx` makes one file system per
/// subnet; `train` reads the one in the first subnet. Each appends to
/// `runs.log` when it runs and `destroyed.log` when it is destroyed.
const PER_SUBNET: &str = r#"
[workflow]
name = "per-subnet"

[vars.subnets]
default = "subnet-a,subnet-b"

[steps.vpc]
provider = "exec"
[steps.vpc.inputs]
run = "echo vpc >> runs.log; echo PrivateSubnets=${vars.subnets} >> $FLOW_OUTPUT"
destroy = "echo vpc >> destroyed.log"

[steps.fsx]
provider = "exec"
for_each = '${split(",", steps.vpc.outputs.PrivateSubnets)}'
[steps.fsx.inputs]
run = "echo fsx-${each.key} >> runs.log; echo id=fs-${each.key} >> $FLOW_OUTPUT"
destroy = "echo fsx-${each.key} >> destroyed.log"

[steps.train]
provider = "exec"
[steps.train.inputs]
run = 'echo train-${steps.fsx["subnet-a"].outputs.id} >> runs.log'
destroy = "echo train >> destroyed.log"
"#;

#[test]
fn a_for_each_over_outputs_is_planned_once_they_are_known() {
    let p = Project::new();
    p.write("w.toml", PER_SUBNET);

    // Before anything applied: vpc is planned, fsx and train are deferred.
    let plan = p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(2);
    assert!(plan.stdout.contains("+ vpc"), "{}", plan.stdout);
    let line_of = |text: &str, step: &str| {
        text.lines()
            .find(|l| l.contains(step))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line_of(&plan.stdout, "fsx[*]")
            .contains("deferred — its for_each reads outputs of `vpc`, known after apply"),
        "{}",
        plan.stdout
    );
    assert!(
        line_of(&plan.stdout, "train").contains("deferred — it needs `fsx`, deferred"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("1 to create") && plan.stdout.contains("2 steps deferred"),
        "{}",
        plan.stdout
    );
    let json = p.run(&["plan", "w.toml", "--json"]).expect(0);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let deferred: Vec<&str> = value["deferred"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["step"].as_str().unwrap())
        .collect();
    assert_eq!(deferred, ["fsx", "train"]);
    assert_eq!(value["deferred"][0]["waits_on"], serde_json::json!(["vpc"]));
    assert!(!p.path().join("runs.log").exists(), "plan ran nothing");

    // Apply: vpc in round 1, then the instances its outputs make, then train.
    let apply = p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("Round 2"), "{}", apply.all());
    assert!(
        apply.stdout.contains(r#"+ fsx["subnet-a"]"#)
            && apply.stdout.contains(r#"+ fsx["subnet-b"]"#),
        "{}",
        apply.stdout
    );
    let order = lines_in_order(&p, "runs.log");
    assert_eq!(order.first().map(String::as_str), Some("vpc"), "{order:?}");
    // train needs fsx["subnet-a"] only: it runs after that one, in any
    // order with fsx["subnet-b"].
    let at = |name: &str| order.iter().position(|s| s == name);
    assert!(
        matches!((at("fsx-subnet-a"), at("train-fs-subnet-a")), (Some(a), Some(t)) if a < t)
            && at("fsx-subnet-b").is_some(),
        "{order:?}"
    );
    assert_eq!(order.len(), 4, "each step ran once: {order:?}");
    let id = p
        .run(&["output", "w.toml", r#"fsx["subnet-b"].id"#])
        .expect(0);
    assert_eq!(id.stdout.trim(), "fs-subnet-b");

    // Now state knows the subnets: the plan is complete and has nothing to do.
    let again = p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(0);
    assert!(again.stdout.contains("No changes"), "{}", again.stdout);

    // The VPC's subnets change: until it has applied, what state holds of
    // fsx stays (no instance is deleted on a guess); then only the
    // instance whose key went is destroyed, and only the new one created.
    std::fs::remove_file(p.path().join("runs.log")).unwrap();
    let moved = ["--var", "subnets=subnet-a,subnet-c"];
    let plan = p
        .run(&[&["plan", "w.toml"][..], &moved[..]].concat())
        .expect(0);
    assert!(plan.stdout.contains("vpc"), "{}", plan.stdout);
    assert!(!plan.stdout.contains("- fsx"), "{}", plan.stdout);
    assert!(plan.stdout.contains("fsx[*]"), "{}", plan.stdout);
    let apply = p
        .run(&[&["apply", "w.toml", "--auto-approve"][..], &moved[..]].concat())
        .expect(0);
    assert!(apply.stdout.contains("Round 2"), "{}", apply.all());
    let mut ran = lines_in_order(&p, "runs.log");
    ran.sort();
    assert_eq!(ran, ["fsx-subnet-c", "vpc"], "{}", apply.stdout);
    assert_eq!(lines_in_order(&p, "destroyed.log"), ["fsx-subnet-b"]);

    let destroy = p
        .run(&[&["destroy", "w.toml", "--auto-approve"][..], &moved[..]].concat())
        .expect(0);
    let mut gone = lines_in_order(&p, "destroyed.log");
    gone.sort();
    assert_eq!(
        gone,
        [
            "fsx-subnet-a",
            "fsx-subnet-b",
            "fsx-subnet-c",
            "train",
            "vpc"
        ],
        "{}",
        destroy.all()
    );
}

#[test]
fn a_saved_plan_runs_only_what_it_shows_and_names_what_waits() {
    let p = Project::new();
    p.write("w.toml", PER_SUBNET);
    p.run(&["plan", "w.toml", "--out", "first.plan"]).expect(0);
    let apply = p.run(&["apply", "first.plan"]).expect(0);
    assert!(
        apply
            .stdout
            .contains("2 deferred steps were not applied: a saved plan runs only what it shows"),
        "{}",
        apply.stdout
    );
    assert_eq!(lines_in_order(&p, "runs.log"), ["vpc"]);
    // The next plan has all of them, and applies as saved.
    p.run(&["plan", "w.toml", "--out", "second.plan"]).expect(0);
    p.run(&["apply", "second.plan"]).expect(0);
    let mut ran = lines_in_order(&p, "runs.log");
    ran.sort();
    assert_eq!(
        ran,
        ["fsx-subnet-a", "fsx-subnet-b", "train-fs-subnet-a", "vpc"]
    );
}
