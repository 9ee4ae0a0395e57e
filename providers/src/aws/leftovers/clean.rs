//! Deleting leftovers in the order AWS allows: load balancers, Classic ones
//! too (their listeners go with them, and their interfaces soon after), target groups,
//! unattached interfaces, then security groups once no other group's rule
//! names them.

use aws_sdk_ec2::types::{IpPermission, SecurityGroup, UserIdGroupPair};
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use super::scan::Clients;
use super::{Kind, Leftover};
use crate::aws::error;
use crate::contract::{ProviderError, Reporter};

/// Error codes that mean the object is already gone.
const GONE: [&str; 6] = [
    "LoadBalancerNotFound",
    "AccessPointNotFound",
    "TargetGroupNotFound",
    "InvalidNetworkInterfaceID.NotFound",
    "InvalidGroup.NotFound",
    "InvalidGroupId.NotFound",
];

/// Error codes that mean something still uses the object: it can go once
/// that is gone (an interface a deleted load balancer still holds).
const IN_USE: [&str; 3] = [
    "DependencyViolation",
    "ResourceInUse",
    "InvalidNetworkInterface.InUse",
];

impl Clients {
    /// Deletes each of `doomed` (load balancers first), reporting each.
    /// Returns those something still uses, with AWS's reason: a later look
    /// deletes them.
    pub(crate) async fn clean(
        &self,
        reporter: &dyn Reporter,
        vpc: &str,
        doomed: &[Leftover],
    ) -> Result<Vec<(Leftover, String)>, ProviderError> {
        let mut ordered: Vec<&Leftover> = doomed.iter().collect();
        ordered.sort_by_key(|l| l.kind);
        let mut groups: Option<Vec<SecurityGroup>> = None;
        let mut busy = Vec::new();
        for leftover in ordered {
            reporter.event(&format!("deleting {}", leftover.line()));
            let result = match leftover.kind {
                Kind::LoadBalancer => self
                    .elb
                    .delete_load_balancer()
                    .load_balancer_arn(&leftover.id)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| failure(leftover, e)),
                Kind::ClassicLoadBalancer => self
                    .classic
                    .delete_load_balancer()
                    .load_balancer_name(&leftover.id)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| failure(leftover, e)),
                Kind::TargetGroup => self
                    .elb
                    .delete_target_group()
                    .target_group_arn(&leftover.id)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| failure(leftover, e)),
                Kind::NetworkInterface => self
                    .ec2
                    .delete_network_interface()
                    .network_interface_id(&leftover.id)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| failure(leftover, e)),
                Kind::SecurityGroup => {
                    if groups.is_none() {
                        groups = Some(self.security_groups(vpc).await?);
                    }
                    self.forget_rules_naming(&leftover.id, groups.as_deref().unwrap_or_default())
                        .await?;
                    self.ec2
                        .delete_security_group()
                        .group_id(&leftover.id)
                        .send()
                        .await
                        .map(drop)
                        .map_err(|e| failure(leftover, e))
                }
            };
            match result {
                Ok(()) | Err(Failure::Gone) => {}
                Err(Failure::InUse(reason)) => busy.push((leftover.clone(), reason)),
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        Ok(busy)
    }

    /// Revokes the rules of other groups in `groups` that name `group`: a
    /// group another group's rule names cannot be deleted.
    async fn forget_rules_naming(
        &self,
        group: &str,
        groups: &[SecurityGroup],
    ) -> Result<(), ProviderError> {
        for other in groups {
            let Some(other_id) = other.group_id() else {
                continue;
            };
            if other_id == group {
                continue;
            }
            let ingress = naming(other.ip_permissions(), group);
            if !ingress.is_empty() {
                self.ec2
                    .revoke_security_group_ingress()
                    .group_id(other_id)
                    .set_ip_permissions(Some(ingress))
                    .send()
                    .await
                    .map_err(|e| {
                        error::aws(
                            &format!("revoke {other_id}'s ingress rules naming {group}"),
                            e,
                        )
                    })?;
            }
            let egress = naming(other.ip_permissions_egress(), group);
            if !egress.is_empty() {
                self.ec2
                    .revoke_security_group_egress()
                    .group_id(other_id)
                    .set_ip_permissions(Some(egress))
                    .send()
                    .await
                    .map_err(|e| {
                        error::aws(
                            &format!("revoke {other_id}'s egress rules naming {group}"),
                            e,
                        )
                    })?;
            }
        }
        Ok(())
    }
}

/// Of `rules`, each one's part that names `group`: the same protocol and
/// ports, only that group.
fn naming(rules: &[IpPermission], group: &str) -> Vec<IpPermission> {
    rules
        .iter()
        .filter(|p| {
            p.user_id_group_pairs()
                .iter()
                .any(|g| g.group_id() == Some(group))
        })
        .map(|p| {
            IpPermission::builder()
                .set_ip_protocol(p.ip_protocol().map(str::to_string))
                .set_from_port(p.from_port())
                .set_to_port(p.to_port())
                .user_id_group_pairs(UserIdGroupPair::builder().group_id(group).build())
                .build()
        })
        .collect()
}

/// How a delete failed.
enum Failure {
    /// The object is already gone.
    Gone,
    /// Something still uses it: AWS's words.
    InUse(String),
    /// Anything else.
    Other(ProviderError),
}

/// What the failed delete of `leftover` means.
fn failure<E>(leftover: &Leftover, e: SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = error::code(&e).map(str::to_string);
    let error = error::aws(
        &format!("delete {} {}", leftover.kind.label(), leftover.id),
        e,
    );
    match code.as_deref() {
        Some(c) if GONE.contains(&c) => Failure::Gone,
        Some(c) if IN_USE.contains(&c) => Failure::InUse(error.message),
        _ => Failure::Other(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_part_of_a_rule_naming_the_group_is_revoked() {
        let rule = IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(80)
            .to_port(80)
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-lbc").build())
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-other").build())
            .build();
        let unrelated = IpPermission::builder()
            .ip_protocol("-1")
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-other").build())
            .build();
        let revoked = naming(&[rule, unrelated], "sg-lbc");
        assert_eq!(revoked.len(), 1);
        assert_eq!(revoked[0].from_port(), Some(80));
        assert_eq!(revoked[0].user_id_group_pairs().len(), 1);
        assert_eq!(
            revoked[0].user_id_group_pairs()[0].group_id(),
            Some("sg-lbc")
        );
    }
}
