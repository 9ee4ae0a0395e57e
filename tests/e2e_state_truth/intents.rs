//! Failures keep the intent unless the answer proves nothing happened.

use crate::record;
use crate::support::aws::Aws;
use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::moto::Moto;

const SECRET: &str = r#"
[workflow]
region = "us-east-1"

[steps.key]
provider = "secretsmanager.secret"
retries = 1
[steps.key.inputs]
name = "team-key"
generate = "ssh-ed25519"
"#;

/// CreateSecret reaches moto and its answer is lost; every later call of the
/// apply fails before reaching moto, so retries run out. The intent (with
/// its token) stays; the next apply finds the secret by that token and
/// adopts it: one secret, one CreateSecret, no conflict.
#[test]
fn a_create_whose_answer_was_lost_is_adopted_by_the_next_apply() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", SECRET);
    // The first look finds no secret; the create reaches moto and its answer
    // is lost; every call after that is cut off before moto.
    proxy.schedule("DescribeSecret", &[None]);
    proxy.schedule("CreateSecret", &[Some(Fault::Lost)]);
    proxy.faults(1.0, &[Fault::Reset], None);
    let first = a.apply().expect(1);
    let counts = proxy.counts();
    // The request reached moto once, and its answer never came back.
    assert_eq!(proxy.injected(Fault::Lost), 1, "{counts:?}");
    assert_eq!(proxy.forwarded("CreateSecret"), 1, "{counts:?}");
    assert_eq!(moto.secrets(), ["team-key"]);
    let rec = record(&a, "key");
    assert_eq!(rec["status"], "failed", "{rec}");
    let token = rec["in_flight"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("the intent was dropped: {rec}\n{}", first.all()))
        .to_string();
    assert_eq!(rec["in_flight"]["operation"], "create", "{rec}");
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("the last create failed; apply first reads what it left"),
        "{}",
        plan.stdout
    );

    proxy.calm();
    let second = a.apply().expect(0);
    assert!(
        second.stdout.contains("1 created") || second.stdout.contains("1 replaced"),
        "{}",
        second.stdout
    );
    let log = a.p.read(".flow/wf/logs/key.log");
    assert!(
        log.contains(&format!(
            "reconciling an interrupted create (token {token})"
        )) && log.contains("adopting it"),
        "{log}"
    );
    assert_eq!(proxy.forwarded("CreateSecret"), 1, "{:?}", proxy.counts());
    assert_eq!(moto.secrets(), ["team-key"]);
    let described = moto.json_call(
        "secretsmanager",
        "secretsmanager.DescribeSecret",
        r#"{"SecretId": "team-key"}"#,
    );
    let tags = described["Tags"].as_array().cloned().unwrap_or_default();
    assert!(
        tags.iter()
            .any(|t| t["Key"] == "flow:token" && t["Value"] == token.as_str()),
        "{described}"
    );
    let rec = record(&a, "key");
    assert_eq!(rec["applied"], true, "{rec}");
    assert!(rec["in_flight"].is_null(), "{rec}");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// A refusal that proves nothing was created (a 400 answer to CreateSecret,
/// which never reached moto) drops the intent: the next plan is a plain
/// create, and the next apply starts under a new token.
#[test]
fn a_refused_create_drops_its_intent() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", SECRET);
    proxy.schedule("CreateSecret", &[Some(Fault::Refused)]);
    let run = a.apply().expect(1);
    assert!(run.stdout.contains("ValidationException"), "{}", run.stdout);
    assert_eq!(proxy.forwarded("CreateSecret"), 0, "{:?}", proxy.counts());
    assert!(moto.secrets().is_empty());
    let rec = record(&a, "key");
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(rec["in_flight"].is_null(), "{rec}");
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("the last attempt failed"),
        "{}",
        plan.stdout
    );
    a.apply().expect(0);
    assert_eq!(proxy.forwarded("CreateSecret"), 1, "{:?}", proxy.counts());
    assert_eq!(moto.secrets(), ["team-key"]);
}
