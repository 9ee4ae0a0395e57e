//! Change sets: what an update would do to each resource, shown in plans and
//! executed by apply.

use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::{Change, ChangeSetType};

use super::spec::StackSpec;
use crate::aws::error;
use crate::aws::poll::{self, Pace, Step};
use crate::contract::{ProviderError, Reporter};

/// What a change set came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Prepared {
    /// Ready to execute, with its resource changes as plan lines.
    Ready(Vec<String>),
    /// The template and parameters change nothing.
    NoChanges,
}

/// Whether a failed change set's reason means "nothing to change".
fn means_no_changes(reason: &str) -> bool {
    reason.contains("didn't contain changes") || reason.contains("No updates are to be performed")
}

/// A resource change as a plan line:
/// `~ Modify AWS::EC2::Subnet PrivateSubnet (replacement: True)`.
pub(super) fn line(change: &Change) -> Option<String> {
    let rc = change.resource_change()?;
    let action = rc.action().map_or("?", |a| a.as_str());
    let sign = match action {
        "Add" => "+",
        "Remove" => "-",
        "Modify" => "~",
        _ => "*",
    };
    let mut line = format!(
        "{sign} {action} {} {}",
        rc.resource_type().unwrap_or("?"),
        rc.logical_resource_id().unwrap_or("?")
    );
    if action == "Modify"
        && let Some(r) = rc.replacement()
    {
        line.push_str(&format!(" (replacement: {})", r.as_str()));
    }
    Some(line)
}

/// Creates change set `name` (type UPDATE) for `spec` on the existing stack
/// and waits until CloudFormation has worked out its changes.
pub(super) async fn create(
    client: &Client,
    reporter: &dyn Reporter,
    spec: &StackSpec,
    name: &str,
    tags: &std::collections::BTreeMap<String, String>,
) -> Result<Prepared, ProviderError> {
    let stack = &spec.name;
    let mut request = client
        .create_change_set()
        .stack_name(stack)
        .change_set_name(name)
        .change_set_type(ChangeSetType::Update)
        .template_body(&spec.body)
        .set_parameters(Some(spec.parameters()))
        .set_capabilities(Some(spec.capabilities()))
        .set_tags(Some(super::spec::aws_tags(tags)))
        .description("planned by flow");
    if name.len() <= 128 {
        request = request.client_token(name);
    }
    match request.send().await {
        Ok(_) => {}
        Err(e) if error::code(&e) == Some("AlreadyExistsException") => {}
        Err(e) => {
            let reason = aws_sdk_cloudformation::error::ProvideErrorMetadata::message(&e)
                .unwrap_or_default()
                .to_string();
            if means_no_changes(&reason) {
                return Ok(Prepared::NoChanges);
            }
            return Err(error::aws(
                &format!("create a change set for stack `{stack}`"),
                e,
            ));
        }
    }
    poll::until(
        Pace::LONG,
        reporter,
        &format!("change set of stack `{stack}`"),
        || async {
            let out = client
                .describe_change_set()
                .stack_name(stack)
                .change_set_name(name)
                .send()
                .await
                .map_err(|e| {
                    error::aws(&format!("describe the change set of stack `{stack}`"), e)
                })?;
            let status = out.status().map_or("", |s| s.as_str());
            Ok(match status {
                "CREATE_COMPLETE" => {
                    let lines: Vec<String> = out.changes().iter().filter_map(line).collect();
                    if lines.is_empty() {
                        Step::Done(Prepared::NoChanges)
                    } else {
                        Step::Done(Prepared::Ready(lines))
                    }
                }
                "FAILED" => {
                    let reason = out.status_reason().unwrap_or_default();
                    if means_no_changes(reason) {
                        Step::Done(Prepared::NoChanges)
                    } else {
                        return Err(ProviderError::fatal(format!(
                            "the change set for stack `{stack}` failed: {reason}"
                        )));
                    }
                }
                _ => Step::Pending(Vec::new()),
            })
        },
    )
    .await
}

/// The execution status of change set `name` (`AVAILABLE`,
/// `EXECUTE_COMPLETE`, …), or `None` when there is no such change set.
pub(super) async fn execution(
    client: &Client,
    stack: &str,
    name: &str,
) -> Result<Option<String>, ProviderError> {
    match client
        .describe_change_set()
        .stack_name(stack)
        .change_set_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(Some(
            out.execution_status()
                .map_or("", |s| s.as_str())
                .to_string(),
        )),
        Err(e)
            if error::code(&e) == Some("ChangeSetNotFound")
                || error::code(&e) == Some("ChangeSetNotFoundException") =>
        {
            Ok(None)
        }
        Err(e) if error::code(&e) == Some("ValidationError") => Ok(None),
        Err(e) => Err(error::aws(
            &format!("describe the change set of stack `{stack}`"),
            e,
        )),
    }
}

/// Runs change set `name` on the stack.
pub(super) async fn execute(
    client: &Client,
    stack: &str,
    name: &str,
    token: &str,
) -> Result<(), ProviderError> {
    let mut request = client
        .execute_change_set()
        .stack_name(stack)
        .change_set_name(name);
    if !token.is_empty() {
        request = request.client_request_token(token);
    }
    request
        .send()
        .await
        .map(|_| ())
        .map_err(|e| error::aws(&format!("execute the change set of stack `{stack}`"), e))
}

/// Deletes change set `name`; one already gone is fine.
pub(super) async fn delete(client: &Client, stack: &str, name: &str) -> Result<(), ProviderError> {
    match client
        .delete_change_set()
        .stack_name(stack)
        .change_set_name(name)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if error::code(&e) == Some("ChangeSetNotFound") => Ok(()),
        Err(e) => Err(error::aws(
            &format!("delete the change set of stack `{stack}`"),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudformation::types::{ChangeAction, Replacement, ResourceChange};

    fn change(action: ChangeAction, replacement: Option<Replacement>) -> Change {
        Change::builder()
            .resource_change(
                ResourceChange::builder()
                    .action(action)
                    .logical_resource_id("PrivateSubnet")
                    .resource_type("AWS::EC2::Subnet")
                    .set_replacement(replacement)
                    .build(),
            )
            .build()
    }

    #[test]
    fn changes_read_as_plan_lines() {
        assert_eq!(
            line(&change(ChangeAction::Add, None)).unwrap(),
            "+ Add AWS::EC2::Subnet PrivateSubnet"
        );
        assert_eq!(
            line(&change(ChangeAction::Modify, Some(Replacement::True))).unwrap(),
            "~ Modify AWS::EC2::Subnet PrivateSubnet (replacement: True)"
        );
        assert_eq!(
            line(&change(ChangeAction::Remove, None)).unwrap(),
            "- Remove AWS::EC2::Subnet PrivateSubnet"
        );
    }

    #[test]
    fn no_change_reasons_are_recognised() {
        assert!(means_no_changes(
            "The submitted information didn't contain changes. Submit different information to create a change set."
        ));
        assert!(means_no_changes("No updates are to be performed."));
        assert!(!means_no_changes("Template format error"));
    }
}
