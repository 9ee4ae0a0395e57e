//! The `s3.sync` provider: a local folder kept in step with `s3://bucket/prefix/`.
//!
//! Every apply compares the local files (by content hash) with the objects
//! under the prefix and with what the last sync uploaded (kept in state):
//! only new and changed files are sent, and files removed locally are
//! deleted, but only those flow uploaded; other objects under the prefix
//! are left alone. `flow plan` lists the files to add, change and delete.
//! Keys follow from file paths, so a resumed sync never duplicates anything:
//! it sends what is still missing. Destroy deletes what flow uploaded.

mod local;
mod plan;
mod refresh;
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::uri::S3Uri;
use crate::aws::{config, error};
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, PlanDetail, Prior, Problem, Provider,
    ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values,
};
use local::{LocalFile, Scan};
use plan::{Manifest, Remote, SyncPlan, Uploaded};
pub use source::folder_digest;
use source::{Spec, skipped_lines, source_problem};

/// How many uploads run at once.
const PARALLEL: usize = 8;

/// The largest object one PUT can send.
const MAX_PUT: u64 = 5 * 1024 * 1024 * 1024;

/// How many file lines a plan shows.
const PLAN_LINES: usize = 50;

/// The `s3.sync` provider kind.
#[derive(Debug, Clone)]
pub struct S3Sync {
    schema: Schema,
}

impl S3Sync {
    /// The provider with its schema.
    pub fn new() -> Self {
        S3Sync {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A local folder uploaded to an S3 prefix; only changed files are sent",
                inputs: vec![
                    InputSpec::required(
                        "source",
                        InputType::String,
                        "The local folder, relative to the workflow file's folder",
                    ),
                    InputSpec::required(
                        "destination",
                        InputType::String,
                        "Where to: s3://bucket/prefix/; another destination replaces (the old copy is deleted)",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "follow_symlinks",
                        InputType::Bool,
                        "Send what symbolic links to files point to (default false: links are skipped and listed); a link that leads out of `source` is refused",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for S3Sync {
    fn default() -> Self {
        Self::new()
    }
}

/// The objects under the prefix, by key.
async fn list(client: &Client, to: &S3Uri) -> Result<BTreeMap<String, Remote>, ProviderError> {
    let mut remote = BTreeMap::new();
    let mut next: Option<String> = None;
    loop {
        let out = client
            .list_objects_v2()
            .bucket(&to.bucket)
            .prefix(&to.prefix)
            .set_continuation_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws(&format!("list {to}"), e))?;
        for o in out.contents() {
            if let Some(k) = o.key() {
                remote.insert(
                    k.to_string(),
                    Remote {
                        etag: o.e_tag().unwrap_or_default().trim_matches('"').to_string(),
                    },
                );
            }
        }
        match out.next_continuation_token() {
            Some(t) if out.is_truncated() == Some(true) => next = Some(t.to_string()),
            _ => return Ok(remote),
        }
    }
}

/// The manifest state keeps (empty when there is none).
fn manifest_of(private: &Value) -> Manifest {
    private
        .get("manifest")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default()
}

/// Every key flow ever wrote under the prefix (kept so that destroy can
/// remove their old versions in a versioned bucket too).
fn written_of(private: &Value) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = private
        .get("written")
        .and_then(|w| serde_json::from_value(w.clone()).ok())
        .unwrap_or_default();
    keys.extend(manifest_of(private).into_keys());
    keys
}

/// What state keeps after a sync.
fn applied(to: &S3Uri, manifest: &Manifest, written: &BTreeSet<String>, digest: &str) -> Applied {
    let mut outputs = Values::new();
    outputs.insert("uri".into(), Value::String(to.to_string()));
    let mut written = written.clone();
    written.extend(manifest.keys().cloned());
    Applied {
        id: Some(to.to_string()),
        outputs,
        private: json!({ "manifest": manifest, "written": written, "digest": digest }),
    }
}

/// Deletes every version (and delete marker) of `keys` under the prefix,
/// so that a versioned bucket is left as it was before flow wrote there.
async fn delete_all_versions(
    client: &Client,
    to: &S3Uri,
    keys: &BTreeSet<String>,
) -> Result<usize, ProviderError> {
    let mut doomed: Vec<(String, Option<String>)> = Vec::new();
    let (mut key_marker, mut version_marker): (Option<String>, Option<String>) = (None, None);
    loop {
        let out = match client
            .list_object_versions()
            .bucket(&to.bucket)
            .prefix(&to.prefix)
            .set_key_marker(key_marker.take())
            .set_version_id_marker(version_marker.take())
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if error::code(&e) == Some("NoSuchBucket") => return Ok(0),
            Err(e) => return Err(error::aws(&format!("list the versions under {to}"), e)),
        };
        let versions = out.versions().iter().map(|v| (v.key(), v.version_id()));
        let markers = out
            .delete_markers()
            .iter()
            .map(|m| (m.key(), m.version_id()));
        for (key, version) in versions.chain(markers) {
            if let Some(key) = key.filter(|k| keys.contains(*k)) {
                let version = version.filter(|v| *v != "null").map(str::to_string);
                doomed.push((key.to_string(), version));
            }
        }
        if out.is_truncated() != Some(true) {
            break;
        }
        key_marker = out.next_key_marker().map(str::to_string);
        version_marker = out.next_version_id_marker().map(str::to_string);
        if key_marker.is_none() {
            break;
        }
    }
    for (key, version) in &doomed {
        match client
            .delete_object()
            .bucket(&to.bucket)
            .key(key)
            .set_version_id(version.clone())
            .send()
            .await
        {
            Ok(_) => {}
            Err(e)
                if error::code(&e) == Some("NoSuchKey")
                    || error::code(&e) == Some("NoSuchVersion") => {}
            Err(e) => return Err(error::aws(&format!("delete s3://{}/{key}", to.bucket), e)),
        }
    }
    Ok(doomed.len())
}

/// Uploads one file; returns its ETag.
async fn put(
    client: Client,
    bucket: String,
    key: String,
    file: LocalFile,
) -> Result<(String, String), ProviderError> {
    if file.size > MAX_PUT {
        return Err(ProviderError::fatal(format!(
            "`{}` is {} bytes; s3.sync sends files of up to 5 GiB",
            file.rel, file.size
        ))
        .with_help("split the file, or upload it another way and leave it out of the folder"));
    }
    let body = ByteStream::from_path(&file.path).await.map_err(|e| {
        ProviderError::fatal(format!("could not read `{}`: {e}", file.rel)).with_help(
            "check the file's permissions; it may have changed while flow read the folder",
        )
    })?;
    let out = client
        .put_object()
        .bucket(&bucket)
        .key(&key)
        .body(body)
        .metadata("flow-sha256", &file.sha256)
        .send()
        .await
        .map_err(|e| error::aws(&format!("upload `{}` to s3://{bucket}/{key}", file.rel), e))?;
    Ok((
        key,
        out.e_tag()
            .unwrap_or_default()
            .trim_matches('"')
            .to_string(),
    ))
}

/// Carries out `plan`: uploads (a few at once), then deletes; returns the
/// new manifest.
async fn run(
    ctx: &OpContext,
    client: &Client,
    to: &S3Uri,
    plan: &SyncPlan<'_>,
    mut manifest: Manifest,
    files: &[LocalFile],
) -> Result<Manifest, ProviderError> {
    let sends: Vec<&LocalFile> = plan.add.iter().chain(&plan.change).copied().collect();
    let total = sends.len();
    let sha: Arc<BTreeMap<String, String>> = Arc::new(
        files
            .iter()
            .map(|f| (to.key(&f.rel), f.sha256.clone()))
            .collect(),
    );
    let mut queue = sends.into_iter();
    let mut running = JoinSet::new();
    let mut done = 0;
    loop {
        while running.len() < PARALLEL {
            let Some(f) = queue.next() else { break };
            running.spawn(put(
                client.clone(),
                to.bucket.clone(),
                to.key(&f.rel),
                f.clone(),
            ));
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (key, etag) = joined.map_err(|e| {
            ProviderError::fatal(format!("an upload stopped: {e}"))
                .with_help("run `flow apply` again: files already sent are not sent twice")
        })??;
        done += 1;
        ctx.reporter
            .event(&format!("uploaded {key} ({done}/{total})"));
        let sha256 = sha.get(&key).cloned().unwrap_or_default();
        manifest.insert(key, Uploaded { sha256, etag });
    }
    for key in &plan.delete {
        match client
            .delete_object()
            .bucket(&to.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) if error::code(&e) == Some("NoSuchKey") => {}
            Err(e) => return Err(error::aws(&format!("delete s3://{}/{key}", to.bucket), e)),
        }
        ctx.reporter.event(&format!("deleted {key}"));
        manifest.remove(key);
    }
    // Keep the manifest to what exists locally now.
    manifest.retain(|k, _| sha.contains_key(k));
    Ok(manifest)
}

impl S3Sync {
    /// Syncs, starting from what `prior` recorded.
    async fn sync(
        &self,
        ctx: &OpContext,
        values: &Values,
        prior: Option<&Value>,
    ) -> Result<Applied, ProviderError> {
        let spec = Spec::load(values)?;
        // Nothing is sent before the scan ends: a refused link leaves no
        // operation to check again.
        let Scan { files, skipped } = spec
            .scan(&ctx.workdir)
            .await
            .map_err(ProviderError::before_acting)?;
        for line in skipped_lines(&skipped) {
            ctx.reporter.event(&line);
        }
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        let remote = list(&client, &spec.to).await?;
        let manifest = prior.map(manifest_of).unwrap_or_default();
        let written = prior.map(written_of).unwrap_or_default();
        let plan = plan::plan(&files, &remote, &manifest, |r| spec.to.key(r));
        ctx.reporter
            .log(&plan::lines(&plan, &manifest, |r| spec.to.key(r), usize::MAX).join("\n"));
        // Files already there count as synced, whoever put them.
        let mut start = manifest.clone();
        for f in &plan.same {
            let key = spec.to.key(&f.rel);
            let etag = remote.get(&key).map(|r| r.etag.clone()).unwrap_or_default();
            start.insert(
                key,
                Uploaded {
                    sha256: f.sha256.clone(),
                    etag,
                },
            );
        }
        let manifest = run(ctx, &client, &spec.to, &plan, start, &files).await?;
        if plan.is_empty() {
            ctx.reporter.event(&format!("{}: already in step", spec.to));
        }
        Ok(applied(
            &spec.to,
            &manifest,
            &written,
            &local::digest(&files),
        ))
    }
}

#[async_trait]
impl Provider for S3Sync {
    fn name(&self) -> &'static str {
        "s3.sync"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        let source = inputs.get("source")?.as_str()?;
        let follow = inputs.get("follow_symlinks").and_then(Value::as_bool);
        folder_digest(&ctx.workdir, source, follow.unwrap_or(false))
    }

    /// Every s3.sync step outputs `uri`, whatever its inputs.
    fn declared_outputs(
        &self,
        _inputs: &[(String, crate::contract::InputValue)],
        _ctx: &crate::contract::ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed("s3.sync", &["uri"]))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// `source` must be a folder inside the workflow's (or one
    /// `allow_paths` opens), with no followed link leading out of it, and
    /// `destination` an s3:// location.
    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let mut problems = Vec::new();
        let follow = inputs
            .iter()
            .any(|(k, v)| k == "follow_symlinks" && *v == InputValue::Known(Value::Bool(true)));
        for (name, value) in inputs {
            let InputValue::Known(Value::String(text)) = value else {
                continue;
            };
            match name.as_str() {
                "source" => problems.extend(source_problem(&ctx.workdir, text, follow)),
                "destination" => {
                    if let Err(e) = S3Uri::parse(text) {
                        problems.push(
                            Problem::at("destination", e.to_string())
                                .with_help("write it as s3://bucket/prefix/"),
                        );
                    }
                }
                _ => {}
            }
        }
        problems
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        self.sync(ctx, values, None).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        self.sync(ctx, values, Some(prior.private)).await
    }

    /// Deletes the objects flow wrote, every version of them.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let written = written_of(prior.private);
        if written.is_empty() {
            return Ok(());
        }
        let to = Spec::load(prior.inputs)?.to;
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        let n = delete_all_versions(&client, &to, &written).await?;
        ctx.reporter.event(&format!(
            "deleted {} keys ({n} object versions) from {to}",
            written.len()
        ));
        Ok(())
    }

    /// The files to add, change and delete.
    fn has_plan_detail(&self) -> bool {
        true
    }

    async fn plan_detail(
        &self,
        ctx: &OpContext,
        prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        let spec = Spec::load(desired)?;
        let Scan { files, skipped } = spec.scan(&ctx.workdir).await?;
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        let remote = match list(&client, &spec.to).await {
            Ok(r) => r,
            // The bucket may be created by an earlier step of the same apply.
            Err(_) if prior.is_none() => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        let manifest = prior
            .filter(|p| p.inputs.get("destination") == desired.get("destination"))
            .map(|p| manifest_of(p.private))
            .unwrap_or_default();
        let plan = plan::plan(&files, &remote, &manifest, |r| spec.to.key(r));
        let mut lines = plan::lines(&plan, &manifest, |r| spec.to.key(r), PLAN_LINES);
        lines.extend(skipped_lines(&skipped));
        Ok(PlanDetail {
            lines,
            replace_because: None,
            refusals: Vec::new(),
        })
    }

    fn can_refresh(&self) -> bool {
        true
    }

    /// The objects flow uploaded, by ETag: missing or changed ones drift,
    /// and apply uploads them again.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let spec = Spec::load(prior.inputs)?;
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        let remote = match list(&client, &spec.to).await {
            Ok(r) => r,
            Err(e) if e.kind == crate::contract::ErrorKind::NotFound => {
                return Ok(Refreshed::Gone);
            }
            Err(e) => return Err(e),
        };
        Ok(Refreshed::drifted(refresh::drift(
            &manifest_of(prior.private),
            &remote,
        )))
    }

    /// Complete when every local file is already under the prefix with the
    /// same content; otherwise missing, and the sync runs again (sending
    /// only what is not there yet).
    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let spec = Spec::load(values)?;
        let files = spec.scan(&ctx.workdir).await?.files;
        let client = config::s3_client(&config::sdk_config(ctx).await?);
        let remote = match list(&client, &spec.to).await {
            Ok(r) => r,
            Err(e) if !e.is_retryable() => return Ok(ReadOutcome::Missing),
            Err(e) => return Err(e),
        };
        let plan = plan::plan(&files, &remote, &Manifest::new(), |r| spec.to.key(r));
        if !plan.add.is_empty() || !plan.change.is_empty() {
            return Ok(ReadOutcome::Missing);
        }
        let manifest: Manifest = plan
            .same
            .iter()
            .map(|f| {
                let key = spec.to.key(&f.rel);
                let etag = remote.get(&key).map(|r| r.etag.clone()).unwrap_or_default();
                (
                    key,
                    Uploaded {
                        sha256: f.sha256.clone(),
                        etag,
                    },
                )
            })
            .collect();
        Ok(ReadOutcome::Present(applied(
            &spec.to,
            &manifest,
            &BTreeSet::new(),
            &local::digest(&files),
        )))
    }
}
