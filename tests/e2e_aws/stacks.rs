//! CloudFormation stacks: exports and imports between stacks, change sets,
//! templates edited in place, replacement create-before-destroy, offline
//! checks of parameters, a stack left in `ROLLBACK_COMPLETE`, destroy in
//! order, and the requests a stack's create and destroy send.

use std::collections::BTreeMap;

use crate::at;
use crate::support::Project;
use crate::support::aws::{Aws, STACKS};
use crate::support::fault_proxy::{Call, FaultProxy};
use crate::support::moto::Moto;

/// The CloudFormation templates of the tests.
const VPC_V2: &str = include_str!("../fixtures/aws/vpc-v2.yaml");
const BATCH: &str = include_str!("../fixtures/aws/batch.yaml");

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

/// A replacement made first whose stack fails (the proxy shows every stack
/// it describes rolled back) never takes the old stack's place: the apply
/// after it deletes the failed replacement and makes it again, and the
/// healthy old stack stays until a replacement succeeds.
#[test]
fn a_failed_create_before_destroy_replacement_leaves_the_old_stack() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    let wf = STACKS.split("[steps.app]").next().unwrap().replace(
        "[steps.vpc.inputs]",
        "lifecycle = { create_before_destroy = true }\n[steps.vpc.inputs]",
    );
    a.p.write("wf.toml", &wf);
    a.apply().expect(0);
    proxy.rewrite(
        "DescribeStacks",
        "<StackStatus>CREATE_COMPLETE</StackStatus>",
        "<StackStatus>ROLLBACK_COMPLETE</StackStatus>",
        1000,
    );
    let failed = a
        .run(&["apply", "wf.toml", "--auto-approve", "--replace", "vpc"])
        .expect(1);
    assert!(
        failed.all().contains("creating `flow-vpc-"),
        "{}",
        failed.all()
    );
    assert!(
        moto.stacks().contains(&"flow-vpc".to_string()),
        "{:?}",
        moto.stacks()
    );
    // Resumed while the replacement still reads as rolled back: it is
    // deleted and made again, and fails again; the old stack stays.
    let again = a.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let log = a.p.read(".flow/wf/logs/vpc.log");
    assert!(
        log.contains("deleting what the failed create left"),
        "{log}\n{}",
        again.all()
    );
    assert!(!log.contains("deleted `flow-vpc`"), "{log}");
    assert!(
        moto.stacks().contains(&"flow-vpc".to_string()),
        "{:?}",
        moto.stacks()
    );
    // Once a replacement succeeds, the old stack goes.
    proxy.calm();
    let done = a.apply().expect(0);
    let stacks = moto.stacks();
    assert!(
        !stacks.contains(&"flow-vpc".to_string()),
        "{stacks:?}\n{}\n{}",
        done.all(),
        a.p.read(".flow/wf/logs/vpc.log")
    );
    assert_eq!(
        stacks.iter().filter(|s| s.starts_with("flow-vpc-")).count(),
        1,
        "{stacks:?}"
    );
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// The way out of a replacement that cannot be made beside the old object:
/// CloudFormation refuses the new stack (the proxy answers its CreateStack
/// with a ValidationException, nothing made), the old stack stays put
/// aside; with `create_before_destroy = false` the next apply deletes the
/// old stack first, then makes the new one.
#[test]
fn create_before_destroy_turned_off_deletes_the_old_stack_first() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    let base = STACKS.split("[steps.app]").next().unwrap().to_string();
    let wf = base.replace(
        "[steps.vpc.inputs]",
        "lifecycle = { create_before_destroy = true }\n[steps.vpc.inputs]",
    );
    a.p.write("wf.toml", &wf);
    a.apply().expect(0);
    proxy.schedule(
        "CreateStack",
        &[Some(crate::support::fault_proxy::Fault::Refused)],
    );
    a.run(&["apply", "wf.toml", "--auto-approve", "--replace", "vpc"])
        .expect(1);
    assert_eq!(
        moto.stacks(),
        ["flow-vpc"],
        "the refused replacement made nothing"
    );
    let shown = a.run(&["state", "show", "wf.toml", "vpc"]).expect(0);
    assert!(shown.stdout.contains("deposed"), "{}", shown.stdout);

    a.p.write(
        "wf.toml",
        &base.replace(
            "[steps.vpc.inputs]",
            "lifecycle = { create_before_destroy = false }\n[steps.vpc.inputs]",
        ),
    );
    a.apply().expect(0);
    let log = a.p.read(".flow/wf/logs/vpc.log");
    assert!(!log.contains("retiring `flow-vpc`"), "{log}");
    let stacks = moto.stacks();
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    assert!(
        at(&log, "deleted `flow-vpc`") < log.rfind("create done").unwrap_or(0),
        "{log}"
    );
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
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
    // Offline, only state is looked at: the edited stack alone changes,
    // as an update (state knows of no rollback; nothing real is read).
    let offline = a.run(&["plan", "wf.toml", "--refresh=false"]).expect(0);
    assert!(
        !offline.stdout.contains("outside flow") && !offline.stdout.contains("ROLLBACK_COMPLETE"),
        "{}",
        offline.stdout
    );
    assert!(
        offline.stdout.contains("0 to replace") && offline.stdout.contains("1 to update"),
        "{}",
        offline.stdout
    );
}

/// The template of bench/peer-terraform.py's stacks: one resource, no VPC.
const HANDLE: &str =
    r#"{"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}"#;

/// The requests of `calls` by operation.
fn by_operation(calls: &[Call]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for c in calls {
        *counts.entry(c.op.clone()).or_default() += 1;
    }
    counts
}

/// `per_stack` for each of `stacks` stacks.
fn times(per_stack: &[(&str, usize)], stacks: usize) -> BTreeMap<String, usize> {
    per_stack
        .iter()
        .map(|(op, n)| (op.to_string(), n * stacks))
        .collect()
}

/// What each stack's create and destroy send, by operation, as
/// docs/performance/terraform.md counts them against Terraform's: a create
/// 5 (the plan's look, create's own look for a stack of this name, the
/// create, the wait's first look at the stack and its events), a destroy 5
/// (the VPC sweep's look, which the delete starts from, and its resource
/// list; the delete; the wait's look). The delete's wait shows the
/// delete's events and none of the create's, which ended seconds before.
#[test]
fn stacks_requests_per_create_and_destroy() {
    const N: usize = 3;
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("t.json", HANDLE);
    let mut wf = String::from("[workflow]\nname = \"requests\"\nregion = \"us-east-1\"\n");
    for i in 0..N {
        wf.push_str(&format!(
            "[steps.k{i}]\nprovider = \"cloudformation.stack\"\n[steps.k{i}.inputs]\nstack_name = \"flow-k{i}\"\ntemplate = \"t.json\"\n"
        ));
    }
    a.p.write("wf.toml", &wf);

    let from = proxy.calls().len();
    let apply = a.apply().expect(0);
    assert_eq!(
        by_operation(&proxy.calls_from(from)),
        times(
            &[
                ("CreateStack", 1),
                ("DescribeStackEvents", 1),
                ("DescribeStacks", 3),
            ],
            N
        ),
        "per create:\n{}",
        apply.all()
    );
    assert_eq!(moto.stacks().len(), N);

    let from = proxy.calls().len();
    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(
        by_operation(&proxy.calls_from(from)),
        times(
            &[
                ("DeleteStack", 1),
                ("DescribeStackEvents", 1),
                ("DescribeStacks", 2),
                ("ListStackResources", 1),
            ],
            N
        ),
        "per destroy:\n{}",
        destroy.all()
    );
    assert!(moto.stacks().is_empty(), "{:?}", moto.stacks());
    let all = destroy.all();
    for i in 0..N {
        for status in ["DELETE_IN_PROGRESS", "DELETE_COMPLETE"] {
            assert!(
                all.contains(&format!("flow-k{i} (AWS::CloudFormation::Stack) {status}")),
                "the delete's events are shown:\n{all}"
            );
        }
    }
    assert!(
        !all.contains("CREATE_"),
        "the create's events are not shown again:\n{all}"
    );
}
