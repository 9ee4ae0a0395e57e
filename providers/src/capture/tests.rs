//! The tests of `success_pattern`, `capture`, `parse` and `expect`.

use super::*;

const NCCL: &str = "#  Out of bounds values : 0 OK\n# Avg bus bandwidth    : 186.437 \n#\n";

#[test]
fn captures_the_first_group_of_the_last_match_as_a_number() {
    let caps = BTreeMap::from([(
        "busbw".to_string(),
        r"Avg bus bandwidth\s*:\s*([0-9.]+)".to_string(),
    )]);
    let m = Matchers::new(Some("Out of bounds values : 0 OK"), &caps).unwrap();
    let out = m.check(NCCL).unwrap();
    assert_eq!(out["busbw"], serde_json::json!(186.437));
    let err = m.check("nothing").unwrap_err();
    assert!(matches!(err, LogsMiss::NoSuccess { .. }));
    assert!(err.to_string().contains("success_pattern"), "{err}");
    let epochs = BTreeMap::from([("epoch".to_string(), r"Epoch (\d+) \|".to_string())]);
    let last = Matchers::new(None, &epochs).unwrap();
    let out = last.check("Epoch 8 | a\nEpoch 9 | b\n").unwrap();
    assert_eq!(out["epoch"], serde_json::json!(9), "the last match counts");
    let only = Matchers::new(None, &caps).unwrap();
    assert!(
        matches!(only.check("x").unwrap_err(), LogsMiss::NoCapture { name, .. } if name == "busbw")
    );
    assert_eq!(number_or_text("GPU 0: A100"), Value::from("GPU 0: A100"));
    assert_eq!(number_or_text("8"), Value::from(8));
}

fn values(v: serde_json::Value) -> Values {
    v.as_object().unwrap().clone()
}

const BATCH_EFA: &str = include_str!("../metrics/testdata/nccl-tests-batch-efa.txt");

#[test]
fn parsed_values_pass_their_gates_or_fail_the_step_with_value_threshold_and_line() {
    let m = Matchers::from_values(&values(serde_json::json!({
        "parse": "nccl-tests",
        "expect": {"busbw": ">= 100", "out_of_bounds": "== 0"}
    })))
    .unwrap();
    let out = m.check(BATCH_EFA).unwrap();
    assert_eq!(out["busbw"], serde_json::json!(156.742));
    assert_eq!(m.gates(), ["busbw >= 100", "out_of_bounds == 0"]);

    // The same run judged against p5's EFA rate: it fails, saying why.
    let strict = Matchers::from_values(&values(serde_json::json!({
        "parse": "nccl-tests", "expect": {"busbw": ">= 300"}
    })))
    .unwrap();
    let e = strict.check(BATCH_EFA).unwrap_err().to_string();
    assert_eq!(
        e,
        "expect: busbw = 156.742 is not >= 300 (log line: `# Avg bus bandwidth    : 156.742`)"
    );
    // A table without its average line: the gate names what had none.
    let p5 = include_str!("../metrics/testdata/nccl-tests-slurm-p5.txt");
    let e = strict.check(p5).unwrap_err().to_string();
    assert_eq!(
        e,
        "expect `busbw >= 300`: no busbw was found (nccl-tests's output has none)"
    );
    // Output of something else entirely: its first lines are shown.
    let e = strict
        .check("Segmentation fault\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("parse: the output is not nccl-tests output"),
        "{e}"
    );
    assert!(e.contains("  | Segmentation fault"), "{e}");
}

#[test]
fn a_run_over_tcp_sockets_fails_the_transport_gate_naming_the_line() {
    let m = Matchers::from_values(&values(serde_json::json!({
        "parse": "nccl-tests",
        "expect": {"out_of_bounds": "== 0", "transport": "== efa"}
    })))
    .unwrap();
    let efa = include_str!("../metrics/testdata/nccl-tests-eks-efa-info.txt");
    assert_eq!(m.check(efa).unwrap()["transport"], "efa");
    // "Out of bounds values : 0 OK" prints all the same; the gate fails.
    let socket = include_str!("../metrics/testdata/nccl-tests-eks-socket.txt");
    assert!(socket.contains("# Out of bounds values : 0 OK"));
    let e = m.check(socket).unwrap_err().to_string();
    assert_eq!(
        e,
        "expect: transport = \"socket\" is not == efa (log line: `nccl-tests-efa-16-worker-0:25:25 [0] NCCL INFO Using network Socket`)"
    );
    // Without NCCL_DEBUG=INFO there is nothing to judge, and it says why.
    let e = m.check(BATCH_EFA).unwrap_err().to_string();
    assert_eq!(
        e,
        "expect `transport == efa`: no transport was found (nccl-tests's output, which prints `NCCL INFO` network lines only with NCCL_DEBUG=INFO, has none)"
    );
}

#[test]
fn captured_values_are_gated_with_their_line() {
    let m = Matchers::from_values(&values(serde_json::json!({
        "capture": {"loss": "loss: ([0-9.]+)"}, "expect": {"loss": "< 2.5"}
    })))
    .unwrap();
    assert!(m.check("step 1 loss: 3.1\nstep 2 loss: 2.2\n").is_ok());
    let e = m.check("step 1 loss: 2.2\nstep 2 loss: 3.1\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "expect: loss = 3.1 is not < 2.5 (log line: `step 2 loss: 3.1`)"
    );
    let e = m.check("nothing\n").unwrap_err();
    assert!(matches!(e, LogsMiss::NoCapture { .. }), "{e}");
}

#[test]
fn gates_that_cannot_be_judged_point_at_their_entry() {
    let problem = |v: serde_json::Value| Matchers::from_values(&values(v)).unwrap_err();
    let p = problem(serde_json::json!({"parse": "nccl"}));
    assert_eq!(p.path, ["parse"]);
    assert_eq!(p.help.as_deref(), Some("did you mean `nccl-tests`?"));
    let p = problem(serde_json::json!({"parse": "nccl-tests", "expect": {"busbww": ">= 1"}}));
    assert_eq!(p.path, ["expect", "busbww"]);
    assert_eq!(p.help.as_deref(), Some("did you mean `busbw`?"));
    let p = problem(serde_json::json!({"expect": {"busbw": ">= 1"}}));
    assert!(p.help.unwrap().contains("add a `capture` regex"));
    let p = problem(serde_json::json!({"parse": "nccl-tests", "expect": {"sizes": ">= 1"}}));
    assert_eq!(p.path, ["expect", "sizes"]);
    assert!(
        p.message
            .contains("judges a number, but sizes is a table of numbers"),
        "{}",
        p.message
    );
    let p = problem(serde_json::json!({"parse": "torchrun", "expect": {"loss": ">= fast"}}));
    assert_eq!(p.path, ["expect", "loss"]);
    assert!(p.help.unwrap().starts_with("a gate is `>= N`"));
    // A table judged as one: losses going down.
    let m = Matchers::from_values(&values(serde_json::json!({
        "parse": "torchrun", "expect": {"losses": "decreasing", "loss": "< 2"}
    })))
    .unwrap();
    let log = "step 1/3 completed (loss: 1.9)\nstep 2/3 completed (loss: 1.6)\nstep 3/3 completed (loss: 1.4)\n";
    assert!(m.check(log).is_ok());
}

#[test]
fn bad_regexes_point_at_their_input() {
    let p = Matchers::new(Some("("), &BTreeMap::new()).unwrap_err();
    assert_eq!(p.path, ["success_pattern"]);
    let caps = BTreeMap::from([("x".to_string(), "[".to_string())]);
    assert_eq!(
        Matchers::new(None, &caps).unwrap_err().path,
        ["capture", "x"]
    );
}

/// Keeps what a job step's reporter is told.
#[derive(Default)]
struct Told {
    events: std::sync::Mutex<Vec<String>>,
    measured: std::sync::Mutex<Vec<crate::contract::Measured>>,
}

impl crate::contract::Reporter for Told {
    fn event(&self, message: &str) {
        self.events.lock().unwrap().push(message.into());
    }
    fn log(&self, _line: &str) {}
    fn measured(&self, m: &crate::contract::Measured) {
        self.measured.lock().unwrap().push(m.clone());
    }
}

#[test]
fn judging_tells_the_values_and_every_verdict_even_when_a_gate_fails() {
    let m = Matchers::from_values(&values(serde_json::json!({
        "parse": "nccl-tests",
        "expect": {"busbw": ">= 300", "out_of_bounds": "== 0"}
    })))
    .unwrap();
    let told = Told::default();
    let e = m.judge(BATCH_EFA, &told).unwrap_err();
    assert!(matches!(e, LogsMiss::GateFailed { .. }), "{e}");
    let measured = told.measured.lock().unwrap();
    assert_eq!(measured.len(), 1);
    assert_eq!(measured[0].values["busbw"], serde_json::json!(156.742));
    let verdicts: Vec<(&str, bool)> = measured[0]
        .verdicts
        .iter()
        .map(|v| (v.name.as_str(), v.failed.is_none()))
        .collect();
    assert_eq!(verdicts, [("busbw", false), ("out_of_bounds", true)]);
    let events = told.events.lock().unwrap();
    assert!(
        events.contains(&"captured busbw = 156.742".to_string()),
        "{events:?}"
    );
    assert!(
        events.contains(&"captured sizes = a table of 32 entries".to_string()),
        "{events:?}"
    );
}

/// A log no rule can judge (another program's, an image that prints no
/// epoch line): the error names the rule that matched nothing and shows the
/// log's first lines, which say what ran.
#[test]
fn a_log_no_rule_matches_shows_its_first_lines_and_the_rule() {
    let log = "\n[2026-11-27 10:00:00] starting\nusing gloo\nstep a\nstep b\nstep c\nstep d\n";
    let epochs = BTreeMap::from([(
        "last_epoch".to_string(),
        r"\[RANK 0\] Epoch (\d+) \|".to_string(),
    )]);
    let said = Matchers::new(None, &epochs)
        .unwrap()
        .check(log)
        .unwrap_err()
        .to_string();
    assert_eq!(
        said,
        r"capture `last_epoch`: no line of the logs matches /\[RANK 0\] Epoch (\d+) \|/ — first lines: [2026-11-27 10:00:00] starting | using gloo | step a | step b | step c"
    );
    let said = Matchers::new(Some("Training finished"), &BTreeMap::new())
        .unwrap()
        .check(log)
        .unwrap_err()
        .to_string();
    assert!(said.contains("/Training finished/"), "{said}");
    assert!(
        said.ends_with(
            "first lines: [2026-11-27 10:00:00] starting | using gloo | step a | step b | step c"
        ),
        "{said}"
    );
    let empty = Matchers::new(Some("x"), &BTreeMap::new()).unwrap();
    assert!(
        empty
            .check("")
            .unwrap_err()
            .to_string()
            .ends_with("the logs are empty")
    );
}
