//! What refresh reads of a stack: whether it still exists, its status, its
//! parameters, its template (by digest), its outputs, and the Batch objects
//! it declares (`batch_drift`).

use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::types::Stack;
use serde_json::{Value, json};

use super::batch_drift;
use super::spec::StackSpec;
use super::stack::{self, describe, status};
use super::template::template_digest;
use crate::aws::error;
use crate::contract::{
    Drift, OpContext, Prior, ProviderError, Refreshed, attribute_drift, is_sealed,
};

/// The stack `prior` recorded, as it is now.
pub(super) async fn refresh(
    ctx: &OpContext,
    client: &Client,
    prior: Prior<'_>,
    usable: &[&str],
) -> Result<Refreshed, ProviderError> {
    let name = prior
        .inputs
        .get("stack_name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let target = prior.id.unwrap_or(name);
    let Some(found) = describe(client, target).await? else {
        return Ok(Refreshed::Gone);
    };
    let st = status(&found);
    if st == "DELETE_COMPLETE" {
        return Ok(Refreshed::Gone);
    }
    let mut drift = Vec::new();
    if !usable.contains(&st) {
        drift.push(Drift::of_attribute(
            "status",
            json!("CREATE_COMPLETE"),
            json!(st),
        ));
    }
    if let Some(d) = parameters_drift(prior.inputs.get("parameters"), &found) {
        drift.push(d);
    }
    let recorded_digest = prior.private.get("template_sha256").and_then(Value::as_str);
    if let Some(recorded) = recorded_digest.filter(|d| !d.is_empty()) {
        let body = client
            .get_template()
            .stack_name(target)
            .send()
            .await
            .map_err(|e| error::aws(&format!("read the template of stack `{name}`"), e))?;
        let real = template_digest(body.template_body().unwrap_or_default().as_bytes());
        drift.extend(attribute_drift(
            "template sha256",
            json!(recorded),
            json!(real),
        ));
    }
    if let Ok(spec) = StackSpec::load(prior.inputs, &ctx.workdir)
        && let Some((_, objects)) = batch_drift::of_stack(ctx, client, target, &spec).await?
    {
        drift.extend(batch_drift::drift(&objects));
    }
    Ok(Refreshed::Present {
        drift,
        outputs: Some(stack::outputs(&found)),
        private: None,
    })
}

/// The `parameters` input with the stack's real values for the keys the
/// workflow set, when any differs. Values CloudFormation hides (`NoEcho`,
/// shown as `****`) and sensitive ones (sealed in state) are not compared.
fn parameters_drift(recorded: Option<&Value>, found: &Stack) -> Option<Drift> {
    let recorded = recorded?.as_object()?;
    let mut real = recorded.clone();
    for p in found.parameters() {
        let (Some(key), Some(value)) = (p.parameter_key(), p.parameter_value()) else {
            continue;
        };
        let Some(was) = recorded.get(key) else {
            continue;
        };
        // NoEcho values come back hidden; a sensitive one state keeps only
        // sealed cannot be compared (and must not be shown).
        if value == "****" || is_sealed(was) || as_parameter(was) == value {
            continue;
        }
        real.insert(key.to_string(), json!(value));
    }
    (real != *recorded).then(|| {
        Drift::of_input(
            "parameters",
            Value::Object(recorded.clone()),
            Value::Object(real),
        )
    })
}

/// A parameter value as CloudFormation holds it: text, lists comma-joined.
fn as_parameter(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(as_parameter).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudformation::types::Parameter;

    #[test]
    fn parameters_drift_only_where_the_workflow_set_them() {
        let stack = Stack::builder()
            .parameters(
                Parameter::builder()
                    .parameter_key("Cidr")
                    .parameter_value("10.1.0.0/16")
                    .build(),
            )
            .parameters(
                Parameter::builder()
                    .parameter_key("Azs")
                    .parameter_value("a,b")
                    .build(),
            )
            .parameters(
                Parameter::builder()
                    .parameter_key("Secret")
                    .parameter_value("****")
                    .build(),
            )
            .parameters(
                Parameter::builder()
                    .parameter_key("Other")
                    .parameter_value("x")
                    .build(),
            )
            .build();
        let same = json!({"Cidr": "10.1.0.0/16", "Azs": ["a", "b"], "Secret": "s"});
        assert!(parameters_drift(Some(&same), &stack).is_none());
        let was = json!({"Cidr": "10.0.0.0/16", "Azs": ["a", "b"]});
        let d = parameters_drift(Some(&was), &stack).unwrap();
        assert!(d.input);
        assert_eq!(d.real, json!({"Cidr": "10.1.0.0/16", "Azs": ["a", "b"]}));
        assert!(parameters_drift(None, &stack).is_none());
    }
}
