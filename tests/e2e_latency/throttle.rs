//! Refresh under API rate limits: the latency model's throttle
//! (scripts/local-cloud/latency_throttle.py) refuses the reads refresh makes
//! beyond a token bucket's rate, with the service's own throttling error,
//! and `flow plan` still reads every object, in about the time the rate
//! allows.

use std::time::{Duration, Instant};

use crate::support::aws::Aws;
use crate::support::moto::Moto;

/// A moto server with the latency model, its table these throttle rows
/// alone (`"service:Operation" = { rate, burst }` lines), the throttle on.
fn throttled_moto(rows: &str) -> (Moto, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("throttle.toml");
    std::fs::write(&table, format!("scale = 60\n\n[throttle]\n{rows}")).expect("write table");
    let moto = Moto::start_with(&[
        ("FLOW_LATENCY_MODEL", &table.to_string_lossy()),
        ("FLOW_LATENCY_THROTTLE", "1"),
    ]);
    (moto, dir)
}

/// Switches the model's throttle `on` or `off`.
fn switch(moto: &Moto, word: &str) {
    let (status, body) = moto.http(
        "POST",
        "/moto-api/flow-latency/throttle",
        &[],
        word.as_bytes(),
    );
    assert_eq!((status, body.as_str()), (200, word));
}

/// Applies `workflow` unthrottled, then times `flow plan` under the limits
/// and checks it read every object: exit 0 under --detailed-exitcode ("No
/// changes"), nothing it could not read. Answers the wall time and the
/// model's report.
fn refresh_under_the_throttle(moto: &Moto, workflow: &str) -> (Duration, serde_json::Value) {
    let mut a = Aws::new(moto, None);
    a.env.push(("FLOW_TIME_SCALE".into(), "1/60".into()));
    a.p.write("t.json", TEMPLATE);
    a.p.write("wf.toml", workflow);
    switch(moto, "off");
    a.run(&[
        "apply",
        "wf.toml",
        "--auto-approve",
        "-q",
        "--parallelism",
        "32",
    ])
    .expect(0);
    switch(moto, "on");
    let started = Instant::now();
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    let wall = started.elapsed();
    let out = plan.all();
    assert_eq!(plan.code, 0, "{out}");
    assert!(out.contains("No changes"), "{out}");
    assert!(!out.to_lowercase().contains("could not read"), "{out}");
    (wall, moto.latency_report())
}

const TEMPLATE: &str =
    r#"{"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}"#;

fn secrets(n: usize) -> String {
    let mut wf = String::from("[workflow]\nname = \"throttle\"\nregion = \"us-east-1\"\n");
    for i in 0..n {
        wf.push_str(&format!(
            "[steps.secret{i}]\nprovider = \"secretsmanager.secret\"\n[steps.secret{i}.inputs]\nname = \"throttle-{i}\"\nvalue = \"v{i}\"\n"
        ));
    }
    wf
}

fn stacks(n: usize) -> String {
    let mut wf = String::from("[workflow]\nname = \"throttle\"\nregion = \"us-east-1\"\n");
    for i in 0..n {
        wf.push_str(&format!(
            "[steps.stack{i}]\nprovider = \"cloudformation.stack\"\n[steps.stack{i}.inputs]\nstack_name = \"throttle-{i}\"\ntemplate = \"t.json\"\n"
        ));
    }
    wf
}

/// The throttled answers to `op` the model sent.
fn throttled(report: &serde_json::Value, op: &str) -> u64 {
    report["throttled"][op].as_u64().unwrap_or(0)
}

/// 200 secrets, DescribeSecret (refresh's one read of a secret) limited to
/// 20 a second with a bucket of 20: the model answered ThrottlingException
/// (JSON protocol) to some reads (the control: the limit was met), flow's
/// retries (the SDK's, then refresh's own back-off) read every secret all
/// the same, and the refresh took at least
/// what the rate allows, (200 - 20) / 20 = 9 s (so the limit applied), and
/// at most 1.5 times it (measured here: 1.07).
#[test]
fn a_refresh_under_a_rate_limit_reads_every_object_at_about_the_rate() {
    let (moto, _table) =
        throttled_moto("\"secretsmanager:DescribeSecret\" = { rate = 20, burst = 20 }\n");
    let (wall, report) = refresh_under_the_throttle(&moto, &secrets(200));
    let allowed = Duration::from_secs(9);
    eprintln!(
        "refresh of 200 at 20/s: {wall:?}, {:.2} x what the rate allows; throttled {}",
        wall.as_secs_f64() / allowed.as_secs_f64(),
        report["throttled"]
    );
    assert!(
        throttled(&report, "DescribeSecret") > 0,
        "{}",
        report["throttled"]
    );
    assert!(wall >= allowed, "{wall:?}: faster than the limit allows");
    assert!(
        wall <= allowed.mul_f64(1.5),
        "{wall:?}: more than 1.5 x the {allowed:?} the limit allows; {}",
        report["throttled"]
    );
}

/// 20 stacks, CloudFormation's DescribeStacks and GetTemplate (a stack's
/// refresh reads both) each limited to 5 a second with a bucket of 5: the
/// model answered the Query protocol's 400 `Throttling`, "Rate exceeded",
/// and flow read every stack, in at least (20 - 5) / 5 = 3 s (so the limit
/// applied; the time against the limit is the secrets test's to judge).
#[test]
fn a_throttled_cloudformation_answer_is_retried_until_read() {
    let (moto, _table) = throttled_moto(
        "\"cloudformation:DescribeStacks\" = { rate = 5, burst = 5 }\n\"cloudformation:GetTemplate\" = { rate = 5, burst = 5 }\n",
    );
    let (wall, report) = refresh_under_the_throttle(&moto, &stacks(20));
    let refused = throttled(&report, "DescribeStacks") + throttled(&report, "GetTemplate");
    assert!(refused > 0, "{}", report["throttled"]);
    assert!(wall >= Duration::from_secs(3), "{wall:?}");
}
