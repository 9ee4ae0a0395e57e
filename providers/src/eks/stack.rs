//! The supporting CloudFormation stacks of EKS objects, as eksctl makes
//! them: an IAM role when none is given, a launch template for EFA or a
//! capacity reservation, the cluster's OIDC provider. Each is created with
//! the operation token as its `ClientRequestToken`, waited for, and deleted
//! with the object it serves.

use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::{Capability, Stack, Tag};
use serde_json::Value;
use tokio::time::Instant;

use super::shared_error as error;
use super::shared_pacing::expected;
use super::shared_poll::{Pace, Step, until};
use crate::contract::{OpContext, ProviderError, Values};

/// A CloudFormation client for `ctx`.
pub async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&super::sdk_config(ctx).await?))
}

/// The stack called `name`, if it exists (and is not deleted).
async fn describe(cfn: &Client, name: &str) -> Result<Option<Stack>, ProviderError> {
    match cfn.describe_stacks().stack_name(name).send().await {
        Ok(out) => Ok(out
            .stacks()
            .first()
            .filter(|s| status(s) != "DELETE_COMPLETE")
            .cloned()),
        Err(e)
            if error::code(&e) == Some("ValidationError")
                && format!("{e:?}").contains("does not exist") =>
        {
            Ok(None)
        }
        Err(e) => Err(error::aws(&format!("describe stack `{name}`"), e)),
    }
}

fn status(stack: &Stack) -> &str {
    stack.stack_status().map_or("UNKNOWN", |s| s.as_str())
}

fn outputs(stack: &Stack) -> Values {
    stack
        .outputs()
        .iter()
        .filter_map(|o| {
            Some((
                o.output_key()?.to_string(),
                Value::String(o.output_value().unwrap_or_default().to_string()),
            ))
        })
        .collect()
}

/// The outputs of the stack `name` if it exists and is complete (nothing
/// is created or waited for: plans read with this).
pub async fn outputs_of(cfn: &Client, name: &str) -> Result<Option<Values>, ProviderError> {
    Ok(describe(cfn, name)
        .await?
        .filter(|s| matches!(status(s), "CREATE_COMPLETE" | "UPDATE_COMPLETE"))
        .map(|s| outputs(&s)))
}

/// Creates the stack `name` from `template` (unless it exists) and waits
/// until it is complete; returns its outputs.
pub async fn ensure(
    ctx: &OpContext,
    cfn: &Client,
    name: &str,
    template: &Value,
) -> Result<Values, ProviderError> {
    let mut sent = None;
    if describe(cfn, name).await?.is_none() {
        ctx.reporter.event(&format!("creating stack {name}"));
        sent = Some(Instant::now());
        let mut req = cfn
            .create_stack()
            .stack_name(name)
            .template_body(template.to_string())
            .capabilities(Capability::CapabilityIam)
            .capabilities(Capability::CapabilityNamedIam)
            .tags(Tag::builder().key("flow:step").value(&ctx.step).build());
        if !ctx.token.is_empty() {
            req = req
                .client_request_token(format!("{}-{}", &ctx.token, short(name)))
                .tags(
                    Tag::builder()
                        .key(super::shared_tags::TOKEN)
                        .value(&ctx.token)
                        .build(),
                );
        }
        if let Err(e) = req.send().await
            && error::code(&e) != Some("AlreadyExistsException")
        {
            return Err(error::aws(&format!("create stack `{name}`"), e));
        }
    }
    let what = format!("stack `{name}`");
    let pace = Pace::expecting(expected::stack(&template.to_string()))
        .within(ctx.timeout)
        .since(sent);
    until(pace, ctx.reporter.as_ref(), &what, || async {
        let Some(stack) = describe(cfn, name).await? else {
            return Err(ProviderError::vanished(format!(
                "stack `{name}` disappeared while being created"
            )));
        };
        match status(&stack) {
            "CREATE_COMPLETE" | "UPDATE_COMPLETE" => Ok(Step::Done(outputs(&stack))),
            s if s.ends_with("_IN_PROGRESS") => {
                Ok(Step::Pending(vec![format!("stack {name}: {s}")]))
            }
            s => Err(ProviderError::fatal(format!(
                "stack `{name}` is {s}: {}",
                stack
                    .stack_status_reason()
                    .unwrap_or("see its events in the CloudFormation console")
            )).with_help("the failed resources and their reasons are in the stack's events in CloudFormation; fix the cause and apply again")),
        }
    })
    .await
}

/// Deletes the stack `name` (if it exists) and waits until it is gone.
pub async fn delete(ctx: &OpContext, cfn: &Client, name: &str) -> Result<(), ProviderError> {
    if describe(cfn, name).await?.is_none() {
        return Ok(());
    }
    ctx.reporter.event(&format!("deleting stack {name}"));
    cfn.delete_stack()
        .stack_name(name)
        .send()
        .await
        .map_err(|e| error::aws(&format!("delete stack `{name}`"), e))?;
    let what = format!("deletion of stack `{name}`");
    let pace = Pace::expecting(expected::STACK_DELETE).within(ctx.timeout);
    until(pace, ctx.reporter.as_ref(), &what, || async {
        match describe(cfn, name).await? {
            None => Ok(Step::Done(())),
            Some(s) if status(&s) == "DELETE_FAILED" => Err(ProviderError::fatal(format!(
                "stack `{name}` could not be deleted: {}",
                s.stack_status_reason().unwrap_or("DELETE_FAILED")
            )).with_help("something still uses what the stack made (a role, a launch template); the stack's events name it: remove that use, then `flow destroy` again")),
            Some(s) => Ok(Step::Pending(vec![format!("stack {name}: {}", status(&s))])),
        }
    })
    .await
}

/// A short, stable digest of `text` (client request tokens are at most 128 characters).
fn short(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..6])
}

/// The name of a supporting stack: `flow-eks-CLUSTER[-PART]`.
pub fn name(cluster: &str, part: &str) -> String {
    format!("flow-eks-{cluster}-{part}")
}

/// A template with an IAM role that `service` (`eks.amazonaws.com`,
/// `ec2.amazonaws.com`) assumes, with AWS-managed `policies`; output `RoleArn`.
pub fn role_template(service: &str, policies: &[&str]) -> Value {
    let arns: Vec<Value> = policies
        .iter()
        .map(|p| serde_json::json!({"Fn::Sub": format!("arn:${{AWS::Partition}}:iam::aws:policy/{p}")}))
        .collect();
    serde_json::json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "IAM role made by flow (eks)",
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [{
                            "Effect": "Allow",
                            "Principal": {"Service": [service]},
                            "Action": ["sts:AssumeRole"]
                        }]
                    },
                    "ManagedPolicyArns": arns
                }
            }
        },
        "Outputs": {"RoleArn": {"Value": {"Fn::GetAtt": ["Role", "Arn"]}}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_template_trusts_the_service_with_managed_policies() {
        let t = role_template("eks.amazonaws.com", &["AmazonEKSClusterPolicy"]);
        let role = &t["Resources"]["Role"]["Properties"];
        assert_eq!(
            role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"][0],
            "eks.amazonaws.com"
        );
        assert_eq!(
            role["ManagedPolicyArns"][0]["Fn::Sub"],
            "arn:${AWS::Partition}:iam::aws:policy/AmazonEKSClusterPolicy"
        );
        assert_eq!(name("dlc", "role"), "flow-eks-dlc-role");
        assert_eq!(short("a").len(), 12);
    }
}
