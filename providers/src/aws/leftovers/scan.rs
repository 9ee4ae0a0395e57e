//! Reading a VPC for what controllers left in it: ELBv2 load balancers and
//! target groups and Classic Load Balancers (their tags come from each
//! API's `DescribeTags`), security groups, and network interfaces in
//! `available` state.

use aws_sdk_ec2::types::{Filter, NetworkInterface, NetworkInterfaceType, SecurityGroup};
use aws_sdk_elasticloadbalancingv2::types::TagDescription;

use super::{Kind, Leftover, Tie, cluster_of, owned_elsewhere};
use crate::aws::error;
use crate::contract::ProviderError;

/// ELBv2's `DescribeTags` takes at most this many ARNs, ELB's this many
/// names.
const TAGS_PER_CALL: usize = 20;

/// The EC2, ELBv2 and ELB clients a scan and a clean use.
pub(crate) struct Clients {
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// ELBv2.
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    /// ELB (Classic Load Balancers).
    pub classic: aws_sdk_elasticloadbalancing::Client,
}

impl Clients {
    /// Everything in `vpc` that a controller made for a cluster, and the
    /// unattached interfaces whose description names the VPC CNI, EFA, FSx
    /// or a load balancer; load balancers first, as they must go first.
    pub(crate) async fn scan(&self, vpc: &str) -> Result<Vec<Leftover>, ProviderError> {
        let mut found = self.balancers(vpc).await?;
        found.extend(self.classic_balancers(vpc).await?);
        found.extend(self.target_groups(vpc).await?);
        found.extend(self.interfaces(vpc).await?);
        found.extend(
            self.security_groups(vpc)
                .await?
                .iter()
                .filter_map(group_leftover),
        );
        found.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
        Ok(found)
    }

    /// The VPC's security groups, every page.
    pub(crate) async fn security_groups(
        &self,
        vpc: &str,
    ) -> Result<Vec<SecurityGroup>, ProviderError> {
        let mut groups = Vec::new();
        let mut next = None;
        loop {
            let out = self
                .ec2
                .describe_security_groups()
                .filters(in_vpc(vpc))
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| error::aws(&format!("describe the security groups of {vpc}"), e))?;
            groups.extend(out.security_groups().iter().cloned());
            next = out.next_token().map(str::to_string);
            if next.is_none() {
                return Ok(groups);
            }
        }
    }

    async fn balancers(&self, vpc: &str) -> Result<Vec<Leftover>, ProviderError> {
        let mut named = Vec::new();
        let mut marker = None;
        loop {
            let out = self
                .elb
                .describe_load_balancers()
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| error::aws("describe the load balancers", e))?;
            named.extend(
                out.load_balancers()
                    .iter()
                    .filter(|lb| lb.vpc_id() == Some(vpc))
                    .filter_map(|lb| {
                        Some((
                            lb.load_balancer_arn()?.to_string(),
                            lb.load_balancer_name().unwrap_or_default().to_string(),
                        ))
                    }),
            );
            marker = out.next_marker().map(str::to_string);
            if marker.is_none() {
                break;
            }
        }
        self.tied(Kind::LoadBalancer, named).await
    }

    /// The VPC's Classic Load Balancers tied to a cluster.
    async fn classic_balancers(&self, vpc: &str) -> Result<Vec<Leftover>, ProviderError> {
        let mut names = Vec::new();
        let mut marker = None;
        loop {
            let out = self
                .classic
                .describe_load_balancers()
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| error::aws("describe the classic load balancers", e))?;
            names.extend(
                out.load_balancer_descriptions()
                    .iter()
                    .filter(|lb| lb.vpc_id() == Some(vpc))
                    .filter_map(|lb| lb.load_balancer_name().map(str::to_string)),
            );
            marker = out.next_marker().map(str::to_string);
            if marker.is_none() {
                break;
            }
        }
        let mut found = Vec::new();
        for chunk in names.chunks(TAGS_PER_CALL) {
            let out = self
                .classic
                .describe_tags()
                .set_load_balancer_names(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| error::aws("read the tags of the classic load balancers", e))?;
            for name in chunk {
                let tags = out
                    .tag_descriptions()
                    .iter()
                    .find(|d| d.load_balancer_name() == Some(name));
                let tie = tags.and_then(|d| {
                    tie_of(
                        d.tags()
                            .iter()
                            .map(|t| (t.key(), t.value().unwrap_or_default())),
                    )
                });
                if let Some(tie) = tie {
                    found.push(Leftover {
                        kind: Kind::ClassicLoadBalancer,
                        id: name.clone(),
                        name: name.clone(),
                        tie,
                    });
                }
            }
        }
        Ok(found)
    }

    async fn target_groups(&self, vpc: &str) -> Result<Vec<Leftover>, ProviderError> {
        let mut named = Vec::new();
        let mut marker = None;
        loop {
            let out = self
                .elb
                .describe_target_groups()
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| error::aws("describe the target groups", e))?;
            named.extend(
                out.target_groups()
                    .iter()
                    .filter(|tg| tg.vpc_id() == Some(vpc))
                    .filter_map(|tg| {
                        Some((
                            tg.target_group_arn()?.to_string(),
                            tg.target_group_name().unwrap_or_default().to_string(),
                        ))
                    }),
            );
            marker = out.next_marker().map(str::to_string);
            if marker.is_none() {
                break;
            }
        }
        self.tied(Kind::TargetGroup, named).await
    }

    /// Those of `named` (ARN, name) whose tags tie them to a cluster.
    async fn tied(
        &self,
        kind: Kind,
        named: Vec<(String, String)>,
    ) -> Result<Vec<Leftover>, ProviderError> {
        let mut found = Vec::new();
        for chunk in named.chunks(TAGS_PER_CALL) {
            let out = self
                .elb
                .describe_tags()
                .set_resource_arns(Some(chunk.iter().map(|(arn, _)| arn.clone()).collect()))
                .send()
                .await
                .map_err(|e| error::aws(&format!("read the tags of the {}s", kind.label()), e))?;
            for (arn, name) in chunk {
                let tags = out
                    .tag_descriptions()
                    .iter()
                    .find(|d| d.resource_arn() == Some(arn));
                if let Some(tie) = tags.and_then(balancer_tie) {
                    found.push(Leftover {
                        kind,
                        id: arn.clone(),
                        name: name.clone(),
                        tie,
                    });
                }
            }
        }
        Ok(found)
    }

    async fn interfaces(&self, vpc: &str) -> Result<Vec<Leftover>, ProviderError> {
        let mut found = Vec::new();
        let mut next = None;
        loop {
            let out = self
                .ec2
                .describe_network_interfaces()
                .filters(in_vpc(vpc))
                .filters(Filter::builder().name("status").values("available").build())
                .set_next_token(next)
                .send()
                .await
                .map_err(|e| error::aws(&format!("describe the network interfaces of {vpc}"), e))?;
            found.extend(
                out.network_interfaces()
                    .iter()
                    .filter_map(interface_leftover),
            );
            next = out.next_token().map(str::to_string);
            if next.is_none() {
                return Ok(found);
            }
        }
    }
}

fn in_vpc(vpc: &str) -> Filter {
    Filter::builder().name("vpc-id").values(vpc).build()
}

/// A load balancer's or target group's tie to a cluster, unless a stack
/// owns it.
fn balancer_tie(tags: &TagDescription) -> Option<Tie> {
    tie_of(
        tags.tags()
            .iter()
            .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default())),
    )
}

/// The tie to a cluster that tags (key, value) make, unless a stack owns
/// the object.
fn tie_of<'a>(tags: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Option<Tie> {
    if owned_elsewhere(tags.clone().map(|(k, _)| k)) {
        return None;
    }
    cluster_of(tags).map(|(name, tag)| Tie::Cluster { name, tag })
}

/// A security group a controller made for a cluster (not the VPC's default
/// group, not one a stack or EKS itself deletes).
pub(crate) fn group_leftover(group: &SecurityGroup) -> Option<Leftover> {
    let pairs = || {
        group
            .tags()
            .iter()
            .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()))
    };
    if group.group_name() == Some("default") || owned_elsewhere(pairs().map(|(k, _)| k)) {
        return None;
    }
    let (name, tag) = cluster_of(pairs())?;
    Some(Leftover {
        kind: Kind::SecurityGroup,
        id: group.group_id()?.to_string(),
        name: group.group_name().unwrap_or_default().to_string(),
        tie: Tie::Cluster { name, tag },
    })
}

/// An unattached interface tagged for a cluster, or made by a service that
/// leaves them behind.
fn interface_leftover(eni: &NetworkInterface) -> Option<Leftover> {
    let pairs = || {
        eni.tag_set()
            .iter()
            .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()))
    };
    if owned_elsewhere(pairs().map(|(k, _)| k)) {
        return None;
    }
    let description = eni.description().unwrap_or_default();
    let tie = match cluster_of(pairs()) {
        Some((name, tag)) => Tie::Cluster { name, tag },
        None => Tie::Service(service_of(description, eni.interface_type())?),
    };
    Some(Leftover {
        kind: Kind::NetworkInterface,
        id: eni.network_interface_id()?.to_string(),
        name: description.to_string(),
        tie,
    })
}

/// The service an interface's description (or type) names, among those
/// that leave interfaces in a cluster's VPC.
fn service_of(description: &str, kind: Option<&NetworkInterfaceType>) -> Option<&'static str> {
    if description.starts_with("aws-K8S-") {
        Some("VPC CNI")
    } else if kind == Some(&NetworkInterfaceType::Efa) || description.contains("EFA") {
        Some("EFA")
    } else if description.contains("FSx") {
        Some("FSx")
    } else if description.starts_with("ELB ") {
        Some("ELB")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::Tag;

    fn eni(description: &str, tags: &[(&str, &str)]) -> NetworkInterface {
        let mut b = NetworkInterface::builder()
            .network_interface_id("eni-1")
            .description(description);
        for (k, v) in tags {
            b = b.tag_set(Tag::builder().key(*k).value(*v).build());
        }
        b.build()
    }

    #[test]
    fn interfaces_are_tied_by_tag_else_by_the_service_that_made_them() {
        let cni = interface_leftover(&eni(
            "aws-K8S-i-0abc",
            &[("cluster.k8s.amazonaws.com/name", "p4d")],
        ))
        .unwrap();
        assert_eq!(cni.cluster(), Some("p4d"));
        for (description, service) in [
            ("aws-K8S-i-0abc", "VPC CNI"),
            ("EFA interface of i-0abc", "EFA"),
            ("ENI for Amazon FSx for Lustre fs-0123", "FSx"),
            ("ELB net/k8s-web/0123", "ELB"),
        ] {
            assert_eq!(
                interface_leftover(&eni(description, &[])).map(|l| l.tie),
                Some(Tie::Service(service)),
                "{description}"
            );
        }
        assert_eq!(interface_leftover(&eni("my own interface", &[])), None);
        let efa = NetworkInterface::builder()
            .network_interface_id("eni-2")
            .interface_type(NetworkInterfaceType::Efa)
            .build();
        assert_eq!(
            interface_leftover(&efa).map(|l| l.tie),
            Some(Tie::Service("EFA"))
        );
    }

    #[test]
    fn groups_of_stacks_eks_and_the_default_are_not_leftovers() {
        let group = |name: &str, tags: &[(&str, &str)]| {
            let mut b = SecurityGroup::builder().group_id("sg-1").group_name(name);
            for (k, v) in tags {
                b = b.tags(Tag::builder().key(*k).value(*v).build());
            }
            b.build()
        };
        let lbc = group("k8s-traffic-p4d", &[("elbv2.k8s.aws/cluster", "p4d")]);
        assert_eq!(
            group_leftover(&lbc).and_then(|l| l.cluster().map(str::to_string)),
            Some("p4d".into())
        );
        for owned in [
            group(
                "eks-cluster-sg-p4d",
                &[
                    ("kubernetes.io/cluster/p4d", "owned"),
                    ("aws:eks:cluster-name", "p4d"),
                ],
            ),
            group(
                "vpc-shared",
                &[
                    ("kubernetes.io/cluster/p4d", "shared"),
                    ("aws:cloudformation:stack-name", "vpc"),
                ],
            ),
            group("default", &[("kubernetes.io/cluster/p4d", "owned")]),
            group("untagged", &[]),
        ] {
            assert_eq!(group_leftover(&owned), None, "{owned:?}");
        }
    }
}
