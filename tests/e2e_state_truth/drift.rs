//! Refresh: what changed or was deleted outside flow, shown, recorded and
//! put back.

use crate::kill::kill_chain;
use crate::record;
use crate::support::aws::{Aws, STACKS};
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;

/// A secret with a tag, beside the two stacks of `STACKS`.
const KEY: &str = r#"
[steps.key]
provider = "secretsmanager.secret"
[steps.key.inputs]
name = "team-key"
value = "not-a-real-secret-5150"
tags = { team = "ml" }
"#;

/// The two stacks and the secret.
fn drifting() -> String {
    format!("{STACKS}{KEY}")
}

/// A stack deleted by hand and a secret retagged in the console: plan reads
/// both, shows them in the drift sections (text and JSON), exits 2 with
/// --detailed-exitcode and writes nothing; `apply --refresh-only` records
/// them; `apply` puts them back; the plan after that is clean.
#[test]
fn changes_made_outside_flow_are_shown_recorded_and_undone() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &drifting());
    a.apply().expect(0);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    moto.query_call("cloudformation", "Action=DeleteStack&StackName=flow-app");
    moto.json_call(
        "secretsmanager",
        "secretsmanager.TagResource",
        r#"{"SecretId": "team-key", "Tags": [{"Key": "team", "Value": "infra"}]}"#,
    );
    moto.json_call(
        "secretsmanager",
        "secretsmanager.PutSecretValue",
        r#"{"SecretId": "team-key", "SecretString": "changed by hand"}"#,
    );
    let before = record(&a, "app");
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    let out = &plan.stdout;
    assert!(
        out.starts_with("Changed outside flow:\n  ~ key  (secretsmanager.secret)\n"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("tags ")
            && l.ends_with(": {\"team\":\"ml\"} → {\"team\":\"infra\"}")),
        "{out}"
    );
    assert!(
        out.contains(
            "Deleted outside flow:\n  - app  (cloudformation.stack) — planned for create again"
        ),
        "{out}"
    );
    assert!(out.contains("current version : "), "{out}");
    assert!(!out.contains("changed by hand"), "{out}");
    assert!(out.contains("create — deleted outside flow"), "{out}");
    assert!(out.contains("update — changed outside flow"), "{out}");
    assert!(!out.contains("not-a-real-secret"), "{out}");
    // A plan never writes state.
    assert_eq!(record(&a, "app"), before);
    // With --target, only the targets and what they need are read.
    let targeted = a.run(&["plan", "wf.toml", "--target", "key"]).expect(0);
    assert!(targeted.stdout.contains("~ key"), "{}", targeted.stdout);
    assert!(
        !targeted.stdout.contains("Deleted outside flow"),
        "{}",
        targeted.stdout
    );

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
    // Recorded drift is not shown again; what apply will do is.
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(!plan.stdout.contains("outside flow:"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("Plan: 1 to create, 1 to update"),
        "{}",
        plan.stdout
    );

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
    assert_eq!(moto.secret_value("team-key"), "not-a-real-secret-5150");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// With no endpoint to reach, refresh stops with one line per provider kind
/// naming what to set and the offline plan as the way out, no SDK error
/// chain; the offline plan works and state is untouched.
#[test]
fn refresh_without_a_reachable_endpoint_says_what_to_set() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &drifting());
    a.apply().expect(0);
    let before = record(&a, "key");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let env: Vec<(String, String)> = moto.env_for(&dead);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plan = a.p.run_env(&["plan", "wf.toml"], &env).expect(1);
    let all = plan.all();
    assert!(
        all.contains("cannot reach the cloud, so nothing was read or changed:"),
        "{all}"
    );
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

/// A Batch compute environment disabled in the console, inside a stack that
/// stays `CREATE_COMPLETE`: CloudFormation does not see it, flow does; apply
/// puts it back from the template, which a stack update alone would not.
/// (moto ignores a new `maxvCpus`, so the vCPU limit is shown by the unit
/// tests of `batch_drift` only.)
#[test]
fn a_batch_environment_changed_in_the_console_is_drift_and_is_put_back() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("data/a.txt", "a\n");
    a.p.write("wf.toml", &kill_chain());
    a.run(&["apply", "wf.toml", "--auto-approve", "--target", "batch"])
        .expect(0);
    let envs = moto
        .rest_call("batch", "POST", "/v1/describecomputeenvironments", "{}")
        .1;
    let envs: serde_json::Value = serde_json::from_str(&envs).unwrap();
    let ce = envs["computeEnvironments"][0]["computeEnvironmentArn"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = moto.rest_call(
        "batch",
        "POST",
        "/v1/updatecomputeenvironment",
        &format!(r#"{{"computeEnvironment": "{ce}", "state": "DISABLED", "computeResources": {{"maxvCpus": 16}}}}"#),
    );
    assert_eq!(status, 200, "{body}");

    let plan = a
        .run(&[
            "plan",
            "wf.toml",
            "--target",
            "batch",
            "--detailed-exitcode",
        ])
        .expect(2);
    let out = &plan.stdout;
    assert!(
        out.contains("compute environment ComputeEnvironment state"),
        "{out}"
    );
    assert!(out.contains("\"ENABLED\" → \"DISABLED\""), "{out}");

    a.run(&["apply", "wf.toml", "--auto-approve", "--target", "batch"])
        .expect(0);
    let envs = moto
        .rest_call("batch", "POST", "/v1/describecomputeenvironments", "{}")
        .1;
    let envs: serde_json::Value = serde_json::from_str(&envs).unwrap();
    assert_eq!(envs["computeEnvironments"][0]["state"], "ENABLED", "{envs}");
    assert_eq!(
        envs["computeEnvironments"][0]["computeResources"]["maxvCpus"], 192,
        "{envs}"
    );
    a.run(&[
        "plan",
        "wf.toml",
        "--target",
        "batch",
        "--detailed-exitcode",
    ])
    .expect(0);
}

/// One object's read hangs (the proxy holds the secret's answers): that
/// step is "could not read" and planned from state alone, while the deleted
/// stack beside it is still seen and planned; the plan exits 0.
#[test]
fn a_read_that_times_out_leaves_the_rest_of_the_plan_usable() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", &drifting());
    a.apply().expect(0);
    moto.query_call("cloudformation", "Action=DeleteStack&StackName=flow-app");
    proxy.hold("DescribeSecret", std::time::Duration::from_secs(5));
    let plan = a
        .run(&["plan", "wf.toml", "--refresh-timeout", "1s"])
        .expect(0);
    let out = &plan.stdout;
    assert!(
        out.contains("Could not read (planned from state alone):\n  ? key  (secretsmanager.secret): timed out after 1s"),
        "{out}"
    );
    assert!(out.contains("Deleted outside flow:\n  - app"), "{out}");
    assert!(out.contains("create — deleted outside flow"), "{out}");
    assert!(!out.contains("~ key"), "{out}");
    // The summary says it once, under the plan's count.
    assert!(
        out.contains(
            "Not checked: 1 step could not be read (listed above) and is planned from state alone."
        ),
        "{out}"
    );
}
