//! The `fsx.lustre` provider: an FSx for Lustre file system.
//!
//! Create sends the operation token as `ClientRequestToken` and as a
//! `flow:token` tag, and waits for `AVAILABLE`, reporting lifecycle changes;
//! `read` after a crash finds the file system by that tag. Storage capacity
//! grows in place (shrinking replaces), tags change in place, and any other
//! change replaces the file system. Delete waits until it is gone.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_fsx::Client;
use aws_sdk_fsx::types::{
    CreateFileSystemLustreConfiguration, FileSystem, FileSystemType, LustreDeploymentType, Tag,
};
use serde_json::Value;

use super::poll::{Pace, Waiter};
use super::{config, error, inputs, pacing, tags};
use crate::contract::{
    Applied, Change, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider,
    ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values, default_diff,
    input_drift,
};

/// The deployment types FSx for Lustre offers.
const DEPLOYMENT_TYPES: [&str; 4] = ["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"];

/// The `fsx.lustre` provider kind.
#[derive(Debug, Clone)]
pub struct FsxLustre {
    schema: Schema,
}

impl FsxLustre {
    /// The provider with its schema.
    pub fn new() -> Self {
        let strings = || InputType::List(Box::new(InputType::String));
        FsxLustre {
            schema: Schema {
                kind: StepKind::Resource,
                description: "An FSx for Lustre file system",
                inputs: vec![
                    InputSpec::required(
                        "storage_capacity",
                        InputType::Integer,
                        "Storage in GiB (1200, 2400, then steps of 2400 or 3600); grows in place, shrinking replaces",
                    ),
                    InputSpec::required(
                        "subnet_ids",
                        strings(),
                        "The subnet (one) the file system lives in",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "security_group_ids",
                        strings(),
                        "Security groups of its network interfaces",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "deployment_type",
                        InputType::String,
                        "SCRATCH_1, SCRATCH_2 (the default), PERSISTENT_1 or PERSISTENT_2",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "per_unit_storage_throughput",
                        InputType::Integer,
                        "MB/s per TiB, for PERSISTENT deployment types",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "import_path",
                        InputType::String,
                        "s3://bucket/prefix to load files from",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "export_path",
                        InputType::String,
                        "s3://bucket/prefix to export files to",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "tags",
                        InputType::Map(Box::new(InputType::String)),
                        "Tags; change in place",
                    ),
                ],
                open_inputs: false,
            },
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

/// The value of the file system's tag `key`.
fn tag<'a>(fs: &'a FileSystem, key: &str) -> Option<&'a str> {
    fs.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// The file system's tags as a map.
fn tag_map(fs: &FileSystem) -> BTreeMap<String, String> {
    fs.tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect()
}

/// Its lifecycle; a service that reports none (some emulators) counts as available.
fn lifecycle(fs: &FileSystem) -> &str {
    fs.lifecycle().map_or("AVAILABLE", |l| l.as_str())
}

/// What state keeps of an available file system.
fn applied(fs: &FileSystem) -> Applied {
    let mut outputs = Values::new();
    let id = fs.file_system_id().unwrap_or_default().to_string();
    outputs.insert("file_system_id".into(), Value::String(id.clone()));
    outputs.insert(
        "dns_name".into(),
        Value::String(fs.dns_name().unwrap_or_default().to_string()),
    );
    let mount = fs
        .lustre_configuration()
        .and_then(|l| l.mount_name())
        .unwrap_or_default();
    outputs.insert("mount_name".into(), Value::String(mount.to_string()));
    Applied {
        id: Some(id),
        outputs,
        private: Value::Null,
    }
}

/// The file system `id`, if it exists.
async fn describe(client: &Client, id: &str) -> Result<Option<FileSystem>, ProviderError> {
    match client
        .describe_file_systems()
        .file_system_ids(id)
        .send()
        .await
    {
        Ok(out) => Ok(out.file_systems().first().cloned()),
        Err(e) if error::code(&e) == Some("FileSystemNotFound") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe file system `{id}`"), e)),
    }
}

/// The file system tagged with operation token `token`, if any.
async fn find_by_token(client: &Client, token: &str) -> Result<Option<FileSystem>, ProviderError> {
    let mut next: Option<String> = None;
    loop {
        let out = client
            .describe_file_systems()
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws("list file systems", e))?;
        if let Some(fs) = out
            .file_systems()
            .iter()
            .find(|fs| tag(fs, tags::TOKEN) == Some(token) && lifecycle(fs) != "DELETING")
        {
            return Ok(Some(fs.clone()));
        }
        match out.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => return Ok(None),
        }
    }
}

/// Waits until file system `id` is `AVAILABLE` (or gone, with `gone_ok`),
/// reporting lifecycle changes.
async fn settle(
    ctx: &OpContext,
    client: &Client,
    id: &str,
    gone_ok: bool,
) -> Result<Option<FileSystem>, ProviderError> {
    // A create (gone not expected) takes minutes; other changes, unknown.
    let pace = if gone_ok {
        Pace::LONG
    } else {
        Pace::expecting(pacing::expected::FSX_LUSTRE)
    };
    let mut waiter = Waiter::new(
        pace.within(ctx.timeout),
        ctx.reporter.as_ref(),
        format!("file system `{id}`"),
    );
    loop {
        match describe(client, id).await {
            Ok(None) if gone_ok => return Ok(None),
            Ok(None) => {
                return Err(ProviderError::vanished(format!(
                    "file system `{id}` disappeared"
                )));
            }
            Ok(Some(fs)) => {
                waiter.looked();
                let state = lifecycle(&fs).to_string();
                let updating = fs.administrative_actions().iter().any(|a| {
                    a.status()
                        .is_some_and(|s| matches!(s.as_str(), "PENDING" | "IN_PROGRESS"))
                });
                match state.as_str() {
                    "AVAILABLE" if !updating => return Ok(Some(fs)),
                    "FAILED" | "MISCONFIGURED" | "MISCONFIGURED_UNAVAILABLE" => {
                        let why = fs
                            .failure_details()
                            .and_then(|f| f.message())
                            .unwrap_or("no reason given");
                        return Err(ProviderError::fatal(format!(
                            "file system `{id}` is {state}: {why}"
                        )).with_help("FSx gave up on the file system: read the reason above (capacity in the subnet's zone, the security group, the S3 import path), fix it, then `flow apply --replace STEP`"));
                    }
                    "DELETING" if !gone_ok => {
                        return Err(ProviderError::fatal(format!(
                            "file system `{id}` is being deleted"
                        )).with_help("something is deleting the file system; wait until it is gone, then `flow apply` creates it again"));
                    }
                    _ => waiter.report([format!(
                        "file system `{id}` is {state}{}",
                        if updating { " (updating)" } else { "" }
                    )]),
                }
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

impl FsxLustre {
    /// Waits for a file system this operation made and returns its outputs.
    async fn finish(
        &self,
        ctx: &OpContext,
        client: &Client,
        id: &str,
    ) -> Result<Applied, ProviderError> {
        let fs = settle(ctx, client, id, false).await?;
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

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (name, value) in inputs {
            let InputValue::Known(v) = value else {
                continue;
            };
            match (name.as_str(), v) {
                ("deployment_type", Value::String(t))
                    if !DEPLOYMENT_TYPES.contains(&t.as_str()) =>
                {
                    problems.push(
                        Problem::at(
                            name,
                            format!("`{t}` is not an FSx for Lustre deployment type"),
                        )
                        .with_help(format!("use one of {}", DEPLOYMENT_TYPES.join(", "))),
                    );
                }
                ("storage_capacity", Value::Number(n)) if n.as_i64().is_some_and(|c| c < 1200) => {
                    problems.push(Problem::at(name, "FSx for Lustre needs at least 1200 GiB"));
                }
                ("import_path" | "export_path", Value::String(p)) if !p.starts_with("s3://") => {
                    problems.push(Problem::at(name, format!("`{p}` is not an s3:// path")));
                }
                _ => {}
            }
        }
        problems
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
            return self.finish(ctx, &client, &id).await;
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
        self.finish(ctx, &client, &id).await
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
        let Some(fs) = settle(ctx, &client, &id, true).await? else {
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
        self.finish(ctx, &client, &id).await
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
        let mut waiter = Waiter::new(
            Pace::LONG.within(ctx.timeout),
            ctx.reporter.as_ref(),
            format!("file system `{id}` to be deleted"),
        );
        loop {
            match describe(&client, id).await {
                Ok(None) => return Ok(()),
                Ok(Some(fs)) => {
                    waiter.looked();
                    if lifecycle(&fs) == "FAILED" {
                        let why = fs
                            .failure_details()
                            .and_then(|f| f.message())
                            .unwrap_or("no reason given");
                        return Err(ProviderError::fatal(format!(
                            "deleting file system `{id}` failed: {why}"
                        )).with_help("read the reason above; a file system still mounted or with a data repository task running cannot be deleted yet: stop those, then `flow destroy` again"));
                    }
                    waiter.report([format!("file system `{id}` is {}", lifecycle(&fs))]);
                }
                Err(e) => waiter.tolerate(e)?,
            }
            waiter.pause().await?;
        }
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
        match settle(ctx, &client, &id, true).await {
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
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    fn base() -> Values {
        values(json!({"storage_capacity": 2400, "subnet_ids": ["subnet-1"], "tags": {"a": "1"}}))
    }

    #[test]
    fn capacity_grows_in_place_and_shrinking_replaces() {
        let p = FsxLustre::new();
        let mut bigger = base();
        bigger.insert("storage_capacity".into(), json!(4800));
        assert_eq!(
            p.diff(&base(), &bigger),
            Change::Update(vec!["storage_capacity".into()])
        );
        let mut smaller = base();
        smaller.insert("storage_capacity".into(), json!(1200));
        assert_eq!(
            p.diff(&base(), &smaller),
            Change::Replace(vec!["storage_capacity".into()])
        );
        let mut retagged = base();
        retagged.insert("tags".into(), json!({"a": "2"}));
        assert_eq!(
            p.diff(&base(), &retagged),
            Change::Update(vec!["tags".into()])
        );
        let mut moved = base();
        moved.insert("subnet_ids".into(), json!(["subnet-2"]));
        assert_eq!(
            p.diff(&base(), &moved),
            Change::Replace(vec!["subnet_ids".into()])
        );
    }

    #[test]
    fn validate_checks_type_capacity_and_paths() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let inputs = vec![
            (
                "deployment_type".to_string(),
                InputValue::Known(json!("SCRATCH_9")),
            ),
            (
                "storage_capacity".to_string(),
                InputValue::Known(json!(100)),
            ),
            (
                "import_path".to_string(),
                InputValue::Known(json!("bucket/x")),
            ),
            ("export_path".to_string(), InputValue::Unknown),
        ];
        let problems = FsxLustre::new().validate(&inputs, &ctx);
        let paths: Vec<_> = problems.iter().map(|p| p.path[0].as_str()).collect();
        assert_eq!(
            paths,
            ["deployment_type", "storage_capacity", "import_path"]
        );
    }

    #[test]
    fn outputs_default_missing_values_to_empty() {
        let fs = FileSystem::builder()
            .file_system_id("fs-1")
            .dns_name("fs-1.fsx")
            .build();
        let a = applied(&fs);
        assert_eq!(a.id.as_deref(), Some("fs-1"));
        assert_eq!(a.outputs["mount_name"], "");
        assert_eq!(lifecycle(&fs), "AVAILABLE");
    }
}
