//! A node group's capacity reservation or capacity block, read while
//! planning and again just before the group is created (see
//! [`crate::aws::reservation`]): the plan shows its window and refuses a
//! reservation that cannot take the group. The plan judges what it knows
//! (often the subnets come from a step not applied yet, so their zones are
//! judged at create); create judges everything, before making anything.

use aws_config::SdkConfig;

use super::spec::{DEFAULT_DESIRED_SIZE, input};
use crate::aws::reservation::{self, Ask};
use crate::contract::{OpContext, PlanDetail, ProviderError, Refusal, Values};
use crate::inputs::{opt_int, opt_str, str_list};

/// What a node group's inputs, as far as they are known, ask of the
/// reservation they name; `None` if they name none.
pub fn ask_of(v: &Values) -> Result<Option<Ask>, ProviderError> {
    let Some(id) = opt_str(v, input::CAPACITY_RESERVATION_ID)?.filter(|id| !id.is_empty()) else {
        return Ok(None);
    };
    Ok(Some(Ask {
        id,
        instance_types: str_list(v, input::INSTANCE_TYPES)?,
        subnets: v
            .contains_key(input::SUBNET_IDS)
            .then(|| str_list(v, input::SUBNET_IDS))
            .transpose()?,
        count: opt_int(v, input::DESIRED_SIZE)?.unwrap_or(DEFAULT_DESIRED_SIZE) as i32,
        capacity_block: Some(
            opt_str(v, input::CAPACITY_TYPE)?.as_deref() == Some("CAPACITY_BLOCK"),
        ),
    }))
}

/// What a node group of an eksctl file asks of its reservation.
pub fn ask_of_spec(ng: &super::NodegroupSpec) -> Option<Ask> {
    Some(Ask {
        id: ng
            .capacity_reservation_id
            .clone()
            .filter(|id| !id.is_empty())?,
        instance_types: ng.instance_types.clone(),
        subnets: Some(ng.subnet_ids.clone()),
        count: ng.desired_size,
        capacity_block: Some(ng.on_capacity_block()),
    })
}

/// The reservation's window line and what it refuses, for the group `group`
/// (named in messages unless it is the step itself), created now
/// (`creating`) or changed.
pub async fn check(
    sdk: &SdkConfig,
    ctx: &OpContext,
    group: Option<&str>,
    ask: &Ask,
    creating: bool,
) -> Result<PlanDetail, ProviderError> {
    let (lines, refusals) = reservation::check(sdk, ask, ctx.timeout, creating).await?;
    let of_group = match group {
        Some(group) if group != ctx.step => format!("node group `{group}`: "),
        _ => String::new(),
    };
    Ok(PlanDetail {
        lines,
        refusals: refusals
            .into_iter()
            .map(|r| Refusal {
                message: format!("{of_group}{}", r.message),
                help: r.help,
            })
            .collect(),
        ..PlanDetail::default()
    })
}

pub use crate::aws::reservation::refused;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn the_ask_takes_what_is_known() {
        assert_eq!(ask_of(&values(json!({"name": "gpu"}))).unwrap(), None);
        let ask = ask_of(&values(json!({
            "capacity_reservation_id": "cr-1", "instance_types": ["p5.48xlarge"],
            "desired_size": 4, "capacity_type": "CAPACITY_BLOCK",
        })))
        .unwrap()
        .unwrap();
        assert_eq!(ask.subnets, None, "subnets not known yet");
        assert_eq!(ask.count, 4);
        assert_eq!(ask.capacity_block, Some(true));
    }
}
