//! A node group's capacity reservation or capacity block, read while
//! planning and again just before the group is created (see
//! [`crate::aws::reservation`]): the plan shows its window and refuses a
//! reservation that cannot take the group. The plan judges what it knows
//! (often the subnets come from a step not applied yet, so their zones are
//! judged at create); create judges everything, before making anything.

use aws_config::SdkConfig;

use super::spec::{DEFAULT_DESIRED_SIZE, input};
use crate::aws::reservation::{self, Wanted};
use crate::contract::{OpContext, PlanDetail, ProviderError, Refusal, Values};
use crate::inputs::{opt_int, opt_str, str_list};

/// What a node group asks of its reservation, from the inputs known so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The group's name, for messages (`None` until known).
    pub group: Option<String>,
    /// `cr-…`.
    pub id: String,
    /// Instance types (empty until known).
    pub instance_types: Vec<String>,
    /// Subnets (`None` until known).
    pub subnets: Option<Vec<String>>,
    /// Instances launched.
    pub count: i32,
    /// Whether it launches as a capacity block.
    pub capacity_block: bool,
}

impl Ask {
    /// The ask of a node group an eksctl file declares.
    pub fn of_spec(ng: &super::NodegroupSpec) -> Option<Ask> {
        Some(Ask {
            group: Some(ng.name.clone()),
            id: ng
                .capacity_reservation_id
                .clone()
                .filter(|id| !id.is_empty())?,
            instance_types: ng.instance_types.clone(),
            subnets: Some(ng.subnet_ids.clone()),
            count: ng.desired_size,
            capacity_block: ng.on_capacity_block(),
        })
    }

    /// The ask of these inputs, if they name a reservation.
    pub fn from_values(v: &Values) -> Result<Option<Ask>, ProviderError> {
        let Some(id) = opt_str(v, input::CAPACITY_RESERVATION_ID)?.filter(|id| !id.is_empty())
        else {
            return Ok(None);
        };
        Ok(Some(Ask {
            group: opt_str(v, input::NAME)?,
            id,
            instance_types: str_list(v, input::INSTANCE_TYPES)?,
            subnets: v
                .contains_key(input::SUBNET_IDS)
                .then(|| str_list(v, input::SUBNET_IDS))
                .transpose()?,
            count: opt_int(v, input::DESIRED_SIZE)?.unwrap_or(DEFAULT_DESIRED_SIZE) as i32,
            capacity_block: opt_str(v, input::CAPACITY_TYPE)?.as_deref() == Some("CAPACITY_BLOCK"),
        }))
    }
}

/// The reservation's window line and what it refuses, for `ask`, created
/// now (`creating`) or changed.
pub async fn check(
    sdk: &SdkConfig,
    ctx: &OpContext,
    ask: &Ask,
    creating: bool,
) -> Result<PlanDetail, ProviderError> {
    let mut detail = PlanDetail::default();
    // A step's own group is the step; a group of an eksctl file is named.
    let of_group = match ask.group.as_deref() {
        Some(group) if group != ctx.step => format!("node group `{group}`: "),
        _ => String::new(),
    };
    let Some(found) = reservation::describe(sdk, &ask.id).await? else {
        detail.refusals.push(Refusal {
            message: format!(
                "{of_group}capacity reservation {} does not exist in {}",
                ask.id,
                sdk.region()
                    .map_or("this region".to_string(), |r| r.to_string())
            ),
            help:
                "name a reservation of the step's region (aws ec2 describe-capacity-reservations)"
                    .into(),
        });
        return Ok(detail);
    };
    // Subnets EC2 cannot describe are the node group's problem, told when
    // it is made: here only the zone check is left out.
    let zones = match &ask.subnets {
        Some(subnets) => match reservation::zones_of(sdk, subnets).await {
            Ok(zones) => zones,
            Err(e) => {
                detail.lines.push(format!(
                    "(the zones of its subnets could not be read: {}; the reservation's zone is checked when the group is made)",
                    e.message
                ));
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    let want = Wanted {
        instance_types: &ask.instance_types,
        zones: &zones,
        count: ask.count,
        capacity_block: ask.capacity_block,
        must_last: ctx.timeout,
        creating,
    };
    detail.lines.push(reservation::window_line(&found));
    detail.refusals = reservation::judge(&found, &want, std::time::SystemTime::now())
        .into_iter()
        .map(|r| Refusal {
            message: format!("{of_group}{}", r.message),
            help: r.help,
        })
        .collect();
    Ok(detail)
}

/// The error create fails with when the reservation refuses the group:
/// every reason, before anything is made.
pub fn refused(refusals: &[Refusal]) -> ProviderError {
    let message = refusals
        .iter()
        .map(|r| r.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let help = refusals
        .iter()
        .map(|r| r.help.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    ProviderError::bad_input(message)
        .with_help(help)
        .before_acting()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn the_ask_takes_what_is_known() {
        assert_eq!(
            Ask::from_values(&values(json!({"name": "gpu"}))).unwrap(),
            None
        );
        let ask = Ask::from_values(&values(json!({
            "capacity_reservation_id": "cr-1", "instance_types": ["p5.48xlarge"],
            "desired_size": 4, "capacity_type": "CAPACITY_BLOCK",
        })))
        .unwrap()
        .unwrap();
        assert_eq!(ask.subnets, None, "subnets not known yet");
        assert_eq!(ask.group, None);
        assert_eq!(ask.count, 4);
        assert!(ask.capacity_block);
    }
}
