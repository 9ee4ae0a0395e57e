//! The EFA rules a node group's inputs cannot show offline, asked of EC2 at
//! plan and before create: whether each instance type has EFA and how many
//! interfaces (DescribeInstanceTypes), the zones of its subnets
//! (DescribeSubnets) and the self rules of its security groups
//! (DescribeSecurityGroups). A call EC2 does not answer leaves its rule
//! unjudged (a note says so); the offline table then gives the count.

use super::spec::NodegroupSpec;
use crate::aws::ec2::Ec2;
use crate::aws::efa_rules;
use crate::contract::{OpContext, ProviderError};

/// What EC2 said of a node group's EFA.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Looked {
    /// Broken rules, each with its fix.
    pub problems: Vec<String>,
    /// Rules EC2 could not answer for, and why.
    pub unjudged: Vec<String>,
    /// EFA interfaces per node of the first instance type, as EC2 says.
    pub interfaces: Option<u32>,
}

/// Asks EC2 about `spec`'s EFA; nothing for a group without EFA.
pub async fn look(ctx: &OpContext, spec: &NodegroupSpec) -> Result<Looked, ProviderError> {
    let mut out = Looked::default();
    if !spec.efa {
        return Ok(out);
    }
    let ec2 = Ec2::new(&super::super::sdk_config(ctx).await?);
    // With a capacity reservation, its own check judges the subnets' zones.
    let zoned: &[String] = match spec.capacity_reservation_id {
        None => &spec.subnet_ids,
        Some(_) => &[],
    };
    // The three questions go to EC2 at once.
    let (types, zones, groups) = tokio::join!(
        ec2.instance_types(&spec.instance_types),
        efa_rules::unless_empty(zoned, |s| efa_rules::one_zone(&ec2, s)),
        efa_rules::unless_empty(&spec.security_group_ids, |g| efa_rules::self_rules(&ec2, g)),
    );
    match types {
        Ok(types) => {
            for t in &types {
                if !t.supported {
                    out.problems.push(format!(
                        "instance type `{}` has no EFA (EC2 DescribeInstanceTypes): choose a type with EFA, or set efa = false",
                        t.instance_type
                    ));
                }
            }
            out.interfaces = spec
                .instance_types
                .first()
                .and_then(|first| types.iter().find(|t| &t.instance_type == first))
                .and_then(|t| t.max_interfaces);
        }
        Err(e) => out.unjudged.push(format!(
            "the instance types' EFA (DescribeInstanceTypes: {})",
            e.message
        )),
    }
    match zones {
        Some(Ok(broken)) => out
            .problems
            .extend(broken.map(|b| format!("{}: {} in subnet_ids", b.message, b.fix))),
        Some(Err(e)) => out.unjudged.push(format!(
            "the subnets' zones (DescribeSubnets: {})",
            e.message
        )),
        None => {}
    }
    match groups {
        Some(Ok(broken)) => out.problems.extend(
            broken
                .into_iter()
                .map(|b| format!("{}: {}", b.message, b.fix)),
        ),
        Some(Err(e)) => out.unjudged.push(format!(
            "the security groups' rules (DescribeSecurityGroups: {})",
            e.message
        )),
        None => {}
    }
    Ok(out)
}

impl Looked {
    /// The plan's lines: what could not be judged, and the interface count
    /// EC2 gave (broken rules are [`Looked::refusals`]).
    pub fn lines(&self, spec: &NodegroupSpec) -> Vec<String> {
        let mut lines: Vec<String> = self
            .unjudged
            .iter()
            .map(|u| format!("EFA rules not judged: {u}"))
            .collect();
        if let (Some(n), Some(t)) = (self.interfaces, spec.instance_types.first()) {
            lines.push(format!(
                "EFA: {n} interfaces per node ({t}, EC2 DescribeInstanceTypes)"
            ));
        }
        lines
    }

    /// The plan's refusals: each broken rule, with its fix.
    pub fn refusals(&self) -> Vec<crate::contract::Refusal> {
        self.problems
            .iter()
            .map(|p| crate::contract::Refusal {
                message: format!("EFA: {p}"),
                help: "fix the node group's EFA setup; nothing is created until then".into(),
            })
            .collect()
    }

    /// The create's refusal, when a rule is broken.
    pub fn refusal(&self, spec: &NodegroupSpec) -> Option<ProviderError> {
        (!self.problems.is_empty()).then(|| {
            ProviderError::invalid(format!(
                "node group `{}`: {}",
                spec.name,
                self.problems.join("; ")
            ))
            .with_help("fix the node group's EFA setup; nothing was created")
        })
    }
}
