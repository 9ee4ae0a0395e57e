//! Adopting objects made by hand: `flow import` and `import = "ID"`.

use crate::record;
use crate::support::aws::Aws;
use crate::support::moto::Moto;

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

/// An ID of the wrong kind is refused before any call, with what the kind
/// takes, and state is not even made.
#[test]
fn an_id_of_the_wrong_kind_is_refused_with_what_the_step_takes() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write(
        "wf.toml",
        r#"
[workflow]
region = "us-east-1"

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
subnet_ids = ["subnet-0a"]
"#,
    );
    let run = a.run(&["import", "wf.toml", "fsx", "flow-vpc"]).expect(1);
    assert!(
        run.stderr.contains(
            "`flow-vpc` is not an FSx file system id: those look like `fs-0123456789abcdef0`"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("a `fsx.lustre` step imports the file system's id (fs-…)"),
        "{}",
        run.stderr
    );
    let missing = a
        .run(&["import", "wf.toml", "fsx", "fs-0123456789abcdef0"])
        .expect(1);
    assert!(
        missing
            .stderr
            .contains("there is no file system `fs-0123456789abcdef0` to import"),
        "{}",
        missing.stderr
    );
    assert!(!a.p.path().join(".flow/wf/db").exists());
}
