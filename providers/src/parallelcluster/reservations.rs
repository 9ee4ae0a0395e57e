//! The capacity reservations a cluster configuration's queues launch into,
//! read while planning (see [`crate::aws::reservation`]): each compute
//! resource naming a `cr-…` reservation, its own or its queue's, is judged
//! against the resource's instance type, its queue's subnets and capacity
//! type, and the static nodes (`MinCount`) create launches. A resource
//! group ARN is not read.

use serde_json::Value;

use crate::aws::reservation::{self, Ask};
use crate::contract::{OpContext, PlanDetail, ProviderError, Refusal};

/// Each queue's compute resources that name a reservation: `(queue,
/// resource, ask)`.
pub fn asks(config: &Value) -> Vec<(String, String, Ask)> {
    let summary = super::config::summary(config);
    let mut out = Vec::new();
    for q in &summary.queues {
        for r in &q.resources {
            let Some(id) = r.reservation.clone().filter(|id| id.starts_with("cr-")) else {
                continue;
            };
            out.push((
                q.name.clone(),
                r.name.clone(),
                Ask {
                    id,
                    instance_types: r.instance_types.clone(),
                    subnets: Some(q.subnets.clone()),
                    count: r.min as i32,
                    capacity_block: Some(q.capacity_type == "CAPACITY_BLOCK"),
                },
            ));
        }
    }
    out
}

/// The window of each reservation `config` names, and what they refuse.
pub async fn check(
    ctx: &OpContext,
    config: &Value,
    creating: bool,
) -> Result<PlanDetail, ProviderError> {
    let asks = asks(config);
    let mut detail = PlanDetail::default();
    if asks.is_empty() {
        return Ok(detail);
    }
    let sdk = crate::aws::config::sdk_config(ctx).await?;
    for (queue, resource, ask) in asks {
        let (lines, refusals) = reservation::check(&sdk, &ask, ctx.timeout, creating).await?;
        detail.lines.extend(
            lines
                .into_iter()
                .map(|l| format!("queue {queue}/{resource}: {l}")),
        );
        detail
            .refusals
            .extend(refusals.into_iter().map(|r| Refusal {
                message: format!("queue {queue}, compute resource {resource}: {}", r.message),
                help: r.help,
            }));
    }
    Ok(detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_resource_naming_a_reservation_is_asked_for() {
        let config = json!({"Scheduling": {"SlurmQueues": [
            {"Name": "gpu", "CapacityType": "CAPACITY_BLOCK",
             "CapacityReservationTarget": {"CapacityReservationId": "cr-queue"},
             "Networking": {"SubnetIds": ["subnet-a"]},
             "ComputeResources": [
                {"Name": "p5", "InstanceType": "p5.48xlarge", "MinCount": 2},
                {"Name": "own", "Instances": [{"InstanceType": "p4d.24xlarge"}],
                 "CapacityReservationTarget": {"CapacityReservationId": "cr-own"}}]},
            {"Name": "cpu", "ComputeResources": [{"Name": "c5", "InstanceType": "c5.xlarge",
             "CapacityReservationTarget": {"CapacityReservationResourceGroupArn": "arn:group"}}]}
        ]}});
        let asks = asks(&config);
        assert_eq!(asks.len(), 2, "{asks:?}");
        assert_eq!((asks[0].0.as_str(), asks[0].1.as_str()), ("gpu", "p5"));
        assert_eq!(asks[0].2.id, "cr-queue");
        assert_eq!(asks[0].2.count, 2);
        assert_eq!(asks[0].2.capacity_block, Some(true));
        assert_eq!(
            asks[0].2.subnets.as_deref(),
            Some(&["subnet-a".to_string()][..])
        );
        assert_eq!(asks[1].2.id, "cr-own");
        assert_eq!(asks[1].2.instance_types, ["p4d.24xlarge"]);
    }
}
