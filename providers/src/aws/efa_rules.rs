//! The EFA rules only EC2 can answer, shared by every step that launches
//! EFA nodes (node groups, Batch compute environments, ParallelCluster
//! queues): each instance type has EFA (DescribeInstanceTypes), the subnets
//! sit in one Availability Zone (DescribeSubnets), and each security group
//! lets all traffic in from and out to itself (DescribeSecurityGroups). The offline rules are in [`crate::efa`].

use std::future::Future;

use super::ec2::Ec2;
use crate::contract::ProviderError;

/// A broken rule, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broken {
    /// What is wrong.
    pub message: String,
    /// How to fix it (a command where there is one).
    pub fix: String,
}

/// The instance types of `types` that have no EFA, as EC2 says.
pub(crate) async fn types_have_efa(
    ec2: &Ec2,
    types: &[String],
) -> Result<Vec<Broken>, ProviderError> {
    Ok(ec2
        .instance_types(types)
        .await?
        .into_iter()
        .filter(|t| !t.supported)
        .map(|t| Broken {
            message: format!(
                "instance type `{}` has no EFA (EC2 DescribeInstanceTypes)",
                t.instance_type
            ),
            fix: "choose an instance type with EFA, or launch without EFA interfaces".into(),
        })
        .collect())
}

/// Whether `subnets` sit in one zone: the rule broken when they do not.
pub(crate) async fn one_zone(
    ec2: &Ec2,
    subnets: &[String],
) -> Result<Option<Broken>, ProviderError> {
    let zones = ec2.subnet_zones(subnets).await?;
    let mut distinct: Vec<&str> = zones.iter().map(|(_, z)| z.as_str()).collect();
    distinct.sort();
    distinct.dedup();
    if distinct.len() < 2 {
        return Ok(None);
    }
    let listed: Vec<String> = zones.iter().map(|(s, z)| format!("{s} in {z}")).collect();
    Ok(Some(Broken {
        message: format!(
            "the subnets span {} Availability Zones ({}); EFA traffic does not cross zones",
            distinct.len(),
            listed.join(", ")
        ),
        fix: "keep the subnets of one zone".into(),
    }))
}

/// The self rules `groups` lack, each with the command that adds it.
/// Rules add up across the groups an interface has: one group letting all
/// traffic in from itself and one letting it out is enough.
pub(crate) async fn self_rules(ec2: &Ec2, groups: &[String]) -> Result<Vec<Broken>, ProviderError> {
    let found = ec2.security_groups(groups).await?;
    let ingress = found.iter().any(|g| g.ingress);
    let egress = found.iter().any(|g| g.egress);
    let mut out = Vec::new();
    for g in found.iter().map(|g| super::ec2::SelfRules {
        ingress: g.ingress || ingress,
        egress: g.egress || egress,
        ..g.clone()
    }) {
        let id = &g.group_id;
        if !g.ingress {
            out.push(Broken {
                message: format!("security group {id} does not allow all traffic in from itself, which EFA needs"),
                fix: format!("aws ec2 authorize-security-group-ingress --group-id {id} --protocol -1 --source-group {id}"),
            });
        }
        if !g.egress {
            out.push(Broken {
                message: format!("security group {id} does not allow all traffic out to itself, which EFA needs"),
                fix: format!("aws ec2 authorize-security-group-egress --group-id {id} --ip-permissions IpProtocol=-1,UserIdGroupPairs=[{{GroupId={id}}}]"),
            });
        }
    }
    Ok(out)
}

/// `ask` of `items`, unless there are none: an empty list is not asked
/// about at all (EC2 would answer an unfiltered describe with everything in
/// the region).
pub(crate) async fn unless_empty<'a, T, Fut>(
    items: &'a [String],
    ask: impl FnOnce(&'a [String]) -> Fut,
) -> Option<T>
where
    Fut: Future<Output = T>,
{
    if items.is_empty() {
        None
    } else {
        Some(ask(items).await)
    }
}

/// What EC2 says of EFA nodes of `types` in `subnets` with `groups` (empty:
/// not asked): the broken rules, and a line for each rule EC2 did not
/// answer for. The three questions go to EC2 at once.
pub(crate) async fn judge(
    ec2: &Ec2,
    types: &[String],
    subnets: &[String],
    groups: &[String],
) -> (Vec<Broken>, Vec<String>) {
    let (types_answer, zones_answer, groups_answer) = tokio::join!(
        unless_empty(types, |t| types_have_efa(ec2, t)),
        unless_empty(subnets, |s| one_zone(ec2, s)),
        unless_empty(groups, |g| self_rules(ec2, g)),
    );
    let mut broken = Vec::new();
    let mut unjudged = Vec::new();
    match types_answer {
        Some(Ok(b)) => broken.extend(b),
        Some(Err(e)) => unjudged.push(format!(
            "EFA of the instance types not judged (DescribeInstanceTypes: {})",
            e.message
        )),
        None => {}
    }
    match zones_answer {
        Some(Ok(b)) => broken.extend(b),
        Some(Err(e)) => unjudged.push(format!(
            "EFA zones not judged (DescribeSubnets: {})",
            e.message
        )),
        None => {}
    }
    match groups_answer {
        Some(Ok(b)) => broken.extend(b),
        Some(Err(e)) => unjudged.push(format!(
            "EFA security groups not judged (DescribeSecurityGroups: {})",
            e.message
        )),
        None => {}
    }
    (broken, unjudged)
}
