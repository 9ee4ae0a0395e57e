//! The EFA rules of a cluster configuration that only EC2 can answer, asked
//! while planning: each queue with an `Efa.Enabled` compute resource has
//! its `Networking.SubnetIds` in one Availability Zone, and the groups of
//! `Networking.SecurityGroups` (which replace the ones pcluster makes, with
//! the rules EFA needs) let all traffic in from and out to themselves.
//! `AdditionalSecurityGroups` sit beside pcluster's own and are not judged.

use serde_json::Value;

use crate::aws::ec2::Ec2;
use crate::aws::efa_rules;
use crate::contract::{OpContext, PlanDetail, ProviderError, Refusal};

/// The queues of `config` with EFA compute resources: `(name, subnets,
/// security groups)`.
pub(crate) fn efa_queues(config: &Value) -> Vec<(String, Vec<String>, Vec<String>)> {
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
    config
        .pointer("/Scheduling/SlurmQueues")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|q| {
            q.get("ComputeResources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|r| r.pointer("/Efa/Enabled").and_then(Value::as_bool) == Some(true))
        })
        .map(|q| {
            (
                q.get("Name")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string(),
                strings(q.pointer("/Networking/SubnetIds")),
                strings(q.pointer("/Networking/SecurityGroups")),
            )
        })
        .collect()
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
    for (queue, subnets, groups) in queues {
        let mut broken = Vec::new();
        if !subnets.is_empty() {
            match efa_rules::one_zone(&ec2, &subnets).await {
                Ok(b) => broken.extend(b),
                Err(e) => detail.lines.push(format!(
                    "queue {queue}: EFA zones not judged (DescribeSubnets: {})",
                    e.message
                )),
            }
        }
        if !groups.is_empty() {
            match efa_rules::self_rules(&ec2, &groups).await {
                Ok(b) => broken.extend(b),
                Err(e) => detail.lines.push(format!(
                    "queue {queue}: EFA security groups not judged (DescribeSecurityGroups: {})",
                    e.message
                )),
            }
        }
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
            [(
                "train".to_string(),
                vec!["subnet-a".to_string(), "subnet-b".to_string()],
                vec!["sg-1".to_string()]
            )]
        );
    }
}
