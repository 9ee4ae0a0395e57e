//! Finding EKS clusters and node groups, and waiting for them, in one way
//! for both: a look describes the object (absent is `None`), a condition
//! typed on the SDK's status enums says whether it is done, still going or
//! failed (kube-rs's `await_condition` habit), and health issues read the
//! same whatever the object.

use std::future::Future;
use std::time::Duration;

use aws_sdk_eks::types::{Cluster, ClusterStatus, Nodegroup, NodegroupStatus};
use tokio::time::Instant;

use super::shared_error as error;
use super::shared_poll::{Pace, Step, until};
use crate::contract::{OpContext, ProviderError};

/// What one look at an object says about the wait.
#[derive(Debug)]
pub(super) enum Condition {
    /// The object is where the wait wants it.
    Met,
    /// Still going: its status, for progress.
    Waiting(String),
    /// It will not get there; what it reports.
    Failed(String),
}

/// The cluster `name`, if it exists.
pub(super) async fn find_cluster(
    eks: &aws_sdk_eks::Client,
    name: &str,
) -> Result<Option<Cluster>, ProviderError> {
    match eks.describe_cluster().name(name).send().await {
        Ok(out) => Ok(out.cluster().cloned()),
        Err(e) if error::code(&e) == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe cluster `{name}`"), e)),
    }
}

/// The node group `name` of `cluster`, if it exists.
pub(super) async fn find_nodegroup(
    eks: &aws_sdk_eks::Client,
    cluster: &str,
    name: &str,
) -> Result<Option<Nodegroup>, ProviderError> {
    match eks
        .describe_nodegroup()
        .cluster_name(cluster)
        .nodegroup_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.nodegroup().cloned()),
        Err(e) if error::code(&e) == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe node group `{name}`"), e)),
    }
}

/// Health issues as one line: `code: message; …`, or that there are none.
pub(super) fn health_line<'a>(
    issues: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>,
) -> String {
    let parts: Vec<String> = issues
        .into_iter()
        .map(|(code, message)| {
            format!(
                "{}: {}",
                code.unwrap_or("issue"),
                message.unwrap_or_default()
            )
        })
        .collect();
    if parts.is_empty() {
        "no health issue reported".into()
    } else {
        parts.join("; ")
    }
}

/// Whether a cluster is `ACTIVE`.
pub(super) fn cluster_active(c: &Cluster) -> Condition {
    match c.status() {
        Some(ClusterStatus::Active) => Condition::Met,
        Some(ClusterStatus::Failed) => Condition::Failed(format!(
            "FAILED: {}",
            health_line(
                c.health()
                    .map(|h| h.issues())
                    .unwrap_or_default()
                    .iter()
                    .map(|i| (i.code().map(|c| c.as_str()), i.message()))
            )
        )),
        other => Condition::Waiting(status_word(other.map(ClusterStatus::as_str))),
    }
}

/// Whether a node group is `ACTIVE`.
pub(super) fn nodegroup_active(ng: &Nodegroup) -> Condition {
    match ng.status() {
        Some(NodegroupStatus::Active) => Condition::Met,
        Some(
            s @ (NodegroupStatus::CreateFailed
            | NodegroupStatus::Degraded
            | NodegroupStatus::DeleteFailed),
        ) => Condition::Failed(format!(
            "{}: {}",
            s.as_str(),
            health_line(
                ng.health()
                    .map(|h| h.issues())
                    .unwrap_or_default()
                    .iter()
                    .map(|i| (i.code().map(|c| c.as_str()), i.message()))
            )
        )),
        other => Condition::Waiting(status_word(other.map(NodegroupStatus::as_str))),
    }
}

fn status_word(status: Option<&str>) -> String {
    status.unwrap_or("UNKNOWN").to_string()
}

/// Look at `what` (`` cluster `x` ``), expected to take `expected`
/// ([`shared_pacing::expected`]) from `sent` (when the call that started it
/// went out, if the caller sent it; else from now), until `condition` is
/// met, reporting its status as it changes. The object disappearing fails
/// the wait ([`ProviderError::vanished`]); a failed condition fails it with
/// `help`.
pub(super) async fn await_condition<T, F, Fut>(
    ctx: &OpContext,
    what: &str,
    (expected, sent): (Duration, Option<Instant>),
    look: F,
    condition: fn(&T) -> Condition,
    help: &str,
) -> Result<T, ProviderError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Option<T>, ProviderError>>,
{
    let pace = Pace::expecting(expected).within(ctx.timeout).since(sent);
    until(pace, ctx.reporter.as_ref(), what, || async {
        let Some(object) = look().await? else {
            return Err(ProviderError::vanished(format!("{what} disappeared")));
        };
        match condition(&object) {
            Condition::Met => Ok(Step::Done(object)),
            Condition::Waiting(status) => Ok(Step::Pending(vec![format!("{what}: {status}")])),
            Condition::Failed(why) => {
                Err(ProviderError::fatal(format!("{what} is {why}")).with_help(help))
            }
        }
    })
    .await
}

/// Look at `what`, whose delete usually takes `expected`, until it is gone,
/// reporting its status (`status` of what a look found) as it changes.
pub(super) async fn await_gone<T, F, Fut>(
    ctx: &OpContext,
    what: &str,
    expected: Duration,
    look: F,
    status: fn(&T) -> Option<&str>,
) -> Result<(), ProviderError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Option<T>, ProviderError>>,
{
    let waiting = format!("deletion of {what}");
    let pace = Pace::expecting(expected).within(ctx.timeout);
    until(pace, ctx.reporter.as_ref(), &waiting, || async {
        match look().await? {
            None => Ok(Step::Done(())),
            Some(object) => Ok(Step::Pending(vec![format!(
                "{what}: {}",
                status(&object).unwrap_or("DELETING")
            )])),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_eks::types::{ClusterHealth, ClusterIssue, ClusterIssueCode};

    #[test]
    fn conditions_follow_the_typed_status() {
        let active = Cluster::builder().status(ClusterStatus::Active).build();
        assert!(matches!(cluster_active(&active), Condition::Met));
        let creating = Cluster::builder().status(ClusterStatus::Creating).build();
        assert!(matches!(cluster_active(&creating), Condition::Waiting(s) if s == "CREATING"));
        let failed = Cluster::builder()
            .status(ClusterStatus::Failed)
            .health(
                ClusterHealth::builder()
                    .issues(
                        ClusterIssue::builder()
                            .code(ClusterIssueCode::AccessDenied)
                            .message("the role cannot be assumed")
                            .build(),
                    )
                    .build(),
            )
            .build();
        assert!(
            matches!(cluster_active(&failed), Condition::Failed(s) if s == "FAILED: AccessDenied: the role cannot be assumed")
        );
        let degraded = Nodegroup::builder()
            .status(NodegroupStatus::Degraded)
            .build();
        assert!(
            matches!(nodegroup_active(&degraded), Condition::Failed(s) if s == "DEGRADED: no health issue reported")
        );
        let updating = Nodegroup::builder()
            .status(NodegroupStatus::Updating)
            .build();
        assert!(matches!(nodegroup_active(&updating), Condition::Waiting(s) if s == "UPDATING"));
    }
}
