//! The cluster spec's tests: inputs over the eksctl file, the VPC made for it.

use super::super::eksctl::EksctlConfig;
use super::*;
use crate::testing::values;
use serde_json::json;

#[test]
fn inputs_override_the_eksctl_file() {
    let cfg = eksctl::parse(eksctl::P4D).unwrap();
    let v = values(json!({"version": "1.34", "tags": {"team": "ml"}}));
    let spec = ClusterSpec::merge(&v, cfg).unwrap();
    assert_eq!(spec.name, "dlc-p4d");
    assert_eq!(spec.version.as_deref(), Some("1.34"));
    assert_eq!(spec.tags["team"], "ml");
    assert!(spec.with_oidc);
    let lines = spec.creation_lines();
    assert!(lines[0].contains("flow-eks-dlc-p4d-role"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("+ cluster dlc-p4d (Kubernetes 1.34")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("managed node group p4d: p4d.24xlarge × 2..4 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123")), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("`addons` is not acted on")),
        "{lines:?}"
    );
}

#[test]
fn a_made_vpc_is_planned_first_and_its_subnets_placed_by_zone() {
    let cfg = eksctl::parse(eksctl::ODCR).unwrap();
    let mut spec = ClusterSpec::merge(&Values::new(), cfg.clone()).unwrap();
    let lines = spec.creation_lines();
    assert_eq!(
        lines[0],
        "+ stack flow-eks-eks-p4de-odcr-vpc (VPC 192.168.0.0/16 as eksctl makes it: public and private subnets in us-west-2a, us-west-2b; one NAT gateway; control plane and shared node security groups)"
    );
    assert!(
        lines.iter().any(|l| l.contains("the VPC stack's subnets")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("in the VPC's private subnet in us-west-2b")),
        "{lines:?}"
    );
    let outputs = values(json!({
        "VPC": "vpc-1", "SubnetsPublic": "subnet-pa,subnet-pb",
        "SubnetsPrivate": "subnet-a,subnet-b", "SecurityGroup": "sg-cp",
        "SharedNodeSecurityGroup": "sg-n"
    }));
    spec.attach_vpc(&outputs).unwrap();
    assert_eq!(
        spec.subnet_ids,
        ["subnet-a", "subnet-b", "subnet-pa", "subnet-pb"]
    );
    assert_eq!(spec.security_group_ids, ["sg-cp"]);
    assert_eq!(spec.nodegroups[0].subnet_ids, ["subnet-pa", "subnet-pb"]);
    assert_eq!(spec.nodegroups[1].subnet_ids, ["subnet-b"]);
    // The step's subnets win: no VPC, and the node groups take them.
    let given = ClusterSpec::merge(&values(json!({"subnet_ids": ["s1", "s2"]})), cfg).unwrap();
    assert!(given.vpc.is_none());
    assert_eq!(given.nodegroups[1].subnet_ids, ["s1", "s2"]);
    assert!(
        given.notes[0].contains("availabilityZones [\"us-west-2b\"] are not applied"),
        "{:?}",
        given.notes
    );
}

#[test]
fn a_named_vpc_without_subnets_says_what_eksctl_would_do() {
    let cfg =
        eksctl::parse("kind: ClusterConfig\nmetadata: {name: x}\nvpc: {id: vpc-1}\n").unwrap();
    let e = ClusterSpec::merge(&Values::new(), cfg.clone()).unwrap_err();
    assert!(
        e.to_string().contains("it would use that VPC's subnets"),
        "{e}"
    );
    assert!(
        e.help
            .as_deref()
            .unwrap_or_default()
            .contains("vpc.subnets.private")
    );
    assert!(ClusterSpec::merge(&values(json!({"subnet_ids": ["s"]})), cfg).is_ok());
    // A VPC eksctl could not make is refused only when it would be made.
    let one_zone = "kind: ClusterConfig\nmetadata: {name: x}\navailabilityZones: [a]\n";
    let cfg = eksctl::parse(one_zone).unwrap();
    let e = ClusterSpec::merge(&Values::new(), cfg.clone()).unwrap_err();
    assert!(
        e.to_string()
            .contains("eksctl would make the VPC, but `availabilityZones` names one zone"),
        "{e}"
    );
    assert!(ClusterSpec::merge(&values(json!({"subnet_ids": ["s"]})), cfg).is_ok());
}

#[test]
fn name_comes_from_inputs_or_the_file() {
    assert!(ClusterSpec::merge(&Values::new(), EksctlConfig::default()).is_err());
    let spec = ClusterSpec::merge(
        &values(json!({"name": "x", "subnet_ids": ["s"]})),
        EksctlConfig::default(),
    )
    .unwrap();
    assert_eq!(spec.name, "x");
    assert_eq!(
        oidc_template("https://oidc.eks")["Resources"]["OIDCProvider"]["Properties"]["Url"],
        "https://oidc.eks"
    );
}

/// The keys `declared_outputs` gives are those `lifecycle::outputs` puts
/// in: every one for a cluster with all it may have, the fixed ones for a
/// bare answer.
#[test]
fn declared_outputs_are_the_outputs_a_cluster_has() {
    use aws_sdk_eks::types::{Certificate, Cluster, Identity, Oidc, VpcConfigResponse};
    let keys = |v: &Values| v.keys().cloned().collect::<std::collections::BTreeSet<_>>();
    let declared = EksCluster::new()
        .declared_outputs(
            &[],
            &ValidateContext {
                workdir: ".".into(),
            },
        )
        .unwrap();
    let full = Cluster::builder()
        .arn("arn:aws:eks:us-west-2:123456789012:cluster/c")
        .endpoint("https://c.eks")
        .certificate_authority(Certificate::builder().data("ca").build())
        .identity(
            Identity::builder()
                .oidc(Oidc::builder().issuer("https://oidc.eks/id/X").build())
                .build(),
        )
        .version("1.33")
        .role_arn("arn:aws:iam::123456789012:role/r")
        .resources_vpc_config(
            VpcConfigResponse::builder()
                .cluster_security_group_id("sg-c")
                .build(),
        )
        .build();
    let spec = ClusterSpec {
        name: "c".into(),
        with_oidc: true,
        made_vpc: Some(super::super::vpc::MadeVpc {
            vpc_id: "vpc-1".into(),
            public: vec!["subnet-p".into()],
            private: vec!["subnet-q".into()],
            security_group: "sg-cp".into(),
            shared_node_security_group: "sg-n".into(),
        }),
        ..ClusterSpec::default()
    };
    let all = lifecycle::outputs(&full, "us-west-2", &spec);
    assert_eq!(keys(&all), declared.keys.iter().cloned().collect());
    let bare = lifecycle::outputs(
        &Cluster::builder().build(),
        "us-west-2",
        &ClusterSpec::default(),
    );
    let always: std::collections::BTreeSet<String> = declared
        .keys
        .iter()
        .filter(|k| !declared.conditional.contains(k))
        .cloned()
        .collect();
    assert_eq!(keys(&bare), always);
}
