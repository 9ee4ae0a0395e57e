//! The `cloudformation.stack` provider: a stack from a local template.
//!
//! - create: `CreateStack` with `ClientRequestToken` = the operation token and
//!   a `flow:token` tag, then waits, showing stack events; a stack left in
//!   `ROLLBACK_COMPLETE` by an earlier failed create of flow's is deleted
//!   first. A stack of the same name that flow did not create is never adopted.
//! - update: a change set of type UPDATE named after the token, executed; a
//!   template and parameters that change nothing end without executing.
//! - plan: for an existing stack, a change set shows the resource changes,
//!   then is deleted; a stack in `ROLLBACK_COMPLETE` plans as a replace.
//! - read (resume): the stack of that name carrying this token's tag is
//!   waited for if in progress, and adopted once complete.
//! - delete: `DeleteStack`, waiting for `DELETE_COMPLETE`.

mod batch_drift;
mod change_set;
mod check;
mod compute_environments;
mod intrinsics;
mod leftovers;
mod plan;
mod refresh;
mod spec;
mod stack;
mod template;

use async_trait::async_trait;
use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::Stack;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{config, error, tags};
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, PlanDetail, Prior, Problem, Provider,
    ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values,
};
use change_set::Prepared;
use spec::StackSpec;
use stack::{Seen, describe, in_progress, now, settle, status};

pub use template::template_digest;

/// Statuses of a stack that is there and usable.
const USABLE: [&str; 5] = [
    "CREATE_COMPLETE",
    "UPDATE_COMPLETE",
    "UPDATE_ROLLBACK_COMPLETE",
    "IMPORT_COMPLETE",
    "IMPORT_ROLLBACK_COMPLETE",
];

/// How far back (seconds) events count as this operation's, for clock skew.
const SKEW: i64 = 30;

/// The `cloudformation.stack` provider kind.
#[derive(Debug, Clone)]
pub struct CloudFormationStack {
    schema: Schema,
}

impl CloudFormationStack {
    /// The provider with its schema.
    pub fn new() -> Self {
        CloudFormationStack {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A CloudFormation stack from a local YAML or JSON template",
                inputs: vec![
                    InputSpec::required("stack_name", InputType::String, "The stack's name")
                        .forces_new(),
                    InputSpec::required(
                        "template",
                        InputType::LocalFile,
                        "The template, a YAML (short-form tags such as !Ref understood) or JSON file",
                    ),
                    crate::substitute::input_spec(
                        "Placeholders in the template and their values (PLACEHOLDER_X, <x>, $X and ${X} forms); a template's own ${AWS::Region} and !Sub names stay unless named here",
                    ),
                    crate::substitute::required_spec(),
                    InputSpec::optional(
                        "parameters",
                        InputType::Map(Box::new(InputType::Any)),
                        "Parameter values by name; lists are passed comma-separated",
                    ),
                    InputSpec::optional(
                        "capabilities",
                        InputType::List(Box::new(InputType::String)),
                        "Capabilities granted, e.g. [\"CAPABILITY_NAMED_IAM\"]",
                    ),
                    InputSpec::optional(
                        "tags",
                        InputType::Map(Box::new(InputType::String)),
                        "Tags on the stack, which CloudFormation passes to its resources",
                    ),
                ]
                .into_iter()
                .chain(crate::aws::leftovers::input_specs(false))
                .collect(),
                open_inputs: false,
            },
        }
    }
}

impl Default for CloudFormationStack {
    fn default() -> Self {
        Self::new()
    }
}

/// A CloudFormation client for `ctx`.
async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

/// What state keeps of a settled stack.
fn applied(stack: &Stack, spec: &StackSpec) -> Applied {
    Applied {
        id: stack.stack_id().map(str::to_string),
        outputs: stack::outputs(stack),
        private: json!({ "template_sha256": spec.digest, "template": spec.template }),
    }
}

/// Puts the stack's Batch objects back as its template says, where they
/// were changed outside CloudFormation (which does not undo that itself).
async fn restore_batch(
    ctx: &OpContext,
    client: &Client,
    spec: &StackSpec,
) -> Result<(), ProviderError> {
    let Some((batch, objects)) = batch_drift::of_stack(ctx, client, &spec.name, spec).await? else {
        return Ok(());
    };
    for label in batch_drift::restore(&batch, &objects).await? {
        ctx.reporter
            .event(&format!("{label}: put back as the template says"));
    }
    Ok(())
}

/// The change set name an operation with `token` uses.
fn change_set_name(token: &str) -> String {
    format!("flow-{token}")
}

impl CloudFormationStack {
    /// Waits for a stack this create started (`sent`: when its
    /// `CreateStack` went out, if this call sent it) or is resuming, and
    /// turns its settled state into the result.
    async fn finish_create(
        &self,
        client: &Client,
        ctx: &OpContext,
        spec: &StackSpec,
        since: i64,
        seen: Seen,
        sent: Option<Instant>,
    ) -> Result<Applied, ProviderError> {
        let pace = stack::pace(ctx, Some(&spec.body)).since(sent);
        let settled = settle(client, pace, ctx.reporter.as_ref(), &spec.name, since, seen).await?;
        match settled {
            Some(s) if USABLE.contains(&status(&s)) => Ok(applied(&s, spec)),
            Some(s) => Err(stack::failed(client, &spec.name, "create", &s, since).await),
            None => Err(ProviderError::vanished(format!(
                "stack `{}` disappeared while it was being created",
                spec.name
            ))),
        }
    }

    /// Deletes the stack `target` (name or id) and waits until it is gone;
    /// `described` is the stack as the caller just described it (`None`:
    /// described here).
    async fn delete_stack(
        &self,
        client: &Client,
        ctx: &OpContext,
        name: &str,
        target: &str,
        described: Option<Stack>,
    ) -> Result<(), ProviderError> {
        let since = now() - SKEW;
        let current = match described {
            Some(stack) => stack,
            None => match describe(client, target).await? {
                Some(stack) => stack,
                None => return Ok(()),
            },
        };
        if status(&current) == "DELETE_COMPLETE" {
            return Ok(());
        }
        if in_progress(status(&current)) && status(&current) != "DELETE_IN_PROGRESS" {
            settle(
                client,
                stack::pace(ctx, None),
                ctx.reporter.as_ref(),
                target,
                since,
                Seen::default(),
            )
            .await?;
        }
        let seen = stack::seen_before_delete(client, target, &current).await;
        let mut request = client.delete_stack().stack_name(target);
        if !ctx.token.is_empty() {
            request = request.client_request_token(&ctx.token);
        }
        request
            .send()
            .await
            .map_err(|e| error::aws(&format!("delete stack `{name}`"), e))?;
        match settle(
            client,
            stack::delete_pace(ctx),
            ctx.reporter.as_ref(),
            target,
            since,
            seen,
        )
        .await?
        {
            None => Ok(()),
            Some(s) if status(&s) == "DELETE_COMPLETE" => Ok(()),
            Some(s) => Err(stack::failed(client, name, "delete", &s, since).await),
        }
    }

    /// Updates an existing, settled stack through change set `flow-<token>`.
    async fn update_stack(
        &self,
        client: &Client,
        ctx: &OpContext,
        spec: &StackSpec,
        current: Stack,
    ) -> Result<Applied, ProviderError> {
        let since = now() - SKEW;
        let seen = stack::seen_events(client, &spec.name).await;
        let name = change_set_name(&ctx.token);
        let mut stack_tags = spec.tags.clone();
        if let Some(token) = stack::tag(&current, tags::TOKEN) {
            stack_tags.insert(tags::TOKEN.to_string(), token.to_string());
        }
        // Resuming: the change set of this token may exist, even be executed.
        let executed = match change_set::execution(client, &spec.name, &name).await? {
            Some(exec) if exec == "EXECUTE_COMPLETE" || exec == "EXECUTE_IN_PROGRESS" => true,
            Some(exec) if exec == "AVAILABLE" => {
                change_set::execute(client, &spec.name, &name, &ctx.token).await?;
                true
            }
            _ => false,
        };
        if !executed {
            let prepared =
                change_set::create(client, ctx.reporter.as_ref(), spec, &name, &stack_tags).await?;
            match prepared {
                Prepared::NoChanges => {
                    change_set::delete(client, &spec.name, &name).await?;
                    ctx.reporter
                        .event(&format!("stack `{}`: no resource changes", spec.name));
                    return Ok(applied(&current, spec));
                }
                Prepared::Ready(lines) => {
                    for l in &lines {
                        ctx.reporter.log(l);
                    }
                    change_set::execute(client, &spec.name, &name, &ctx.token).await?;
                }
            }
        }
        match settle(
            client,
            stack::pace(ctx, None),
            ctx.reporter.as_ref(),
            &spec.name,
            since,
            seen,
        )
        .await?
        {
            Some(s) if status(&s) == "UPDATE_COMPLETE" || status(&s) == "CREATE_COMPLETE" => {
                Ok(applied(&s, spec))
            }
            Some(s) => Err(stack::failed(client, &spec.name, "update", &s, since).await),
            None => Err(ProviderError::vanished(format!(
                "stack `{}` disappeared while it was being updated",
                spec.name
            ))),
        }
    }
}

#[async_trait]
impl Provider for CloudFormationStack {
    fn name(&self) -> &'static str {
        "cloudformation.stack"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        crate::substitute::digest_of_input(inputs, "template", &ctx.workdir)
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// `stack_name` (at most 128 characters), for
    /// `lifecycle.create_before_destroy`: the template's own names
    /// (exports, physical names) must not clash between the two stacks.
    fn replacement_name(&self) -> Option<crate::contract::Rename> {
        Some(crate::contract::Rename {
            input: "stack_name",
            max_len: 128,
        })
    }

    /// Parses the template and checks the parameters against it.
    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        check::problems(inputs, &ctx.workdir)
    }

    /// The template's `Outputs`, and `stack_name` and `stack_id`.
    fn declared_outputs(
        &self,
        inputs: &[(String, InputValue)],
        ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        check::declared_outputs(inputs, &ctx.workdir)
    }

    /// The EFA rules' warnings, read offline from the template.
    fn plan_lines(&self, inputs: &Values, ctx: &ValidateContext) -> Vec<String> {
        check::efa_warnings(inputs, &ctx.workdir)
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        // The template is read before anything is asked of AWS.
        let spec = StackSpec::load(inputs, &ctx.workdir).map_err(ProviderError::before_acting)?;
        let client = client(ctx).await?;
        let since = now() - SKEW;
        if let Some(existing) = describe(&client, &spec.name).await? {
            let token = stack::tag(&existing, tags::TOKEN);
            let st = status(&existing).to_string();
            if token == Some(ctx.token.as_str()) {
                ctx.reporter.event(&format!(
                    "stack `{}` was already started by this operation ({st})",
                    spec.name
                ));
                let seen = stack::seen_events(&client, &spec.name).await;
                return self
                    .finish_create(&client, ctx, &spec, since, seen, None)
                    .await;
            }
            if token.is_some()
                && (st == "ROLLBACK_COMPLETE" || st == "ROLLBACK_FAILED" || st == "CREATE_FAILED")
            {
                ctx.reporter.event(&format!(
                    "stack `{}` is in {st} from an earlier failed create: deleting it first",
                    spec.name
                ));
                let id = existing.stack_id().unwrap_or(&spec.name).to_string();
                self.delete_stack(&client, ctx, &spec.name, &id, Some(existing.clone()))
                    .await?;
            } else if st != "DELETE_COMPLETE" {
                return Err(crate::ownership::not_own(&format!(
                    "stack `{}` ({st})",
                    spec.name
                )));
            }
        }
        // What the compute environments launch into, judged again with the
        // exports the stack will import, before anything is made.
        let judged = compute_environments::judge(ctx, &client, &spec, true).await?;
        if !judged.refusals.is_empty() {
            return Err(crate::aws::reservation::refused(&judged.refusals));
        }
        let mut request = client
            .create_stack()
            .stack_name(&spec.name)
            .template_body(&spec.body)
            .set_parameters(Some(spec.parameters()))
            .set_capabilities(Some(spec.capabilities()))
            .set_tags(Some(spec::aws_tags(&tags::with_token(
                &spec.tags, &ctx.token,
            ))));
        if !ctx.token.is_empty() {
            request = request.client_request_token(&ctx.token);
        }
        let sent = Instant::now();
        match request.send().await {
            Ok(_) => {}
            // A retry of our own call that had reached CloudFormation.
            Err(e) if error::code(&e) == Some("AlreadyExistsException") => {
                let mine = describe(&client, &spec.name)
                    .await?
                    .is_some_and(|s| stack::tag(&s, tags::TOKEN) == Some(ctx.token.as_str()));
                if !mine {
                    return Err(error::aws(&format!("create stack `{}`", spec.name), e));
                }
            }
            Err(e) => return Err(error::refused(&format!("create stack `{}`", spec.name), e)),
        }
        self.finish_create(&client, ctx, &spec, since, Seen::default(), Some(sent))
            .await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        // The template is read before anything is asked of AWS.
        let spec = StackSpec::load(inputs, &ctx.workdir).map_err(ProviderError::before_acting)?;
        let client = client(ctx).await?;
        let since = now() - SKEW;
        let target = prior.id.unwrap_or(&spec.name).to_string();
        let mut current = describe(&client, &target).await?;
        if current.as_ref().is_some_and(|s| in_progress(status(s))) {
            current = settle(
                &client,
                stack::pace(ctx, None),
                ctx.reporter.as_ref(),
                &target,
                since,
                Seen::default(),
            )
            .await?;
        }
        match current {
            None => {
                ctx.reporter.event(&format!(
                    "stack `{}` no longer exists: creating it again",
                    spec.name
                ));
                self.create(ctx, inputs).await
            }
            Some(s) if status(&s) == "DELETE_COMPLETE" => {
                ctx.reporter.event(&format!(
                    "stack `{}` was deleted: creating it again",
                    spec.name
                ));
                self.create(ctx, inputs).await
            }
            Some(s) if status(&s) == "ROLLBACK_COMPLETE" => Err(ProviderError::fatal(format!(
                "stack `{}` is in ROLLBACK_COMPLETE and cannot be updated; `flow plan` shows it as a replace: apply that plan",
                spec.name
            ))),
            Some(s) => {
                let applied = self.update_stack(&client, ctx, &spec, s).await?;
                restore_batch(ctx, &client, &spec).await?;
                Ok(applied)
            }
        }
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let name = prior
            .inputs
            .get("stack_name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| prior.id.map(str::to_string))
            .ok_or_else(|| {
                ProviderError::fatal("state records neither the stack's id nor its name").with_help("the step's record is incomplete (written by an older flow, or edited by hand): look at it with `flow state show FILE STEP`, or restore a backup with `flow state restore`")
            })?;
        let target = prior.id.unwrap_or(&name).to_string();
        let client = client(ctx).await?;
        // The sweep describes the stack; the delete starts from that answer.
        let Some(current) = leftovers::sweep_vpcs(ctx, &client, &target, prior.inputs).await?
        else {
            return Ok(());
        };
        self.delete_stack(&client, ctx, &name, &target, Some(current))
            .await
    }

    /// For an existing stack: a change set's resource changes, or a replace
    /// when the stack is in `ROLLBACK_COMPLETE`.
    fn has_plan_detail(&self) -> bool {
        true
    }

    async fn plan_detail(
        &self,
        ctx: &OpContext,
        prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        let spec = StackSpec::load(desired, &ctx.workdir)?;
        let client = client(ctx).await?;
        plan::detail(ctx, &client, prior.is_some(), &spec).await
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("the stack's name or ARN")
    }

    /// A settled stack of the step's `stack_name`, by name or ARN.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        let spec = StackSpec::load(inputs, &ctx.workdir)?;
        let client = client(ctx).await?;
        let Some(found) = describe(&client, id).await? else {
            return Err(crate::contract::import_missing("stack", id));
        };
        let name = found.stack_name().unwrap_or_default();
        if name != spec.name {
            return Err(crate::contract::import_mismatch("stack", id, &spec.name));
        }
        let st = status(&found);
        if !USABLE.contains(&st) {
            return Err(ProviderError::invalid(format!(
                "stack `{name}` is {st}: only a stack in a *_COMPLETE state can be imported"
            )));
        }
        Ok(applied(&found, &spec))
    }

    /// Status, parameters the workflow set, the template's digest, outputs.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let client = client(ctx).await?;
        refresh::refresh(ctx, &client, prior, &USABLE).await
    }

    /// The stack of this name carrying this operation's token: waited for if
    /// in progress, adopted once complete, failed if it rolled back. Anything
    /// else is missing, and the create that follows tells why (one not
    /// flow's). Only
    /// the name is needed: a template since moved or deleted does not stop
    /// the recovery.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let spec =
            StackSpec::load(inputs, &ctx.workdir).or_else(|_| StackSpec::name_only(inputs))?;
        let client = client(ctx).await?;
        let target = id.unwrap_or(&spec.name).to_string();
        let Some(found) = describe(&client, &target).await? else {
            return Ok(ReadOutcome::Missing);
        };
        if stack::tag(&found, tags::TOKEN) != Some(ctx.token.as_str()) {
            return Ok(ReadOutcome::Missing);
        }
        let settled = if in_progress(status(&found)) {
            ctx.reporter.event(&format!(
                "stack `{}` is still {}: waiting for it",
                spec.name,
                status(&found)
            ));
            settle(
                &client,
                stack::pace(ctx, Some(&spec.body)),
                ctx.reporter.as_ref(),
                &target,
                now() - SKEW,
                Seen::default(),
            )
            .await?
        } else {
            Some(found)
        };
        Ok(match settled {
            Some(s) if USABLE.contains(&status(&s)) => ReadOutcome::Present(applied(&s, &spec)),
            Some(s) if status(&s) != "DELETE_COMPLETE" => ReadOutcome::Failed {
                id: s.stack_id().map(str::to_string),
                reason: format!("stack `{}` is {}", spec.name, status(&s)),
            },
            _ => ReadOutcome::Missing,
        })
    }
}

#[cfg(test)]
mod tests;
