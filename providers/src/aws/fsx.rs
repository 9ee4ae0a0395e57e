//! The `fsx.lustre` provider: an FSx for Lustre file system.
//!
//! Create sends the operation token as `ClientRequestToken` and as a
//! `flow:token` tag, and waits for `AVAILABLE`, reporting lifecycle changes;
//! `read` after a crash finds the file system by that tag. Storage capacity
//! grows in place (shrinking replaces), tags change in place, and any other
//! change replaces the file system. Delete waits until it is gone.

mod file_system;
mod schema;
mod wait;

use async_trait::async_trait;
use aws_sdk_fsx::Client;
use aws_sdk_fsx::types::{
    CreateFileSystemLustreConfiguration, FileSystemType, LustreDeploymentType, Tag,
};
use serde_json::Value;
use tokio::time::Instant;

use super::{config, error, inputs, tags};
use crate::contract::{
    Applied, Change, InputValue, OpContext, Prior, Problem, Provider, ProviderError, ReadOutcome,
    Refreshed, Schema, ValidateContext, Values, default_diff, input_drift,
};
use file_system::{applied, describe, find_by_token, lifecycle, tag_map};
use wait::settle;

/// The `fsx.lustre` provider kind.
#[derive(Debug, Clone)]
pub struct FsxLustre {
    schema: Schema,
}

impl FsxLustre {
    /// The provider with its schema.
    pub fn new() -> Self {
        FsxLustre {
            schema: schema::schema(),
        }
    }
}

impl Default for FsxLustre {
    fn default() -> Self {
        Self::new()
    }
}

/// An FSx client for `ctx`.
async fn client(ctx: &OpContext) -> Result<Client, ProviderError> {
    Ok(Client::new(&config::sdk_config(ctx).await?))
}

impl FsxLustre {
    /// Waits for a file system this operation made (its create sent at
    /// `sent`, when this call made it) and returns its outputs.
    async fn finish(
        &self,
        ctx: &OpContext,
        client: &Client,
        id: &str,
        sent: Option<Instant>,
    ) -> Result<Applied, ProviderError> {
        let fs = settle(ctx, client, id, false, sent).await?;
        Ok(applied(
            &fs.expect("settle without gone_ok returns a file system"),
        ))
    }
}

#[async_trait]
impl Provider for FsxLustre {
    fn name(&self) -> &'static str {
        "fsx.lustre"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    fn capacity(
        &self,
        inputs: &Values,
        _ctx: &crate::contract::ValidateContext,
    ) -> Vec<crate::contract::Capacity> {
        let Some(gib) = inputs.get("storage_capacity").and_then(Value::as_u64) else {
            return Vec::new();
        };
        let deployment_type = inputs
            .get("deployment_type")
            .and_then(Value::as_str)
            .unwrap_or("SCRATCH_2")
            .to_string();
        let throughput = inputs
            .get("per_unit_storage_throughput")
            .and_then(Value::as_u64)
            .map(|t| t as u32);
        vec![crate::contract::Capacity::LustreStorage {
            gib,
            deployment_type,
            throughput,
        }]
    }

    /// Every fsx.lustre step outputs `file_system_id`, `dns_name`, `mount_name`, whatever its inputs.
    fn declared_outputs(
        &self,
        _inputs: &[(String, crate::contract::InputValue)],
        _ctx: &crate::contract::ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "fsx.lustre",
            &["file_system_id", "dns_name", "mount_name"],
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        schema::problems(inputs)
    }

    /// Capacity grows in place and shrinking replaces; tags change in place;
    /// the rest replaces (as the schema marks).
    fn diff(&self, prior: &Values, desired: &Values) -> Change {
        let change = default_diff(&self.schema, prior, desired);
        let shrinks = match (
            prior.get("storage_capacity"),
            desired.get("storage_capacity"),
        ) {
            (Some(a), Some(b)) => matches!((a.as_i64(), b.as_i64()), (Some(a), Some(b)) if b < a),
            _ => false,
        };
        match change {
            Change::Update(_) if shrinks => Change::Replace(vec!["storage_capacity".into()]),
            Change::Replace(mut forcing) if shrinks => {
                forcing.push("storage_capacity".into());
                Change::Replace(forcing)
            }
            other => other,
        }
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let client = client(ctx).await?;
        if !ctx.token.is_empty()
            && let Some(fs) = find_by_token(&client, &ctx.token).await?
        {
            let id = fs.file_system_id().unwrap_or_default().to_string();
            ctx.reporter.event(&format!(
                "file system `{id}` was already created by this operation"
            ));
            return self.finish(ctx, &client, &id, None).await;
        }
        let capacity = inputs::opt_int(values, "storage_capacity")?
            .ok_or_else(|| ProviderError::bad_input("`storage_capacity` is required"))?;
        let mut lustre = CreateFileSystemLustreConfiguration::builder().deployment_type(
            LustreDeploymentType::from(
                inputs::opt_str(values, "deployment_type")?
                    .as_deref()
                    .unwrap_or("SCRATCH_2"),
            ),
        );
        if let Some(t) = inputs::opt_int(values, "per_unit_storage_throughput")? {
            lustre = lustre.per_unit_storage_throughput(t as i32);
        }
        if let Some(p) = inputs::opt_str(values, "import_path")? {
            lustre = lustre.import_path(p);
        }
        if let Some(p) = inputs::opt_str(values, "export_path")? {
            lustre = lustre.export_path(p);
        }
        let all_tags = tags::with_token(&inputs::str_map(values, "tags")?, &ctx.token);
        let mut request = client
            .create_file_system()
            .file_system_type(FileSystemType::Lustre)
            .storage_capacity(capacity as i32)
            .set_subnet_ids(Some(inputs::str_list(values, "subnet_ids")?))
            .set_security_group_ids(Some(inputs::str_list(values, "security_group_ids")?))
            .lustre_configuration(lustre.build())
            .set_tags(Some(
                all_tags
                    .iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ));
        if !ctx.token.is_empty() {
            request = request.client_request_token(&ctx.token);
        }
        // No SDK retry of the create itself: a retry after a lost answer
        // would make a second file system wherever the token is not
        // honoured. The engine retries instead, and this create looks for
        // the token's file system first.
        let sent = Instant::now();
        let out = request
            .customize()
            .config_override(
                aws_sdk_fsx::config::Builder::default()
                    .retry_config(aws_config::retry::RetryConfig::disabled()),
            )
            .send()
            .await
            .map_err(|e| error::refused("create FSx for Lustre file system", e))?;
        let id = out
            .file_system()
            .and_then(|fs| fs.file_system_id())
            .ok_or_else(|| ProviderError::fatal("FSx answered without a file system id").with_help("the service gave an answer flow did not expect; run `flow apply` again, and if it repeats check that AWS_ENDPOINT_URL (if set) points at AWS or a faithful stand-in"))?
            .to_string();
        ctx.reporter.event(&format!(
            "file system `{id}` created; waiting until it is AVAILABLE"
        ));
        self.finish(ctx, &client, &id, Some(sent)).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let client = client(ctx).await?;
        let id = prior
            .id
            .ok_or_else(|| ProviderError::fatal("state records no file system id").with_help("the step's record is incomplete (written by an older flow, or edited by hand): look at it with `flow state show FILE STEP`, or restore a backup with `flow state restore`"))?
            .to_string();
        let Some(fs) = settle(ctx, &client, &id, true, None).await? else {
            return Err(ProviderError::fatal(format!(
                "file system `{id}` no longer exists; run `flow apply --replace {}` to create it again",
                ctx.step
            )));
        };
        if let Some(capacity) = inputs::opt_int(values, "storage_capacity")?
            && fs
                .storage_capacity()
                .is_some_and(|c| i64::from(c) < capacity)
        {
            let mut request = client
                .update_file_system()
                .file_system_id(&id)
                .storage_capacity(capacity as i32);
            if !ctx.token.is_empty() {
                request = request.client_request_token(&ctx.token);
            }
            request.send().await.map_err(|e| {
                error::aws(&format!("grow file system `{id}` to {capacity} GiB"), e)
            })?;
            ctx.reporter
                .event(&format!("file system `{id}`: growing to {capacity} GiB"));
        }
        let arn = fs.resource_arn().unwrap_or_default().to_string();
        let current = tag_map(&fs);
        let wanted = inputs::str_map(values, "tags")?;
        let mut desired_tags = wanted.clone();
        if let Some(t) = current.get(tags::TOKEN) {
            desired_tags.insert(tags::TOKEN.into(), t.clone());
        }
        let (add, remove) = tags::changes(&current, &desired_tags);
        if !add.is_empty() {
            client
                .tag_resource()
                .resource_arn(&arn)
                .set_tags(Some(
                    add.iter()
                        .map(|(k, v)| Tag::builder().key(k).value(v).build())
                        .collect(),
                ))
                .send()
                .await
                .map_err(|e| error::aws(&format!("tag file system `{id}`"), e))?;
        }
        if !remove.is_empty() {
            client
                .untag_resource()
                .resource_arn(&arn)
                .set_tag_keys(Some(remove))
                .send()
                .await
                .map_err(|e| error::aws(&format!("untag file system `{id}`"), e))?;
        }
        self.finish(ctx, &client, &id, None).await
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(id) = prior.id else { return Ok(()) };
        let client = client(ctx).await?;
        let Some(fs) = describe(&client, id).await? else {
            return Ok(());
        };
        if lifecycle(&fs) != "DELETING" {
            let mut request = client.delete_file_system().file_system_id(id);
            if !ctx.token.is_empty() {
                request = request.client_request_token(&ctx.token);
            }
            match request.send().await {
                Ok(_) => {}
                Err(e) if error::code(&e) == Some("FileSystemNotFound") => return Ok(()),
                Err(e) => return Err(error::aws(&format!("delete file system `{id}`"), e)),
            }
        }
        wait::deleted(ctx, &client, id).await
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("the file system's id (fs-…)")
    }

    /// The file system `id`, once available.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        _values: &Values,
    ) -> Result<Applied, ProviderError> {
        let well_formed = id
            .strip_prefix("fs-")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if !well_formed {
            return Err(ProviderError::invalid(format!(
                "`{id}` is not an FSx file system id: those look like `fs-0123456789abcdef0`"
            )));
        }
        let client = client(ctx).await?;
        let Some(fs) = describe(&client, id).await? else {
            return Err(crate::contract::import_missing("file system", id));
        };
        if lifecycle(&fs) != "AVAILABLE" {
            return Err(ProviderError::invalid(format!(
                "file system `{id}` is {}: only an available one can be imported",
                lifecycle(&fs)
            )));
        }
        Ok(applied(&fs))
    }

    /// Lifecycle, storage capacity and throughput of the recorded file system.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let Some(id) = prior.id else {
            return Ok(Refreshed::Gone);
        };
        let client = client(ctx).await?;
        let Some(fs) = describe(&client, id).await? else {
            return Ok(Refreshed::Gone);
        };
        let state = lifecycle(&fs);
        if state == "DELETING" {
            return Ok(Refreshed::Gone);
        }
        let mut drift = Vec::new();
        if state != "AVAILABLE" && state != "UPDATING" {
            drift.push(crate::contract::Drift::of_attribute(
                "lifecycle",
                Value::from("AVAILABLE"),
                Value::from(state),
            ));
        }
        if let Some(gib) = fs.storage_capacity() {
            drift.extend(input_drift(
                prior.inputs,
                "storage_capacity",
                Value::from(gib),
            ));
        }
        if let Some(t) = fs
            .lustre_configuration()
            .and_then(|l| l.per_unit_storage_throughput())
        {
            drift.extend(input_drift(
                prior.inputs,
                "per_unit_storage_throughput",
                Value::from(t),
            ));
        }
        Ok(Refreshed::Present {
            drift,
            outputs: Some(applied(&fs).outputs),
            private: None,
        })
    }

    /// The file system with this id, or else the one tagged with this
    /// operation's token; waited for until available, failed if FSx gave up
    /// on it.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        _inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let client = client(ctx).await?;
        let found = match id {
            Some(id) => describe(&client, id).await?,
            None if !ctx.token.is_empty() => find_by_token(&client, &ctx.token).await?,
            None => None,
        };
        let Some(fs) = found else {
            return Ok(ReadOutcome::Missing);
        };
        let id = fs.file_system_id().unwrap_or_default().to_string();
        if lifecycle(&fs) != "AVAILABLE" {
            ctx.reporter.event(&format!(
                "file system `{id}` is {}: waiting for it",
                lifecycle(&fs)
            ));
        }
        match settle(ctx, &client, &id, true, None).await {
            Ok(Some(fs)) => Ok(ReadOutcome::Present(applied(&fs))),
            Ok(None) => Ok(ReadOutcome::Missing),
            // FSx gave up on it (FAILED, MISCONFIGURED): delete, then create anew.
            Err(e) if e.kind == crate::contract::ErrorKind::Failed => Ok(ReadOutcome::Failed {
                id: Some(id),
                reason: e.message,
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
