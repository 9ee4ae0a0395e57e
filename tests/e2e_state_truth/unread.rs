//! Plans that did not look say so: a plan whose refresh read nothing is not
//! "No changes", `--detailed-exitcode` gives it a code of its own, and a
//! missing region stops the plan before any read, as missing credentials do.

use std::time::Duration;

use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;

/// A template with one resource that needs nothing.
const HANDLE: &str =
    r#"{"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}"#;

/// Two stacks and a secret, all read by refresh; no region in the file.
const WORKFLOW: &str = r#"
[workflow]
name = "unread"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-unread-vpc"
template = "handle.json"

[steps.app]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.app.inputs]
stack_name = "flow-unread-app"
template = "handle.json"

[steps.key]
provider = "secretsmanager.secret"
[steps.key.inputs]
name = "unread-key"
value = "not-a-real-secret-7"
"#;

/// Every read hangs past `--refresh-timeout` (the proxy holds the answers):
/// the plan lists the three steps once under their shared reason, says that
/// none was checked instead of "No changes", and `--detailed-exitcode` exits
/// 3, neither 0 (nothing to do) nor 2 (changes); JSON carries the count.
#[test]
fn a_plan_that_could_read_nothing_says_so_and_exits_3() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", WORKFLOW);
    a.p.write("handle.json", HANDLE);
    a.apply().expect(0);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    proxy.hold("DescribeStacks", Duration::from_secs(5));
    proxy.hold("DescribeSecret", Duration::from_secs(5));
    let plan = a
        .run(&[
            "plan",
            "wf.toml",
            "--refresh-timeout",
            "1s",
            "--detailed-exitcode",
        ])
        .expect(3);
    let out = &plan.stdout;
    assert!(
        out.contains(
            "Could not read (planned from state alone):\n  ? 3 steps: timed out after 1s\n      key, vpc, app\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "Not checked: 3 of 3 steps could not be read; from state alone, nothing would change."
        ),
        "{out}"
    );
    assert!(!out.contains("No changes"), "{out}");

    let json = a
        .run(&["plan", "wf.toml", "--refresh-timeout", "1s", "--json"])
        .expect(0);
    let plan: serde_json::Value = serde_json::from_str(&json.stdout).expect("plan JSON");
    assert_eq!(plan["unread"], 3, "{plan}");

    // Once the reads answer again, the same plan is a clean verdict.
    proxy.calm();
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// No region anywhere (no `region` in the workflow, no AWS_REGION, no
/// profile): the plan stops before reading anything with one line for each
/// provider kind, naming what to set; never "No changes", never exit 0.
#[test]
fn a_plan_without_a_region_stops_before_any_read() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", WORKFLOW);
    a.p.write("handle.json", HANDLE);
    a.apply().expect(0);
    let env: Vec<(String, String)> = moto
        .env()
        .into_iter()
        .filter(|(k, _)| k != "AWS_REGION")
        .collect();
    let mut cmd = a.p.cmd(&["plan", "wf.toml", "--detailed-exitcode"]);
    cmd.env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION");
    for (k, v) in &env {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let plan = crate::support::finish(cmd.spawn().expect("spawn flow"));
    assert_eq!(plan.code, 1, "{}", plan.all());
    let all = plan.all();
    assert!(all.contains("refresh could not reach the cloud"), "{all}");
    assert!(
        all.contains("cloudformation.stack (2 steps): no AWS region: set `region` under [workflow] or on the step, or AWS_REGION"),
        "{all}"
    );
    assert!(
        all.contains("secretsmanager.secret (1 step): no AWS region"),
        "{all}"
    );
    assert!(!all.contains("No changes"), "{all}");
    assert!(!all.contains("up to date"), "{all}");
}
