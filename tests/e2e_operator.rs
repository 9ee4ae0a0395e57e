//! End-to-end: what operators see — plain progress without a terminal, the
//! JSON event stream, step logs, graph pictures, completions and the manual.

mod support;

use std::time::Duration;

use support::{Project, finish, wait_until};

const CHAIN: &str = r#"
[workflow]
name = "ops"

[steps.vpc]
provider = "exec"
[steps.vpc.inputs]
run = "echo creating the network; echo id=vpc-1 >> $FLOW_OUTPUT"

[steps.cluster]
provider = "exec"
[steps.cluster.inputs]
run = "echo cluster in $VPC; echo name=c1 >> $FLOW_OUTPUT"
env = { VPC = "${steps.vpc.outputs.id}" }

[steps.nccl]
provider = "exec"
[steps.nccl.inputs]
run = "echo 'all_reduce_perf on $CLUSTER'; echo 'Avg bus bandwidth : 187.3'; exit 1"
env = { CLUSTER = "${steps.cluster.outputs.name}" }

[steps.train]
provider = "null"
depends_on = ["nccl"]
[steps.train.inputs]
epochs = 3
"#;

/// Timings vary from run to run; everything else must not.
fn normalize(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut l = line.to_string();
        if let (Some(0), Some(b)) = (l.find('['), l.find("s]")) {
            l = format!("[ T ]{}", &l[b + 2..]);
        }
        for unit in ["ms", "s"] {
            // "in 12ms" / "after 1.2s" → "in D"
            for lead in ["in ", "after "] {
                while let Some(i) = l.find(lead) {
                    let rest = &l[i + lead.len()..];
                    let n = rest
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.')
                        .count();
                    if n > 0 && rest[n..].starts_with(unit) {
                        l = format!("{}{lead}D{}", &l[..i], &rest[n + unit.len()..]);
                    } else {
                        break;
                    }
                }
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

#[test]
fn apply_without_a_terminal_prints_plain_lines() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    let r = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(
        !r.stdout.contains('\x1b'),
        "escape codes without a terminal"
    );
    insta::assert_snapshot!("plain_apply", normalize(&r.stdout));
}

#[test]
fn apply_json_is_a_stream_of_events_in_dependency_order() {
    let p = Project::new();
    p.write("wf.toml", &CHAIN.replace("; exit 1", ""));
    let r = p
        .run(&["apply", "wf.toml", "--auto-approve", "--json"])
        .expect(0);
    let events: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(events[0]["type"], "plan");
    assert_eq!(events.last().unwrap()["type"], "summary");
    assert_eq!(events.last().unwrap()["done"], 4);
    let at = |kind: &str, step: &str| {
        events
            .iter()
            .position(|e| e["type"] == kind && e["step"] == step)
            .unwrap_or_else(|| panic!("no {kind} event for {step}: {}", r.stdout))
    };
    for step in ["vpc", "cluster", "nccl", "train"] {
        assert!(at("started", step) < at("finished", step), "{step}");
    }
    for (before, after) in [("vpc", "cluster"), ("cluster", "nccl"), ("nccl", "train")] {
        assert!(
            at("finished", before) < at("started", after),
            "{before} must end before {after} starts"
        );
    }
    let progress: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "progress" && e["step"] == "nccl")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        progress.iter().any(|m| m.contains("bus bandwidth")),
        "{progress:?}"
    );
    // Nothing prompts in JSON mode.
    let refused = p.run(&["destroy", "wf.toml", "--json"]).expect(1);
    assert!(
        refused.stderr.contains("--auto-approve"),
        "{}",
        refused.stderr
    );
}

/// `destroy -q` prints no plan, only the final summary (as `--quiet` says), and
/// `destroy --json` prints JSON lines only, the plan among them.
#[test]
fn destroy_is_quiet_with_q_and_pure_json_with_json() {
    let p = Project::new();
    p.write("wf.toml", &CHAIN.replace("; exit 1", ""));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let quiet = p
        .run(&["destroy", "wf.toml", "--auto-approve", "-q"])
        .expect(0);
    // Only the final summary, as `--quiet` promises.
    assert_eq!(quiet.stdout.trim().lines().count(), 1, "{}", quiet.stdout);
    assert!(
        quiet
            .stdout
            .trim()
            .starts_with("Destroy complete: 4 deleted"),
        "{}",
        quiet.stdout
    );

    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let json = p
        .run(&["destroy", "wf.toml", "--auto-approve", "--json"])
        .expect(0);
    let events: Vec<serde_json::Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(events[0]["type"], "plan", "{}", json.stdout);
    assert_eq!(events[0]["summary"]["delete"], 4, "{}", json.stdout);
    assert!(
        events.iter().any(|e| e["type"] == "summary"),
        "{}",
        json.stdout
    );
}

/// A step that ran and printed nothing has no log file; `flow logs` says it
/// ran and wrote nothing, instead of "a step has a log once it has run".
/// A step that never ran is still an error.
#[test]
fn logs_of_a_step_that_said_nothing_say_so() {
    let p = Project::new();
    p.write(
        "wf.toml",
        "[workflow]\nname = \"quiet\"\n\n[steps.silent]\nprovider = \"exec\"\n[steps.silent.inputs]\nrun = \"true\"\n",
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let said = p.run(&["logs", "wf.toml", "silent"]).expect(0);
    assert_eq!(
        said.stdout.trim(),
        "step `silent` ran (applied) and wrote nothing to its log: it printed no output and had no event or note to record"
    );
    let missing = p.run(&["logs", "wf.toml", "other"]).expect(1);
    assert!(
        missing.stderr.contains("there is no log for step `other`"),
        "{}",
        missing.stderr
    );
}

/// `flow output` reads a module call's declared outputs (one, or all of
/// them for the call), evaluated over what its steps recorded, and names
/// where `[[moved]]` says a step went.
#[test]
fn output_reads_module_outputs_and_follows_moved_entries() {
    let p = Project::new();
    p.write(
        "m/main.toml",
        r#"
[steps.nccl]
provider = "exec"
[steps.nccl.inputs]
run = "echo busbw=17.5 >> $FLOW_OUTPUT"

[outputs]
busbw = "${steps.nccl.outputs.busbw}"
label = "nccl at ${steps.nccl.outputs.busbw} GB/s"
"#,
    );
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "modout"

[modules.cluster]
source = "m"

[[moved]]
from = "nccl"
to = "cluster.nccl"
"#,
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let one = p.run(&["output", "wf.toml", "cluster.busbw"]).expect(0);
    assert_eq!(one.stdout.trim(), "17.5");
    let all = p.run(&["output", "wf.toml", "cluster", "--json"]).expect(0);
    let all: serde_json::Value = serde_json::from_str(&all.stdout).expect("JSON");
    assert_eq!(
        all,
        serde_json::json!({"busbw": "17.5", "label": "nccl at 17.5 GB/s"})
    );
    let moved = p.run(&["output", "wf.toml", "nccl"]).expect(1);
    assert!(
        moved
            .stderr
            .contains("`nccl` moved to `cluster.nccl` ([[moved]] in wf.toml): use that address"),
        "{}",
        moved.stderr
    );
    let step = p
        .run(&["output", "wf.toml", "cluster.nccl.busbw"])
        .expect(0);
    assert_eq!(step.stdout.trim(), "17.5");
    let logs = p.run(&["logs", "wf.toml", "nccl"]).expect(1);
    assert!(
        logs.stderr.contains("`nccl` moved to `cluster.nccl`"),
        "{}",
        logs.stderr
    );
}

/// `flow compare` honours `--state-dir` on its own (it read ./.flow only),
/// and says when the two runs ran with different inputs.
#[test]
fn compare_reads_the_state_dir_it_is_given_and_names_differing_inputs() {
    let p = Project::new();
    let wf = |nodes: u32| {
        format!(
            "[workflow]\nname = \"cmp\"\n\n[steps.nccl]\nprovider = \"exec\"\n[steps.nccl.inputs]\nrun = \"echo busbw=$((100 * $NODES)) >> $FLOW_OUTPUT\"\nenv = {{ NODES = \"{nodes}\" }}\nexpect = {{ busbw = \">= 1\" }}\n"
        )
    };
    let state = p.path().join("elsewhere");
    let state_arg = state.display().to_string();
    for nodes in [2, 4] {
        p.write("wf.toml", &wf(nodes));
        p.run(&[
            "apply",
            "wf.toml",
            "--auto-approve",
            "--state-dir",
            &state_arg,
        ])
        .expect(0);
    }
    let runs = p
        .run(&["runs", "wf.toml", "--json", "--state-dir", &state_arg])
        .expect(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).expect("runs JSON");
    let ids: Vec<&str> = runs
        .as_array()
        .expect("a list of runs")
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{runs}");
    let cmp = p
        .run(&["compare", ids[0], ids[1], "--state-dir", &state_arg])
        .expect(0)
        .stdout;
    // The two runs differ in `env` alone (NODES 2 → 4), and compare says so.
    assert!(cmp.contains("note: their inputs differ in `env`:"), "{cmp}");
    assert!(
        cmp.lines()
            .any(|l| l.starts_with("busbw ") && l.ends_with("+100.0 %")),
        "{cmp}"
    );
    let nowhere = p.path().join("nowhere").display().to_string();
    let missing = p
        .run(&["compare", ids[0], ids[1], "--state-dir", &nowhere])
        .expect(1);
    assert!(
        missing.stderr.contains("there is no state at"),
        "{}",
        missing.stderr
    );
}

#[test]
fn logs_show_a_steps_output_and_follow_a_running_one() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let log = p.run(&["logs", "wf.toml", "nccl"]).expect(0);
    assert!(
        log.stdout.contains("Avg bus bandwidth : 187.3"),
        "{}",
        log.stdout
    );
    assert!(
        log.stdout.contains("exited with status 1") || log.stdout.contains("[flow]"),
        "{}",
        log.stdout
    );
    let none = p.run(&["logs", "wf.toml", "nope"]).expect(1);
    assert!(
        none.stderr.contains("no log for step `nope`"),
        "{}",
        none.stderr
    );

    p.write(
        "slow.toml",
        r#"
[steps.slow]
provider = "exec"
[steps.slow.inputs]
run = "echo first; sleep 1; echo second"
"#,
    );
    let apply = p.spawn(&["apply", "slow.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(20), "the log to appear", || {
        p.read(".flow/slow/logs/slow.log").contains("first")
    });
    let follow = p.run(&["logs", "slow.toml", "slow", "-f"]).expect(0);
    assert!(
        follow.stdout.contains("first") && follow.stdout.contains("second"),
        "{}",
        follow.stdout
    );
    finish(apply).expect(0);
}

#[test]
fn graph_draws_svg_and_mermaid_with_status() {
    let p = Project::new();
    p.write("wf.toml", CHAIN);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let svg = p
        .run(&["graph", "wf.toml", "--format", "svg"])
        .expect(0)
        .stdout;
    let doc = roxmltree::Document::parse(&svg).expect("the SVG parses as XML");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    for step in ["vpc", "cluster", "nccl", "train"] {
        assert!(texts.contains(&step), "{step} missing from {texts:?}");
    }
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    assert!(titles.contains(&"vpc (exec): applied"), "{titles:?}");
    assert!(titles.contains(&"nccl (exec): failed"), "{titles:?}");
    assert!(titles.contains(&"train (null): not applied"), "{titles:?}");

    let mermaid = p
        .run(&["graph", "wf.toml", "--format", "mermaid"])
        .expect(0)
        .stdout;
    assert!(mermaid.starts_with("flowchart LR"), "{mermaid}");
    assert!(mermaid.contains("s_vpc --> s_cluster"), "{mermaid}");
    assert!(mermaid.contains("class s_nccl failed"), "{mermaid}");
    let dot = p.run(&["graph", "wf.toml"]).expect(0).stdout;
    assert!(dot.contains("\"cluster\" -> \"nccl\""), "{dot}");
}

#[test]
fn completions_and_manual_are_generated_from_the_cli() {
    let p = Project::new();
    for shell in ["bash", "zsh", "fish"] {
        let c = p.run(&["completions", shell]).expect(0);
        assert!(
            c.stdout.contains("apply") && c.stdout.contains("destroy"),
            "{shell}"
        );
    }
    let man = p.run(&["man"]).expect(0);
    assert!(
        man.stdout.contains(".TH flow 1"),
        "{}",
        &man.stdout[..200.min(man.stdout.len())]
    );
    assert!(man.stdout.contains("apply"));
}

#[test]
fn color_is_off_without_a_terminal_and_on_when_forced() {
    let p = Project::new();
    p.write("wf.toml", &CHAIN.replace("; exit 1", ""));
    let plain = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(!plain.stdout.contains('\x1b'));
    let forced = p.run(&["plan", "wf.toml", "--color", "always"]).expect(0);
    assert!(forced.stdout.contains("\x1b["), "{}", forced.stdout);
    let quiet = p
        .run(&["apply", "wf.toml", "--auto-approve", "-q"])
        .expect(0);
    assert_eq!(quiet.stdout.trim().lines().count(), 1, "{}", quiet.stdout);
}

const GPU_CLUSTER: &str = r#"
[workflow]
name = "costed"
region = "us-east-1"

[steps.gpu_nodes]
provider = "eks.nodegroup"
[steps.gpu_nodes.inputs]
cluster = "dlc-p4d"
name = "p4d"
instance_types = ["p4d.24xlarge"]
desired_size = 2
subnet_ids = ["subnet-1"]

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
subnet_ids = ["subnet-1"]
deployment_type = "PERSISTENT_1"
per_unit_storage_throughput = 200
"#;

#[test]
fn the_plan_prices_what_it_starts() {
    let p = Project::new();
    p.write("wf.toml", GPU_CLUSTER);
    let text = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        text.stdout.contains("≈ $43.92/h (2 × p4d.24xlarge)"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(
            "Cost: this plan starts ≈ $44.39/h (on-demand, us-east-1 prices of 2026-11-01)"
        ),
        "{}",
        text.stdout
    );
    let json = p.run(&["plan", "wf.toml", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let total = v["cost"]["starts_per_hour"].as_f64().unwrap();
    // 2 × $21.957642 for the nodes, 1200 GiB × $0.290 / 730 h for the file system.
    assert!(
        (total - (2.0 * 21.957642 + 1200.0 * 0.290 / 730.0)).abs() < 1e-6,
        "{total}"
    );
    assert_eq!(v["cost"]["prices"]["date"], "2026-11-01");
    assert_eq!(v["cost"]["regions"][0]["region"], "us-east-1");
    let nodes = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["step"] == "gpu_nodes")
        .unwrap();
    assert_eq!(nodes["cost"]["items"][0], "2 × p4d.24xlarge");
    assert_eq!(nodes["cost"]["region"], "us-east-1");

    // A price table of one's own overrides single entries.
    p.write("prices.toml", "[instances]\n\"p4d.24xlarge\" = 10.0\n");
    let own = p
        .run(&["plan", "wf.toml", "--prices", "prices.toml"])
        .expect(0);
    assert!(
        own.stdout.contains("≈ $20.00/h (2 × p4d.24xlarge)"),
        "{}",
        own.stdout
    );
}

#[test]
fn each_step_is_priced_in_its_own_region() {
    let p = Project::new();
    // The workflow's region, us-west-2: its own table, and the line says so.
    p.write("wf.toml", &GPU_CLUSTER.replace("us-east-1", "us-west-2"));
    let west = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        west.stdout.contains(
            "Cost: this plan starts ≈ $44.39/h (on-demand, us-west-2 prices of 2026-11-01)"
        ),
        "{}",
        west.stdout
    );

    // Tokyo charges more for the nodes; FSx there is not in the table, so
    // the file system is priced at us-east-1's and both its line and the
    // total say so.
    p.write(
        "wf.toml",
        &GPU_CLUSTER.replace("us-east-1", "ap-northeast-1"),
    );
    let tokyo = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        tokyo.stdout.contains("≈ $60.20/h (2 × p4d.24xlarge)"),
        "{}",
        tokyo.stdout
    );
    assert!(
        tokyo.stdout.contains(
            "FSx for Lustre PERSISTENT_1/200 at us-east-1's price: not in the ap-northeast-1 table"
        ),
        "{}",
        tokyo.stdout
    );
    assert!(
        tokyo.stdout.contains(
            "(on-demand, prices of 2026-11-01: ap-northeast-1 with FSx for Lustre \
             PERSISTENT_1/200 at us-east-1's, not in its table)"
        ),
        "{}",
        tokyo.stdout
    );

    // A region the table has no prices of: priced at us-east-1's, said.
    p.write("wf.toml", &GPU_CLUSTER.replace("us-east-1", "eu-north-1"));
    let north = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        north.stdout.contains(
            "Cost: this plan starts ≈ $44.39/h (on-demand, prices of 2026-11-01: \
             eu-north-1 priced at us-east-1's, no table for it)"
        ),
        "{}",
        north.stdout
    );

    // No region in the workflow: AWS_REGION decides, as for the AWS SDK.
    p.write(
        "wf.toml",
        &GPU_CLUSTER.replace("region = \"us-east-1\"\n", ""),
    );
    let env = p
        .run_env(
            &["plan", "wf.toml"],
            &[
                ("AWS_REGION", "us-west-2"),
                ("AWS_DEFAULT_REGION", "eu-west-1"),
            ],
        )
        .expect(0);
    assert!(
        env.stdout
            .contains("(on-demand, us-west-2 prices of 2026-11-01)"),
        "{}",
        env.stdout
    );
}
