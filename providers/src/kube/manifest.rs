//! `kube.manifest`: Kubernetes objects from YAML files, URLs or inline
//! YAML, applied server-side with field manager `flow`.
//!
//! Create applies every object (namespaces and CRDs first, waiting for the
//! CRDs to be established before their custom resources) and waits for
//! each to be ready ([`super::ready`]). Update re-applies only the objects
//! whose rendered text changed (or that vanished), deletes the objects the
//! manifests no longer hold, and waits again. Delete removes the recorded
//! objects in reverse order: custom resources before their CRDs, namespaced
//! objects before their namespace. Read (after an interrupted create) adopts
//! the objects when all exist, waiting for them to be ready.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::connection::{Connection, Target};
use super::objects::{self, KUBE_PACE, Kinds, Record};
use super::ready::{self, Readiness, WaitFor};
use super::render::{Doc, Sources};
use crate::aws::poll::{Step, until};
use crate::contract::{
    Applied, CONTENT_KEY, Drift, InputSpec, InputType, InputValue, OpContext, PlanDetail, Prior,
    Problem, Provider, ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext,
    Values,
};

/// The `kube.manifest` provider kind.
#[derive(Debug, Clone)]
pub struct KubeManifest {
    schema: Schema,
}

impl KubeManifest {
    /// The provider with its schema.
    pub fn new() -> Self {
        let mut inputs = super::connection_inputs();
        inputs.extend(super::manifest_inputs());
        inputs.push(InputSpec::optional(
            "wait_for",
            InputType::Any,
            "Readiness of custom resources: \"condition=Succeeded\" or \"jsonpath={.status.phase}=Running\", or a table by `Kind` or `Kind/name`",
        ));
        inputs.push(InputSpec::optional(
            "wait",
            InputType::Bool,
            "Wait for the objects to be ready (default true)",
        ));
        KubeManifest {
            schema: Schema {
                kind: StepKind::Resource,
                description: "Kubernetes objects from YAML manifests, applied server-side, pruned, waited for",
                inputs,
                open_inputs: false,
            },
        }
    }
}

impl Default for KubeManifest {
    fn default() -> Self {
        Self::new()
    }
}

/// `wait_for` as given: one condition for every custom resource, or
/// conditions by `Kind` or `Kind/name`.
#[derive(Debug, Clone, Default)]
pub struct WaitRules {
    all_custom: Option<WaitFor>,
    by_name: BTreeMap<String, WaitFor>,
}

impl WaitRules {
    /// The rules of a step's `wait_for` input.
    // A `String` error on purpose: the text is one problem, shown as it is
    // at the step input's span; no caller tells its cases apart.
    pub fn from_value(v: Option<&Value>) -> Result<WaitRules, String> {
        match v {
            None | Some(Value::Null) => Ok(WaitRules::default()),
            Some(Value::String(s)) => Ok(WaitRules {
                all_custom: Some(WaitFor::parse(s)?),
                ..Default::default()
            }),
            Some(Value::Object(m)) => Ok(WaitRules {
                all_custom: None,
                by_name: m
                    .iter()
                    .map(|(k, v)| {
                        let text = v
                            .as_str()
                            .ok_or_else(|| format!("`wait_for.{k}` must be a string"))?;
                        Ok((
                            k.clone(),
                            WaitFor::parse(text).map_err(|e| format!("`wait_for.{k}`: {e}"))?,
                        ))
                    })
                    .collect::<Result<_, String>>()?,
            }),
            Some(_) => Err("`wait_for` must be a string or a table".into()),
        }
    }

    /// The condition for the object `r`, if any.
    fn for_record(&self, r: &Record) -> Option<&WaitFor> {
        self.by_name
            .get(&format!("{}/{}", r.kind, r.name))
            .or_else(|| self.by_name.get(&r.kind))
            .or_else(|| {
                (!ready::built_in(&r.kind) && r.api_version.contains('.'))
                    .then_some(())
                    .and(self.all_custom.as_ref())
            })
    }
}

/// One operation's view of the step: connection, inputs, objects.
struct Run<'a> {
    ctx: &'a OpContext,
    conn: Connection,
    inputs: &'a Values,
    rules: WaitRules,
}

impl<'a> Run<'a> {
    fn new(ctx: &'a OpContext, inputs: &'a Values) -> Result<Self, ProviderError> {
        Ok(Run {
            ctx,
            conn: Connection::new(ctx, inputs)?,
            inputs,
            rules: WaitRules::from_value(inputs.get("wait_for")).map_err(ProviderError::fatal)?,
        })
    }

    async fn kinds(&self) -> Result<Kinds, ProviderError> {
        Ok(Kinds::new(self.conn.client().await?))
    }

    async fn default_namespace(&self) -> Result<String, ProviderError> {
        if let Some(ns) = self.inputs.get("namespace").and_then(Value::as_str) {
            return Ok(ns.to_string());
        }
        Ok(self
            .conn
            .context_namespace()
            .await?
            .unwrap_or_else(|| "default".into()))
    }

    /// The manifests' objects in apply order (namespaces and CRDs first);
    /// each is placed in its namespace when applied, once its kind is served.
    async fn docs(&self) -> Result<Vec<Doc>, ProviderError> {
        let sources = Sources::from_inputs(self.inputs)?;
        let docs = sources.render(&self.ctx.workdir).await?;
        let docs = objects::apply_order(&docs);
        let mut seen = HashSet::new();
        for d in &docs {
            let key = objects::key(d.api_version(), d.kind(), d.namespace(), d.name());
            if !seen.insert(key) {
                return Err(ProviderError::fatal(format!(
                    "{} {} appears twice in the manifests ({})",
                    d.kind(),
                    d.name(),
                    d.source
                ))
                .with_help("keep one of the two, or give them different names"));
            }
        }
        Ok(docs)
    }

    fn wait_enabled(&self) -> bool {
        self.inputs
            .get("wait")
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }

    /// Applies `docs` (skipping those whose digest and existence match
    /// `prior`), returning the records in apply order.
    async fn apply(
        &self,
        kinds: &mut Kinds,
        docs: &[Doc],
        prior: &[Record],
    ) -> Result<Vec<Record>, ProviderError> {
        let ns = self.default_namespace().await?;
        let mut records = Vec::new();
        let mut crds_pending = false;
        for doc in docs {
            if doc.kind() != "CustomResourceDefinition" && doc.kind() != "Namespace" && crds_pending
            {
                // Custom resources need their CRDs established first.
                let crds: Vec<Record> = records
                    .iter()
                    .filter(|r: &&Record| r.kind == "CustomResourceDefinition")
                    .cloned()
                    .collect();
                self.wait_ready(kinds, &crds).await?;
                crds_pending = false;
            }
            let placed = kinds.place(doc, &ns).await?;
            let mut want = Kinds::record_of(&placed);
            let before = prior.iter().find(|p| p.key() == want.key());
            let unchanged = match before {
                Some(p) if p.digest == want.digest => kinds
                    .get(p)
                    .await?
                    .and_then(|o| o.metadata.uid)
                    .filter(|uid| p.uid.is_empty() || *uid == p.uid),
                _ => None,
            };
            match unchanged {
                Some(uid) => {
                    want.uid = uid;
                    self.ctx
                        .reporter
                        .log(&format!("unchanged {}", want.label()));
                    records.push(want);
                }
                None => {
                    let (rec, note) = kinds.apply(&placed).await?;
                    if let Some(note) = note {
                        self.ctx.reporter.event(&format!("warning: {note}"));
                    }
                    let verb = if before.is_some() {
                        "configured"
                    } else {
                        "applied"
                    };
                    self.ctx.reporter.event(&format!("{verb} {}", rec.label()));
                    self.ctx
                        .reporter
                        .log(&format!("{verb} {} uid={}", rec.label(), rec.uid));
                    if rec.kind == "CustomResourceDefinition" {
                        crds_pending = true;
                    }
                    records.push(rec);
                }
            }
        }
        Ok(records)
    }

    /// Waits until every object of `records` is ready.
    async fn wait_ready(&self, kinds: &mut Kinds, records: &[Record]) -> Result<(), ProviderError> {
        if !self.wait_enabled() {
            return Ok(());
        }
        for r in records {
            let rule = self.rules.for_record(r).cloned();
            if rule.is_none() && !ready::built_in(&r.kind) {
                continue;
            }
            let api = kinds.api_for(r).await?;
            let what = r.label();
            until(KUBE_PACE, self.ctx.reporter.as_ref(), &what, || async {
                let obj = api
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| super::errors::kube(&format!("read {what}"), e))?
                    .ok_or_else(|| {
                        ProviderError::vanished(format!("{what} disappeared while waiting for it"))
                    })?;
                let value = serde_json::to_value(&obj).unwrap_or(Value::Null);
                match ready::check(&r.kind, &value, rule.as_ref()) {
                    Readiness::Ready => {
                        self.ctx.reporter.log(&format!("{what} is ready"));
                        Ok(Step::Done(()))
                    }
                    Readiness::Pending(why) => {
                        Ok(Step::Pending(vec![format!("waiting for {what}: {why}")]))
                    }
                    Readiness::Failed(why) => {
                        Err(ProviderError::fatal(format!("{what} failed: {why}")).with_help(
                            "`kubectl describe` the object and its events; a `wait_for` rule on the step changes what counts as ready",
                        ))
                    }
                }
            })
            .await?;
        }
        Ok(())
    }

    /// Deletes `records` in a safe order.
    async fn delete(&self, kinds: &mut Kinds, records: &[Record]) -> Result<(), ProviderError> {
        for r in objects::deletion_order(records) {
            kinds.delete(&r, self.ctx.reporter.as_ref()).await?;
        }
        Ok(())
    }
}

/// The outputs of every kube.manifest step ([`applied`] puts each in).
const OUTPUT_KEYS: [&str; 2] = ["objects", "count"];

/// The step's result for `records`.
fn applied(records: &[Record]) -> Applied {
    Applied {
        id: None,
        outputs: [
            (
                "objects".to_string(),
                Value::Array(records.iter().map(Record::public).collect()),
            ),
            ("count".to_string(), json!(records.len())),
        ]
        .into_iter()
        .collect(),
        private: json!({ "objects": records }),
    }
}

impl Run<'_> {
    /// Each recorded object as it is now: gone ones, and the fields flow
    /// applied that differ (compared only while the files are those that
    /// were applied). Drifted objects lose their recorded digest, so the
    /// update that follows applies them again.
    async fn refresh(
        &self,
        records: &[Record],
        same_files: bool,
    ) -> Result<Refreshed, ProviderError> {
        let mut kinds = self.kinds().await?;
        let ns = self.default_namespace().await?;
        let docs = if same_files {
            self.docs().await.unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut drift = Vec::new();
        let mut kept = Vec::new();
        for r in records {
            let live = match kinds.get(r).await {
                Ok(live) => live,
                Err(e) if e.message.contains("does not serve") => None,
                Err(e) => return Err(e),
            };
            let Some(live) = live else {
                drift.push(Drift::of_attribute(
                    r.label(),
                    json!("present"),
                    Value::Null,
                ));
                continue;
            };
            let applied = match docs.iter().find(|d| {
                d.kind() == r.kind && d.name() == r.name && d.api_version() == r.api_version
            }) {
                Some(doc) => Some(kinds.place(doc, &ns).await?.object),
                None => None,
            };
            let live = serde_json::to_value(&live).unwrap_or_default();
            let found = applied
                .map(|a| super::drift::owned_drift(&r.label(), &a, &live))
                .unwrap_or_default();
            let mut rec = r.clone();
            if !found.is_empty() {
                rec.digest.clear();
            }
            drift.extend(found);
            kept.push(rec);
        }
        if kept.is_empty() {
            return Ok(Refreshed::Gone);
        }
        Ok(Refreshed::Present {
            drift,
            outputs: None,
            private: Some(json!({ "objects": kept })),
        })
    }
}

/// The records kept in `private`.
fn recorded(private: &Value) -> Vec<Record> {
    private
        .get("objects")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

#[async_trait]
impl Provider for KubeManifest {
    fn name(&self) -> &'static str {
        "kube.manifest"
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        crate::substitute::digest_of_input(inputs, "files", &ctx.workdir)
    }

    fn has_plan_detail(&self) -> bool {
        true
    }

    /// When the cluster is there: what it would refuse (a server-side dry
    /// run of every object; see [`super::dry_run`]).
    async fn plan_detail(
        &self,
        ctx: &OpContext,
        _prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        let run = Run::new(ctx, desired)?;
        let docs = run.docs().await?;
        let mut kinds = run.kinds().await?;
        let ns = run.default_namespace().await?;
        Ok(PlanDetail {
            lines: super::dry_run::lines(&mut kinds, &docs, &ns).await,
            replace_because: None,
            refusals: Vec::new(),
        })
    }

    /// Every kube.manifest step outputs `objects` and `count`.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "kube.manifest",
            &OUTPUT_KEYS,
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let mut out = Target::problems(inputs);
        let known = crate::contract::known_inputs(inputs);
        let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
        if !has("files") && !has("manifest") {
            out.push(Problem::at_path(
                &[],
                "give `files` (YAML files or URLs) or an inline `manifest`",
            ));
        }
        if let Err(e) = WaitRules::from_value(known.get("wait_for")) {
            out.push(Problem::at("wait_for", e));
        }
        if let Err(problems) = super::file_entry::parse(known.get("files")) {
            out.extend(problems);
        }
        let values_known = inputs.iter().all(|(k, v)| {
            !matches!(k.as_str(), "values" | "substitute") || matches!(v, InputValue::Known(_))
        });
        match Sources::from_inputs(&known) {
            Ok(sources) if values_known => out.extend(sources.offline(&ctx.workdir).1),
            Ok(sources) => out.extend(sources.unreadable_files(&ctx.workdir)),
            Err(_) => {}
        }
        out
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        let run = Run::new(ctx, inputs)?;
        let docs = run.docs().await.map_err(ProviderError::before_acting)?;
        let mut kinds = run.kinds().await?;
        let records = run.apply(&mut kinds, &docs, &[]).await?;
        run.wait_ready(&mut kinds, &records).await?;
        Ok(applied(&records))
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        let run = Run::new(ctx, inputs)?;
        let before = recorded(prior.private);
        let docs = run.docs().await.map_err(ProviderError::before_acting)?;
        let mut kinds = run.kinds().await?;
        let records = run.apply(&mut kinds, &docs, &before).await?;
        let kept: HashSet<String> = records.iter().map(Record::key).collect();
        let dropped: Vec<Record> = before
            .into_iter()
            .filter(|r| !kept.contains(&r.key()))
            .collect();
        for r in &dropped {
            ctx.reporter.log(&format!(
                "pruning {} (no longer in the manifests)",
                r.label()
            ));
        }
        run.delete(&mut kinds, &dropped).await?;
        run.wait_ready(&mut kinds, &records).await?;
        Ok(applied(&records))
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let run = Run::new(ctx, prior.inputs)?;
        let mut kinds = run.kinds().await?;
        run.delete(&mut kinds, &recorded(prior.private)).await
    }

    fn can_refresh(&self) -> bool {
        true
    }

    /// The objects flow applied, and the fields it owns in them.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let records = recorded(prior.private);
        if records.is_empty() {
            return Ok(Refreshed::unchanged());
        }
        let workdir = ValidateContext {
            workdir: ctx.workdir.clone(),
        };
        let same_files = self
            .content_digest(prior.inputs, &workdir)
            .map(Value::String)
            .as_ref()
            == prior.inputs.get(CONTENT_KEY);
        Run::new(ctx, prior.inputs)?
            .refresh(&records, same_files)
            .await
    }

    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let run = Run::new(ctx, inputs)?;
        let docs = run.docs().await?;
        let mut kinds = run.kinds().await?;
        let ns = run.default_namespace().await?;
        let mut records = Vec::new();
        for doc in &docs {
            let placed = match kinds.place(doc, &ns).await {
                Ok(p) => p,
                // A custom resource whose CRD was not applied yet.
                Err(e) if e.message.contains("does not serve") => return Ok(ReadOutcome::Missing),
                Err(e) => return Err(e),
            };
            let mut rec = Kinds::record_of(&placed);
            match kinds.get(&rec).await? {
                Some(obj) => {
                    rec.uid = obj.metadata.uid.unwrap_or_default();
                    records.push(rec);
                }
                None => return Ok(ReadOutcome::Missing),
            }
        }
        ctx.reporter
            .log("every object of the interrupted apply exists: waiting for them");
        run.wait_ready(&mut kinds, &records).await?;
        Ok(ReadOutcome::Present(applied(&records)))
    }
}

#[cfg(test)]
mod tests;
