//! The EC2 reads flow makes while planning and before create, through the
//! AWS SDK: what instance types have of EFA (`DescribeInstanceTypes`), the
//! zones of subnets (`DescribeSubnets`) and the all-traffic rules of
//! security groups that name the group itself (`DescribeSecurityGroups`).
//! Capacity reservations are read in [`super::reservation`].

use aws_config::SdkConfig;
use aws_sdk_ec2::types::{InstanceType, IpPermission, SecurityGroup};

use super::error;
use crate::contract::ProviderError;

/// What an instance type has of EFA (DescribeInstanceTypes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceTypeEfa {
    /// The type.
    pub instance_type: String,
    /// `NetworkInfo.EfaSupported`.
    pub supported: bool,
    /// `NetworkInfo.EfaInfo.MaximumEfaInterfaces`, when given.
    pub max_interfaces: Option<u32>,
}

/// A security group's all-traffic rules naming the group itself
/// (DescribeSecurityGroups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelfRules {
    /// The group's id.
    pub group_id: String,
    /// An ingress rule, protocol `-1`, from the group itself.
    pub ingress: bool,
    /// An egress rule, protocol `-1`, to the group itself or to 0.0.0.0/0.
    pub egress: bool,
}

/// EC2 in the region (and at the endpoint, if one is set) of a config.
pub(crate) struct Ec2 {
    client: aws_sdk_ec2::Client,
}

impl Ec2 {
    /// EC2 for `config`.
    pub(crate) fn new(config: &SdkConfig) -> Self {
        Ec2 {
            client: aws_sdk_ec2::Client::new(config),
        }
    }

    /// What each of `types` has of EFA.
    pub(crate) async fn instance_types(
        &self,
        types: &[String],
    ) -> Result<Vec<InstanceTypeEfa>, ProviderError> {
        let wanted = types
            .iter()
            .map(|t| InstanceType::from(t.as_str()))
            .collect();
        let out = self
            .client
            .describe_instance_types()
            .set_instance_types(Some(wanted))
            .send()
            .await
            .map_err(|e| error::aws("describe the instance types", e))?;
        Ok(out
            .instance_types()
            .iter()
            .map(|t| {
                let net = t.network_info();
                InstanceTypeEfa {
                    instance_type: t
                        .instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    supported: net.and_then(|n| n.efa_supported()) == Some(true),
                    max_interfaces: net
                        .and_then(|n| n.efa_info())
                        .and_then(|e| e.maximum_efa_interfaces())
                        .and_then(|n| u32::try_from(n).ok()),
                }
            })
            .collect())
    }

    /// Each of `subnets` with its Availability Zone, in EC2's order.
    pub(crate) async fn subnet_zones(
        &self,
        subnets: &[String],
    ) -> Result<Vec<(String, String)>, ProviderError> {
        let out = self
            .client
            .describe_subnets()
            .set_subnet_ids(Some(subnets.to_vec()))
            .send()
            .await
            .map_err(|e| error::aws("describe the subnets", e))?;
        Ok(out
            .subnets()
            .iter()
            .map(|s| {
                (
                    s.subnet_id().unwrap_or_default().to_string(),
                    s.availability_zone().unwrap_or_default().to_string(),
                )
            })
            .collect())
    }

    /// The VPC `subnet` is in, or `None` when EC2 no longer has it.
    pub(crate) async fn vpc_of_subnet(
        &self,
        subnet: &str,
    ) -> Result<Option<String>, ProviderError> {
        match self
            .client
            .describe_subnets()
            .subnet_ids(subnet)
            .send()
            .await
        {
            Ok(out) => Ok(out
                .subnets()
                .first()
                .and_then(|s| s.vpc_id())
                .map(str::to_string)),
            Err(e) if error::code(&e) == Some("InvalidSubnetID.NotFound") => Ok(None),
            Err(e) => Err(error::aws(&format!("describe subnet {subnet}"), e)),
        }
    }

    /// Each of `groups` with its self-referencing all-traffic rules.
    pub(crate) async fn security_groups(
        &self,
        groups: &[String],
    ) -> Result<Vec<SelfRules>, ProviderError> {
        let out = self
            .client
            .describe_security_groups()
            .set_group_ids(Some(groups.to_vec()))
            .send()
            .await
            .map_err(|e| error::aws("describe the security groups", e))?;
        Ok(out.security_groups().iter().map(self_rules).collect())
    }
}

/// `group`'s all-traffic rules that name it: ingress from itself, egress to
/// itself (or to the whole world, which includes it).
fn self_rules(group: &SecurityGroup) -> SelfRules {
    let id = group.group_id().unwrap_or_default();
    let all = |rules: &[IpPermission], world_counts: bool| {
        rules.iter().any(|p| {
            p.ip_protocol() == Some("-1")
                && (p
                    .user_id_group_pairs()
                    .iter()
                    .any(|pair| pair.group_id() == Some(id))
                    || (world_counts
                        && p.ip_ranges()
                            .iter()
                            .any(|r| r.cidr_ip() == Some("0.0.0.0/0"))))
        })
    };
    SelfRules {
        group_id: id.to_string(),
        ingress: all(group.ip_permissions(), false),
        egress: all(group.ip_permissions_egress(), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{IpRange, UserIdGroupPair};

    fn rule(protocol: &str, group: Option<&str>, cidr: Option<&str>) -> IpPermission {
        let mut p = IpPermission::builder().ip_protocol(protocol);
        if let Some(g) = group {
            p = p.user_id_group_pairs(UserIdGroupPair::builder().group_id(g).build());
        }
        if let Some(c) = cidr {
            p = p.ip_ranges(IpRange::builder().cidr_ip(c).build());
        }
        p.build()
    }

    #[test]
    fn self_rules_need_all_traffic_naming_the_group() {
        let efa = SecurityGroup::builder()
            .group_id("sg-1")
            .ip_permissions(rule("-1", Some("sg-1"), None))
            .ip_permissions_egress(rule("-1", None, Some("0.0.0.0/0")))
            .build();
        let judged = self_rules(&efa);
        assert!(judged.ingress && judged.egress, "{judged:?}");
        let tcp_only = SecurityGroup::builder()
            .group_id("sg-2")
            .ip_permissions(rule("tcp", Some("sg-2"), None))
            .ip_permissions(rule("-1", Some("sg-other"), None))
            .build();
        let judged = self_rules(&tcp_only);
        assert!(!judged.ingress && !judged.egress, "{judged:?}");
        let world_in = SecurityGroup::builder()
            .group_id("sg-3")
            .ip_permissions(rule("-1", None, Some("0.0.0.0/0")))
            .build();
        assert!(
            !self_rules(&world_in).ingress,
            "ingress from the world is not from itself"
        );
    }
}
