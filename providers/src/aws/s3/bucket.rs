//! The `s3.bucket` provider: a bucket, with versioning and a public access
//! block (on unless turned off).
//!
//! A bucket is known by its globally unique name: create treats "you already
//! own it" as success, and `read` after a crash finds it by name, so a
//! resumed create never makes a second. Delete fails on a bucket that still
//! holds objects rather than deleting data it did not put there.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration,
    PublicAccessBlockConfiguration, VersioningConfiguration,
};
use serde_json::Value;

use crate::aws::{config, error, inputs};
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values,
};

/// The `s3.bucket` provider kind.
#[derive(Debug, Clone)]
pub struct S3Bucket {
    schema: Schema,
}

impl S3Bucket {
    /// The provider with its schema.
    pub fn new() -> Self {
        S3Bucket {
            schema: Schema {
                kind: StepKind::Resource,
                description: "An S3 bucket",
                inputs: vec![
                    InputSpec::required(
                        "name",
                        InputType::String,
                        "The bucket's globally unique name",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "versioning",
                        InputType::Bool,
                        "Keep every version of every object",
                    ),
                    InputSpec::optional(
                        "block_public_access",
                        InputType::Bool,
                        "Block all public access (the default: true)",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for S3Bucket {
    fn default() -> Self {
        Self::new()
    }
}

/// What a bucket name must look like: 3–63 lowercase letters, digits, dots
/// and hyphens, starting and ending with a letter or digit.
fn name_problem(name: &str) -> Option<String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let ends_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if (3..=63).contains(&name.len())
        && ok_chars
        && ends_ok(name.bytes().next())
        && ends_ok(name.bytes().last())
    {
        None
    } else {
        Some(format!(
            "`{name}` is not a valid bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
        ))
    }
}

/// The outputs of bucket `name` in `region`.
fn applied(name: &str, region: &str) -> Applied {
    let mut outputs = Values::new();
    outputs.insert("name".into(), Value::String(name.to_string()));
    outputs.insert(
        "arn".into(),
        Value::String(format!("arn:{}:s3:::{name}", config::partition(region))),
    );
    Applied {
        id: Some(name.to_string()),
        outputs,
        private: Value::Null,
    }
}

/// Whether bucket `name` exists and is reachable with our credentials.
async fn exists(client: &Client, name: &str) -> Result<bool, ProviderError> {
    match client.head_bucket().bucket(name).send().await {
        Ok(_) => Ok(true),
        Err(e)
            if error::code(&e) == Some("NotFound")
                || e.raw_response().is_some_and(|r| r.status().as_u16() == 404) =>
        {
            Ok(false)
        }
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 403) => {
            Err(ProviderError::fatal(format!(
                "bucket `{name}` exists but belongs to someone else (access denied); bucket names are global: choose another"
            )))
        }
        Err(e) => Err(error::aws(&format!("look at bucket `{name}`"), e)),
    }
}

/// Sets versioning and the public access block as the inputs ask.
async fn configure(
    client: &Client,
    name: &str,
    values: &Values,
    prior: Option<&Values>,
) -> Result<(), ProviderError> {
    let block = inputs::bool_or(values, "block_public_access", true)?;
    let was_block = prior
        .map(|p| inputs::bool_or(p, "block_public_access", true))
        .transpose()?;
    if was_block != Some(block) {
        if block {
            client
                .put_public_access_block()
                .bucket(name)
                .public_access_block_configuration(
                    PublicAccessBlockConfiguration::builder()
                        .block_public_acls(true)
                        .ignore_public_acls(true)
                        .block_public_policy(true)
                        .restrict_public_buckets(true)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| error::aws(&format!("block public access to bucket `{name}`"), e))?;
        } else if was_block.is_some() {
            client
                .delete_public_access_block()
                .bucket(name)
                .send()
                .await
                .map_err(|e| {
                    error::aws(
                        &format!("remove the public access block of bucket `{name}`"),
                        e,
                    )
                })?;
        }
    }
    let versioning = values.get("versioning").and_then(Value::as_bool);
    let was_versioning = prior
        .and_then(|p| p.get("versioning"))
        .and_then(Value::as_bool);
    // An unversioned bucket stays so unless versioning is asked for; once
    // enabled, it can only be suspended.
    let status = match (versioning, was_versioning) {
        (Some(true), w) if w != Some(true) => Some(BucketVersioningStatus::Enabled),
        (Some(false) | None, Some(true)) => Some(BucketVersioningStatus::Suspended),
        _ => None,
    };
    if let Some(status) = status {
        client
            .put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(VersioningConfiguration::builder().status(status).build())
            .send()
            .await
            .map_err(|e| error::aws(&format!("set versioning of bucket `{name}`"), e))?;
    }
    Ok(())
}

#[async_trait]
impl Provider for S3Bucket {
    fn name(&self) -> &'static str {
        "s3.bucket"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// Every s3.bucket step outputs `name`, `arn`, whatever its inputs.
    fn declared_outputs(
        &self,
        _inputs: &[(String, crate::contract::InputValue)],
        _ctx: &crate::contract::ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "s3.bucket",
            &["name", "arn"],
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        inputs
            .iter()
            .filter_map(|(k, v)| match (k.as_str(), v) {
                ("name", InputValue::Known(Value::String(n))) => {
                    name_problem(n).map(|m| Problem::at("name", m))
                }
                _ => None,
            })
            .collect()
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let sdk = config::sdk_config(ctx).await?;
        let region = config::region(&sdk);
        let client = config::s3_client(&sdk);
        let mut request = client.create_bucket().bucket(&name);
        if region != "us-east-1" {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region.as_str()))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => ctx.reporter.event(&format!("bucket `{name}` created")),
            Err(e) if error::code(&e) == Some("BucketAlreadyOwnedByYou") => {
                ctx.reporter
                    .event(&format!("bucket `{name}` already exists and is yours"));
            }
            Err(e) if error::code(&e) == Some("BucketAlreadyExists") => {
                return Err(ProviderError::fatal(format!(
                    "bucket `{name}` already exists and belongs to another account; bucket names are global: choose another"
                )));
            }
            Err(e) => return Err(error::refused(&format!("create bucket `{name}`"), e)),
        }
        configure(&client, &name, values, None).await?;
        Ok(applied(&name, &region))
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let sdk = config::sdk_config(ctx).await?;
        let client = config::s3_client(&sdk);
        if !exists(&client, &name).await? {
            ctx.reporter.event(&format!(
                "bucket `{name}` no longer exists: creating it again"
            ));
            return self.create(ctx, values).await;
        }
        configure(&client, &name, values, Some(prior.inputs)).await?;
        Ok(applied(&name, &config::region(&sdk)))
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(name) = prior.id.map(str::to_string).or_else(|| {
            prior
                .inputs
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string)
        }) else {
            return Ok(());
        };
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        match client.delete_bucket().bucket(&name).send().await {
            Ok(_) => Ok(()),
            Err(e) if error::code(&e) == Some("NoSuchBucket") => Ok(()),
            Err(e) if error::code(&e) == Some("BucketNotEmpty") => {
                Err(ProviderError::fatal(format!(
                    "bucket `{name}` still holds objects, and flow deletes only the objects it put there (with s3.sync); empty it first"
                )))
            }
            Err(e) => Err(error::aws(&format!("delete bucket `{name}`"), e)),
        }
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("the bucket's name")
    }

    /// The bucket of the step's `name`.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let bare = id.strip_prefix("arn:aws:s3:::").unwrap_or(id);
        if bare != name {
            return Err(crate::contract::import_mismatch("bucket", id, &name));
        }
        let sdk = config::sdk_config(ctx).await?;
        let client = config::s3_client(&sdk);
        if !exists(&client, &name).await? {
            return Err(crate::contract::import_missing("bucket", id));
        }
        Ok(applied(&name, &config::region(&sdk)))
    }

    /// Whether the bucket still exists.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let name = inputs::req_str(prior.inputs, "name")?;
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        Ok(if exists(&client, &name).await? {
            Refreshed::unchanged()
        } else {
            Refreshed::Gone
        })
    }

    /// The bucket of this name, if it exists and is ours.
    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let sdk = config::sdk_config(ctx).await?;
        let client = config::s3_client(&sdk);
        if !exists(&client, &name).await? {
            return Ok(ReadOutcome::Missing);
        }
        // The interrupted create may not have configured it yet.
        configure(&client, &name, values, None).await?;
        Ok(ReadOutcome::Present(applied(&name, &config::region(&sdk))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_are_checked() {
        assert!(name_problem("my-data.bucket-1").is_none());
        for bad in [
            "ab",
            "Upper",
            "-lead",
            "trail-",
            "under_score",
            &"a".repeat(64),
        ] {
            assert!(name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn outputs_carry_the_partitioned_arn() {
        assert_eq!(applied("b", "us-east-1").outputs["arn"], "arn:aws:s3:::b");
        assert_eq!(
            applied("b", "cn-north-1").outputs["arn"],
            "arn:aws-cn:s3:::b"
        );
    }
}
