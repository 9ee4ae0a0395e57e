//! The EFA rules of a cluster configuration that only EC2 can answer, asked
//! while planning: each queue with an `Efa.Enabled` compute resource has
//! instance types with EFA (DescribeInstanceTypes, beside the offline table
//! of [`super::efa_rules`]), its `Networking.SubnetIds` in one Availability
//! Zone, and the groups of
//! `Networking.SecurityGroups` (which replace the ones pcluster makes, with
//! the rules EFA needs) let all traffic in from and out to themselves.
//! `AdditionalSecurityGroups` sit beside pcluster's own and are not judged.

use serde_json::Value;

use crate::aws::ec2::Ec2;
use crate::aws::efa_rules;
use crate::contract::{OpContext, PlanDetail, ProviderError, Refusal};

/// A queue with EFA compute resources, as the configuration gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EfaQueue {
    /// Its name.
    pub name: String,
    /// The instance types of its EFA compute resources.
    pub types: Vec<String>,
    /// `Networking.SubnetIds`.
    pub subnets: Vec<String>,
    /// `Networking.SecurityGroups`.
    pub groups: Vec<String>,
}

/// The queues of `config` with EFA compute resources.
pub(crate) fn efa_queues(config: &Value) -> Vec<EfaQueue> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for q in config
        .pointer("/Scheduling/SlurmQueues")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut types: Vec<String> = q
            .get("ComputeResources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|r| r.pointer("/Efa/Enabled").and_then(Value::as_bool) == Some(true))
            .flat_map(|r| {
                let own = r
                    .get("InstanceType")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let listed = r
                    .get("Instances")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.get("InstanceType").and_then(Value::as_str))
                    .map(str::to_string);
                own.into_iter().chain(listed).collect::<Vec<_>>()
            })
            .collect();
        if types.is_empty() {
            continue;
        }
        types.sort();
        types.dedup();
        out.push(EfaQueue {
            name: q
                .get("Name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            types,
            subnets: strings(q.pointer("/Networking/SubnetIds")),
            groups: strings(q.pointer("/Networking/SecurityGroups")),
        });
    }
    out
}

/// What EC2 shows of the EFA queues' subnets and groups: lines for what it
/// could not answer, refusals for broken rules.
pub(crate) async fn check(ctx: &OpContext, config: &Value) -> Result<PlanDetail, ProviderError> {
    let queues = efa_queues(config);
    let mut detail = PlanDetail::default();
    if queues.is_empty() {
        return Ok(detail);
    }
    let ec2 = Ec2::new(&crate::aws::config::sdk_config(ctx).await?);
    for q in queues {
        let (broken, unjudged) = efa_rules::judge(&ec2, &q.types, &q.subnets, &q.groups).await;
        let queue = &q.name;
        detail
            .lines
            .extend(unjudged.into_iter().map(|u| format!("queue {queue}: {u}")));
        detail.refusals.extend(broken.into_iter().map(|b| Refusal {
            message: format!("queue {queue}: EFA: {}", b.message),
            help: b.fix,
        }));
    }
    Ok(detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_queues_with_efa_resources_are_judged() {
        let config = json!({"Scheduling": {"SlurmQueues": [
            {"Name": "train", "Networking": {"SubnetIds": ["subnet-a", "subnet-b"], "SecurityGroups": ["sg-1"],
             "AdditionalSecurityGroups": ["sg-extra"]},
             "ComputeResources": [{"Name": "p5", "InstanceType": "p5.48xlarge", "Efa": {"Enabled": true}}]},
            {"Name": "cpu", "Networking": {"SubnetIds": ["subnet-c"]},
             "ComputeResources": [{"Name": "c5", "InstanceType": "c5.xlarge"}]}
        ]}});
        assert_eq!(
            efa_queues(&config),
            [EfaQueue {
                name: "train".into(),
                types: vec!["p5.48xlarge".into()],
                subnets: vec!["subnet-a".into(), "subnet-b".into()],
                groups: vec!["sg-1".into()],
            }]
        );
    }
}
