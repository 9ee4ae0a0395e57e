//! What Kubernetes controllers leave in a VPC behind flow's back, found and
//! cleared before the VPC or the cluster goes: load balancers, target
//! groups and security groups that the AWS Load Balancer Controller or the
//! in-tree service controller made for `Service type=LoadBalancer`, and
//! network interfaces left `available` by the VPC CNI, EFA, FSx or a load
//! balancer. CloudFormation would otherwise fail the VPC stack with
//! `DependencyViolation` after a long wait.
//!
//! `scan` reads them through EC2, ELBv2 and (for the Classic Load Balancers
//! the in-tree service controller makes by default) ELB, `clean` deletes the ones tied to
//! a cluster, `sweep` waits a bounded time for them to go, then cleans or
//! refuses with each one's id, kind, tie and the command that removes it.

mod clean;
mod scan;
mod sweep;

pub(crate) use sweep::{Scope, Sweep, input_specs};

/// The tags that tie an object to the cluster that made it:
/// `kubernetes.io/cluster/NAME = owned` (in-tree controllers),
/// `elbv2.k8s.aws/cluster = NAME` (the Load Balancer Controller) and
/// `cluster.k8s.amazonaws.com/name = NAME` (the VPC CNI's interfaces).
/// `kubernetes.io/cluster/NAME = shared` marks what users share with a
/// cluster (subnets, node groups' security groups), not what it made: it
/// ties nothing. An object tied to two clusters ties to none (it is not
/// one cluster's to delete).
pub(crate) fn cluster_of<'a>(
    tags: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<(String, String)> {
    let mut found: Option<(String, String)> = None;
    for (key, value) in tags {
        let tie = if let Some(name) = key.strip_prefix("kubernetes.io/cluster/") {
            (value == "owned").then(|| name.to_string())
        } else if key == "elbv2.k8s.aws/cluster" || key == "cluster.k8s.amazonaws.com/name" {
            Some(value.to_string())
        } else {
            None
        };
        let Some(name) = tie else { continue };
        match &found {
            Some((other, _)) if *other != name => return None,
            Some(_) => {}
            None => found = Some((name, format!("{key}={value}"))),
        }
    }
    found
}

/// Tags of objects that something else deletes: a CloudFormation stack's
/// resources go with their stack, and the security group EKS makes for a
/// cluster goes with the cluster.
pub(crate) fn owned_elsewhere<'a>(mut keys: impl Iterator<Item = &'a str>) -> bool {
    keys.any(|k| k == "aws:cloudformation:stack-name" || k == "aws:eks:cluster-name")
}

/// What kind of object was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// An ELBv2 load balancer (application, network or gateway).
    LoadBalancer,
    /// A Classic Load Balancer (ELB), which the in-tree service controller
    /// makes for `Service type=LoadBalancer` without the Load Balancer
    /// Controller; its id is its name.
    ClassicLoadBalancer,
    /// An ELBv2 target group.
    TargetGroup,
    /// A network interface in `available` state.
    NetworkInterface,
    /// A security group.
    SecurityGroup,
}

impl Kind {
    /// The kind as a listing shows it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::LoadBalancer => "load balancer",
            Kind::ClassicLoadBalancer => "classic load balancer",
            Kind::TargetGroup => "target group",
            Kind::NetworkInterface => "network interface",
            Kind::SecurityGroup => "security group",
        }
    }
}

/// What ties a leftover to its maker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tie {
    /// A tag naming a cluster.
    Cluster {
        /// The cluster's name.
        name: String,
        /// The tag, as `KEY=VALUE`.
        tag: String,
    },
    /// An interface that names no cluster, whose description (or type) names
    /// the service that made it: `VPC CNI`, `EFA`, `FSx` or `ELB`.
    Service(&'static str),
}

/// One object left in the VPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leftover {
    /// Its kind.
    pub kind: Kind,
    /// Its id: an ARN for load balancers and target groups, a Classic Load
    /// Balancer's name, `sg-…`, `eni-…`.
    pub id: String,
    /// Its name, or an interface's description.
    pub name: String,
    /// What ties it to its maker.
    pub tie: Tie,
}

impl Leftover {
    /// The cluster it is tagged for, if any.
    pub(crate) fn cluster(&self) -> Option<&str> {
        match &self.tie {
            Tie::Cluster { name, .. } => Some(name),
            Tie::Service(_) => None,
        }
    }

    /// The AWS CLI command that deletes it.
    pub(crate) fn removal(&self) -> String {
        match self.kind {
            Kind::LoadBalancer => {
                format!(
                    "aws elbv2 delete-load-balancer --load-balancer-arn {}",
                    self.id
                )
            }
            Kind::ClassicLoadBalancer => {
                format!(
                    "aws elb delete-load-balancer --load-balancer-name {}",
                    self.id
                )
            }
            Kind::TargetGroup => {
                format!(
                    "aws elbv2 delete-target-group --target-group-arn {}",
                    self.id
                )
            }
            Kind::NetworkInterface => format!(
                "aws ec2 delete-network-interface --network-interface-id {}",
                self.id
            ),
            Kind::SecurityGroup => format!("aws ec2 delete-security-group --group-id {}", self.id),
        }
    }

    /// One line of a listing: kind, name, id, tie, and the command.
    pub(crate) fn line(&self) -> String {
        let tie = match &self.tie {
            Tie::Cluster { tag, .. } => format!("tagged {tag}"),
            Tie::Service(service) => format!("left by {service}, tagged for no cluster"),
        };
        let named = if self.name.is_empty() || self.name == self.id {
            String::new()
        } else {
            format!(" `{}`", self.name)
        };
        format!(
            "{}{named} {} ({tie}): {}",
            self.kind.label(),
            self.id,
            self.removal()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_controller_tag_names_its_cluster() {
        let tie = |k: &str, v: &str| cluster_of([(k, v)]);
        assert_eq!(
            tie("kubernetes.io/cluster/p4d", "owned"),
            Some(("p4d".into(), "kubernetes.io/cluster/p4d=owned".into()))
        );
        assert_eq!(
            tie("elbv2.k8s.aws/cluster", "p4d"),
            Some(("p4d".into(), "elbv2.k8s.aws/cluster=p4d".into()))
        );
        assert_eq!(
            tie("cluster.k8s.amazonaws.com/name", "p4d"),
            Some(("p4d".into(), "cluster.k8s.amazonaws.com/name=p4d".into()))
        );
        assert_eq!(tie("Name", "p4d"), None);
        // What users share with a cluster is not the cluster's to delete.
        assert_eq!(tie("kubernetes.io/cluster/p4d", "shared"), None);
        // Nor is what two clusters claim.
        assert_eq!(
            cluster_of([
                ("elbv2.k8s.aws/cluster", "p4d"),
                ("kubernetes.io/cluster/other", "owned")
            ]),
            None
        );
        assert_eq!(
            cluster_of([
                ("elbv2.k8s.aws/cluster", "p4d"),
                ("kubernetes.io/cluster/p4d", "owned")
            ])
            .map(|(name, _)| name),
            Some("p4d".to_string())
        );
        assert!(owned_elsewhere(
            ["Name", "aws:cloudformation:stack-name"].into_iter()
        ));
        assert!(!owned_elsewhere(["Name"].into_iter()));
    }

    #[test]
    fn a_line_names_the_object_its_tie_and_the_command() {
        let lb = Leftover {
            kind: Kind::LoadBalancer,
            id: "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/k8s-web/abc"
                .into(),
            name: "k8s-web".into(),
            tie: Tie::Cluster {
                name: "p4d".into(),
                tag: "elbv2.k8s.aws/cluster=p4d".into(),
            },
        };
        assert_eq!(
            lb.line(),
            "load balancer `k8s-web` arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/k8s-web/abc \
             (tagged elbv2.k8s.aws/cluster=p4d): aws elbv2 delete-load-balancer --load-balancer-arn \
             arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/k8s-web/abc"
        );
        let classic = Leftover {
            kind: Kind::ClassicLoadBalancer,
            id: "a1b2c3".into(),
            name: "a1b2c3".into(),
            tie: Tie::Cluster {
                name: "p4d".into(),
                tag: "kubernetes.io/cluster/p4d=owned".into(),
            },
        };
        assert_eq!(
            classic.line(),
            "classic load balancer a1b2c3 (tagged kubernetes.io/cluster/p4d=owned): \
             aws elb delete-load-balancer --load-balancer-name a1b2c3"
        );
        // Deleted with the other load balancers, before what they use.
        assert!(Kind::ClassicLoadBalancer < Kind::TargetGroup);
        assert!(Kind::ClassicLoadBalancer < Kind::SecurityGroup);
        let eni = Leftover {
            kind: Kind::NetworkInterface,
            id: "eni-0abc".into(),
            name: "ENI for FSx fs-0123".into(),
            tie: Tie::Service("FSx"),
        };
        assert_eq!(eni.cluster(), None);
        assert_eq!(
            eni.line(),
            "network interface `ENI for FSx fs-0123` eni-0abc (left by FSx, tagged for no cluster): \
             aws ec2 delete-network-interface --network-interface-id eni-0abc"
        );
    }
}
