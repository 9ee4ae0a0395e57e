//! kill -9 in the middle of a chain, then a resume that makes no second
//! stack or file system.

use std::time::Duration;

use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;
use crate::support::{finish, signal, wait_until};

const RESUME: &str = r#"
[workflow]
name = "resume"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
subnet_ids = ["${steps.vpc.outputs.SubnetId}"]
"#;

#[test]
fn kill_9_mid_chain_then_resume_makes_no_second_stack_or_file_system() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", RESUME);

    // moto creates stacks at once; the proxy shows this one in progress.
    proxy.rewrite(
        "DescribeStacks",
        "<StackStatus>CREATE_COMPLETE</StackStatus>",
        "<StackStatus>CREATE_IN_PROGRESS</StackStatus>",
        1000,
    );
    let child = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(
        Duration::from_secs(60),
        "flow to wait for the stack",
        || proxy.forwarded("CreateStack") == 1 && proxy.counts().rewritten >= 2,
    );
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("resumes an interrupted create"),
        "{}",
        plan.stdout
    );

    // Resume: the stack is still in progress for a while; flow waits for it
    // instead of creating another. Then FSx is shown creating, and killed too.
    proxy.calm();
    proxy.rewrite(
        "DescribeStacks",
        "<StackStatus>CREATE_COMPLETE</StackStatus>",
        "<StackStatus>CREATE_IN_PROGRESS</StackStatus>",
        2,
    );
    proxy.rewrite(
        "DescribeFileSystems",
        r#""Lifecycle": "AVAILABLE""#,
        r#""Lifecycle": "CREATING""#,
        1000,
    );
    let child = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(
        Duration::from_secs(90),
        "flow to wait for the file system",
        || proxy.forwarded("CreateFileSystem") == 1 && proxy.forwarded("DescribeFileSystems") >= 3,
    );
    signal(&child, libc::SIGKILL);
    let resumed = finish(child);
    assert!(
        resumed.stdout.contains("waiting for it") || resumed.stdout.contains("adopting"),
        "{}",
        resumed.all()
    );

    proxy.calm();
    proxy.rewrite(
        "DescribeFileSystems",
        r#""Lifecycle": "AVAILABLE""#,
        r#""Lifecycle": "CREATING""#,
        1,
    );
    let done = a.apply().expect(0);
    assert!(done.stdout.contains("Apply complete"), "{}", done.stdout);

    assert_eq!(moto.stacks(), ["flow-vpc"]);
    assert_eq!(moto.file_systems().len(), 1, "{:?}", moto.file_systems());
    assert_eq!(proxy.forwarded("CreateStack"), 1);
    assert_eq!(proxy.forwarded("CreateFileSystem"), 1);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(moto.file_systems().is_empty());
    assert!(moto.stacks().is_empty());
}
