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
    applied(&a);
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
    applied(&a);
    let plan = run_without(
        &a,
        &moto.env(),
        &["plan", "wf.toml", "--detailed-exitcode"],
        &["AWS_REGION", "AWS_DEFAULT_REGION"],
    );
    assert_eq!(plan.code, 1, "{}", plan.all());
    let all = plan.all();
    assert!(
        all.contains("cannot reach the cloud, so nothing was read or changed:"),
        "{all}"
    );
    assert!(
        all.contains("  AWS in the default region (3 steps: app, key, vpc): no AWS region: set `region` under [workflow] or on the step, or AWS_REGION"),
        "{all}"
    );
    assert!(!all.contains("No changes"), "{all}");
    assert!(!all.contains("up to date"), "{all}");
}

/// No credentials anywhere in the SDK's chain (keys unset, no profile file,
/// instance metadata off): plan, apply and destroy each stop before any
/// step runs with the same one error, naming the chain and what to set;
/// nothing is retried or called transient, no call reaches the server,
/// and state and the objects are as they were.
#[test]
fn without_credentials_every_command_stops_before_any_step() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    applied(&a);
    // A change, so apply has something to do.
    a.p.write(
        "wf.toml",
        &WORKFLOW.replace("not-a-real-secret-7", "not-a-real-secret-8"),
    );
    let state_before = state_bytes(&a);
    let calls_before = proxy.calls().len();
    for args in [
        vec!["plan", "wf.toml", "--detailed-exitcode"],
        vec!["apply", "wf.toml", "--auto-approve"],
        vec!["destroy", "wf.toml", "--auto-approve"],
    ] {
        let run = run_without(
            &a,
            &moto.env_for(&proxy.endpoint()),
            &args,
            &[
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
                "AWS_PROFILE",
            ],
        );
        let all = run.all();
        assert_eq!(run.code, 1, "{args:?}: {all}");
        assert!(
            all.contains("cannot reach the cloud, so nothing was read or changed:"),
            "{args:?}: {all}"
        );
        assert!(
            all.contains("  AWS in the default region (3 steps: app, key, vpc): ")
                && all.contains("): no usable AWS credentials: ")
                && all.contains(
                    "(the chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the profile"
                ),
            "{args:?}: {all}"
        );
        for never in [
            "retrying",
            "transient",
            "attempt 1",
            "No changes",
            "deleting",
        ] {
            assert!(!all.contains(never), "{args:?} said {never:?}: {all}");
        }
    }
    assert_eq!(
        proxy.calls().len(),
        calls_before,
        "a call reached the server"
    );
    assert_eq!(state_bytes(&a), state_before, "state changed");
    // With credentials back, the apply goes on as if nothing had happened.
    a.apply().expect(0);
}

/// The workflow and its template written, and applied.
fn applied(a: &Aws) {
    a.p.write("wf.toml", WORKFLOW);
    a.p.write("handle.json", HANDLE);
    a.apply().expect(0);
}

/// `flow ARGS` with the test cloud's environment `env`, less `removed`
/// (taken out of the test process's environment too).
fn run_without(
    a: &Aws,
    env: &[(String, String)],
    args: &[&str],
    removed: &[&str],
) -> crate::support::Run {
    let mut cmd = a.p.cmd(args);
    for (k, v) in env.iter().filter(|(k, _)| !removed.contains(&k.as_str())) {
        cmd.env(k, v);
    }
    for k in removed {
        cmd.env_remove(k);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    crate::support::finish(cmd.spawn().expect("spawn flow"))
}

/// What state holds: each step's record and the backups taken (a
/// command that changed nothing takes none); sled's own files may be
/// rewritten by any open, so their bytes are not compared.
fn state_bytes(a: &Aws) -> Vec<String> {
    let mut out: Vec<String> = ["app", "key", "vpc"]
        .iter()
        .map(|step| a.run(&["state", "show", "wf.toml", step]).expect(0).stdout)
        .collect();
    out.push(a.run(&["state", "backups", "wf.toml"]).expect(0).stdout);
    out
}
