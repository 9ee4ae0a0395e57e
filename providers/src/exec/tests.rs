//! Tests of the `exec` provider that run real shell commands.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::testing::{op_context, values};

fn prior<'a>(inputs: &'a Values, outputs: &'a Values) -> Prior<'a> {
    Prior {
        id: None,
        inputs,
        outputs,
        private: &Value::Null,
    }
}

/// Whether process `pid` has ended: gone, or a zombie waiting to be reaped.
fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// The trimmed contents of `path`, once it has some.
fn read_when_written(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[tokio::test]
async fn outputs_are_the_flow_output_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, reporter) = op_context(dir.path(), "vpc", "tok-outputs");
    let inputs = values(json!({
        "run": "echo creating; echo 'vpc_id=vpc-123' >> \"$FLOW_OUTPUT\"; \
                echo '# comment' >> \"$FLOW_OUTPUT\"; echo 'url=http://x/?a=b' >> \"$FLOW_OUTPUT\"; \
                echo \"file=$FLOW_OUTPUT\" >> \"$FLOW_OUTPUT\"",
    }));
    let applied = Exec::new().create(&ctx, &inputs).await.unwrap();
    assert_eq!(applied.id, None);
    let file = applied.outputs["file"].as_str().unwrap().to_string();
    assert!(
        !Path::new(&file).exists(),
        "$FLOW_OUTPUT is removed afterwards"
    );
    let mut expected = values(json!({"vpc_id": "vpc-123", "url": "http://x/?a=b"}));
    expected.insert("file".into(), json!(file));
    assert_eq!(applied.outputs, expected);
    assert_eq!(reporter.logs(), vec!["creating"]);
    assert_eq!(reporter.events(), vec!["creating"]);
}

#[tokio::test]
async fn env_workdir_step_and_token_are_visible() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let (ctx, _) = op_context(dir.path(), "greeter", "tok-env-42");
    let inputs = values(json!({
        "run": "{ echo \"greeting=$GREETING\"; echo \"step=$FLOW_STEP\"; \
                 echo \"token=$FLOW_OPERATION_TOKEN\"; echo \"pwd=$(pwd -P)\"; } >> \"$FLOW_OUTPUT\"",
        "env": {"GREETING": "hello world"},
        "workdir": "sub",
    }));
    let outputs = Exec::new().create(&ctx, &inputs).await.unwrap().outputs;
    let sub = dir.path().join("sub").canonicalize().unwrap();
    assert_eq!(
        Value::Object(outputs),
        json!({
            "greeting": "hello world",
            "step": "greeter",
            "token": "tok-env-42",
            "pwd": sub.to_str().unwrap(),
        })
    );
}

#[tokio::test]
async fn a_failing_command_reports_its_status_and_last_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, reporter) = op_context(dir.path(), "bad", "tok-fail");
    let inputs = values(json!({"run": "for i in $(seq 1 30); do echo line$i; done; exit 3"}));
    let err = Exec::new().create(&ctx, &inputs).await.unwrap_err();
    assert!(!err.is_retryable());
    assert!(
        err.message.starts_with("`run` exited with status 3"),
        "{}",
        err.message
    );
    let quoted: Vec<&str> = err.message.lines().skip(1).map(str::trim).collect();
    let expected: Vec<String> = (11..=30).map(|i| format!("line{i}")).collect();
    assert_eq!(quoted, expected);
    assert_eq!(reporter.logs().len(), 30);
}

#[tokio::test]
async fn stderr_is_quoted_too() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, reporter) = op_context(dir.path(), "bad", "tok-stderr");
    let inputs = values(json!({"run": "echo 'no such bucket' >&2; exit 1"}));
    let err = Exec::new().create(&ctx, &inputs).await.unwrap_err();
    assert_eq!(
        err.message,
        "`run` exited with status 1; last lines of its output:\n  no such bucket"
    );
    assert_eq!(reporter.logs(), vec!["no such bucket"]);
}

#[tokio::test]
async fn death_by_signal_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "killed", "tok-signal");
    let inputs = values(json!({"run": "kill -9 $$"}));
    let err = Exec::new().create(&ctx, &inputs).await.unwrap_err();
    assert_eq!(err.message, "`run` was killed by signal 9");
}

#[tokio::test]
async fn an_invalid_output_line_fails_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "bad", "tok-bad-output");
    let inputs = values(json!({"run": "echo 'not a pair' >> \"$FLOW_OUTPUT\""}));
    let err = Exec::new().create(&ctx, &inputs).await.unwrap_err();
    assert!(err.message.contains("`not a pair`"), "{}", err.message);
}

#[tokio::test]
async fn long_lines_show_as_short_events() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, reporter) = op_context(dir.path(), "wide", "tok-wide");
    let inputs = values(json!({"run": "printf '%0300d\\n' 0"}));
    Exec::new().create(&ctx, &inputs).await.unwrap();
    assert_eq!(reporter.logs()[0].len(), 300);
    let events = reporter.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].chars().count(), 120);
}

#[tokio::test]
async fn dropping_the_operation_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "long", "tok-drop");
    let inputs = values(json!({
        "run": "echo $$ > sh.pid; sleep 30 & echo $! > sleep.pid; wait",
    }));
    let exec = Exec::new();
    let mut create = Box::pin(exec.create(&ctx, &inputs));
    let sleep_pid_file = dir.path().join("sleep.pid");
    let mut sleep_pid = None;
    for _ in 0..200 {
        let polled = tokio::time::timeout(Duration::from_millis(50), &mut create).await;
        assert!(polled.is_err(), "the command ended early: {polled:?}");
        sleep_pid = read_when_written(&sleep_pid_file);
        if sleep_pid.is_some() {
            break;
        }
    }
    let sleep_pid = sleep_pid.expect("the command starts its background sleep");
    let sh_pid = read_when_written(&dir.path().join("sh.pid")).unwrap();
    assert!(!ended(&sleep_pid) && !ended(&sh_pid));

    drop(create);

    for _ in 0..100 {
        if ended(&sleep_pid) && ended(&sh_pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("sleep {sleep_pid} or sh {sh_pid} survived the dropped operation");
}

#[tokio::test]
async fn update_of_destroy_alone_does_not_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "counter", "tok-update");
    let run = "echo run >> count; echo \"runs=$(wc -l < count | tr -d ' ')\" >> \"$FLOW_OUTPUT\"";
    let exec = Exec::new();
    let first = values(json!({"run": run, "destroy": "true"}));
    let created = exec.create(&ctx, &first).await.unwrap();
    assert_eq!(created.outputs["runs"], "1");

    let second = values(json!({"run": run, "destroy": "rm -f count"}));
    let updated = exec
        .update(&ctx, prior(&first, &created.outputs), &second)
        .await
        .unwrap();
    assert_eq!(updated.outputs, created.outputs);
    let count = std::fs::read_to_string(dir.path().join("count")).unwrap();
    assert_eq!(count.lines().count(), 1, "`run` ran again");

    let third = values(json!({"run": run, "destroy": "rm -f count", "env": {"X": "1"}}));
    let rerun = exec
        .update(&ctx, prior(&second, &updated.outputs), &third)
        .await
        .unwrap();
    assert_eq!(rerun.outputs["runs"], "2");
}

#[tokio::test]
async fn delete_runs_destroy_with_the_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, reporter) = op_context(dir.path(), "vpc", "tok-delete");
    let inputs = values(json!({
        "run": "echo 'vpc.id=vpc-9' >> \"$FLOW_OUTPUT\"",
        "destroy": "echo \"$FLOW_OUTPUT_VPC_ID $FLOW_OPERATION_TOKEN $NAME\" > destroyed; echo deleting",
        "env": {"NAME": "main"},
    }));
    let exec = Exec::new();
    let created = exec.create(&ctx, &inputs).await.unwrap();
    exec.delete(&ctx, prior(&inputs, &created.outputs))
        .await
        .unwrap();
    let destroyed = std::fs::read_to_string(dir.path().join("destroyed")).unwrap();
    assert_eq!(destroyed.trim(), "vpc-9 tok-delete main");
    assert_eq!(reporter.logs(), vec!["deleting"]);
}

#[tokio::test]
async fn delete_without_destroy_does_nothing_and_failures_fail() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, reporter) = op_context(dir.path(), "x", "tok-delete-2");
    let none = values(json!({"run": "exit 1"}));
    let empty = Values::new();
    Exec::new()
        .delete(&ctx, prior(&none, &empty))
        .await
        .unwrap();
    assert!(reporter.logs().is_empty());

    let failing = values(json!({"run": "true", "destroy": "echo busy; exit 2"}));
    let err = Exec::new()
        .delete(&ctx, prior(&failing, &empty))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "`destroy` exited with status 2; last lines of its output:\n  busy"
    );
}

#[tokio::test]
async fn read_reports_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "x", "tok-read");
    let inputs = values(json!({"run": "true"}));
    let outcome = Exec::new().read(&ctx, None, &inputs).await.unwrap();
    assert_eq!(outcome, ReadOutcome::Missing);
}

#[test]
fn validate_reports_a_missing_workdir() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ValidateContext {
        workdir: dir.path().into(),
    };
    let inputs = [("workdir".to_string(), InputValue::Known(json!("nope")))];
    let problems = Exec::new().validate(&inputs, &ctx);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].path, vec!["workdir".to_string()]);
}

#[tokio::test]
async fn expect_gates_the_outputs_the_script_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "bench", "tok-gates");
    let run = "echo busbw=17.5 >> \"$FLOW_OUTPUT\"";
    let ok = values(json!({"run": run, "expect": {"busbw": ">= 10"}}));
    let applied = Exec::new().create(&ctx, &ok).await.unwrap();
    assert_eq!(applied.outputs["busbw"], json!("17.5"));
    let low = values(json!({"run": run, "expect": {"busbw": ">= 100"}}));
    let e = Exec::new().create(&ctx, &low).await.unwrap_err();
    assert_eq!(e.message, "expect: busbw = 17.5 is not >= 100");
    let missing = values(json!({"run": run, "expect": {"loss": "< 2"}}));
    let e = Exec::new().create(&ctx, &missing).await.unwrap_err();
    assert_eq!(
        e.message,
        "expect `loss < 2`: no loss was found (the script's $FLOW_OUTPUT has none)"
    );
}

#[test]
fn validate_points_at_a_gate_that_does_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    let problems = Exec::new().validate(
        &[
            ("run".into(), InputValue::Known(json!("true"))),
            (
                "expect".into(),
                InputValue::Known(json!({"busbw": "at least 3"})),
            ),
        ],
        &ValidateContext {
            workdir: dir.path().into(),
        },
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, ["expect", "busbw"]);
}

#[tokio::test]
async fn a_script_without_gates_reports_no_measurement() {
    /// Counts what it is told was measured.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);
    impl crate::contract::Reporter for Counting {
        fn event(&self, _: &str) {}
        fn log(&self, _: &str) {}
        fn measured(&self, _: &crate::contract::Measured) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut ctx, _) = op_context(dir.path(), "plain", "tok-plain");
    let counting = std::sync::Arc::new(Counting::default());
    ctx.reporter = counting.clone();
    let run = "echo x=1 >> \"$FLOW_OUTPUT\"";
    Exec::new()
        .create(&ctx, &values(json!({"run": run})))
        .await
        .unwrap();
    assert_eq!(counting.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    Exec::new()
        .create(&ctx, &values(json!({"run": run, "expect": {"x": "== 1"}})))
        .await
        .unwrap();
    assert_eq!(counting.0.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A published nccl-tests run (aws-batch seed's EFA output) printed by the
/// script itself: what `parse` reads joins the outputs and `expect` gates
/// it, as on a job's log; the script's own outputs still count.
#[tokio::test]
async fn parse_reads_what_the_script_prints_and_expect_gates_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "check", "tok-parse");
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/metrics/testdata/nccl-tests-batch-efa.txt"
    );
    let run = format!("cat '{sample}'; echo node=gpu-1 >> \"$FLOW_OUTPUT\"");
    let ok = values(json!({"run": run, "parse": "nccl-tests",
        "expect": {"busbw": ">= 150", "node": "== gpu-1"}}));
    let applied = Exec::new().create(&ctx, &ok).await.unwrap();
    assert_eq!(applied.outputs["busbw"], json!(156.742));
    assert!(
        applied.outputs["sizes"].is_object(),
        "{:?}",
        applied.outputs
    );
    assert_eq!(applied.outputs["node"], json!("gpu-1"));
    let low = values(json!({"run": run, "parse": "nccl-tests", "expect": {"busbw": ">= 180"}}));
    let e = Exec::new().create(&ctx, &low).await.unwrap_err();
    assert_eq!(
        e.message,
        "expect: busbw = 156.742 is not >= 180 (log line: `# Avg bus bandwidth    : 156.742`)"
    );
    // A value the script writes itself quotes no line of the output.
    let own = format!("{run}; echo busbw=12 >> \"$FLOW_OUTPUT\"");
    let own = values(json!({"run": own, "parse": "nccl-tests", "expect": {"busbw": ">= 180"}}));
    let e = Exec::new().create(&ctx, &own).await.unwrap_err();
    assert_eq!(e.message, "expect: busbw = 12 is not >= 180");
    // Without `parse`, the printed figure is only text in the log.
    let unread = values(json!({"run": run, "expect": {"busbw": ">= 150"}}));
    let e = Exec::new().create(&ctx, &unread).await.unwrap_err();
    assert!(e.message.contains("no busbw was found"), "{}", e.message);
}

/// Output that is not the program's: the step fails naming `parse`, with
/// the output's first lines, never passing as if healthy.
#[tokio::test]
async fn parse_of_output_that_is_not_the_programs_fails_at_parse() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _) = op_context(dir.path(), "check", "tok-parse-miss");
    let inputs = values(
        json!({"run": "echo 'NCCL WARN net plugin not found'", "parse": "nccl-tests",
        "expect": {"busbw": ">= 1"}}),
    );
    let e = Exec::new().create(&ctx, &inputs).await.unwrap_err();
    assert_eq!(e.input, ["parse"]);
    assert!(
        e.message.contains("NCCL WARN net plugin not found"),
        "{}",
        e.message
    );
}

#[test]
fn validate_names_a_program_parse_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let problems = Exec::new().validate(
        &[
            ("run".into(), InputValue::Known(json!("true"))),
            ("parse".into(), InputValue::Known(json!("nccl-test"))),
        ],
        &ValidateContext {
            workdir: dir.path().to_path_buf().into(),
        },
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, ["parse"]);
    assert!(
        problems[0]
            .message
            .contains("flow reads no program called `nccl-test`")
    );
    assert_eq!(
        problems[0].help.as_deref(),
        Some("did you mean `nccl-tests`?")
    );
}
