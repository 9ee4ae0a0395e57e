//! The `ecr.repository` provider: a container image repository.
//!
//! Create tags the repository with `flow:token` = the operation token (ECR
//! has no idempotency token), so that `read` after a crash adopts the
//! repository this operation made and nothing else; scan-on-push and tags
//! change in place; the name forces a new repository. Destroy refuses to
//! delete a repository that still holds images unless `force_delete` is set.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ecr::Client;
use aws_sdk_ecr::types::{ImageScanningConfiguration, Repository, Tag};
use serde_json::Value;

use super::{config, error, inputs, tags};
use crate::contract::{
    Applied, InputSpec, InputType, OpContext, Prior, Provider, ProviderError, ReadOutcome,
    Refreshed, Schema, StepKind, Values, input_drift,
};

/// The `ecr.repository` provider kind.
#[derive(Debug, Clone)]
pub struct EcrRepository {
    schema: Schema,
}

impl EcrRepository {
    /// The provider with its schema.
    pub fn new() -> Self {
        EcrRepository {
            schema: Schema {
                kind: StepKind::Resource,
                description: "An ECR container image repository",
                inputs: vec![
                    InputSpec::required("name", InputType::String, "The repository's name")
                        .forces_new(),
                    InputSpec::optional(
                        "scan_on_push",
                        InputType::Bool,
                        "Scan each image when it is pushed",
                    ),
                    InputSpec::optional(
                        "tags",
                        InputType::Map(Box::new(InputType::String)),
                        "Tags on the repository",
                    ),
                    InputSpec::optional(
                        "force_delete",
                        InputType::Bool,
                        "Let destroy delete the repository with the images in it",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for EcrRepository {
    fn default() -> Self {
        Self::new()
    }
}

/// An ECR client for `ctx`.
async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

/// ECR tags from a map.
fn ecr_tags(tags: &BTreeMap<String, String>) -> Result<Vec<Tag>, ProviderError> {
    tags.iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| ProviderError::fatal(format!("tag `{k}`: {e}")))
        })
        .collect()
}

/// Repository `name`, if it exists.
async fn describe(client: &Client, name: &str) -> Result<Option<Repository>, ProviderError> {
    match client
        .describe_repositories()
        .repository_names(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.repositories().first().cloned()),
        Err(e) if error::code(&e) == Some("RepositoryNotFoundException") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe repository `{name}`"), e)),
    }
}

/// The repository's tags.
async fn tags_of(
    client: &Client,
    repo: &Repository,
) -> Result<BTreeMap<String, String>, ProviderError> {
    let arn = repo.repository_arn().unwrap_or_default();
    let out = client
        .list_tags_for_resource()
        .resource_arn(arn)
        .send()
        .await
        .map_err(|e| error::aws(&format!("list the tags of repository `{arn}`"), e))?;
    Ok(out
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect())
}

/// The outputs of a repository.
fn applied(repo: &Repository) -> Applied {
    let mut outputs = Values::new();
    outputs.insert(
        "repository_uri".into(),
        Value::String(repo.repository_uri().unwrap_or_default().into()),
    );
    outputs.insert(
        "arn".into(),
        Value::String(repo.repository_arn().unwrap_or_default().into()),
    );
    Applied {
        id: repo.repository_name().map(str::to_string),
        outputs,
        private: Value::Null,
    }
}

#[async_trait]
impl Provider for EcrRepository {
    fn name(&self) -> &'static str {
        "ecr.repository"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// Every ecr.repository step outputs `repository_uri`, `arn`, whatever its inputs.
    fn declared_outputs(
        &self,
        _inputs: &[(String, crate::contract::InputValue)],
        _ctx: &crate::contract::ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "ecr.repository",
            &["repository_uri", "arn"],
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let client = client(ctx).await?;
        let all_tags = tags::with_token(&inputs::str_map(values, "tags")?, &ctx.token);
        let result = client
            .create_repository()
            .repository_name(&name)
            .image_scanning_configuration(
                ImageScanningConfiguration::builder()
                    .scan_on_push(inputs::bool_or(values, "scan_on_push", false)?)
                    .build(),
            )
            .set_tags(Some(ecr_tags(&all_tags)?))
            .send()
            .await;
        match result {
            Ok(out) => {
                ctx.reporter.event(&format!("repository `{name}` created"));
                let repo = out
                    .repository()
                    .ok_or_else(|| ProviderError::fatal("ECR answered without the repository").with_help("the service gave an answer flow did not expect; run `flow apply` again, and if it repeats check that AWS_ENDPOINT_URL (if set) points at AWS or a faithful stand-in"))?;
                Ok(applied(repo))
            }
            Err(e) if error::code(&e) == Some("RepositoryAlreadyExistsException") => {
                let repo = describe(&client, &name)
                    .await?
                    .ok_or_else(|| error::aws(&format!("create repository `{name}`"), e))?;
                if !ctx.token.is_empty()
                    && tags_of(&client, &repo).await?.get(tags::TOKEN) == Some(&ctx.token)
                {
                    return Ok(applied(&repo));
                }
                Err(crate::ownership::not_own(&format!("repository `{name}`")))
            }
            Err(e) => Err(error::refused(&format!("create repository `{name}`"), e)),
        }
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        let client = client(ctx).await?;
        let Some(repo) = describe(&client, &name).await? else {
            ctx.reporter.event(&format!(
                "repository `{name}` no longer exists: creating it again"
            ));
            return self.create(ctx, values).await;
        };
        let scan = inputs::bool_or(values, "scan_on_push", false)?;
        if repo
            .image_scanning_configuration()
            .map(|c| c.scan_on_push())
            != Some(scan)
        {
            client
                .put_image_scanning_configuration()
                .repository_name(&name)
                .image_scanning_configuration(
                    ImageScanningConfiguration::builder()
                        .scan_on_push(scan)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| error::aws(&format!("set scan-on-push of repository `{name}`"), e))?;
        }
        if prior.inputs.get("tags") != values.get("tags") {
            let arn = repo.repository_arn().unwrap_or_default().to_string();
            let current = tags_of(&client, &repo).await?;
            let mut wanted = inputs::str_map(values, "tags")?;
            if let Some(t) = current.get(tags::TOKEN) {
                wanted.insert(tags::TOKEN.into(), t.clone());
            }
            let (add, remove) = tags::changes(&current, &wanted);
            if !add.is_empty() {
                client
                    .tag_resource()
                    .resource_arn(&arn)
                    .set_tags(Some(ecr_tags(&add)?))
                    .send()
                    .await
                    .map_err(|e| error::aws(&format!("tag repository `{name}`"), e))?;
            }
            if !remove.is_empty() {
                client
                    .untag_resource()
                    .resource_arn(&arn)
                    .set_tag_keys(Some(remove))
                    .send()
                    .await
                    .map_err(|e| error::aws(&format!("untag repository `{name}`"), e))?;
            }
        }
        Ok(applied(&repo))
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
        let force = inputs::bool_or(prior.inputs, "force_delete", false)?;
        let client = client(ctx).await?;
        match client
            .delete_repository()
            .repository_name(&name)
            .force(force)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if error::code(&e) == Some("RepositoryNotFoundException") => Ok(()),
            Err(e) if error::code(&e) == Some("RepositoryNotEmptyException") => {
                Err(ProviderError::fatal(format!(
                    "repository `{name}` still holds images; delete them, or set force_delete = true and apply before destroying"
                )))
            }
            Err(e) => Err(error::aws(&format!("delete repository `{name}`"), e)),
        }
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("the repository's name")
    }

    /// The repository of the step's `name`.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "name")?;
        if id != name {
            return Err(crate::contract::import_mismatch("repository", id, &name));
        }
        let client = client(ctx).await?;
        match describe(&client, &name).await? {
            Some(repo) => Ok(applied(&repo)),
            None => Err(crate::contract::import_missing("repository", id)),
        }
    }

    /// Whether the repository still exists, and its scan-on-push setting.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let name = inputs::req_str(prior.inputs, "name")?;
        let client = client(ctx).await?;
        let Some(repo) = describe(&client, &name).await? else {
            return Ok(Refreshed::Gone);
        };
        let scan = repo
            .image_scanning_configuration()
            .map(|c| c.scan_on_push())
            .unwrap_or(false);
        Ok(Refreshed::drifted(
            input_drift(prior.inputs, "scan_on_push", Value::from(scan))
                .into_iter()
                .collect(),
        ))
    }

    /// The repository of this name carrying this operation's token.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let name = match id {
            Some(id) => id.to_string(),
            None => inputs::req_str(values, "name")?,
        };
        let client = client(ctx).await?;
        let Some(repo) = describe(&client, &name).await? else {
            return Ok(ReadOutcome::Missing);
        };
        if id.is_none() && tags_of(&client, &repo).await?.get(tags::TOKEN) != Some(&ctx.token) {
            return Ok(ReadOutcome::Missing);
        }
        Ok(ReadOutcome::Present(applied(&repo)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_forces_replacement_and_tags_convert() {
        let p = EcrRepository::new();
        assert!(p.schema().input("name").unwrap().force_new);
        assert!(!p.schema().input("scan_on_push").unwrap().force_new);
        let tags = ecr_tags(&BTreeMap::from([("a".to_string(), "1".to_string())])).unwrap();
        assert_eq!(tags[0].key(), "a");
    }
}
