//! Looking at a stack and waiting for it: status, outputs, tags, and the
//! events that explain what happened.

use std::collections::HashSet;

use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::{Stack, StackEvent};
use serde_json::Value;

use crate::aws::poll::{Pace, Waiter};
use crate::aws::{error, pacing};
use crate::contract::{OpContext, ProviderError, Reporter, Values};

/// The resource type of a stack's own events.
const STACK: &str = "AWS::CloudFormation::Stack";

/// The stack called (or with the id) `stack`, if it exists. A deleted stack
/// looked up by id comes back with status `DELETE_COMPLETE`.
pub(super) async fn describe(client: &Client, stack: &str) -> Result<Option<Stack>, ProviderError> {
    match client.describe_stacks().stack_name(stack).send().await {
        Ok(out) => Ok(out.stacks().first().cloned()),
        Err(e)
            if error::code(&e) == Some("ValidationError")
                && e.as_service_error()
                    .and_then(|s| aws_sdk_cloudformation::error::ProvideErrorMetadata::message(s))
                    .is_some_and(|m| m.contains("does not exist")) =>
        {
            Ok(None)
        }
        Err(e) => Err(error::aws(&format!("describe stack `{stack}`"), e)),
    }
}

/// The stack's status, as CloudFormation writes it.
pub(super) fn status(stack: &Stack) -> &str {
    stack.stack_status().map_or("UNKNOWN", |s| s.as_str())
}

/// Whether `status` is a step on the way to another. `REVIEW_IN_PROGRESS`
/// is not: a stack made by a change set that was never executed stays in
/// it until someone executes or deletes it (CloudFormation's stack status
/// codes), so waiting for it to end would wait until the step's timeout.
pub(super) fn in_progress(status: &str) -> bool {
    status.ends_with("_IN_PROGRESS") && status != "REVIEW_IN_PROGRESS"
}

/// The value of the stack's tag `key`.
pub(super) fn tag<'a>(stack: &'a Stack, key: &str) -> Option<&'a str> {
    stack
        .tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// The stack's outputs by key, plus `stack_name` and `stack_id` (output
/// keys are alphanumeric, so these never clash with a template's).
pub(super) fn outputs(stack: &Stack) -> Values {
    let mut out: Values = stack
        .outputs()
        .iter()
        .filter_map(|o| {
            Some((
                o.output_key()?.to_string(),
                Value::String(o.output_value().unwrap_or_default().to_string()),
            ))
        })
        .collect();
    for (key, value) in [
        ("stack_name", stack.stack_name()),
        ("stack_id", stack.stack_id()),
    ] {
        if let Some(v) = value {
            out.insert(key.into(), Value::String(v.to_string()));
        }
    }
    out
}

/// One event as a progress line: `Vpc (AWS::EC2::VPC) CREATE_FAILED: reason`.
fn event_line(e: &StackEvent) -> String {
    let mut line = format!(
        "{} ({}) {}",
        e.logical_resource_id().unwrap_or("?"),
        e.resource_type().unwrap_or("?"),
        e.resource_status().map_or("?", |s| s.as_str())
    );
    if let Some(reason) = e.resource_status_reason().filter(|r| !r.is_empty()) {
        line.push_str(": ");
        line.push_str(reason);
    }
    line
}

/// The stack's most recent events (newest first), one page.
async fn events(client: &Client, stack: &str) -> Result<Vec<StackEvent>, ProviderError> {
    client
        .describe_stack_events()
        .stack_name(stack)
        .send()
        .await
        .map(|out| out.stack_events().to_vec())
        .map_err(|e| error::aws(&format!("read the events of stack `{stack}`"), e))
}

/// When an event happened, in seconds since the epoch.
fn when(e: &StackEvent) -> i64 {
    e.timestamp().map_or(0, |t| t.secs())
}

/// The reason of the first `*_FAILED` event since `since` (seconds since the
/// epoch), which is the cause; the later ones are its consequences.
pub(super) async fn first_failure(client: &Client, stack: &str, since: i64) -> Option<String> {
    let events = events(client, stack).await.ok()?;
    events
        .iter()
        .rev()
        .filter(|e| when(e) >= since)
        .find(|e| {
            e.resource_status()
                .is_some_and(|s| s.as_str().ends_with("_FAILED"))
                && e.resource_status_reason()
                    .is_some_and(|r| !r.is_empty() && !r.contains("Resource creation cancelled"))
        })
        .map(|e| {
            format!(
                "{} ({}): {}",
                e.logical_resource_id().unwrap_or("?"),
                e.resource_type().unwrap_or("?"),
                e.resource_status_reason().unwrap_or_default()
            )
        })
}

/// The stack's recent events, to leave out of the next wait's report (best
/// effort: none when they cannot be read).
pub(super) async fn seen_events(client: &Client, stack: &str) -> Seen {
    match events(client, stack).await {
        Ok(events) => Seen {
            ids: events
                .iter()
                .filter_map(|e| e.event_id().map(str::to_string))
                .collect(),
            deleting: None,
        },
        Err(_) => Seen::default(),
    }
}

/// What the wait for the delete of stack `target`, described as `current`
/// just before the `DeleteStack`, leaves out: the events of the operations
/// before the delete. A stack that is not already deleting (or failed to
/// delete) is settled, so its events before the delete end with its last
/// operation's stack event and the wait tells them apart itself, with no
/// read now; otherwise they are read now ([`seen_events`]).
pub(super) async fn seen_before_delete(client: &Client, target: &str, current: &Stack) -> Seen {
    match current.stack_id() {
        Some(id) if !status(current).starts_with("DELETE_") => Seen {
            ids: HashSet::new(),
            deleting: Some(id.to_string()),
        },
        _ => seen_events(client, target).await,
    }
}

/// The events a wait does not show: those shown or read before, and for a
/// delete, those of the stack's operations before it.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// The ids of the events left out.
    ids: HashSet<String>,
    /// The id of the stack being deleted, until a look has found where the
    /// delete's events begin (and put the older ones in `ids`).
    deleting: Option<String>,
}

impl Seen {
    /// Once `recent` (newest first) shows where the delete began, leaves
    /// out every event older than its start from then on.
    fn leave_out_before_delete(&mut self, recent: &[StackEvent]) {
        let Some(id) = &self.deleting else { return };
        let Some(start) = delete_start(recent, id) else {
            return;
        };
        for e in &recent[start..] {
            self.ids
                .insert(e.event_id().unwrap_or_default().to_string());
        }
        self.deleting = None;
    }
}

/// The index in `recent` (newest first) of the newest event from before
/// the delete of stack `id` began: the events before it are the delete's
/// own. The delete begins with the stack's own `DELETE_IN_PROGRESS`; a
/// stack event of another status than the delete's (`DELETE_COMPLETE`,
/// `DELETE_FAILED`) ended the operation before it. `None`: neither is in
/// `recent`, which then holds only the delete's events.
fn delete_start(recent: &[StackEvent], id: &str) -> Option<usize> {
    recent.iter().enumerate().find_map(|(i, e)| {
        let own = e.resource_type() == Some(STACK) && e.physical_resource_id() == Some(id);
        match e.resource_status().map(|s| s.as_str()) {
            _ if !own => None,
            Some("DELETE_COMPLETE" | "DELETE_FAILED") => None,
            Some("DELETE_IN_PROGRESS") => Some(i + 1),
            _ => Some(i),
        }
    })
}

/// How to pace a wait for a stack of `template` (its create) or of any
/// change (`None`), giving up no sooner than the step's timeout.
pub(super) fn pace(ctx: &OpContext, template: Option<&str>) -> Pace {
    template
        .map_or(Pace::LONG, |t| Pace::expecting(pacing::expected::stack(t)))
        .within(ctx.timeout)
}

/// How to pace a wait for a stack's delete, giving up no sooner than the
/// step's timeout.
pub(super) fn delete_pace(ctx: &OpContext) -> Pace {
    Pace::expecting(pacing::expected::STACK_DELETE).within(ctx.timeout)
}

/// Waits until the stack is no longer in progress, showing its new events
/// (those after `since`, seconds since the epoch, and not in `seen`) as they
/// come. Returns the settled stack, or `None` once it is gone.
pub(super) async fn settle(
    client: &Client,
    pace: Pace,
    reporter: &dyn Reporter,
    stack: &str,
    since: i64,
    mut seen: Seen,
) -> Result<Option<Stack>, ProviderError> {
    let mut waiter = Waiter::new(pace, reporter, format!("stack `{stack}`"));
    loop {
        let look = async {
            // The stack and its events are asked for at once: a look costs
            // one round trip, not two (a stack that is gone has no events
            // to show, and their error is then not one).
            let (found, recent) = tokio::join!(describe(client, stack), events(client, stack));
            let found = found?;
            let fresh = match &found {
                Some(_) => fresh_events(recent?, since, &mut seen),
                None => Vec::new(),
            };
            Ok::<_, ProviderError>((found, fresh))
        };
        match look.await {
            Ok((found, fresh)) => {
                waiter.looked();
                let ended_shown = fresh.iter().any(stack_ended);
                waiter.report(fresh.iter().map(event_line));
                match found {
                    None => return Ok(None),
                    Some(s) if !in_progress(status(&s)) => {
                        // The events read beside this look may predate the
                        // status it saw: without the stack's own last event
                        // they are read once more, so that what ended it is
                        // shown (best effort).
                        if !ended_shown && let Ok(recent) = events(client, stack).await {
                            let more = fresh_events(recent, since, &mut seen);
                            waiter.report(more.iter().map(event_line));
                        }
                        return Ok(Some(s));
                    }
                    Some(s) => waiter.report([format!("stack `{stack}` is {}", status(&s))]),
                }
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

/// The `recent` events (newest first, as CloudFormation lists them) from
/// `since` on that `seen` does not leave out, oldest first; each is added
/// to `seen`.
fn fresh_events(recent: Vec<StackEvent>, since: i64, seen: &mut Seen) -> Vec<StackEvent> {
    seen.leave_out_before_delete(&recent);
    let mut fresh: Vec<StackEvent> = recent
        .into_iter()
        .filter(|e| when(e) >= since)
        .filter(|e| e.event_id().is_some_and(|id| !seen.ids.contains(id)))
        .collect();
    fresh.reverse();
    for e in &fresh {
        seen.ids
            .insert(e.event_id().unwrap_or_default().to_string());
    }
    fresh
}

/// Whether `event` is the stack's own, in a status that ends an operation.
fn stack_ended(event: &StackEvent) -> bool {
    event.resource_type() == Some(STACK)
        && event
            .resource_status()
            .is_some_and(|s| !s.as_str().ends_with("_IN_PROGRESS"))
}

/// The error for a stack that settled in `status` instead of what was asked,
/// with the first failure's reason when there is one.
pub(super) async fn failed(
    client: &Client,
    name: &str,
    doing: &str,
    stack: &Stack,
    since: i64,
) -> ProviderError {
    let id = stack.stack_id().unwrap_or(name);
    let mut message = format!("stack `{name}` failed to {doing}: it is {}", status(stack));
    match first_failure(client, id, since).await {
        Some(reason) => {
            message.push_str("; first failure: ");
            message.push_str(&reason);
        }
        None => {
            if let Some(reason) = stack.stack_status_reason().filter(|r| !r.is_empty()) {
                message.push_str(": ");
                message.push_str(reason);
            }
        }
    }
    ProviderError::fatal(message).with_help("the failed resources and their reasons are above (and in the stack's events); fix the template or its parameters and apply again: flow deletes a stack whose create failed before it creates it anew")
}

/// Seconds since the epoch now.
pub(super) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Every resource of stack `stack`, every page of `ListStackResources`.
pub(super) async fn resources(
    client: &Client,
    stack: &str,
) -> Result<Vec<aws_sdk_cloudformation::types::StackResourceSummary>, ProviderError> {
    let mut found = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page = client
            .list_stack_resources()
            .stack_name(stack)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws(&format!("list the resources of stack `{stack}`"), e))?;
        found.extend(page.stack_resource_summaries().iter().cloned());
        match page.next_token() {
            Some(t) => next = Some(t.to_string()),
            None => return Ok(found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudformation::types::{Output, ResourceStatus, StackStatus, Tag};

    #[test]
    fn reads_outputs_tags_and_status() {
        let stack = Stack::builder()
            .stack_name("vpc")
            .stack_status(StackStatus::CreateInProgress)
            .outputs(
                Output::builder()
                    .output_key("VpcId")
                    .output_value("vpc-1")
                    .build(),
            )
            .tags(Tag::builder().key("flow:token").value("t1").build())
            .build();
        assert_eq!(status(&stack), "CREATE_IN_PROGRESS");
        assert!(in_progress(status(&stack)));
        assert!(!in_progress("ROLLBACK_COMPLETE"));
        assert!(!in_progress("REVIEW_IN_PROGRESS"));
        assert!(in_progress("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS"));
        assert_eq!(tag(&stack, "flow:token"), Some("t1"));
        assert_eq!(outputs(&stack)["VpcId"], "vpc-1");
    }

    /// An event `id` of resource `logical` (the stack itself when it is
    /// `stack`) in `status`, at second `at`.
    fn event(id: &str, logical: &str, status: &str, at: i64) -> StackEvent {
        let own = logical == "stack";
        StackEvent::builder()
            .event_id(id)
            .logical_resource_id(logical)
            .physical_resource_id(if own { "arn:stack/1" } else { "h-1" })
            .resource_type(if own { STACK } else { "AWS::EC2::VPC" })
            .resource_status(ResourceStatus::from(status))
            .timestamp(aws_sdk_cloudformation::primitives::DateTime::from_secs(at))
            .build()
    }

    /// The ids of what `fresh_events` shows of `recent` (newest first).
    fn shown(recent: &[StackEvent], seen: &mut Seen) -> Vec<String> {
        fresh_events(recent.to_vec(), 0, seen)
            .iter()
            .map(|e| e.event_id().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn a_delete_shows_its_own_events_and_none_of_the_create_before_it() {
        let created = [
            event("c3", "stack", "CREATE_COMPLETE", 12),
            event("c2", "Vpc", "CREATE_COMPLETE", 11),
            event("c1", "stack", "CREATE_IN_PROGRESS", 10),
        ];
        let deleting = || Seen {
            ids: HashSet::new(),
            deleting: Some("arn:stack/1".into()),
        };
        // The delete's start in sight at the first look.
        let mut seen = deleting();
        let mut first = vec![
            event("d2", "Vpc", "DELETE_IN_PROGRESS", 13),
            event("d1", "stack", "DELETE_IN_PROGRESS", 13),
        ];
        first.extend(created.iter().cloned());
        assert_eq!(shown(&first, &mut seen), ["d1", "d2"]);
        let mut last = vec![
            event("d4", "stack", "DELETE_COMPLETE", 14),
            event("d3", "Vpc", "DELETE_COMPLETE", 14),
        ];
        last.extend(first.iter().cloned());
        assert_eq!(shown(&last, &mut seen), ["d3", "d4"]);
        // The events listed late: the create's end is in sight, not the
        // delete's start; what comes after it is the delete's.
        let mut seen = deleting();
        assert!(shown(&created, &mut seen).is_empty());
        assert_eq!(shown(&last, &mut seen), ["d1", "d2", "d3", "d4"]);
        // A nested stack's events (another id) are not the stack's own.
        let mut seen = deleting();
        let nested = StackEvent::builder()
            .event_id("n1")
            .physical_resource_id("arn:stack/nested")
            .resource_type(STACK)
            .resource_status(ResourceStatus::DeleteInProgress)
            .timestamp(aws_sdk_cloudformation::primitives::DateTime::from_secs(13))
            .build();
        let mut with_nested = vec![nested];
        with_nested.extend(created.iter().cloned());
        assert_eq!(shown(&with_nested, &mut seen), ["n1"]);
        // A page of the delete's events alone (a big stack): all shown.
        let mut seen = deleting();
        assert_eq!(shown(&last[..2], &mut seen), ["d3", "d4"]);
    }

    #[test]
    fn event_lines_name_the_resource_and_the_reason() {
        let e = StackEvent::builder()
            .logical_resource_id("Subnet")
            .resource_type("AWS::EC2::Subnet")
            .resource_status(ResourceStatus::CreateFailed)
            .resource_status_reason("The CIDR '10.0.0.0/8' is invalid.")
            .build();
        assert_eq!(
            event_line(&e),
            "Subnet (AWS::EC2::Subnet) CREATE_FAILED: The CIDR '10.0.0.0/8' is invalid."
        );
    }
}
