//! Capacity reservations checked while planning (issue 21, part 2): a node
//! group naming a reservation that cannot take it fails the plan, and the
//! apply, before anything is made; a matching one shows its window in the
//! plan and is applied. The reservations live in the local cloud
//! (scripts/local-cloud/capacity_reservations.py: moto has none).

use crate::support::Project;
use crate::support::moto::Moto;
use crate::{ec2, first};

/// A subnet of `vpc` in `zone`.
fn subnet(moto: &Moto, vpc: &str, cidr: &str, zone: &str) -> String {
    first(
        &ec2(
            moto,
            &format!("Action=CreateSubnet&VpcId={vpc}&CidrBlock={cidr}&AvailabilityZone={zone}"),
        ),
        "subnetId",
    )
}

fn workflow(cr: &str, subnet: &str, instance_type: &str, count: u32, timeout: &str) -> String {
    format!(
        r#"
[workflow]
name = "odcr"
region = "us-east-1"

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
name = "dlc"
subnet_ids = ["{subnet}"]
role_arn = "arn:aws:iam::123456789012:role/eks"

[steps.gpu]
provider = "eks.nodegroup"
timeout = "{timeout}"
[steps.gpu.inputs]
cluster = "${{steps.eks.outputs.name}}"
name = "gpu"
node_role_arn = "arn:aws:iam::123456789012:role/node"
instance_types = ["{instance_type}"]
subnet_ids = ["{subnet}"]
desired_size = {count}
capacity_reservation_id = "{cr}"
"#
    )
}

#[test]
fn a_reservation_that_cannot_take_the_group_fails_the_plan_before_anything_is_made() {
    let moto = Moto::start();
    let mut env = moto.env();
    // Wide enough that no reason is wrapped.
    env.push(("COLUMNS".into(), "400".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let vpc = first(
        &moto.query_call(
            "ec2",
            "Action=CreateVpc&Version=2016-11-15&CidrBlock=10.0.0.0/16",
        ),
        "vpcId",
    );
    let in_a = subnet(&moto, &vpc, "10.0.1.0/24", "us-east-1a");
    let in_b = subnet(&moto, &vpc, "10.0.2.0/24", "us-east-1b");
    let cr = "cr-0a1b2c3d4e5f60789";
    moto.capacity_reservation(cr, "p5.48xlarge", "us-east-1a", 2, false, Some(2));
    let p = Project::new();

    // Wrong type, zone and count, and a timeout past the reservation's end.
    p.write("wf.toml", &workflow(cr, &in_b, "p4d.24xlarge", 3, "3d"));
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(1);
    for reason in [
        "is for p5.48xlarge, the step launches p4d.24xlarge",
        "is in us-east-1a, the step's subnets are in us-east-1b",
        "has 2 p5.48xlarge instance(s) available, the step launches 3",
        ", before the step's timeout runs out",
        "help: give the step a subnet in us-east-1a",
    ] {
        assert!(plan.stderr.contains(reason), "{reason}:\n{}", plan.stderr);
    }
    assert!(
        plan.stderr
            .contains("step `gpu`: capacity reservation cr-0a1b2c3d4e5f60789 is for"),
        "{}",
        plan.stderr
    );
    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(1);
    assert!(
        apply.stderr.contains("is in us-east-1a"),
        "{}",
        apply.stderr
    );
    let (status, _) = moto.rest_call("eks", "GET", "/clusters/dlc", "");
    assert_eq!(status, 404, "the cluster was made before the refusal");
    let listed = p.run(&["state", "list", "wf.toml", "--json"]).expect(0);
    assert_eq!(
        listed.stdout.trim(),
        "[]",
        "state holds steps: {}",
        listed.stdout
    );

    // An unknown reservation is refused by name.
    p.write(
        "wf.toml",
        &workflow("cr-0000000000000dead", &in_a, "p5.48xlarge", 2, "1h"),
    );
    let unknown = p.run_env(&["plan", "wf.toml"], &env).expect(1);
    assert!(
        unknown
            .stderr
            .contains("capacity reservation cr-0000000000000dead does not exist in us-east-1"),
        "{}",
        unknown.stderr
    );

    // The matching group: the plan shows the window, the apply makes it.
    p.write("wf.toml", &workflow(cr, &in_a, "p5.48xlarge", 2, "1h"));
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    assert!(
        plan.stdout.contains(&format!(
            "capacity reservation {cr}: 2 of 2 × p5.48xlarge available in us-east-1a, active, "
        )),
        "{}",
        plan.stdout
    );
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let (status, _) = moto.rest_call("eks", "GET", "/clusters/dlc/node-groups/gpu", "");
    assert_eq!(status, 200);
    p.run_env(&["destroy", "wf.toml", "--auto-approve"], &env)
        .expect(0);
}
