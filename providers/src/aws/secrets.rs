//! The `secretsmanager.secret` provider: a secret holding a given value or
//! an SSH private key that flow makes itself.
//!
//! With `generate = "ssh-ed25519"` or `"ssh-rsa-4096"`, the key pair is made
//! in-process; the private key goes only to Secrets Manager, the public key
//! is the `public_key` output. Create passes the operation token as
//! `ClientRequestToken` and a `flow:token` tag; `read` after a crash finds
//! the secret by name and that tag, and takes the public key back from the
//! stored private key. Delete removes the secret without a recovery window,
//! so the name can be used again at once.

mod keygen;

use async_trait::async_trait;
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::operation::describe_secret::DescribeSecretOutput;
use aws_sdk_secretsmanager::types::Tag;
use serde_json::Value;

use super::{config, error, inputs, tags};
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values, input_drift, is_sealed,
};

/// The `secretsmanager.secret` provider kind.
#[derive(Debug, Clone)]
pub struct SecretsManagerSecret {
    schema: Schema,
}

impl SecretsManagerSecret {
    /// The provider with its schema.
    pub fn new() -> Self {
        SecretsManagerSecret {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A Secrets Manager secret: a given value, or an SSH key pair flow generates",
                inputs: vec![
                    InputSpec::required("name", InputType::String, "The secret's name")
                        .forces_new(),
                    InputSpec::optional(
                        "value",
                        InputType::String,
                        "The secret's value (never printed or stored)",
                    )
                    .secret(),
                    InputSpec::optional(
                        "generate",
                        InputType::String,
                        "Make an SSH key pair instead: \"ssh-ed25519\" or \"ssh-rsa-4096\"; the private key is the value",
                    ),
                    InputSpec::optional(
                        "kms_key_id",
                        InputType::String,
                        "The KMS key that encrypts it (default: aws/secretsmanager)",
                    ),
                    InputSpec::optional(
                        "tags",
                        InputType::Map(Box::new(InputType::String)),
                        "Tags on the secret",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for SecretsManagerSecret {
    fn default() -> Self {
        Self::new()
    }
}

/// A Secrets Manager client for `ctx`.
async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

/// The secret called (or with ARN) `id`, if it exists and is not deleted.
async fn describe(
    client: &Client,
    id: &str,
) -> Result<Option<DescribeSecretOutput>, ProviderError> {
    match client.describe_secret().secret_id(id).send().await {
        Ok(out) if out.deleted_date().is_some() => Ok(None),
        Ok(out) => Ok(Some(out)),
        Err(e) if error::code(&e) == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe secret `{id}`"), e)),
    }
}

/// The value of the secret's tag `key`.
fn tag<'a>(secret: &'a DescribeSecretOutput, key: &str) -> Option<&'a str> {
    secret
        .tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// The value to store: the given one, or a new key pair's private key (with
/// its public key).
async fn material(step: &str, values: &Values) -> Result<(String, String), ProviderError> {
    if let Some(kind) = inputs::opt_str(values, "generate")? {
        let comment = format!("flow:{step}");
        let pair = tokio::task::spawn_blocking(move || keygen::generate(&kind, &comment))
            .await
            .map_err(|e| ProviderError::fatal(format!("key generation stopped: {e}")))??;
        return Ok((pair.private.to_string(), pair.public));
    }
    let value = inputs::opt_str(values, "value")?
        .ok_or_else(|| ProviderError::fatal("set `value` or `generate`"))?;
    if is_sealed(&Value::String(value.clone())) {
        return Err(ProviderError::fatal(
            "`value` is sensitive and state keeps only its digest; apply with the workflow's secrets available",
        ));
    }
    Ok((value, String::new()))
}

/// The outputs of a secret: its ARN and the public key (empty for a given value).
fn applied(arn: &str, public_key: &str, version: Option<String>) -> Applied {
    let mut outputs = Values::new();
    outputs.insert("arn".into(), Value::String(arn.to_string()));
    outputs.insert("public_key".into(), Value::String(public_key.to_string()));
    Applied {
        id: Some(arn.to_string()),
        outputs,
        private: serde_json::json!({ "version_id": version }),
    }
}

/// The id of the secret's current version (`AWSCURRENT`).
fn current_version(secret: &DescribeSecretOutput) -> Option<String> {
    secret
        .version_ids_to_stages()?
        .iter()
        .find(|(_, stages)| stages.iter().any(|s| s == "AWSCURRENT"))
        .map(|(id, _)| id.clone())
}

/// The current version of the secret `arn`, looked up.
async fn looked_up_version(client: &Client, arn: &str) -> Result<Option<String>, ProviderError> {
    Ok(describe(client, arn)
        .await?
        .as_ref()
        .and_then(current_version))
}

/// The public key of a stored generated key (empty for a given value).
async fn stored_public_key(
    client: &Client,
    arn: &str,
    values: &Values,
) -> Result<String, ProviderError> {
    if inputs::opt_str(values, "generate")?.is_none() {
        return Ok(String::new());
    }
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| error::aws(&format!("read secret `{arn}`"), e))?;
    keygen::public_of(out.secret_string().unwrap_or_default())
}

#[async_trait]
impl Provider for SecretsManagerSecret {
    fn name(&self) -> &'static str {
        "secretsmanager.secret"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// Every secretsmanager.secret step outputs `arn`, `public_key`, whatever its inputs.
    fn declared_outputs(
        &self,
        _inputs: &[(String, crate::contract::InputValue)],
        _ctx: &crate::contract::ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "secretsmanager.secret",
            &["arn", "public_key"],
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Exactly one of `value` and `generate`, and a key type flow can make.
    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        let has = |n: &str| inputs.iter().any(|(k, _)| k == n);
        let mut problems = Vec::new();
        match (has("value"), has("generate")) {
            (true, true) => problems.push(
                Problem::at("generate", "set either `value` or `generate`, not both").with_help(
                    "`generate` makes an SSH key pair and stores its private key as the value",
                ),
            ),
            (false, false) => problems.push(
                Problem::at_path(&[], "a secret needs `value` or `generate`")
                    .with_help("e.g. generate = \"ssh-ed25519\", or value = \"${vars.token}\""),
            ),
            _ => {}
        }
        if let Some((_, InputValue::Known(Value::String(kind)))) =
            inputs.iter().find(|(k, _)| k == "generate")
            && !keygen::KINDS.contains(&kind.as_str())
        {
            problems.push(
                Problem::at("generate", format!("flow cannot generate {kind:?}"))
                    .with_help(format!("use one of {}", keygen::KINDS.join(", "))),
            );
        }
        problems
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let client = client(ctx).await?;
        if let Some(existing) = describe(&client, &name).await? {
            let arn = existing.arn().unwrap_or(&name).to_string();
            if !ctx.token.is_empty() && tag(&existing, tags::TOKEN) == Some(ctx.token.as_str()) {
                ctx.reporter.event(&format!(
                    "secret `{name}` was already created by this operation"
                ));
                let public = stored_public_key(&client, &arn, values).await?;
                return Ok(applied(&arn, &public, current_version(&existing)));
            }
            return Err(crate::ownership::not_own(&format!("secret `{name}`")));
        }
        let (secret, public) = material(&ctx.step, values).await?;
        let all_tags = tags::with_token(&inputs::str_map(values, "tags")?, &ctx.token);
        let mut request = client
            .create_secret()
            .name(&name)
            .secret_string(secret)
            .set_kms_key_id(inputs::opt_str(values, "kms_key_id")?)
            .set_tags(Some(
                all_tags
                    .iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ));
        if ctx.token.len() >= 32 {
            request = request.client_request_token(&ctx.token);
        }
        let out = request
            .send()
            .await
            .map_err(|e| error::refused(&format!("create secret `{name}`"), e))?;
        let arn = out.arn().unwrap_or(&name).to_string();
        ctx.reporter.event(&format!("secret `{name}` created"));
        Ok(applied(&arn, &public, out.version_id().map(str::to_string)))
    }

    /// A new value or key (a new version of the secret), another KMS key, or
    /// other tags, in place.
    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let client = client(ctx).await?;
        let id = prior.id.unwrap_or(&name).to_string();
        let Some(current) = describe(&client, &id).await? else {
            ctx.reporter.event(&format!(
                "secret `{name}` no longer exists: creating it again"
            ));
            return self.create(ctx, values).await;
        };
        let arn = current.arn().unwrap_or(&id).to_string();
        let changed = |k: &str| prior.inputs.get(k) != values.get(k);
        let mut public = prior
            .outputs
            .get("public_key")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // A given value is compared with the stored one (state keeps only a
        // digest of it); a generated key is made again only when `generate` changes.
        // A version stored outside flow (the recorded one is no longer
        // current) is replaced too: a generated key is made again.
        let replaced_outside = prior
            .private
            .get("version_id")
            .and_then(Value::as_str)
            .is_some_and(|v| current_version(&current).as_deref() != Some(v));
        let store_new = if values.get("generate").is_some_and(|g| !g.is_null()) {
            changed("generate") || replaced_outside
        } else {
            let wanted = inputs::opt_str(values, "value")?;
            let stored = client
                .get_secret_value()
                .secret_id(&arn)
                .send()
                .await
                .map_err(|e| error::aws(&format!("read secret `{name}`"), e))?;
            stored.secret_string() != wanted.as_deref()
        };
        if store_new {
            let (secret, new_public) = material(&ctx.step, values).await?;
            let mut request = client
                .put_secret_value()
                .secret_id(&arn)
                .secret_string(secret);
            if ctx.token.len() >= 32 {
                request = request.client_request_token(&ctx.token);
            }
            request
                .send()
                .await
                .map_err(|e| error::aws(&format!("store a new value in secret `{name}`"), e))?;
            public = new_public;
        }
        if changed("kms_key_id") {
            client
                .update_secret()
                .secret_id(&arn)
                .set_kms_key_id(inputs::opt_str(values, "kms_key_id")?)
                .send()
                .await
                .map_err(|e| error::aws(&format!("change the KMS key of secret `{name}`"), e))?;
        }
        let current_tags = current
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect();
        let mut wanted = inputs::str_map(values, "tags")?;
        if let Some(t) = tag(&current, tags::TOKEN) {
            wanted.insert(tags::TOKEN.into(), t.to_string());
        }
        let (add, remove) = tags::changes(&current_tags, &wanted);
        if !add.is_empty() {
            client
                .tag_resource()
                .secret_id(&arn)
                .set_tags(Some(
                    add.iter()
                        .map(|(k, v)| Tag::builder().key(k).value(v).build())
                        .collect(),
                ))
                .send()
                .await
                .map_err(|e| error::aws(&format!("tag secret `{name}`"), e))?;
        }
        if !remove.is_empty() {
            client
                .untag_resource()
                .secret_id(&arn)
                .set_tag_keys(Some(remove))
                .send()
                .await
                .map_err(|e| error::aws(&format!("untag secret `{name}`"), e))?;
        }
        Ok(applied(
            &arn,
            &public,
            looked_up_version(&client, &arn).await?,
        ))
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(id) = prior.id.map(str::to_string).or_else(|| {
            prior
                .inputs
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string)
        }) else {
            return Ok(());
        };
        let client = client(ctx).await?;
        match client
            .delete_secret()
            .secret_id(&id)
            .force_delete_without_recovery(true)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if error::code(&e) == Some("ResourceNotFoundException") => Ok(()),
            Err(e) => Err(error::aws(&format!("delete secret `{id}`"), e)),
        }
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("the secret's name or ARN")
    }

    /// The secret of the step's `name`, by name or ARN; its value is never read.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let client = client(ctx).await?;
        let Some(found) = describe(&client, id).await? else {
            return Err(crate::contract::import_missing("secret", id));
        };
        if found.name() != Some(name.as_str()) {
            return Err(crate::contract::import_mismatch("secret", id, &name));
        }
        let arn = found.arn().unwrap_or(&name).to_string();
        let public = stored_public_key(&client, &arn, values).await?;
        Ok(applied(&arn, &public, current_version(&found)))
    }

    /// Whether the secret still exists (scheduled for deletion counts as
    /// gone), its tags and its KMS key; never its value.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let name = inputs::req_str(prior.inputs, "name")?;
        let client = client(ctx).await?;
        let Some(found) = describe(&client, prior.id.unwrap_or(&name)).await? else {
            return Ok(Refreshed::Gone);
        };
        let mut drift = Vec::new();
        let real_tags: serde_json::Map<String, Value> = found
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), Value::from(t.value()?))))
            .filter(|(k, _)| !k.starts_with("flow:"))
            .collect();
        drift.extend(input_drift(prior.inputs, "tags", Value::Object(real_tags)));
        if let Some(key) = found.kms_key_id() {
            drift.extend(input_drift(prior.inputs, "kms_key_id", Value::from(key)));
        }
        if let Some(recorded) = prior.private.get("version_id").filter(|v| !v.is_null()) {
            let real = current_version(&found).map_or(Value::Null, Value::from);
            drift.extend(crate::contract::attribute_drift(
                "current version",
                recorded.clone(),
                real,
            ));
        }
        Ok(Refreshed::drifted(drift))
    }

    /// The secret of this name carrying this operation's token.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let client = client(ctx).await?;
        let Some(found) = describe(&client, id.unwrap_or(&name)).await? else {
            return Ok(ReadOutcome::Missing);
        };
        if id.is_none() && tag(&found, tags::TOKEN) != Some(ctx.token.as_str()) {
            return Ok(ReadOutcome::Missing);
        }
        let arn = found.arn().unwrap_or(&name).to_string();
        let public = stored_public_key(&client, &arn, values).await?;
        Ok(ReadOutcome::Present(applied(
            &arn,
            &public,
            current_version(&found),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(inputs: &[(&str, InputValue)]) -> Vec<Problem> {
        let inputs: Vec<(String, InputValue)> = inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        SecretsManagerSecret::new().validate(
            &inputs,
            &ValidateContext {
                workdir: ".".into(),
            },
        )
    }

    #[test]
    fn value_or_generate_exactly_once() {
        let name = ("name", InputValue::Known(json!("ssh")));
        assert!(
            check(&[
                name.clone(),
                ("generate", InputValue::Known(json!("ssh-ed25519")))
            ])
            .is_empty()
        );
        assert!(check(&[name.clone(), ("value", InputValue::Unknown)]).is_empty());
        assert_eq!(check(std::slice::from_ref(&name)).len(), 1);
        let both = check(&[
            name.clone(),
            ("value", InputValue::Unknown),
            ("generate", InputValue::Known(json!("ssh-ed25519"))),
        ]);
        assert_eq!(both[0].path, ["generate"]);
        let bad = check(&[name, ("generate", InputValue::Known(json!("ssh-dss")))]);
        assert!(bad[0].message.contains("cannot generate"));
    }

    #[test]
    fn value_is_sensitive_and_name_forces_replacement() {
        let s = SecretsManagerSecret::new();
        assert!(s.schema().input("value").unwrap().sensitive);
        assert!(s.schema().input("name").unwrap().force_new);
    }

    #[tokio::test]
    async fn generated_material_keeps_the_private_key_out_of_the_outputs() {
        let values = crate::testing::values(json!({"name": "k", "generate": "ssh-ed25519"}));
        let (secret, public) = material("ssh", &values).await.unwrap();
        assert!(secret.contains("OPENSSH PRIVATE KEY"));
        let a = applied("arn:x", &public, Some("v1".into()));
        assert!(
            !a.outputs
                .values()
                .any(|v| v.as_str().is_some_and(|s| s.contains("PRIVATE")))
        );
        assert!(
            a.outputs["public_key"]
                .as_str()
                .unwrap()
                .starts_with("ssh-ed25519 ")
        );
    }
}
