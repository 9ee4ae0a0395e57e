//! End-to-end: state that tells the truth. An intent survives any failure
//! after which the provider may have acted, and the next apply reads what
//! the recorded token did before creating anything; plans read the real
//! objects and show what changed outside flow. Against moto, with the
//! tests' fault proxy where moto cannot show a behaviour (an answer lost on
//! the way back).

mod support;

use support::aws::Aws;
use support::fault_proxy::{Fault, FaultProxy};
use support::moto::Moto;

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

/// The step's record as `flow state show` prints it.
fn record(a: &Aws, step: &str) -> serde_json::Value {
    let show = a.run(&["state", "show", "wf.toml", step]).expect(0);
    serde_json::from_str(&show.stdout).expect("state show prints JSON")
}

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

const DRIFTING: &str = r#"
[workflow]
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.app]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.app.inputs]
stack_name = "flow-app"
template = "app.yaml"
parameters = { VpcStack = "flow-vpc" }

[steps.key]
provider = "secretsmanager.secret"
[steps.key.inputs]
name = "team-key"
value = "not-a-real-secret-5150"
tags = { team = "ml" }
"#;

/// A stack deleted by hand and a secret retagged in the console: plan reads
/// both, shows them in the drift sections (text and JSON), exits 2 with
/// --detailed-exitcode and writes nothing; `apply --refresh-only` records
/// them; `apply` puts them back; the plan after that is clean.
#[test]
fn changes_made_outside_flow_are_shown_recorded_and_undone() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", DRIFTING);
    a.apply().expect(0);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    moto.query_call("cloudformation", "Action=DeleteStack&StackName=flow-app");
    moto.json_call(
        "secretsmanager",
        "secretsmanager.TagResource",
        r#"{"SecretId": "team-key", "Tags": [{"Key": "team", "Value": "infra"}]}"#,
    );
    let before = record(&a, "app");
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    let out = &plan.stdout;
    assert!(
        out.contains(
            "Changed outside flow:\n  ~ key  (secretsmanager.secret)\n      tags : {\"team\":\"ml\"} → {\"team\":\"infra\"}\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "Deleted outside flow:\n  - app  (cloudformation.stack) — planned for create again"
        ),
        "{out}"
    );
    assert!(out.contains("create — deleted outside flow"), "{out}");
    assert!(out.contains("update — changed outside flow"), "{out}");
    assert!(!out.contains("not-a-real-secret"), "{out}");
    // A plan never writes state.
    assert_eq!(record(&a, "app"), before);

    let json = a.run(&["plan", "wf.toml", "--json"]).expect(0);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let drift = doc["drift"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<(String, String)> = drift
        .iter()
        .map(|d| (d["step"].to_string(), d["drift"].to_string()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("\"key\"".to_string(), "\"changed\"".to_string()),
            ("\"app\"".to_string(), "\"deleted\"".to_string())
        ],
        "{drift:?}"
    );

    // Recorded as found, and nothing in the cloud changes.
    let only = a
        .run(&["apply", "wf.toml", "--refresh-only", "--auto-approve"])
        .expect(0);
    assert!(
        only.stdout
            .contains("Refresh complete: 2 steps recorded as found."),
        "{}",
        only.stdout
    );
    assert_eq!(record(&a, "app")["applied"], false);
    assert_eq!(record(&a, "key")["inputs"]["tags"]["team"], "infra");
    assert_eq!(moto.stacks(), ["flow-vpc"]);

    // Apply puts both back, and then nothing is left to do.
    a.apply().expect(0);
    let mut stacks = moto.stacks();
    stacks.sort();
    assert_eq!(stacks, ["flow-app", "flow-vpc"]);
    let described = moto.json_call(
        "secretsmanager",
        "secretsmanager.DescribeSecret",
        r#"{"SecretId": "team-key"}"#,
    );
    let team: Vec<&serde_json::Value> = described["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["Key"] == "team")
        .map(|t| &t["Value"])
        .collect();
    assert_eq!(team, ["ml"], "{described}");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// With no endpoint to reach, refresh stops with one line per provider kind
/// naming what to set and the offline plan as the way out, no SDK error
/// chain; the offline plan works and state is untouched.
#[test]
fn refresh_without_a_reachable_endpoint_says_what_to_set() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", DRIFTING);
    a.apply().expect(0);
    let before = record(&a, "key");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let env: Vec<(String, String)> = moto.env_for(&dead);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plan = a.p.run_env(&["plan", "wf.toml"], &env).expect(1);
    let all = plan.all();
    assert!(all.contains("refresh could not reach the cloud"), "{all}");
    assert!(
        all.contains(
            "cloudformation.stack (2 steps): the endpoint does not answer; set `AWS_PROFILE`"
        ),
        "{all}"
    );
    assert!(all.contains("secretsmanager.secret (1 step)"), "{all}");
    assert!(all.contains("--refresh=false"), "{all}");
    assert!(!all.contains("dispatch failure"), "{all}");
    a.p.run_env(&["plan", "wf.toml", "--refresh=false"], &env)
        .expect(0);
    assert_eq!(record(&a, "key"), before);
}

/// A template body as a query-string value.
fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const TOPIC: &str = r#"{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}"#;
const TWO_TOPICS: &str = r#"{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}, "Other": {"Type": "AWS::SNS::Topic"}}}"#;

const ADOPTING: &str = r#"
[workflow]
region = "us-east-1"

[steps.topic]
provider = "cloudformation.stack"
[steps.topic.inputs]
stack_name = "made-by-hand"
template = "topic.json"

[steps.key]
provider = "secretsmanager.secret"
import = "team-key"
[steps.key.inputs]
name = "team-key"
value = "made by hand"
tags = { team = "ml" }
"#;

/// A stack and a secret made by hand, as a team that followed the runbook
/// has them: `flow import` adopts the stack, `import = "ID"` the secret;
/// neither is changed by adopting it, and the next plan shows only how they
/// differ from the workflow. Wrong IDs are refused and leave state alone.
#[test]
fn objects_made_by_hand_are_adopted_not_created_again() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    moto.query_call(
        "cloudformation",
        &format!(
            "Action=CreateStack&StackName=made-by-hand&TemplateBody={}",
            form_encode(TOPIC)
        ),
    );
    moto.json_call(
        "secretsmanager",
        "secretsmanager.CreateSecret",
        r#"{"Name": "team-key", "SecretString": "made by hand", "Tags": [{"Key": "team", "Value": "infra"}]}"#,
    );
    a.p.write("topic.json", TOPIC);
    a.p.write("wf.toml", ADOPTING);

    // Wrong IDs: another object's name, one that does not exist, a step
    // that cannot import. State is not even created.
    let wrong = a.run(&["import", "wf.toml", "topic", "team-key"]).expect(1);
    assert!(
        wrong
            .stderr
            .contains("there is no stack `team-key` to import"),
        "{}",
        wrong.all()
    );
    let other = a
        .run(&["import", "wf.toml", "key", "made-by-hand"])
        .expect(1);
    assert!(
        other.all().contains("there is no secret `made-by-hand` to import")
            || other
                .all()
                .contains("the step's inputs name secret `team-key`, but the ID to import names `made-by-hand`"),
        "{}",
        other.all()
    );
    assert!(!a.p.path().join(".flow/wf/db").exists());

    // The plan shows what it will adopt and what it will create.
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("(secretsmanager.secret)  import — adopts `team-key`, changing nothing"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("Plan: 1 to import, 1 to create"),
        "{}",
        plan.stdout
    );

    let imported = a
        .run(&["import", "wf.toml", "topic", "made-by-hand"])
        .expect(0);
    assert!(
        imported
            .stdout
            .contains("Imported `made-by-hand` into step `topic`"),
        "{}",
        imported.stdout
    );
    let rec = record(&a, "topic");
    assert_eq!(rec["applied"], true, "{rec}");
    assert!(
        rec["resource_id"]
            .as_str()
            .unwrap()
            .contains("made-by-hand"),
        "{rec}"
    );
    let again = a
        .run(&["import", "wf.toml", "topic", "made-by-hand"])
        .expect(1);
    assert!(
        again.all().contains("step `topic` already holds"),
        "{}",
        again.all()
    );

    let apply = a.apply().expect(0);
    assert!(apply.stdout.contains("1 imported"), "{}", apply.stdout);
    assert_eq!(moto.stacks(), ["made-by-hand"]);
    assert_eq!(moto.secrets(), ["team-key"]);
    assert_eq!(moto.secret_value("team-key"), "made by hand");

    // Only the real difference is left: the tag set by hand.
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout
            .contains("tags : {\"team\":\"ml\"} → {\"team\":\"infra\"}"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("Plan: 0 to create, 1 to update"),
        "{}",
        plan.stdout
    );
    assert!(
        !plan.stdout.contains("topic  (cloudformation.stack)"),
        "{}",
        plan.stdout
    );

    // The workflow's template differs from the one the stack was made with.
    a.p.write("topic.json", TWO_TOPICS);
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("~ topic"), "{}", plan.stdout);
}

/// `import` on a step whose kind has nothing to adopt is refused before
/// anything runs, at its place in the file.
#[test]
fn import_on_a_task_is_refused_where_it_is_written() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write(
        "wf.toml",
        "[steps.hello]\nprovider = \"exec\"\nimport = \"x\"\n[steps.hello.inputs]\nrun = \"true\"\n",
    );
    let run = a.run(&["validate", "wf.toml"]).expect(1);
    assert!(
        run.stderr.contains("`exec` steps cannot be imported"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("wf.toml:3:10"), "{}", run.stderr);
}
