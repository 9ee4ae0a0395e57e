//! End-to-end: the language past one flat list of steps, through the
//! `flow` binary: expressions, `for_each` instances that are created and
//! destroyed by their keys alone, `[[moved]]` entries that keep what a
//! rename would otherwise destroy, and secrets that stay masked through
//! functions; `deferred`: a `for_each` over outputs known only after
//! apply, planned in a second round; `instances`: an instance key worked
//! out in what a module call passes.

#[path = "../support/mod.rs"]
mod support;

mod deferred;
mod instances;
mod paths;

use support::Project;

/// `nccl` once per node count; `report` reads the instance at `full`.
/// Each step appends to `runs.log` when it runs and `destroyed.log` when it
/// is destroyed, so the tests see exactly which instances ran.
const SWEEP: &str = r#"
[workflow]
name = "sweep"

[vars.sizes]
type = "list"
default = [2, 4]

[vars.full]
type = "integer"
default = 4

[steps.nccl]
provider = "exec"
for_each = "${vars.sizes}"
[steps.nccl.inputs]
run = "echo nccl-${each.key} >> runs.log; echo all_reduce at ${each.value} nodes; echo busbw=${each.value * 10} >> $FLOW_OUTPUT"
destroy = "echo nccl-${each.key} >> destroyed.log"

[steps.report]
provider = "exec"
depends_on = ["nccl"]
[steps.report.inputs]
run = "echo report >> runs.log; echo best=${steps.nccl[vars.full].outputs.busbw} >> $FLOW_OUTPUT"
destroy = "echo report >> destroyed.log"
"#;

/// The lines of `name` in the project, sorted (none when it is missing).
fn lines(p: &Project, name: &str) -> Vec<String> {
    let mut out = lines_in_order(p, name);
    out.sort();
    out
}

/// The lines of `name` in the project as written.
fn lines_in_order(p: &Project, name: &str) -> Vec<String> {
    p.read(name).lines().map(str::to_string).collect()
}

#[test]
fn for_each_instances_are_created_and_destroyed_by_their_keys() {
    let p = Project::new();
    p.write("w.toml", SWEEP);
    let apply = p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    assert_eq!(lines(&p, "runs.log"), ["nccl-2", "nccl-4", "report"]);
    let busbw = p.run(&["output", "w.toml", r#"nccl["4"].busbw"#]).expect(0);
    assert_eq!(busbw.stdout.trim(), "40");
    let report = p.run(&["output", "w.toml", "report.best"]).expect(0);
    assert_eq!(
        report.stdout.trim(),
        "40",
        "report read the instance at `full`"
    );
    let all = p.run(&["output", "w.toml", "nccl"]).expect(0);
    assert!(
        all.stdout.contains(r#"nccl["2"]"#) && all.stdout.contains(r#"nccl["4"]"#),
        "{}",
        all.stdout
    );
    let logs = p.run(&["logs", "w.toml", r#"nccl["2"]"#]).expect(0);
    assert!(
        logs.stdout.contains("all_reduce at 2 nodes"),
        "{}",
        logs.all()
    );

    // A key added: only its instance is created.
    std::fs::remove_file(p.path().join("runs.log")).unwrap();
    let plan = p
        .run(&[
            "plan",
            "w.toml",
            "--var",
            "sizes=[2, 4, 8]",
            "--detailed-exitcode",
        ])
        .expect(2);
    assert!(plan.stdout.contains(r#"+ nccl["8"]"#), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("1 to create, 0 to update, 0 to replace, 0 to delete"),
        "{}",
        plan.stdout
    );
    p.run(&[
        "apply",
        "w.toml",
        "--var",
        "sizes=[2, 4, 8]",
        "--auto-approve",
    ])
    .expect(0);
    assert_eq!(lines(&p, "runs.log"), ["nccl-8"]);

    // A key removed: only its instance is destroyed.
    let plan = p
        .run(&[
            "plan",
            "w.toml",
            "--var",
            "sizes=[4, 8]",
            "--detailed-exitcode",
        ])
        .expect(2);
    assert!(plan.stdout.contains(r#"- nccl["2"]"#), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("0 to create, 0 to update, 0 to replace, 1 to delete"),
        "{}",
        plan.stdout
    );
    p.run(&["apply", "w.toml", "--var", "sizes=[4, 8]", "--auto-approve"])
        .expect(0);
    assert_eq!(lines(&p, "destroyed.log"), ["nccl-2"]);

    // `--target nccl` is every instance, and what they need; not `report`.
    let targeted = p
        .run(&[
            "plan",
            "w.toml",
            "--var",
            "sizes=[4, 8]",
            "--replace",
            "nccl",
            "--target",
            "nccl",
        ])
        .expect(0);
    assert!(
        targeted.stdout.contains(r#"nccl["4"]"#) && targeted.stdout.contains(r#"nccl["8"]"#),
        "{}",
        targeted.stdout
    );
    assert!(!targeted.stdout.contains("report"), "{}", targeted.stdout);
    assert!(
        targeted.stdout.contains("2 to replace"),
        "{}",
        targeted.stdout
    );

    // A key that the for_each does not make is refused before anything runs.
    let bad = p
        .run(&[
            "plan",
            "w.toml",
            "--var",
            "sizes=[4, 8]",
            "--var",
            "full=16",
        ])
        .expect(1);
    assert!(
        bad.stderr
            .contains(r#"step `nccl` has no instance `nccl["16"]`"#),
        "{}",
        bad.stderr
    );

    p.run(&[
        "destroy",
        "w.toml",
        "--var",
        "sizes=[4, 8]",
        "--auto-approve",
    ])
    .expect(0);
    assert_eq!(
        lines(&p, "destroyed.log"),
        ["nccl-2", "nccl-4", "nccl-8", "report"]
    );
}

/// One NCCL step, before it ran over node counts.
const BEFORE: &str = r#"
[workflow]
name = "rename"

[steps.allreduce]
provider = "exec"
[steps.allreduce.inputs]
run = "echo nccl-2 >> runs.log"
destroy = "echo nccl-2 >> destroyed.log"
"#;

/// The same step renamed and keyed by node count.
const AFTER: &str = r#"
[workflow]
name = "rename"

[steps.nccl]
provider = "exec"
for_each = [2]
[steps.nccl.inputs]
run = "echo nccl-${each.key} >> runs.log"
destroy = "echo nccl-${each.key} >> destroyed.log"
"#;

#[test]
fn a_moved_entry_keeps_a_renamed_step_and_without_one_plan_warns() {
    let p = Project::new();
    p.write("w.toml", BEFORE);
    p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert_eq!(lines(&p, "runs.log"), ["nccl-2"]);

    // Without a [[moved]] entry: a destroy and a create, and a warning.
    p.write("w.toml", AFTER);
    let plan = p.run(&["plan", "w.toml"]).expect(0);
    assert!(plan.stdout.contains("warning:"), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains(r#"`allreduce` will be destroyed and `nccl["2"]` created"#),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains(r#"from = "allreduce""#),
        "{}",
        plan.stdout
    );

    // With one: the record moves, nothing runs or is destroyed.
    p.write(
        "w.toml",
        &format!("{AFTER}\n[[moved]]\nfrom = \"allreduce\"\nto = \"nccl[\\\"2\\\"]\"\n"),
    );
    let plan = p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout.contains(r#"allreduce → nccl["2"]"#),
        "{}",
        plan.stdout
    );
    assert!(!plan.stdout.contains("warning:"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains(
            "Plan: 1 to move, 0 to create, 0 to update, 0 to replace, 0 to delete, 1 unchanged"
        ),
        "{}",
        plan.stdout
    );
    let json = p.run(&["plan", "w.toml", "--json"]).expect(0);
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan JSON");
    assert_eq!(
        json["moved"],
        serde_json::json!([{"from": "allreduce", "to": "nccl[\"2\"]"}]),
        "{json}"
    );
    p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert_eq!(lines(&p, "runs.log"), ["nccl-2"], "nothing ran again");
    assert_eq!(lines(&p, "destroyed.log"), Vec::<String>::new());
    let list = p.run(&["state", "list", "w.toml"]).expect(0);
    assert!(list.stdout.contains(r#"nccl["2"]"#), "{}", list.stdout);
    assert!(!list.stdout.contains("allreduce"), "{}", list.stdout);
    // The backup taken by that apply is from before the move.
    let backups = p.run(&["state", "backups", "w.toml"]).expect(0);
    let newest = backups.stdout.lines().nth(1).expect("a backup").to_string();
    let file = newest.split_whitespace().last().unwrap();
    let before = p.read(file.trim_start_matches("./"));
    assert!(before.contains("allreduce"), "{before}");
    assert!(!before.contains(r#"nccl[\"2\"]"#), "{before}");
    // The move is done: the entry can stay, and changes nothing.
    p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(0);
}

#[test]
fn moved_entries_chain_for_a_state_that_missed_a_rename() {
    let p = Project::new();
    p.write("w.toml", BEFORE);
    p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    // Two renames later (allreduce → nccl["2"] → sweep["2"]), with the
    // entries in either order: the record goes straight to the last one.
    let renamed = AFTER.replace("steps.nccl", "steps.sweep");
    p.write(
        "w.toml",
        &format!(
            "{renamed}\n[[moved]]\nfrom = \"nccl[\\\"2\\\"]\"\nto = \"sweep[\\\"2\\\"]\"\n\n[[moved]]\nfrom = \"allreduce\"\nto = \"nccl[\\\"2\\\"]\"\n"
        ),
    );
    let plan = p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout.contains(r#"allreduce → sweep["2"]"#),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("1 to move, 0 to create"),
        "{}",
        plan.stdout
    );
    p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert_eq!(lines(&p, "runs.log"), ["nccl-2"], "nothing ran again");
    p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(0);
}

#[test]
fn secrets_stay_masked_through_functions_everywhere_they_could_land() {
    let token = "hf_SecretTokenValue123";
    let b64 = "aGZfU2VjcmV0VG9rZW5WYWx1ZTEyMw"; // base64 of the token, unpadded
    let p = Project::new();
    p.write(
        "w.toml",
        r#"
[vars.hf_token]
sensitive = true
env = "HF_TOKEN"

[steps.login]
provider = "exec"
[steps.login.inputs]
run = "echo ${base64encode(vars.hf_token)}; echo ${jsonencode({ token = vars.hf_token })}; echo upper=${upper(vars.hf_token)}"
"#,
    );
    let env = [("HF_TOKEN", token)];
    let plan = p.run_env(&["plan", "w.toml"], &env).expect(0);
    let apply = p
        .run_env(&["apply", "w.toml", "--auto-approve"], &env)
        .expect(0);
    let logs = p.run_env(&["logs", "w.toml", "login"], &env).expect(0);
    let upper = token.to_uppercase();
    for (what, text) in [
        ("plan", plan.all()),
        ("apply", apply.all()),
        ("logs", logs.all()),
    ] {
        for secret in [token, b64, upper.as_str()] {
            assert!(!text.contains(secret), "{what} shows {secret}: {text}");
        }
    }
    assert!(logs.all().contains("(sensitive)"), "{}", logs.all());
    for file in p.state_files() {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        for secret in [token, b64, upper.as_str()] {
            assert!(!text.contains(secret), "{} holds {secret}", file.display());
        }
    }
}

/// A state folder written by the release before expressions, `for_each` and
/// `[[moved]]` (tests/fixtures/compat: the workflow, and the state the old
/// `flow apply` left): the current flow plans it with no changes, and reads
/// its outputs.
#[test]
fn state_written_before_expressions_still_plans_no_changes() {
    let p = Project::new();
    support::copy_dir(
        &support::workspace_root().join("tests/fixtures/compat"),
        p.path(),
    );
    let plan = p
        .run_env(
            &[
                "plan",
                "workflow.toml",
                "--state-dir",
                "state",
                "--detailed-exitcode",
            ],
            &[("HOME", "/nonexistent")],
        )
        .expect(0);
    assert!(
        plan.stdout.contains("No changes. 3 steps are up to date."),
        "{}",
        plan.all()
    );
    let job = p
        .run(&[
            "output",
            "workflow.toml",
            "train.job",
            "--state-dir",
            "state",
        ])
        .expect(0);
    assert_eq!(job.stdout.trim(), "subnet-4-demo");
}

/// A module used twice, and a module that calls another: inputs from the
/// caller's steps and variables, outputs read by the caller and by the
/// second call, each step addressed `CALL.STEP`.
#[test]
fn modules_take_inputs_from_the_caller_and_give_outputs_back() {
    let p = Project::new();
    p.write(
        "modules/job/main.toml",
        r#"
[inputs.name]
description = "What to call the job"

[inputs.nodes]
type = "integer"
default = 2

[inputs.upstream]

[steps.prepare]
provider = "exec"
[steps.prepare.inputs]
run = "echo prepare-${inputs.name} >> runs.log; echo path=/fsx/${inputs.name}/${inputs.upstream} >> $FLOW_OUTPUT"
destroy = "echo prepare-${inputs.name} >> destroyed.log"

[steps.run]
provider = "exec"
depends_on = ["prepare"]
[steps.run.inputs]
run = "echo run-${inputs.name} >> runs.log; echo busbw=${inputs.nodes * 10} >> $FLOW_OUTPUT"
destroy = "echo run-${inputs.name} >> destroyed.log"

[modules.probe]
source = "../probe"
inputs = { target = "${steps.prepare.outputs.path}" }

[outputs]
busbw = "${steps.run.outputs.busbw}"
path = "${steps.prepare.outputs.path}"
probed = "${modules.probe.outputs.seen}"
"#,
    );
    p.write(
        "modules/probe/main.toml",
        r#"
[inputs.target]

[steps.look]
provider = "exec"
[steps.look.inputs]
run = "echo look >> runs.log; echo seen=${upper(inputs.target)} >> $FLOW_OUTPUT"

[outputs]
seen = "${steps.look.outputs.seen}"
"#,
    );
    p.write(
        "w.toml",
        r#"
[vars.prefix]
default = "demo"

[steps.vpc]
provider = "exec"
[steps.vpc.inputs]
run = "echo vpc >> runs.log; echo subnet=subnet-1 >> $FLOW_OUTPUT"

[modules.small]
source = "modules/job"
inputs = { name = "${vars.prefix}-small", upstream = "${steps.vpc.outputs.subnet}" }

[modules.big]
source = "modules/job"
inputs = { name = "${vars.prefix}-big", nodes = 8, upstream = "${modules.small.outputs.busbw}" }

[steps.report]
provider = "exec"
[steps.report.inputs]
run = "echo report >> runs.log; echo line=${modules.small.outputs.busbw}/${modules.big.outputs.busbw}/${modules.big.outputs.probed} >> $FLOW_OUTPUT"
"#,
    );
    let apply = p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("8 created"), "{}", apply.all());
    let out = |sel: &str| {
        p.run(&["output", "w.toml", sel])
            .expect(0)
            .stdout
            .trim()
            .to_string()
    };
    assert_eq!(out("report.line"), "20/80//FSX/DEMO-BIG/20");
    assert_eq!(out("small.prepare.path"), "/fsx/demo-small/subnet-1");
    assert_eq!(out("big.probe.look.seen"), "/FSX/DEMO-BIG/20");
    // The order followed the references across the module boundary.
    let runs = p.read("runs.log");
    let at = |line: &str| {
        runs.lines()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line} in {runs}"))
    };
    assert!(at("vpc") < at("prepare-demo-small"), "{runs}");
    assert!(at("run-demo-small") < at("prepare-demo-big"), "{runs}");
    assert!(at("run-demo-big") < at("report"), "{runs}");
    p.run(&["plan", "w.toml", "--detailed-exitcode"]).expect(0);

    // A changed input changes only what reads it.
    let plan = p
        .run(&[
            "plan",
            "w.toml",
            "--var",
            "prefix=prod",
            "--detailed-exitcode",
        ])
        .expect(2);
    assert!(plan.stdout.contains("small.prepare"), "{}", plan.stdout);
    assert!(
        !plan.stdout.contains("~ vpc") && !plan.stdout.contains("+ vpc"),
        "{}",
        plan.stdout
    );

    p.run(&["destroy", "w.toml", "--auto-approve"]).expect(0);
    let destroyed = p.read("destroyed.log");
    assert_eq!(destroyed.lines().count(), 4, "{destroyed}");
}
