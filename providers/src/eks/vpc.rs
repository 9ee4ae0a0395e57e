//! The VPC eksctl makes for a `ClusterConfig` that lists no subnets: one
//! CloudFormation stack per cluster (`flow-eks-CLUSTER-vpc`) with a public
//! and a private subnet in each availability zone, an internet gateway, NAT
//! gateway(s), route tables, the control plane's security group and the
//! nodes' shared one. Its outputs give the cluster its subnets and the
//! node groups theirs; it is deleted after the cluster.
//!
//! As eksctl does: the block is `vpc.cidr` (192.168.0.0/16 when absent),
//! cut into equal subnets, public ones first (a /16 over up to four zones
//! gives /19s); `vpc.nat.gateway` is `Single` (the default: one NAT gateway,
//! in the first zone), `HighlyAvailable` (one per zone) or `Disable`.

use serde_json::{Value, json};

use crate::contract::Values;

/// eksctl's block when `vpc.cidr` is not set.
pub const DEFAULT_CIDR: &str = "192.168.0.0/16";

/// Zones used when the config names none: the region's first two, as
/// CloudFormation lists them.
const ZONES_WHEN_UNNAMED: usize = 2;

/// NAT gateways, as `vpc.nat.gateway` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nat {
    /// One NAT gateway, in the first zone's public subnet.
    Single,
    /// One NAT gateway per zone.
    HighlyAvailable,
    /// None: private subnets have no route out.
    Disable,
}

/// The VPC to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VpcRequest {
    /// The VPC's block, e.g. `192.168.0.0/16`.
    pub cidr: String,
    /// `availabilityZones` of the config; empty for the region's first two.
    pub zones: Vec<String>,
    /// NAT gateways.
    pub nat: Nat,
}

/// A `vpc:` section flow cannot make a VPC from, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VpcProblem {
    /// `vpc.cidr` is not an IPv4 block.
    #[error("`vpc.cidr` `{0}` is not an IPv4 block such as 192.168.0.0/16")]
    Cidr(String),
    /// The block is too small for a subnet per zone and kind.
    #[error(
        "`vpc.cidr` `{cidr}` is too small for a public and a private subnet in each of {zones} zones"
    )]
    TooSmall {
        /// The block.
        cidr: String,
        /// How many zones.
        zones: usize,
    },
    /// `vpc.nat.gateway` is not one eksctl knows.
    #[error("`vpc.nat.gateway` `{0}` is not Single, HighlyAvailable or Disable")]
    Nat(String),
    /// One zone named; EKS needs two.
    #[error(
        "`availabilityZones` names one zone ({0}); EKS needs subnets in at least two, as eksctl says"
    )]
    OneZone(String),
}

impl VpcRequest {
    /// The request from a config's `vpc` section and `availabilityZones`.
    pub fn from_config(vpc: &Value, zones: Vec<String>) -> Result<Self, VpcProblem> {
        let cidr = vpc
            .get("cidr")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_CIDR)
            .to_string();
        let nat = match vpc.pointer("/nat/gateway").and_then(Value::as_str) {
            None | Some("Single") => Nat::Single,
            Some("HighlyAvailable") => Nat::HighlyAvailable,
            Some("Disable") => Nat::Disable,
            Some(other) => return Err(VpcProblem::Nat(other.to_string())),
        };
        if let [only] = zones.as_slice() {
            return Err(VpcProblem::OneZone(only.clone()));
        }
        let request = VpcRequest { cidr, zones, nat };
        request.subnet_blocks()?;
        Ok(request)
    }

    /// How many zones the VPC spans.
    pub fn zone_count(&self) -> usize {
        if self.zones.is_empty() {
            ZONES_WHEN_UNNAMED
        } else {
            self.zones.len()
        }
    }

    /// The zone names for the plan (`zone 1`, … when the config names none).
    pub fn zone_names(&self) -> Vec<String> {
        if self.zones.is_empty() {
            (1..=ZONES_WHEN_UNNAMED)
                .map(|i| format!("the region's zone {i}"))
                .collect()
        } else {
            self.zones.clone()
        }
    }

    /// The subnets' blocks: the public ones, then the private ones.
    fn subnet_blocks(&self) -> Result<Vec<String>, VpcProblem> {
        let (base, prefix) =
            parse_cidr(&self.cidr).ok_or_else(|| VpcProblem::Cidr(self.cidr.clone()))?;
        let wanted = 2 * self.zone_count();
        // eksctl cuts a block into eight at least (/16 → /19).
        let bits = (usize::BITS - (wanted - 1).leading_zeros()).max(3);
        let new_prefix = prefix + bits;
        if new_prefix > 28 {
            return Err(VpcProblem::TooSmall {
                cidr: self.cidr.clone(),
                zones: self.zone_count(),
            });
        }
        let size = 1u64 << (32 - new_prefix);
        Ok((0..wanted as u64)
            .map(|i| {
                let start = u64::from(base) + i * size;
                format!("{}/{new_prefix}", std::net::Ipv4Addr::from(start as u32))
            })
            .collect())
    }

    /// The zone of subnet `i` in the template: its name, or the region's
    /// i-th zone.
    fn zone(&self, i: usize) -> Value {
        match self.zones.get(i) {
            Some(z) => json!(z),
            None => json!({"Fn::Select": [i.to_string(), {"Fn::GetAZs": ""}]}),
        }
    }

    /// What the plan says the stack makes.
    pub fn describe(&self) -> String {
        let nat = match self.nat {
            Nat::Single => "one NAT gateway".to_string(),
            Nat::HighlyAvailable => format!("{} NAT gateways", self.zone_count()),
            Nat::Disable => "no NAT gateway".to_string(),
        };
        format!(
            "VPC {} as eksctl makes it: public and private subnets in {}; {nat}; control plane and shared node security groups",
            self.cidr,
            self.zone_names().join(", ")
        )
    }

    /// The stack's template. `cluster` names the resources.
    pub fn template(&self, cluster: &str) -> Value {
        let blocks = self
            .subnet_blocks()
            .expect("the request was checked when it was read");
        let n = self.zone_count();
        let mut resources = serde_json::Map::new();
        let mut put = |name: String, value: Value| {
            resources.insert(name, value);
        };
        let tag = |name: String| json!([{"Key": "Name", "Value": name}]);
        put(
            "VPC".into(),
            json!({"Type": "AWS::EC2::VPC", "Properties": {
                "CidrBlock": self.cidr, "EnableDnsSupport": true, "EnableDnsHostnames": true,
                "Tags": tag(format!("flow-eks-{cluster}/VPC"))}}),
        );
        put(
            "InternetGateway".into(),
            json!({"Type": "AWS::EC2::InternetGateway"}),
        );
        put(
            "VPCGatewayAttachment".into(),
            json!({"Type": "AWS::EC2::VPCGatewayAttachment", "Properties": {
                "VpcId": {"Ref": "VPC"}, "InternetGatewayId": {"Ref": "InternetGateway"}}}),
        );
        put(
            "PublicRouteTable".into(),
            json!({"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": {"Ref": "VPC"}}}),
        );
        put(
            "PublicSubnetRoute".into(),
            json!({"Type": "AWS::EC2::Route", "DependsOn": "VPCGatewayAttachment", "Properties": {
                "RouteTableId": {"Ref": "PublicRouteTable"}, "DestinationCidrBlock": "0.0.0.0/0",
                "GatewayId": {"Ref": "InternetGateway"}}}),
        );
        for i in 0..n {
            let k = i + 1;
            put(
                format!("PublicSubnet{k}"),
                json!({"Type": "AWS::EC2::Subnet", "Properties": {
                    "VpcId": {"Ref": "VPC"}, "CidrBlock": blocks[i], "AvailabilityZone": self.zone(i),
                    "MapPublicIpOnLaunch": true,
                    "Tags": [{"Key": "Name", "Value": format!("flow-eks-{cluster}/PublicSubnet{k}")},
                             {"Key": "kubernetes.io/role/elb", "Value": "1"}]}}),
            );
            put(
                format!("PrivateSubnet{k}"),
                json!({"Type": "AWS::EC2::Subnet", "Properties": {
                    "VpcId": {"Ref": "VPC"}, "CidrBlock": blocks[n + i], "AvailabilityZone": self.zone(i),
                    "Tags": [{"Key": "Name", "Value": format!("flow-eks-{cluster}/PrivateSubnet{k}")},
                             {"Key": "kubernetes.io/role/internal-elb", "Value": "1"}]}}),
            );
            put(
                format!("PublicRouteTableAssociation{k}"),
                json!({"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
                    "SubnetId": {"Ref": format!("PublicSubnet{k}")}, "RouteTableId": {"Ref": "PublicRouteTable"}}}),
            );
            put(
                format!("PrivateRouteTable{k}"),
                json!({"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": {"Ref": "VPC"}}}),
            );
            put(
                format!("PrivateRouteTableAssociation{k}"),
                json!({"Type": "AWS::EC2::SubnetRouteTableAssociation", "Properties": {
                    "SubnetId": {"Ref": format!("PrivateSubnet{k}")},
                    "RouteTableId": {"Ref": format!("PrivateRouteTable{k}")}}}),
            );
            let gateway = match self.nat {
                Nat::Disable => None,
                Nat::Single => Some(1),
                Nat::HighlyAvailable => Some(k),
            };
            if let Some(g) = gateway {
                put(
                    format!("PrivateSubnetRoute{k}"),
                    json!({"Type": "AWS::EC2::Route", "Properties": {
                        "RouteTableId": {"Ref": format!("PrivateRouteTable{k}")},
                        "DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": {"Ref": format!("NATGateway{g}")}}}),
                );
            }
            let makes_gateway = match self.nat {
                Nat::Disable => false,
                Nat::Single => k == 1,
                Nat::HighlyAvailable => true,
            };
            if makes_gateway {
                put(
                    format!("NATIP{k}"),
                    json!({"Type": "AWS::EC2::EIP", "DependsOn": "VPCGatewayAttachment",
                           "Properties": {"Domain": "vpc"}}),
                );
                put(
                    format!("NATGateway{k}"),
                    json!({"Type": "AWS::EC2::NatGateway", "Properties": {
                        "AllocationId": {"Fn::GetAtt": [format!("NATIP{k}"), "AllocationId"]},
                        "SubnetId": {"Ref": format!("PublicSubnet{k}")}}}),
                );
            }
        }
        put(
            "ControlPlaneSecurityGroup".into(),
            json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
                "GroupDescription": "Communication between the control plane and worker nodegroups",
                "VpcId": {"Ref": "VPC"}, "Tags": tag(format!("flow-eks-{cluster}/ControlPlaneSecurityGroup"))}}),
        );
        put(
            "ClusterSharedNodeSecurityGroup".into(),
            json!({"Type": "AWS::EC2::SecurityGroup", "Properties": {
                "GroupDescription": "Communication between all nodes in the cluster",
                "VpcId": {"Ref": "VPC"}, "Tags": tag(format!("flow-eks-{cluster}/ClusterSharedNodeSecurityGroup"))}}),
        );
        put(
            "IngressInterNodeGroupSG".into(),
            json!({"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
                "Description": "Allow nodes to communicate with each other (all ports)",
                "GroupId": {"Ref": "ClusterSharedNodeSecurityGroup"}, "IpProtocol": "-1",
                "FromPort": 0, "ToPort": 65535,
                "SourceSecurityGroupId": {"Ref": "ClusterSharedNodeSecurityGroup"}}}),
        );
        let refs = |kind: &str| -> Vec<Value> {
            (1..=n)
                .map(|k| json!({"Ref": format!("{kind}Subnet{k}")}))
                .collect()
        };
        let mut outputs = serde_json::Map::new();
        outputs.insert("VPC".into(), json!({"Value": {"Ref": "VPC"}}));
        outputs.insert(
            "SubnetsPublic".into(),
            json!({"Value": {"Fn::Join": [",", refs("Public")]}}),
        );
        outputs.insert(
            "SubnetsPrivate".into(),
            json!({"Value": {"Fn::Join": [",", refs("Private")]}}),
        );
        outputs.insert(
            "SecurityGroup".into(),
            json!({"Value": {"Ref": "ControlPlaneSecurityGroup"}}),
        );
        outputs.insert(
            "SharedNodeSecurityGroup".into(),
            json!({"Value": {"Ref": "ClusterSharedNodeSecurityGroup"}}),
        );
        json!({
            "AWSTemplateFormatVersion": "2010-09-09",
            "Description": format!("VPC of EKS cluster {cluster}, made by flow as eksctl makes it"),
            "Resources": resources,
            "Outputs": outputs,
        })
    }
}

/// What the VPC stack made, read from its outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MadeVpc {
    /// The VPC's id.
    pub vpc_id: String,
    /// Public subnets, zone by zone (the request's order).
    pub public: Vec<String>,
    /// Private subnets, zone by zone.
    pub private: Vec<String>,
    /// The control plane's security group.
    pub security_group: String,
    /// The nodes' shared security group.
    pub shared_node_security_group: String,
}

impl MadeVpc {
    /// Reads the stack's outputs; `None` names the output that is missing.
    pub fn from_outputs(outputs: &Values) -> Result<Self, String> {
        let get = |k: &str| {
            outputs
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| k.to_string())
        };
        let list = |k: &str| -> Result<Vec<String>, String> {
            Ok(get(k)?
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect())
        };
        Ok(MadeVpc {
            vpc_id: get("VPC")?,
            public: list("SubnetsPublic")?,
            private: list("SubnetsPrivate")?,
            security_group: get("SecurityGroup")?,
            shared_node_security_group: get("SharedNodeSecurityGroup")?,
        })
    }
}

/// `a.b.c.d/n` as the address and prefix length.
fn parse_cidr(cidr: &str) -> Option<(u32, u32)> {
    let (addr, prefix) = cidr.split_once('/')?;
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    let prefix: u32 = prefix.parse().ok()?;
    if prefix > 32 {
        return None;
    }
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    Some((u32::from(addr) & mask, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(zones: &[&str]) -> VpcRequest {
        VpcRequest::from_config(&Value::Null, zones.iter().map(|z| z.to_string()).collect())
            .unwrap()
    }

    #[test]
    fn subnets_are_cut_as_eksctl_cuts_them() {
        let r = request(&["us-west-2a", "us-west-2b"]);
        assert_eq!(
            r.subnet_blocks().unwrap(),
            [
                "192.168.0.0/19",
                "192.168.32.0/19",
                "192.168.64.0/19",
                "192.168.96.0/19"
            ]
        );
        let five = request(&["a", "b", "c", "d", "e"]);
        let blocks = five.subnet_blocks().unwrap();
        assert_eq!(blocks.len(), 10);
        assert_eq!(blocks[9], "192.168.144.0/20");
        let small = VpcRequest::from_config(&json!({"cidr": "10.0.0.0/26"}), vec![]);
        assert!(matches!(small, Err(VpcProblem::TooSmall { .. })));
        let odd = VpcRequest::from_config(&json!({"cidr": "10.0.0/16"}), vec![]);
        assert_eq!(odd.unwrap_err(), VpcProblem::Cidr("10.0.0/16".into()));
    }

    #[test]
    fn one_zone_and_unknown_nat_are_refused() {
        let one = VpcRequest::from_config(&Value::Null, vec!["us-west-2a".into()]);
        assert!(one.unwrap_err().to_string().contains("at least two"));
        let nat = VpcRequest::from_config(&json!({"nat": {"gateway": "Double"}}), vec![]);
        assert_eq!(nat.unwrap_err(), VpcProblem::Nat("Double".into()));
    }

    #[test]
    fn the_template_routes_private_subnets_through_the_nat_gateways() {
        let single = request(&["us-west-2a", "us-west-2b"]).template("dlc");
        let res = &single["Resources"];
        assert_eq!(
            res["PrivateSubnet2"]["Properties"]["AvailabilityZone"],
            "us-west-2b"
        );
        assert_eq!(
            res["PrivateSubnet2"]["Properties"]["CidrBlock"],
            "192.168.96.0/19"
        );
        assert_eq!(
            res["PrivateSubnetRoute2"]["Properties"]["NatGatewayId"]["Ref"],
            "NATGateway1"
        );
        assert!(res.get("NATGateway2").is_none());
        let ha = VpcRequest {
            nat: Nat::HighlyAvailable,
            ..request(&["a", "b", "c"])
        }
        .template("dlc");
        assert_eq!(
            ha["Resources"]["PrivateSubnetRoute3"]["Properties"]["NatGatewayId"]["Ref"],
            "NATGateway3"
        );
        let none = VpcRequest {
            nat: Nat::Disable,
            ..request(&["a", "b"])
        }
        .template("dlc");
        assert!(none["Resources"].get("PrivateSubnetRoute1").is_none());
        let unnamed = VpcRequest::from_config(&Value::Null, vec![]).unwrap();
        assert_eq!(
            unnamed.template("x")["Resources"]["PublicSubnet2"]["Properties"]["AvailabilityZone"],
            json!({"Fn::Select": ["1", {"Fn::GetAZs": ""}]})
        );
    }

    #[test]
    fn outputs_are_read_back_zone_by_zone() {
        let out: Values = serde_json::from_value(json!({
            "VPC": "vpc-1", "SubnetsPublic": "subnet-p1,subnet-p2",
            "SubnetsPrivate": "subnet-q1,subnet-q2", "SecurityGroup": "sg-c",
            "SharedNodeSecurityGroup": "sg-n"
        }))
        .unwrap();
        let made = MadeVpc::from_outputs(&out).unwrap();
        assert_eq!(made.private, ["subnet-q1", "subnet-q2"]);
        assert_eq!(made.security_group, "sg-c");
        let mut partial = out.clone();
        partial.remove("SubnetsPrivate");
        assert_eq!(
            MadeVpc::from_outputs(&partial).unwrap_err(),
            "SubnetsPrivate"
        );
    }
}
