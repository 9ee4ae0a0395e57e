//! EKS from an eksctl file with no `vpc:` section: flow makes the VPC as
//! eksctl does (against moto), places each node group in its zone's
//! subnets, and deletes the VPC after the cluster.

use crate::support::Project;
use crate::support::moto::Moto;

/// The runbook's `eks-p4de-odcr.yaml` shape (no `vpc:`), plus a p5 node
/// group on a capacity block as in `eks-p5-capacity-block.yaml`.
const CONFIG: &str = r#"apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: odcr
  version: "1.33"
  region: us-east-1
availabilityZones:
  - us-east-1a
  - us-east-1b
managedNodeGroups:
  - name: sys
    instanceType: c5.2xlarge
    desiredCapacity: 1
  - name: p4de-odcr
    instanceType: p4de.24xlarge
    privateNetworking: true
    efaEnabled: true
    minSize: 0
    desiredCapacity: 2
    maxSize: 10
    availabilityZones: ["us-east-1b"]
    capacityReservation:
      capacityReservationTarget:
        capacityReservationID: "cr-0123456789abcdef0"
  - name: p5-cbr
    instanceType: p5.48xlarge
    privateNetworking: true
    efaEnabled: true
    minSize: 0
    desiredCapacity: 1
    maxSize: 10
    capacityReservation:
      capacityReservationTarget:
        capacityReservationID: "cr-0fedcba9876543210"
    instanceMarketOptions:
      marketType: capacity-block
iam:
  withOIDC: true
"#;

const WORKFLOW: &str = r#"
[workflow]
name = "eks"
region = "us-east-1"

[steps.cluster]
provider = "eks.cluster"
[steps.cluster.inputs]
eksctl_config = "cluster.yaml"
"#;

/// A value of the EC2 query API's XML answer: every `<tag>…</tag>`.
fn values_of(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.split(&open)
        .skip(1)
        .filter_map(|rest| rest.split_once(&close).map(|(v, _)| v.to_string()))
        .collect()
}

#[test]
fn an_eksctl_config_without_vpc_gets_the_vpc_eksctl_makes() {
    let moto = Moto::start();
    // The reservation and the capacity block the config names (the plan
    // reads them): the ODCR in the group's zone, the block in the first of
    // the VPC's.
    moto.capacity_reservation(
        "cr-0123456789abcdef0",
        "p4de.24xlarge",
        "us-east-1b",
        2,
        false,
        None,
    );
    moto.capacity_reservation(
        "cr-0fedcba9876543210",
        "p5.48xlarge",
        "us-east-1a",
        1,
        true,
        Some(14),
    );
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let p = Project::new();
    p.write("cluster.yaml", CONFIG);
    p.write("wf.toml", WORKFLOW);

    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    for line in [
        "+ stack flow-eks-odcr-vpc (VPC 192.168.0.0/16 as eksctl makes it: public and private subnets in us-east-1a, us-east-1b; one NAT gateway; control plane and shared node security groups)",
        "+ cluster odcr (Kubernetes 1.33, the VPC stack's subnets, public endpoint)",
        "+ managed node group p4de-odcr: p4de.24xlarge × 0..10 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123456789abcdef0; node role created; in the VPC's private subnet in us-east-1b",
        "+ managed node group p5-cbr: p5.48xlarge × 0..10 (desired 1); EFA: 32 interfaces per node; capacity block cr-0fedcba9876543210; node role created; in the VPC's private subnets",
        "+ managed node group sys: c5.2xlarge × 1..1 (desired 1); node role created; in the VPC's public subnets",
    ] {
        assert!(
            plan.stdout.contains(line),
            "{line} missing from\n{}",
            plan.stdout
        );
    }
    // The node groups are priced, in the workflow's region (moto answers
    // these tests in us-east-1 only).
    for item in [
        "(1 × c5.2xlarge, 2 × p4de.24xlarge, 1 × p5.48xlarge)",
        "(on-demand, us-east-1 prices of ",
    ] {
        assert!(
            plan.stdout.contains(item),
            "{item} missing from\n{}",
            plan.stdout
        );
    }
    // The VPC is planned before the cluster.
    let vpc_at = plan.stdout.find("+ stack flow-eks-odcr-vpc").unwrap();
    assert!(vpc_at < plan.stdout.find("+ cluster odcr").unwrap());

    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(apply.stdout.contains("1 created"), "{}", apply.all());
    assert!(
        moto.stacks().contains(&"flow-eks-odcr-vpc".to_string()),
        "{:?}",
        moto.stacks()
    );

    // The subnets eksctl would have cut, in the named zones.
    let xml = moto.query_call(
        "ec2",
        "Action=DescribeSubnets&Version=2016-11-15&Filter.1.Name=cidr-block&Filter.1.Value.1=192.168.96.0/19",
    );
    let ids = values_of(&xml, "subnetId");
    assert_eq!(ids.len(), 1, "{xml}");
    assert_eq!(values_of(&xml, "availabilityZone"), ["us-east-1b"]);
    let private_b = &ids[0];

    let (_, cluster) = moto.rest_call("eks", "GET", "/clusters/odcr", "");
    let cluster: serde_json::Value = serde_json::from_str(&cluster).unwrap();
    let subnets = &cluster["cluster"]["resourcesVpcConfig"]["subnetIds"];
    assert_eq!(subnets.as_array().map(Vec::len), Some(4), "{cluster}");
    let outputs = p
        .run_env(&["output", "wf.toml", "cluster", "--json"], &env)
        .expect(0)
        .stdout;
    let outputs: serde_json::Value = serde_json::from_str(&outputs).unwrap();
    assert_eq!(
        outputs["private_subnet_ids"][1],
        private_b.as_str(),
        "{outputs}"
    );
    assert_eq!(outputs["subnet_ids"], *subnets);
    // The control plane's security group of the VPC stack.
    let groups = &cluster["cluster"]["resourcesVpcConfig"]["securityGroupIds"];
    let group = groups[0].as_str().expect("a security group");
    assert_eq!(groups.as_array().map(Vec::len), Some(1), "{cluster}");
    let xml = moto.query_call(
        "ec2",
        &format!("Action=DescribeSecurityGroups&Version=2016-11-15&GroupId.1={group}"),
    );
    assert!(
        xml.contains("Communication between the control plane and worker nodegroups"),
        "{xml}"
    );

    // Each node group in its zone's subnets, the capacity block's launch
    // template with its market type.
    let (_, ng) = moto.rest_call("eks", "GET", "/clusters/odcr/node-groups/p4de-odcr", "");
    let ng: serde_json::Value = serde_json::from_str(&ng).unwrap();
    assert_eq!(ng["nodegroup"]["subnets"], serde_json::json!([private_b]));
    let (_, cbr) = moto.rest_call("eks", "GET", "/clusters/odcr/node-groups/p5-cbr", "");
    let cbr: serde_json::Value = serde_json::from_str(&cbr).unwrap();
    assert_eq!(cbr["nodegroup"]["capacityType"], "CAPACITY_BLOCK");
    assert_eq!(cbr["nodegroup"]["subnets"], outputs["private_subnet_ids"]);
    let lt = cbr["nodegroup"]["launchTemplate"]["id"]
        .as_str()
        .expect("launch template");
    let xml = moto.query_call(
        "ec2",
        &format!("Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateId={lt}"),
    );
    assert!(
        xml.contains("<marketType>capacity-block</marketType>"),
        "{xml}"
    );
    assert!(xml.contains("cr-0fedcba9876543210"), "{xml}");

    // Nothing changed: the plan reads the VPC stack and agrees.
    let plan = p
        .run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.stdout);

    let d = p
        .run_env(&["destroy", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(d.stdout.contains("1 deleted"), "{}", d.all());
    assert!(
        moto.stacks().iter().all(|s| !s.starts_with("flow-eks-")),
        "{:?}",
        moto.stacks()
    );
    let xml = moto.query_call(
        "ec2",
        "Action=DescribeSubnets&Version=2016-11-15&Filter.1.Name=cidr-block&Filter.1.Value.1=192.168.96.0/19",
    );
    assert!(values_of(&xml, "subnetId").is_empty(), "{xml}");
}
