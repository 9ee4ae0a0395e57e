//! A Batch job that failed its gate, applied again: the plan, the progress,
//! the summary and the JSON events call it a create each time, and what
//! the failed run captured is not shown again as this run's.

use crate::support::aws::{Aws, BATCH_CHAIN};
use crate::support::moto::Moto;

/// The Batch chain's NCCL job reading nccl-tests' table, gated on
/// `min_busbw` (a threshold no fabric meets fails it).
fn gated_chain() -> String {
    let chain = BATCH_CHAIN.replace(
        "timeout = \"1h\"\n",
        "timeout = \"1h\"\ncommand = [\"all_reduce_perf\", \"-b\", \"8\", \"-e\", \"1G\"]\nparse = \"nccl-tests\"\nexpect = { busbw = \">= ${vars.min_busbw}\" }\n",
    );
    chain.replace(
        "region = \"us-east-1\"\n",
        "region = \"us-east-1\"\n\n[vars.min_busbw]\ntype = \"number\"\ndefault = 1\n",
    )
}

/// The `(type, action, status)` of each of `step`'s events in a JSON stream.
fn events_of(stdout: &str, step: &str) -> Vec<(String, Option<String>, Option<String>)> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["step"] == step && v["type"] != "progress")
        .map(|v| {
            let s = |k: &str| v[k].as_str().map(String::from);
            (s("type").unwrap_or_default(), s("action"), s("status"))
        })
        .collect()
}

/// How many of `step`'s progress events in a JSON stream start with `prefix`.
fn progress_count(stdout: &str, step: &str, prefix: &str) -> usize {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "progress" && v["step"] == step)
        .filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with(prefix)))
        .count()
}

#[test]
fn a_job_that_failed_its_gate_is_created_again_and_called_a_create_everywhere() {
    let moto = Moto::start();
    let _compute = moto.batch_compute();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &gated_chain());
    let gate = ["--var", "min_busbw=99999"];

    let failed = a
        .run(&[&["apply", "wf.toml", "--auto-approve"][..], &gate].concat())
        .expect(1);
    assert!(
        failed.all().contains("busbw") && failed.all().contains("is not >= 99999"),
        "{}",
        failed.all()
    );
    assert!(failed.stdout.contains("3 created"), "{}", failed.all());

    // The plan: one create, the reason said once.
    let plan = a.run(&[&["plan", "wf.toml"][..], &gate].concat()).expect(0);
    assert!(
        plan.stdout
            .contains("nccl  (batch.job)  create — the last create failed"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("Plan: 1 to create, 0 to update, 0 to replace"),
        "{}",
        plan.stdout
    );

    // Failing again: started and finished both say create; the failed
    // run's captures are not shown again, this run's are shown once.
    let json = a
        .run(&[&["apply", "wf.toml", "--auto-approve", "--json"][..], &gate].concat())
        .expect(1);
    assert_eq!(
        events_of(&json.stdout, "nccl"),
        [
            ("started".to_string(), Some("create".to_string()), None),
            (
                "finished".to_string(),
                Some("create".to_string()),
                Some("failed".to_string())
            ),
        ],
        "{}",
        json.stdout
    );
    assert_eq!(
        progress_count(&json.stdout, "nccl", "captured busbw = "),
        1,
        "{}",
        json.stdout
    );
    assert_eq!(
        progress_count(&json.stdout, "nccl", "reading what the failed create left"),
        1,
        "{}",
        json.stdout
    );
    assert_eq!(
        progress_count(&json.stdout, "nccl", "reconciling interrupted"),
        0,
        "a failed create was not interrupted: {}",
        json.stdout
    );

    // With a gate it meets: created, as the plan said, not "replaced".
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("Plan: 1 to create"), "{}", plan.stdout);
    let done = a.apply().expect(0);
    let all = done.all();
    assert!(all.contains("✓ created"), "{all}");
    assert!(
        !all.contains("replaced") && !all.contains("replacing"),
        "{all}"
    );
    assert!(
        all.contains("Apply complete: 1 created, 3 unchanged"),
        "{all}"
    );
    assert_eq!(all.matches("captured busbw = ").count(), 1, "{all}");
    // The failed run's captures are in the step's log, marked as its.
    let log = a.p.read(".flow/wf/logs/nccl.log");
    assert!(log.contains("(the failed run) captured busbw = "), "{log}");
}
