//! Before a command reads or changes anything in AWS: can it reach AWS at
//! all? One check for each (region, profile) of the AWS steps it is about
//! to touch (`flow_providers::aws::access::check`: the region is set, the
//! credential chain yields credentials), so that missing credentials or a
//! missing region stop plan, apply, destroy and refresh the same way: one
//! error before any step runs, naming what to set, never a retried step.

use std::collections::BTreeMap;

use flow_providers::Registry;
use flow_state::StepRecord;

use super::model::{Action, Plan};
use crate::lang::load::Loaded;

/// One AWS step a command is about to touch, and where it would run.
#[derive(Debug, Clone)]
pub struct AwsStep {
    /// The step's address.
    pub step: String,
    /// Its region (`None`: the SDK's default chain decides).
    pub region: Option<String>,
    /// The workflow's profile (`None`: `AWS_PROFILE` or `default`).
    pub profile: Option<String>,
}

/// The header of the error the lines of [`unreachable`] go under.
pub const HEADER: &str = "cannot reach the cloud, so nothing was read or changed:";

/// What to do, under the lines.
pub const HELP: &str = "set what the lines above name (`aws sts get-caller-identity` with the same \
     settings shows what flow would use), or plan from state alone with `flow plan --refresh=false`";

/// One line for each (region, profile) whose check failed, naming the
/// steps it holds; empty when every one can reach AWS.
pub async fn unreachable(steps: Vec<AwsStep>) -> Vec<String> {
    let mut places: BTreeMap<(Option<String>, Option<String>), Vec<String>> = BTreeMap::new();
    for s in steps {
        places
            .entry((s.region, s.profile))
            .or_default()
            .push(s.step);
    }
    let mut lines = Vec::new();
    for ((region, profile), steps) in places {
        if let Err(e) = flow_providers::aws::access::check(region.clone(), profile.clone()).await {
            lines.push(format!(
                "  {} ({} step{}: {}): {}",
                place(region.as_deref(), profile.as_deref()),
                steps.len(),
                if steps.len() == 1 { "" } else { "s" },
                shortened(&steps),
                e.message
            ));
        }
    }
    lines
}

/// The AWS steps `plan` changes (creates, updates, replaces, deletes), each
/// in its region: the workflow's for its steps, the recorded one for a step
/// that left the file; the profile is the workflow's.
pub fn changed(
    plan: &Plan,
    loaded: Option<&Loaded>,
    records: &BTreeMap<String, StepRecord>,
    registry: &Registry,
) -> Vec<AwsStep> {
    plan.changes
        .iter()
        .filter(|c| c.action != Action::NoOp)
        .filter(|c| registry.get(&c.provider).is_some_and(|p| p.uses_aws()))
        .map(|c| {
            let decl = loaded.and_then(|l| l.workflow.step(&c.step).map(|d| (l, d)));
            let region = match decl {
                Some((l, d)) if c.action != Action::Delete => l.region_of(d),
                _ => records
                    .get(&c.step)
                    .and_then(|r| r.region.clone())
                    .or_else(|| loaded.and_then(|l| l.workflow.region.clone())),
            };
            AwsStep {
                step: c.step.clone(),
                region,
                profile: loaded.and_then(|l| l.workflow.profile.clone()),
            }
        })
        .collect()
}

/// [`unreachable`] as the error a command stops with, if any line.
pub async fn check(steps: Vec<AwsStep>) -> Result<(), (String, &'static str)> {
    let lines = unreachable(steps).await;
    if lines.is_empty() {
        return Ok(());
    }
    Err((format!("{HEADER}\n{}", lines.join("\n")), HELP))
}

/// `region us-east-1, profile ml` as far as they are named.
fn place(region: Option<&str>, profile: Option<&str>) -> String {
    let region = region.map_or("the default region".to_string(), |r| format!("region {r}"));
    match profile {
        Some(p) => format!("AWS in {region}, profile {p}"),
        None => format!("AWS in {region}"),
    }
}

/// The first few step names, and how many more.
fn shortened(steps: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut out = steps
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if steps.len() > SHOWN {
        out.push_str(&format!(" and {} more", steps.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_and_step_lists_read_as_words() {
        assert_eq!(place(None, None), "AWS in the default region");
        assert_eq!(
            place(Some("us-west-2"), Some("ml")),
            "AWS in region us-west-2, profile ml"
        );
        let steps: Vec<String> = (1..=6).map(|i| format!("s{i}")).collect();
        assert_eq!(shortened(&steps), "s1, s2, s3, s4 and 2 more");
        assert_eq!(shortened(&steps[..1]), "s1");
    }
}
