//! End-to-end: the `flow` binary and the AWS providers against the moto
//! server, which speaks the real AWS wire protocols; where moto cannot show
//! a behaviour of the real service (an operation still in progress, a
//! throttled or failing call), a fault-injecting proxy of our own sits
//! between `flow` and moto.
//!
//! Each test starts its own moto server (installed into `.venv` on first use).

mod support;

use std::time::Duration;

use support::aws::{
    Aws, BATCH_CHAIN, MANY, STACKS, assert_many_made_once, destroy_many_under_faults,
};
use support::fault_proxy::{Fault, FaultProxy};
use support::moto::Moto;
use support::{Project, finish, signal, wait_until};

/// The CloudFormation templates of the tests.
const VPC_V2: &str = include_str!("fixtures/aws/vpc-v2.yaml");
const BATCH: &str = include_str!("fixtures/aws/batch.yaml");

/// Where `needle` first appears in `hay` (panics if it does not).
fn at(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in:\n{hay}"))
}

#[test]
fn stacks_exports_imports_change_sets_and_destroy_in_order() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", STACKS);
    a.run(&["validate", "wf.toml"]).expect(0);

    let apply = a.apply().expect(0);
    assert!(
        apply.stdout.contains("Apply complete: 2 created"),
        "{}",
        apply.stdout
    );
    assert!(
        apply.stdout.contains("CREATE_COMPLETE"),
        "stack events are shown: {}",
        apply.stdout
    );
    let mut stacks = moto.stacks();
    stacks.sort();
    assert_eq!(stacks, ["flow-app", "flow-vpc"]);
    let vpc_id = a.run(&["output", "wf.toml", "vpc.VpcId"]).expect(0);
    assert!(
        vpc_id.stdout.trim().starts_with("vpc-"),
        "{}",
        vpc_id.stdout
    );

    // Nothing changed: no change, and no call to AWS needed to say so.
    let same = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert!(same.stdout.contains("No changes"), "{}", same.stdout);

    // A new template: the plan shows the change set's resource changes.
    a.p.write(
        "wf.toml",
        &STACKS.replace(r#"template = "vpc.yaml""#, r#"template = "vpc-v2.yaml""#),
    );
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout.contains("+ Add AWS::EC2::Subnet Subnet2"),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("1 to update"), "{}", plan.stdout);
    let update = a.apply().expect(0);
    assert!(update.stdout.contains("1 updated"), "{}", update.stdout);
    let resources = moto.query_call(
        "cloudformation",
        "Action=DescribeStackResources&StackName=flow-vpc&Version=2010-05-15",
    );
    assert!(
        resources.contains("<LogicalResourceId>Subnet2</LogicalResourceId>"),
        "{resources}"
    );
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    // Destroy: the importing stack first, then the exporting one.
    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let all = destroy.all();
    assert!(at(&all, "app ") < at(&all, "vpc "), "destroy order:\n{all}");
    assert!(moto.stacks().is_empty(), "{:?}", moto.stacks());
}

/// A template edited in place (same path) is a change only once the engine
/// records a digest of local content with the inputs (see
/// docs/providers/aws.md, "Known limits").
#[test]
fn a_template_edited_in_place_plans_a_change_set() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", STACKS);
    a.apply().expect(0);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    a.p.write("vpc.yaml", VPC_V2);
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout.contains("+ Add AWS::EC2::Subnet Subnet2"),
        "{}",
        plan.stdout
    );
    a.apply().expect(0);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// `lifecycle.create_before_destroy` on any provider that can name a
/// replacement: `--replace` of a stack makes `flow-vpc-xxxx` first, then
/// deletes `flow-vpc`; replaced again, it goes back to `flow-vpc`.
#[test]
fn a_stack_replaced_create_before_destroy_is_made_under_a_suffixed_name_first() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    let wf = STACKS.split("[steps.app]").next().unwrap().replace(
        "[steps.vpc.inputs]",
        "lifecycle = { create_before_destroy = true }\n[steps.vpc.inputs]",
    );
    a.p.write("wf.toml", &wf);
    a.apply().expect(0);
    let plan = a.run(&["plan", "wf.toml", "--replace", "vpc"]).expect(0);
    assert!(plan.stdout.contains("+/- vpc"), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("create before destroy: creates `flow-vpc-")
            && plan
                .stdout
                .contains("then retires (drains) and deletes `flow-vpc`"),
        "{}",
        plan.stdout
    );
    let replaced = a
        .run(&["apply", "wf.toml", "--auto-approve", "--replace", "vpc"])
        .expect(0);
    assert!(replaced.stdout.contains("1 replaced"), "{}", replaced.all());
    let stacks = moto.stacks();
    let new: Vec<&String> = stacks
        .iter()
        .filter(|s| s.starts_with("flow-vpc-"))
        .collect();
    assert_eq!(new.len(), 1, "{stacks:?}");
    assert!(!stacks.contains(&"flow-vpc".to_string()), "{stacks:?}");
    let log = a.p.read(".flow/wf/logs/vpc.log");
    assert!(
        at(
            &log,
            &format!("creating `{}` while `flow-vpc` stays", new[0])
        ) < at(&log, "deleted `flow-vpc`"),
        "{log}"
    );
    let out = a.run(&["output", "wf.toml", "vpc.VpcId"]).expect(0);
    assert!(out.stdout.starts_with("vpc-"), "{}", out.stdout);
    a.run(&["apply", "wf.toml", "--auto-approve", "--replace", "vpc"])
        .expect(0);
    let stacks = moto.stacks();
    assert!(stacks.contains(&"flow-vpc".to_string()), "{stacks:?}");
    assert!(
        !stacks.iter().any(|s| s.starts_with("flow-vpc-")),
        "{stacks:?}"
    );
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(moto.stacks().is_empty(), "{:?}", moto.stacks());
}

#[test]
fn validate_points_at_undeclared_and_missing_parameters() {
    let p = Project::new();
    p.write("batch.yaml", BATCH);
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "bad-params"

[steps.batch]
provider = "cloudformation.stack"
[steps.batch.inputs]
stack_name = "batch"
template = "batch.yaml"
parameters = { VPCStackParameterr = "vpc", InstanceType = "p5.48xlarge" }
capabilities = ["CAPABILITY_NAMED_IAM"]
"#,
    );
    let v = p.run(&["validate", "wf.toml"]).expect(1);
    let all = v.all();
    assert!(
        all.contains("parameter `VPCStackParameterr` is not declared"),
        "{all}"
    );
    assert!(all.contains("did you mean `VPCStackParameter`?"), "{all}");
    assert!(
        all.contains("parameter `VPCStackParameter` of template `batch.yaml` has no default"),
        "{all}"
    );
    assert!(
        all.contains("wf.toml:"),
        "points into the workflow file: {all}"
    );
    assert!(
        !p.path().join(".flow").exists(),
        "bad input never touches state"
    );

    p.write("bad.yaml", "Resources:\n  Vpc:\n    Type: AWS::EC2::VPC\n    Properties:\n      CidrBlock: !Reff Cidr\n");
    p.write(
        "wf.toml",
        "[workflow]\nname = \"bad-template\"\n[steps.s]\nprovider = \"cloudformation.stack\"\n[steps.s.inputs]\nstack_name = \"s\"\ntemplate = \"bad.yaml\"\n",
    );
    let v = p.run(&["validate", "wf.toml"]).expect(1);
    assert!(v.all().contains("unknown tag `!Reff`"), "{}", v.all());
    assert!(v.all().contains("line 5"), "{}", v.all());
}

#[test]
fn batch_chain_runs_a_multi_node_job_with_a_generated_ssh_key() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", BATCH_CHAIN);
    let apply = a.apply().expect(0);
    assert!(
        apply.stdout.contains("Apply complete: 4 created"),
        "{}",
        apply.stdout
    );
    assert!(apply.stdout.contains("nccl-test-2node"), "{}", apply.stdout);
    assert!(
        apply.stdout.contains("SUCCEEDED"),
        "the job's status is shown: {}",
        apply.stdout
    );

    let status = a.run(&["output", "wf.toml", "nccl.status"]).expect(0);
    assert_eq!(status.stdout.trim(), "SUCCEEDED");
    let job_id = a.run(&["output", "wf.toml", "nccl.job_id"]).expect(0);
    assert!(!job_id.stdout.trim().is_empty());

    // The private key is only in Secrets Manager; the public key is an output.
    let private = moto.secret_value("flow-batch-ssh-key");
    assert!(
        private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{private}"
    );
    let public = a.run(&["output", "wf.toml", "ssh.public_key"]).expect(0);
    assert!(
        public.stdout.trim().starts_with("ssh-ed25519 "),
        "{}",
        public.stdout
    );
    for f in a.p.state_files() {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("PRIVATE KEY"),
            "{} holds the private key",
            f.display()
        );
    }
    assert!(!apply.all().contains("PRIVATE KEY"));

    // Unchanged inputs: the job does not run again.
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let all = destroy.all();
    assert!(
        at(&all, "batch ") < at(&all, "vpc "),
        "destroy order:\n{all}"
    );
    assert!(moto.stacks().is_empty());
    assert!(moto.secrets().is_empty(), "{:?}", moto.secrets());
}

const FSX: &str = r#"
[workflow]
name = "fsx"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.data]
provider = "s3.bucket"
[steps.data.inputs]
name = "flow-training-data"

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
deployment_type = "SCRATCH_2"
subnet_ids = ["${steps.vpc.outputs.SubnetId}"]
security_group_ids = ["${steps.vpc.outputs.SecurityGroupId}"]
import_path = "s3://${steps.data.outputs.name}/train/"
export_path = "s3://${steps.data.outputs.name}/train/export/"
tags = { Name = "training" }
"#;

#[test]
fn fsx_lustre_with_an_s3_import_path() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", FSX);
    let apply = a.apply().expect(0);
    assert!(
        apply.stdout.contains("Apply complete: 3 created"),
        "{}",
        apply.stdout
    );
    let fs = moto.file_systems();
    assert_eq!(fs.len(), 1, "{fs:?}");
    let id = a
        .run(&["output", "wf.toml", "fsx.file_system_id"])
        .expect(0);
    assert_eq!(id.stdout.trim(), fs[0]);
    let dns = a.run(&["output", "wf.toml", "fsx.dns_name"]).expect(0);
    assert!(dns.stdout.contains(&fs[0]), "{}", dns.stdout);
    let v = moto.json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.DescribeFileSystems",
        "{}",
    );
    assert_eq!(
        v["FileSystems"][0]["LustreConfiguration"]["ImportPath"],
        "s3://flow-training-data/train/"
    );

    // Capacity grows in place; shrinking or moving replaces.
    a.p.write(
        "wf.toml",
        &FSX.replace("storage_capacity = 1200", "storage_capacity = 2400"),
    );
    let grow = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        grow.stdout.contains("1 to update, 0 to replace"),
        "{}",
        grow.stdout
    );
    a.p.write(
        "wf.toml",
        &FSX.replace(
            r#"deployment_type = "SCRATCH_2""#,
            r#"deployment_type = "PERSISTENT_2""#,
        ),
    );
    let moved = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(moved.stdout.contains("1 to replace"), "{}", moved.stdout);
    a.p.write("wf.toml", FSX);

    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(moto.file_systems().is_empty());
    assert!(moto.stacks().is_empty());
}

const SYNC: &str = r#"
[workflow]
name = "sync"
region = "us-east-1"

[steps.data]
provider = "s3.bucket"
[steps.data.inputs]
name = "flow-sync-data"
versioning = true

[steps.upload]
provider = "s3.sync"
[steps.upload.inputs]
source = "data"
destination = "s3://${steps.data.outputs.name}/train/"
"#;

#[test]
fn s3_sync_sends_only_the_file_that_changed() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("data/a.txt", "alpha\n");
    a.p.write("data/b.txt", "bravo\n");
    a.p.write("data/sub/c.txt", "charlie\n");
    a.p.write("wf.toml", SYNC);
    a.apply().expect(0);
    let mut keys = moto.objects("flow-sync-data", "train/");
    keys.sort();
    assert_eq!(keys, ["train/a.txt", "train/b.txt", "train/sub/c.txt"]);
    assert_eq!(proxy.forwarded("s3:PUT /flow-sync-data/train/"), 3);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    // The same files, one of them changed, in another folder: the plan
    // lists that one file by content hash, and only it is sent.
    a.p.write("data2/a.txt", "alpha\n");
    a.p.write("data2/b.txt", "bravo, changed\n");
    a.p.write("data2/sub/c.txt", "charlie\n");
    a.p.write(
        "wf.toml",
        &SYNC.replace(r#"source = "data""#, r#"source = "data2""#),
    );
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout
            .contains("files: 0 to add, 1 to change, 0 to delete, 2 unchanged"),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("~ b.txt (sha256 "), "{}", plan.stdout);
    a.apply().expect(0);
    assert_eq!(
        proxy.forwarded("s3:PUT /flow-sync-data/train/"),
        4,
        "{:?}",
        proxy.counts().forwarded
    );
    assert_eq!(
        moto.object("flow-sync-data", "train/b.txt"),
        "bravo, changed\n"
    );

    // A file removed from the folder is deleted from the prefix.
    std::fs::remove_file(a.p.path().join("data2/sub/c.txt")).unwrap();
    a.p.write("data3/a.txt", "alpha\n");
    a.p.write("data3/b.txt", "bravo, changed\n");
    a.p.write(
        "wf.toml",
        &SYNC.replace(r#"source = "data""#, r#"source = "data3""#),
    );
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("- train/sub/c.txt"), "{}", plan.stdout);
    a.apply().expect(0);
    assert_eq!(proxy.forwarded("s3:PUT /flow-sync-data/train/"), 4);
    let mut keys = moto.objects("flow-sync-data", "train/");
    keys.sort();
    assert_eq!(keys, ["train/a.txt", "train/b.txt"]);

    // Destroy deletes what flow uploaded, then the bucket.
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let (status, _) = moto.rest_call("s3", "HEAD", "/flow-sync-data", "");
    assert_eq!(status, 404);
}

/// Editing a file in place (same folder, same inputs) is a change only when
/// the engine records a digest of the folder's content with the inputs: the
/// contract has no way for a provider to say so today (see
/// docs/providers/s3.sync.md).
#[test]
fn s3_sync_notices_a_file_edited_in_place() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("data/a.txt", "alpha\n");
    a.p.write("data/b.txt", "bravo\n");
    a.p.write("data/c.txt", "charlie\n");
    a.p.write("wf.toml", SYNC);
    a.apply().expect(0);
    a.p.write("data/b.txt", "bravo, changed\n");
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(plan.stdout.contains("~ b.txt"), "{}", plan.stdout);
    a.apply().expect(0);
    assert_eq!(proxy.forwarded("s3:PUT /flow-sync-data/train/"), 4);
}

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
        r#""FileSystemType": "LUSTRE""#,
        r#""Lifecycle": "CREATING", "FileSystemType": "LUSTRE""#,
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
        r#""FileSystemType": "LUSTRE""#,
        r#""Lifecycle": "CREATING", "FileSystemType": "LUSTRE""#,
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

#[test]
fn throttling_and_server_errors_injected_and_the_apply_still_converges() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    for i in 0..4 {
        a.p.write(&format!("data/f{i}.txt"), &format!("file {i}\n"));
    }
    a.p.write("wf.toml", MANY);
    proxy.slow_by(Duration::from_millis(300));
    let kinds = [
        Fault::Throttle,
        Fault::TooMany,
        Fault::Internal,
        Fault::Unavailable,
        Fault::Reset,
        Fault::Slow,
    ];
    proxy.faults(0.35, &kinds, None);
    let apply = a.apply();
    let counts = proxy.counts();
    assert_eq!(apply.code, 0, "{}\n{counts:?}", apply.all());
    for kind in kinds {
        assert!(proxy.injected(kind) > 0, "no {kind:?} injected: {counts:?}");
    }
    assert!(
        apply.stdout.contains("Apply complete: 7 created"),
        "{}",
        apply.stdout
    );

    // Every object exactly once despite the retries.
    proxy.calm();
    assert_many_made_once(&moto);
    assert_eq!(
        moto.secret_value("hf-token"),
        "hf_not_really_a_token_0123456789"
    );
    for f in a.p.state_files() {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("hf_not_really"),
            "{} holds the secret",
            f.display()
        );
    }
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    // Destroy converges through faults too.
    destroy_many_under_faults(&a, &moto, &proxy, 0.25, &kinds);
}

#[test]
fn an_interrupted_batch_job_is_terminated() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write(
        "wf.toml",
        &BATCH_CHAIN.replace("generate = \"ssh-ed25519\"", "value = \"x\""),
    );
    a.run(&[
        "apply",
        "wf.toml",
        "--auto-approve",
        "--target",
        "batch",
        "--target",
        "ssh",
    ])
    .expect(0);

    // moto finishes jobs at once; the proxy shows this one running.
    proxy.rewrite(
        "batch:describejobs",
        r#""status": "SUCCEEDED""#,
        r#""status": "RUNNING""#,
        1000,
    );
    let child = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "the job to be watched", || {
        proxy.forwarded("batch:describejobs") >= 2
    });
    signal(&child, libc::SIGINT);
    let run = finish(child);
    assert_ne!(run.code, 0, "{}", run.all());
    assert_eq!(
        proxy.forwarded("batch:terminatejob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    assert!(run.all().contains("terminat"), "{}", run.all());

    // Ctrl-C kept the intent: the next apply reads the job by its token
    // before anything else. moto had in fact finished it (the proxy only
    // showed it running), so it is adopted, not submitted a second time.
    let show = a.run(&["state", "show", "wf.toml", "nccl"]).expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert!(rec["in_flight"]["token"].is_string(), "{rec}");
    proxy.calm();
    a.apply().expect(0);
    assert_eq!(
        proxy.forwarded("batch:submitjob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    let log = a.p.read(".flow/wf/logs/nccl.log");
    assert!(
        log.contains("the interrupted create had completed: adopting it"),
        "{log}"
    );
}

#[test]
fn a_stack_left_in_rollback_complete_is_planned_as_a_replace() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", STACKS);
    a.apply().expect(0);
    // moto cannot fail a stack; the proxy shows it failed and rolled back.
    proxy.rewrite(
        "DescribeStacks",
        "<StackStatus>CREATE_COMPLETE</StackStatus>",
        "<StackStatus>ROLLBACK_COMPLETE</StackStatus>",
        1000,
    );
    a.p.write(
        "wf.toml",
        &STACKS.replace(r#"template = "vpc.yaml""#, r#"template = "vpc-v2.yaml""#),
    );
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("ROLLBACK_COMPLETE"), "{}", plan.stdout);
    // Refresh sees both stacks rolled back (the proxy rewrites every
    // DescribeStacks), so both are replaced, not only the edited one.
    assert!(
        plan.stdout
            .contains("Changed outside flow:\n  ~ vpc  (cloudformation.stack)\n      status : \"CREATE_COMPLETE\" → \"ROLLBACK_COMPLETE\""),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("2 to replace"), "{}", plan.stdout);
    // Offline, only state is looked at: the edited stack alone changes.
    let offline = a.run(&["plan", "wf.toml", "--refresh=false"]).expect(0);
    assert!(
        !offline.stdout.contains("outside flow"),
        "{}",
        offline.stdout
    );
    assert!(
        offline.stdout.contains("1 to replace"),
        "{}",
        offline.stdout
    );
}

/// An object under a step's name that the step did not create is refused,
/// in the one ownership wording with its next step, and left as it was.
#[test]
fn a_secret_made_outside_flow_is_refused_and_left_alone() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    moto.json_call(
        "secretsmanager",
        "secretsmanager.CreateSecret",
        r#"{"Name": "team-key", "SecretString": "made by hand"}"#,
    );
    a.p.write(
        "wf.toml",
        r#"
[workflow]
region = "us-east-1"

[steps.key]
provider = "secretsmanager.secret"
[steps.key.inputs]
name = "team-key"
generate = "ssh-ed25519"
"#,
    );
    let r = a.apply().expect(1);
    assert!(
        r.stdout
            .contains("secret `team-key` already exists and was not created by this step"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("help: choose another name in the workflow"),
        "{}",
        r.stdout
    );
    assert_eq!(moto.secrets(), vec!["team-key".to_string()]);
    assert_eq!(moto.secret_value("team-key"), "made by hand");
    let show = a.run(&["state", "show", "wf.toml", "key"]).expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(rec["applied"], false, "{rec}");
    assert!(
        rec["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("was not created by this step")),
        "{rec}"
    );
}
