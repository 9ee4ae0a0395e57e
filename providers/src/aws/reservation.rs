//! Capacity reservations read while planning: an On-Demand Capacity
//! Reservation (`cr-…`) or a capacity block that a node group (or another
//! step) launches into is checked against what the step asks for before
//! anything is made, so a reservation in the wrong zone, for the wrong
//! type, short of instances or ending too soon fails the plan, not the
//! apply an hour later.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;

use super::error;
use crate::contract::{ProviderError, Refusal};

/// What the step asks of its reservation.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    /// The instance types the step launches (any one must match).
    pub instance_types: &'a [String],
    /// The availability zones the step launches in (the reservation's must
    /// be one of them); empty when not known.
    pub zones: &'a [String],
    /// How many instances it launches into the reservation.
    pub count: i32,
    /// Whether the step launches as a capacity block (`CAPACITY_BLOCK`);
    /// `None` when not known yet (then not judged).
    pub capacity_block: Option<bool>,
    /// How long the step may take (its `timeout`): the reservation must
    /// last that long from now.
    pub must_last: Option<Duration>,
    /// Whether the step is created now (the reservation's *available*
    /// count must cover it) rather than changed (its total must).
    pub creating: bool,
}

/// A reservation as EC2 describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    /// `cr-…`.
    pub id: String,
    /// `p5.48xlarge`.
    pub instance_type: String,
    /// `us-east-1a`.
    pub zone: String,
    /// `Linux/UNIX`, `Windows`, …
    pub platform: String,
    /// `active`, `scheduled`, `pending`, `expired`, …
    pub state: String,
    /// `default` or `capacity-block`.
    pub kind: String,
    /// Instances it can still take.
    pub available: i32,
    /// Instances it holds in all.
    pub total: i32,
    /// When it starts (capacity blocks, future-dated reservations).
    pub start: Option<SystemTime>,
    /// When it ends (`None`: until cancelled).
    pub end: Option<SystemTime>,
}

/// Why `r` cannot serve `want` (empty: it can), judged at `now`.
pub fn judge(r: &Reservation, want: &Wanted<'_>, now: SystemTime) -> Vec<Refusal> {
    let mut out = Vec::new();
    let id = &r.id;
    let mut refuse = |message: String, help: String| out.push(Refusal { message, help });
    if !want.instance_types.is_empty() && !want.instance_types.contains(&r.instance_type) {
        refuse(
            format!(
                "capacity reservation {id} is for {}, the step launches {}",
                r.instance_type,
                want.instance_types.join(", ")
            ),
            format!(
                "launch {} into it, or name a reservation for the step's type",
                r.instance_type
            ),
        );
    }
    if !want.zones.is_empty() && !want.zones.contains(&r.zone) {
        refuse(
            format!(
                "capacity reservation {id} is in {}, the step's subnets are in {}",
                r.zone,
                want.zones.join(", ")
            ),
            format!("give the step a subnet in {}", r.zone),
        );
    }
    if !r.platform.starts_with("Linux/UNIX") {
        refuse(
            format!(
                "capacity reservation {id} is for the platform {}, the nodes run Linux/UNIX",
                r.platform
            ),
            "name a Linux/UNIX reservation".into(),
        );
    }
    if let Some(block) = want.capacity_block
        && block != (r.kind == "capacity-block")
    {
        refuse(
            if block {
                format!("{id} is not a capacity block, but the step launches as one (CAPACITY_BLOCK)")
            } else {
                format!("{id} is a capacity block, but the step does not launch as one")
            },
            "set the step's capacity type to match the reservation (CAPACITY_BLOCK for a block, ON_DEMAND for a cr-… reservation)".into(),
        );
    }
    let deadline = want.must_last.map(|d| now + d);
    let starts_in_time = match (r.start, deadline) {
        (Some(start), Some(deadline)) => start <= deadline,
        (Some(start), None) => start <= now,
        (None, _) => true,
    };
    match r.state.as_str() {
        "active" => {}
        "scheduled" if r.kind == "capacity-block" && starts_in_time => {}
        "scheduled" if r.kind == "capacity-block" => refuse(
            format!(
                "capacity block {id} starts {}, after the step's timeout runs out",
                when(r.start)
            ),
            "raise the step's `timeout` to reach the block's start, or apply closer to it".into(),
        ),
        other => refuse(
            format!("capacity reservation {id} is {other}, not active"),
            "name an active reservation (aws ec2 describe-capacity-reservations)".into(),
        ),
    }
    let have = if want.creating { r.available } else { r.total };
    if have < want.count {
        refuse(
            format!(
                "capacity reservation {id} has {have} {} instance(s){}, the step launches {}",
                r.instance_type,
                if want.creating {
                    " available"
                } else {
                    " in all"
                },
                want.count
            ),
            format!("launch at most {have}, or grow the reservation"),
        );
    }
    if let Some(end) = r.end {
        let need = deadline.unwrap_or(now);
        if end <= need {
            refuse(
                format!(
                    "capacity reservation {id} ends {}, before the step's timeout runs out ({})",
                    when(Some(end)),
                    when(Some(need))
                ),
                "extend the reservation, or lower the step's `timeout` if it is safe".into(),
            );
        }
    }
    out
}

/// The error create fails with when the reservation refuses the group:
/// every reason, before anything is made.
pub fn refused(refusals: &[Refusal]) -> ProviderError {
    let join =
        |part: fn(&Refusal) -> &str| refusals.iter().map(part).collect::<Vec<_>>().join("; ");
    ProviderError::bad_input(join(|r| &r.message))
        .with_help(join(|r| &r.help))
        .before_acting()
}

/// The line the plan shows: `capacity reservation cr-…: 4 × p5.48xlarge in
/// us-east-1a, active, 2026-11-26T10:00:00Z → 2026-12-03T10:00:00Z`.
pub fn window_line(r: &Reservation) -> String {
    format!(
        "{} {}: {} of {} × {} available in {}, {}, {} → {}",
        if r.kind == "capacity-block" {
            "capacity block"
        } else {
            "capacity reservation"
        },
        r.id,
        r.available,
        r.total,
        r.instance_type,
        r.zone,
        r.state,
        r.start.map_or("now".to_string(), |s| when(Some(s))),
        r.end
            .map_or("until cancelled".to_string(), |e| when(Some(e))),
    )
}

fn when(t: Option<SystemTime>) -> String {
    t.map_or("now".to_string(), |t| {
        humantime::format_rfc3339_seconds(t).to_string()
    })
}

/// What a step launches into reservation `id`, as far as it is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// `cr-…`.
    pub id: String,
    /// Instance types (empty until known).
    pub instance_types: Vec<String>,
    /// Subnets (`None` until known).
    pub subnets: Option<Vec<String>>,
    /// Instances launched into it.
    pub count: i32,
    /// Whether the step launches as a capacity block (`None`: not known).
    pub capacity_block: Option<bool>,
}

/// Reads `ask`'s reservation and judges it: the plan's line for it (its
/// window) and what it refuses. `must_last` is the step's timeout,
/// `creating` whether the step is made now.
pub async fn check(
    sdk: &SdkConfig,
    ask: &Ask,
    must_last: Option<Duration>,
    creating: bool,
) -> Result<(Vec<String>, Vec<Refusal>), ProviderError> {
    let Some(found) = describe(sdk, &ask.id).await? else {
        let refusal = Refusal {
            message: format!(
                "capacity reservation {} does not exist in {}",
                ask.id,
                sdk.region()
                    .map_or("this region".to_string(), |r| r.to_string())
            ),
            help:
                "name a reservation of the step's region (aws ec2 describe-capacity-reservations)"
                    .into(),
        };
        return Ok((Vec::new(), vec![refusal]));
    };
    let mut lines = vec![window_line(&found)];
    // Subnets EC2 cannot describe are the step's own problem, told when it
    // is made: here only the zone check is left out.
    let zones = match &ask.subnets {
        Some(subnets) => match zones_of(sdk, subnets).await {
            Ok(zones) => zones,
            Err(e) => {
                lines.push(format!(
                    "(the zones of its subnets could not be read: {}; the reservation's zone is not checked)",
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
        must_last,
        creating,
    };
    Ok((lines, judge(&found, &want, SystemTime::now())))
}

/// The reservation `id`, or `None` if EC2 does not know it.
pub async fn describe(sdk: &SdkConfig, id: &str) -> Result<Option<Reservation>, ProviderError> {
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let out = match ec2
        .describe_capacity_reservations()
        .capacity_reservation_ids(id)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) if error::code(&e).is_some_and(|c| c.contains("NotFound")) => return Ok(None),
        Err(e) => {
            return Err(error::aws(
                &format!("describe capacity reservation {id}"),
                e,
            ));
        }
    };
    let time = |t: Option<&aws_sdk_ec2::primitives::DateTime>| {
        t.and_then(|t| SystemTime::try_from(*t).ok())
    };
    Ok(out.capacity_reservations().first().map(|r| Reservation {
        id: r.capacity_reservation_id().unwrap_or(id).to_string(),
        instance_type: r.instance_type().unwrap_or_default().to_string(),
        zone: r.availability_zone().unwrap_or_default().to_string(),
        platform: r
            .instance_platform()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        state: r
            .state()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        kind: r
            .reservation_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_else(|| "default".into()),
        available: r.available_instance_count().unwrap_or(0),
        total: r.total_instance_count().unwrap_or(0),
        start: time(r.start_date()),
        end: time(r.end_date()),
    }))
}

/// The availability zones of `subnets`, without repeats.
pub async fn zones_of(sdk: &SdkConfig, subnets: &[String]) -> Result<Vec<String>, ProviderError> {
    if subnets.is_empty() {
        return Ok(Vec::new());
    }
    let mut zones: Vec<String> = Vec::new();
    for (_, zone) in super::ec2::Ec2::new(sdk).subnet_zones(subnets).await? {
        if !zones.contains(&zone) {
            zones.push(zone);
        }
    }
    Ok(zones)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn p5(state: &str, kind: &str) -> Reservation {
        Reservation {
            id: "cr-0123".into(),
            instance_type: "p5.48xlarge".into(),
            zone: "us-east-1a".into(),
            platform: "Linux/UNIX".into(),
            state: state.into(),
            kind: kind.into(),
            available: 4,
            total: 4,
            start: Some(at(1_000)),
            end: Some(at(1_000 + 7 * 86_400)),
        }
    }

    fn wanted<'a>(types: &'a [String], zones: &'a [String], count: i32) -> Wanted<'a> {
        Wanted {
            instance_types: types,
            zones,
            count,
            capacity_block: Some(false),
            must_last: Some(Duration::from_secs(3_600)),
            creating: true,
        }
    }

    #[test]
    fn a_matching_active_reservation_passes() {
        let types = ["p5.48xlarge".to_string()];
        let zones = ["us-east-1a".to_string(), "us-east-1b".to_string()];
        assert!(
            judge(
                &p5("active", "default"),
                &wanted(&types, &zones, 4),
                at(2_000)
            )
            .is_empty()
        );
    }

    #[test]
    fn each_mismatch_is_refused_with_its_reason() {
        let types = ["p4d.24xlarge".to_string()];
        let zones = ["us-east-1b".to_string()];
        let mut r = p5("expired", "default");
        r.platform = "Windows".into();
        let refused = judge(&r, &wanted(&types, &zones, 5), at(2_000));
        let text: Vec<&str> = refused.iter().map(|r| r.message.as_str()).collect();
        assert_eq!(refused.len(), 5, "{text:#?}");
        assert!(text[0].contains("is for p5.48xlarge, the step launches p4d.24xlarge"));
        assert!(text[1].contains("is in us-east-1a, the step's subnets are in us-east-1b"));
        assert!(text[2].contains("platform Windows"));
        assert!(text[3].contains("is expired, not active"));
        assert!(text[4].contains("has 4 p5.48xlarge instance(s) available, the step launches 5"));
    }

    #[test]
    fn a_reservation_ending_within_the_timeout_is_refused() {
        let types = ["p5.48xlarge".to_string()];
        let r = p5("active", "default");
        let end = 1_000 + 7 * 86_400;
        let refused = judge(&r, &wanted(&types, &[], 1), at(end - 60));
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0]
                .message
                .contains("ends 1970-01-08T00:16:40Z, before the step's timeout runs out"),
            "{}",
            refused[0].message
        );
        let mut forever = r.clone();
        forever.end = None;
        assert!(judge(&forever, &wanted(&types, &[], 1), at(end)).is_empty());
    }

    #[test]
    fn a_scheduled_block_passes_only_if_it_starts_within_the_timeout() {
        let types = ["p5.48xlarge".to_string()];
        let block = p5("scheduled", "capacity-block");
        let mut want = wanted(&types, &[], 4);
        want.capacity_block = Some(true);
        assert!(
            judge(&block, &want, at(0)).is_empty(),
            "starts 1000 s from now"
        );
        want.must_last = Some(Duration::from_secs(600));
        let late = judge(&block, &want, at(0));
        assert_eq!(late.len(), 1);
        assert!(
            late[0]
                .message
                .contains("starts 1970-01-01T00:16:40Z, after the step's timeout")
        );
        want.capacity_block = Some(false);
        assert!(
            judge(&block, &want, at(2_000))
                .iter()
                .any(|r| r.message.contains("is a capacity block"))
        );
    }

    #[test]
    fn an_update_counts_the_whole_reservation() {
        let types = ["p5.48xlarge".to_string()];
        let mut r = p5("active", "default");
        r.available = 0;
        let mut want = wanted(&types, &[], 4);
        want.creating = false;
        assert!(judge(&r, &want, at(2_000)).is_empty());
        want.creating = true;
        assert_eq!(judge(&r, &want, at(2_000)).len(), 1);
    }

    #[test]
    fn the_window_line_names_type_zone_state_and_dates() {
        assert_eq!(
            window_line(&p5("active", "default")),
            "capacity reservation cr-0123: 4 of 4 × p5.48xlarge available in us-east-1a, active, 1970-01-01T00:16:40Z → 1970-01-08T00:16:40Z"
        );
    }
}
