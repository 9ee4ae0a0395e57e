//! The eksctl reader's tests, on the runbook's configs.

use super::*;

/// The runbook's `eks-p4d-odcr.yaml`, with an existing VPC (for tests).
pub(crate) const P4D: &str = r#"
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: dlc-p4d
  region: us-west-2
  version: "1.33"
availabilityZones: [us-west-2a, us-west-2b]
iam:
  withOIDC: true
vpc:
  subnets:
    private:
      us-west-2a: { id: subnet-a }
      us-west-2b: { id: subnet-b }
    public:
      us-west-2a: { id: subnet-pa }
  clusterEndpoints: { publicAccess: true, privateAccess: true }
managedNodeGroups:
  - name: sys
    instanceType: c5.2xlarge
    desiredCapacity: 1
  - name: p4d
    instanceType: p4d.24xlarge
    minSize: 2
    desiredCapacity: 2
    maxSize: 4
    volumeSize: 500
    efaEnabled: true
    privateNetworking: true
    availabilityZones: [us-west-2b]
    capacityReservation:
      capacityReservationTarget:
        capacityReservationID: cr-0123
addons:
  - name: vpc-cni
"#;

/// The runbook's `eks-p4de-odcr.yaml` as published (no `vpc:`: eksctl
/// makes the VPC), its placeholders filled.
pub(crate) const ODCR: &str = r#"
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: eks-p4de-odcr
  version: "1.28"
  region: us-west-2
availabilityZones:
  - us-west-2a
  - us-west-2b
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
    volumeSize: 500
    availabilityZones: ["us-west-2b"]
    capacityReservation:
      capacityReservationTarget:
        capacityReservationID: "cr-0123"
iam:
  withOIDC: true
"#;

#[test]
fn a_config_without_subnets_asks_for_the_vpc_eksctl_makes() {
    let c = parse(ODCR).unwrap();
    let Network::Made(vpc) = &c.network else {
        panic!("{:?}", c.network)
    };
    assert_eq!(vpc.zones, ["us-west-2a", "us-west-2b"]);
    assert_eq!(vpc.cidr, "192.168.0.0/16");
    assert!(c.subnet_ids.is_empty());
    let p4de = &c.nodegroups[1];
    assert!(p4de.subnet_ids.is_empty(), "placed once the VPC exists");
    assert_eq!(
        c.placements[1],
        Placement {
            zones: vec!["us-west-2b".into()],
            private_networking: true
        }
    );
    assert_eq!(p4de.capacity_reservation_id.as_deref(), Some("cr-0123"));
    let named = parse("kind: ClusterConfig\nvpc: {id: vpc-1}\n").unwrap();
    assert_eq!(
        named.network,
        Network::Unlisted {
            vpc_id: "vpc-1".into()
        }
    );
}

#[test]
fn capacity_blocks_are_read_from_the_market_type() {
    let block = P4D.replace(
            "        capacityReservationID: cr-0123\n",
            "        capacityReservationID: cr-0123\n    instanceMarketOptions:\n      marketType: capacity-block\n",
        );
    let c = parse(&block).unwrap();
    let p4d = &c.nodegroups[1];
    assert_eq!(p4d.capacity_type.as_deref(), Some("CAPACITY_BLOCK"));
    let lt = &p4d.stack_template(Some("sg-1")).unwrap()["Resources"]["LaunchTemplate"]["Properties"]
        ["LaunchTemplateData"];
    assert_eq!(lt["InstanceMarketOptions"]["MarketType"], "capacity-block");
    assert_eq!(
        lt["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"],
        "cr-0123"
    );
    assert!(
        p4d.describe().contains("capacity block cr-0123"),
        "{}",
        p4d.describe()
    );
    let odd = block.replace("capacity-block", "spot-block");
    assert!(
        parse(&odd)
            .unwrap_err()
            .to_string()
            .contains("`spot-block`")
    );
}

#[test]
fn reads_the_cluster_and_its_node_groups() {
    let c = parse(P4D).unwrap();
    assert_eq!(c.name.as_deref(), Some("dlc-p4d"));
    assert_eq!(c.region.as_deref(), Some("us-west-2"));
    assert_eq!(c.version.as_deref(), Some("1.33"));
    assert_eq!(c.subnet_ids, ["subnet-a", "subnet-b", "subnet-pa"]);
    assert!(c.with_oidc);
    assert_eq!(c.public_access, Some(true));
    assert_eq!(c.ignored, ["addons"]);
    let sys = &c.nodegroups[0];
    assert_eq!((sys.min_size, sys.desired_size, sys.max_size), (1, 1, 1));
    assert_eq!(sys.subnet_ids, ["subnet-pa"]);
    assert_eq!(sys.ami_type, None);
    let p4d = &c.nodegroups[1];
    assert_eq!(p4d.cluster, "dlc-p4d");
    assert_eq!(p4d.subnet_ids, ["subnet-b"]);
    assert_eq!((p4d.min_size, p4d.desired_size, p4d.max_size), (2, 2, 4));
    assert_eq!(p4d.efa_interfaces(), 4);
    assert_eq!(p4d.capacity_reservation_id.as_deref(), Some("cr-0123"));
    assert_eq!(p4d.disk_size, Some(500));
    assert_eq!(p4d.ami_type.as_deref(), Some("AL2_x86_64_GPU"));
}

#[test]
fn refuses_configs_it_cannot_carry_out() {
    assert!(matches!(
        parse("kind: Other").unwrap_err(),
        ConfigProblem::NotClusterConfig
    ));
    let one_zone = "kind: ClusterConfig\nmetadata: {name: x}\navailabilityZones: [a]\n";
    let Network::Unmakeable(why) = parse(one_zone).unwrap().network else {
        panic!("one zone is not a VPC eksctl makes")
    };
    assert!(why.contains("at least two"), "{why}");
    let stray = format!("{ODCR}\n").replace(
        "availabilityZones: [\"us-west-2b\"]",
        "availabilityZones: [\"us-west-2c\"]",
    );
    let Network::Unmakeable(e) = parse(&stray).unwrap().network else {
        panic!("a node group outside the file's zones")
    };
    assert!(
        e.contains("zone us-west-2c is not one of the config's availabilityZones"),
        "{e}"
    );
    let bad_zone = P4D.replace("[us-west-2b]", "[eu-west-1a]");
    let e = parse(&bad_zone).unwrap_err();
    assert!(
        matches!(&e, ConfigProblem::Nodegroup { index: 1, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("managedNodeGroups[1]: node group `"),
        "{e}"
    );
}

#[test]
fn places_a_field_at_its_line_and_column_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.yaml"),
        "kind: ClusterConfig\nvpc:\n  id: vpc-1\n",
    )
    .unwrap();
    assert_eq!(
        place_of(&dir.path().into(), "c.yaml", &["vpc", "id"]),
        "c.yaml:3:3"
    );
    // A file that cannot be read, or a path outside the folder: the name alone.
    assert_eq!(
        place_of(&dir.path().into(), "gone.yaml", &["vpc", "id"]),
        "gone.yaml"
    );
    assert_eq!(
        place_of(&dir.path().into(), "../c.yaml", &["vpc", "id"]),
        "../c.yaml"
    );
}
