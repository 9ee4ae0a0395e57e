//! The EFA rules EC2 answers for an `eks.nodegroup` (against moto, which
//! implements DescribeInstanceTypes, DescribeSubnets and
//! DescribeSecurityGroups): plan names subnets in two zones and a security
//! group without its self rule, apply refuses before anything is made, and
//! once fixed the launch template takes the interface count EC2 gives.

use crate::support::Project;
use crate::support::moto::Moto;
use crate::{ec2, first};

const WORKFLOW: &str = r#"
[workflow]
name = "efa"
region = "us-east-1"

[steps.cluster]
provider = "eks.cluster"
[steps.cluster.inputs]
name = "efa"
subnet_ids = ["SUBNET_A", "SUBNET_B"]
role_arn = "arn:aws:iam::123456789012:role/eks"

[steps.gpu]
provider = "eks.nodegroup"
depends_on = ["cluster"]
[steps.gpu.inputs]
cluster = "efa"
name = "gpu"
instance_types = ["p5.48xlarge"]
subnet_ids = [SUBNETS]
security_group_ids = ["GROUP"]
node_role_arn = "arn:aws:iam::123456789012:role/nodes"
efa = true
"#;

#[test]
fn ec2_judges_zones_and_self_rules_at_plan_and_apply_refuses() {
    let moto = Moto::start();
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let vpc = first(
        &ec2(&moto, "Action=CreateVpc&CidrBlock=10.0.0.0/16"),
        "vpcId",
    );
    let subnet = |cidr: &str, zone: &str| {
        first(
            &ec2(
                &moto,
                &format!(
                    "Action=CreateSubnet&VpcId={vpc}&CidrBlock={cidr}&AvailabilityZone={zone}"
                ),
            ),
            "subnetId",
        )
    };
    let (a, b) = (
        subnet("10.0.0.0/24", "us-east-1a"),
        subnet("10.0.1.0/24", "us-east-1b"),
    );
    let group = first(
        &ec2(
            &moto,
            &format!("Action=CreateSecurityGroup&GroupName=efa&GroupDescription=efa&VpcId={vpc}"),
        ),
        "groupId",
    );
    let p = Project::new();
    let write = |subnets: &str| {
        p.write(
            "wf.toml",
            &WORKFLOW
                .replace("SUBNET_A", &a)
                .replace("SUBNET_B", &b)
                .replace("SUBNETS", subnets)
                .replace("GROUP", &group),
        )
    };
    write(&format!("\"{a}\", \"{b}\""));

    // Each broken rule fails the plan (wide lines: no reason is wrapped).
    let wide: Vec<(&str, &str)> = env.iter().copied().chain([("COLUMNS", "400")]).collect();
    let plan = p.run_env(&["plan", "wf.toml"], &wide).expect(1);
    for line in [
        format!(
            "step `gpu`: EFA: the subnets span 2 Availability Zones ({a} in us-east-1a, {b} in us-east-1b)"
        ),
        format!(
            "step `gpu`: EFA: security group {group} does not allow all traffic in from itself, which EFA needs: aws ec2 authorize-security-group-ingress --group-id {group} --protocol -1 --source-group {group}"
        ),
    ] {
        assert!(
            plan.stderr.contains(&line),
            "{line} missing from\n{}",
            plan.stderr
        );
    }
    // moto's default egress (all traffic to 0.0.0.0/0) lets it out to itself.
    assert!(!plan.stderr.contains("out to itself"), "{}", plan.stderr);

    // The apply plans first: refused before anything is made.
    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &wide)
        .expect(1);
    assert!(
        apply
            .all()
            .contains("step `gpu`: EFA: the subnets span 2 Availability Zones"),
        "{}",
        apply.all()
    );
    let (_, groups) = moto.rest_call("eks", "GET", "/clusters/efa/node-groups", "");
    assert!(!groups.contains("\"gpu\""), "nothing made: {groups}");
    assert!(
        !moto.stacks().iter().any(|s| s.contains("ng-gpu")),
        "no supporting stack: {:?}",
        moto.stacks()
    );

    // Fixed: one zone, and the group lets itself in.
    ec2(
        &moto,
        &format!(
            "Action=AuthorizeSecurityGroupIngress&GroupId={group}&IpPermissions.1.IpProtocol=-1&IpPermissions.1.Groups.1.GroupId={group}"
        ),
    );
    write(&format!("\"{a}\""));
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    assert!(
        plan.stdout
            .contains("EFA: 32 interfaces per node (p5.48xlarge, EC2 DescribeInstanceTypes)"),
        "{}",
        plan.stdout
    );
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let out = p
        .run_env(&["output", "wf.toml", "gpu.efa_interfaces"], &env)
        .expect(0);
    assert_eq!(out.stdout.trim(), "32");
}

/// A rule with nothing to judge is not asked of EC2: a node group without
/// `security_group_ids` makes no DescribeSecurityGroups (unfiltered, it
/// would list every group in the region), while its instance types and
/// subnets are still asked about, at once (the latency model counts).
#[test]
fn a_rule_with_nothing_to_judge_is_not_asked_of_ec2() {
    let moto = Moto::start_with_latency(60);
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let vpc = first(
        &ec2(&moto, "Action=CreateVpc&CidrBlock=10.0.0.0/16"),
        "vpcId",
    );
    let subnet = first(
        &ec2(
            &moto,
            &format!(
                "Action=CreateSubnet&VpcId={vpc}&CidrBlock=10.0.0.0/24&AvailabilityZone=us-east-1a"
            ),
        ),
        "subnetId",
    );
    let p = Project::new();
    p.write(
        "wf.toml",
        &WORKFLOW
            .replace("SUBNET_A", &subnet)
            .replace("SUBNET_B", &subnet)
            .replace("SUBNETS", &format!("\"{subnet}\""))
            .replace("security_group_ids = [\"GROUP\"]\n", ""),
    );
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    assert!(
        plan.stdout.contains("EFA: 32 interfaces per node"),
        "{}",
        plan.stdout
    );
    let calls = &moto.latency_report()["calls"];
    assert_eq!(calls["DescribeInstanceTypes"], 1, "{calls}");
    assert_eq!(calls["DescribeSubnets"], 1, "{calls}");
    assert!(calls["DescribeSecurityGroups"].is_null(), "{calls}");
}
