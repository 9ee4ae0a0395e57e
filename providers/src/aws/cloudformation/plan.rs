//! What `flow plan` shows of a stack step: what its compute environments
//! launch into (judged with AWS), and for an existing stack a change set's
//! resource changes, made and deleted at once; a stack CloudFormation can
//! only replace, or one flow did not make, is said so.

use aws_sdk_cloudformation::Client;

use super::change_set::{self, Prepared};
use super::compute_environments;
use super::spec::StackSpec;
use super::stack::{self, describe, in_progress, status};
use crate::aws::tags;
use crate::contract::{OpContext, PlanDetail, ProviderError};

/// The plan's detail for `spec`; `recorded` when state holds the step.
pub(super) async fn detail(
    ctx: &OpContext,
    client: &Client,
    recorded: bool,
    spec: &StackSpec,
) -> Result<PlanDetail, ProviderError> {
    let mut detail = PlanDetail::default();
    let judged = compute_environments::judge(ctx, client, spec, !recorded).await?;
    detail.lines.extend(judged.lines);
    detail.refusals.extend(judged.refusals);
    let Some(current) = describe(client, &spec.name).await? else {
        if recorded {
            detail.lines.push(format!(
                "stack `{}` no longer exists: apply creates it again",
                spec.name
            ));
        }
        return Ok(detail);
    };
    let st = status(&current);
    if st == "ROLLBACK_COMPLETE" {
        detail.replace_because = Some(format!(
            "stack `{}` is in ROLLBACK_COMPLETE (its creation failed and was rolled back): it can only be deleted and created again",
            spec.name
        ));
        return Ok(detail);
    }
    if !recorded {
        if stack::tag(&current, tags::TOKEN).is_none() {
            let refusal = crate::ownership::not_own(&format!("stack `{}` ({st})", spec.name));
            detail
                .lines
                .push(format!("{}: apply will refuse it", refusal.message));
        }
        return Ok(detail);
    }
    if in_progress(st) {
        detail.lines.push(format!(
            "stack `{}` is {st}: apply waits for it first",
            spec.name
        ));
        return Ok(detail);
    }
    let name = plan_change_set_name();
    let mut stack_tags = spec.tags.clone();
    if let Some(token) = stack::tag(&current, tags::TOKEN) {
        stack_tags.insert(tags::TOKEN.to_string(), token.to_string());
    }
    let prepared =
        change_set::create(client, ctx.reporter.as_ref(), spec, &name, &stack_tags).await;
    change_set::delete(client, &spec.name, &name).await?;
    match prepared? {
        Prepared::Ready(lines) => detail.lines.extend(lines),
        Prepared::NoChanges => detail.lines.push("no resource changes".into()),
    }
    Ok(detail)
}

/// A name for a change set that only plans: unique enough, never executed.
pub(super) fn plan_change_set_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("flow-plan-{:x}{:x}", nanos, std::process::id())
}
