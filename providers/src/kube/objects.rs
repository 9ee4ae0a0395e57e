//! Applying and deleting objects of any kind: the API resource of each
//! `apiVersion`/`kind` (discovered once per operation), server-side apply
//! with field manager `flow`, deletion in a safe order, and waiting.

use std::collections::HashMap;

use ::kube::Client;
use ::kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, ValidationDirective};
use ::kube::core::{ApiResource, GroupVersionKind};
use ::kube::discovery::Scope;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::crd_schema;
use super::errors;
use super::render::Doc;
use crate::aws::poll::{Pace, Rhythm, Step, until};
use crate::contract::ProviderError;

/// Pacing for Kubernetes waits: objects settle in seconds, jobs in hours.
pub const KUBE_PACE: Pace = Pace {
    first: std::time::Duration::from_millis(500),
    max: std::time::Duration::from_secs(5),
    limit: std::time::Duration::from_secs(24 * 3600),
    rhythm: Rhythm::Growing,
    since: None,
};

/// An object flow applied, as state records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `apps/v1`.
    pub api_version: String,
    /// `Deployment`.
    pub kind: String,
    /// The namespace, for namespaced objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
    /// The uid the server gave it.
    #[serde(default)]
    pub uid: String,
    /// A keyed fingerprint of what was applied (see [`crate::fingerprint`]:
    /// a Secret's data must not be guessable from state), to re-apply only
    /// what changed.
    #[serde(default)]
    pub digest: String,
}

impl Record {
    /// Identity across versions of the same group: `apps/Deployment/ns/name`.
    pub fn key(&self) -> String {
        key(
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }

    /// `Deployment default/web`.
    pub fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// The record without the digest, as outputs show it.
    pub fn public(&self) -> Value {
        serde_json::json!({
            "apiVersion": self.api_version, "kind": self.kind,
            "namespace": self.namespace, "name": self.name, "uid": self.uid,
        })
    }

    /// Deletion rank: namespaced objects, then cluster-scoped ones, then
    /// CRDs (after their custom resources), then namespaces.
    fn rank(&self) -> u8 {
        match self.kind.as_str() {
            "Namespace" => 3,
            "CustomResourceDefinition" => 2,
            _ if self.namespace.is_none() => 1,
            _ => 0,
        }
    }
}

/// The identity of an object across versions of its API group.
pub fn key(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or(""))
}

/// `records` in the order to delete them: by rank, and within a rank the
/// reverse of the order they were applied in.
pub fn deletion_order(records: &[Record]) -> Vec<Record> {
    let mut indexed: Vec<(usize, &Record)> = records.iter().enumerate().collect();
    indexed.sort_by_key(|(i, r)| (r.rank(), std::cmp::Reverse(*i)));
    indexed.into_iter().map(|(_, r)| r.clone()).collect()
}

/// `docs` in the order to apply them: namespaces, then CRDs, then the rest
/// as written (a stable sort).
pub fn apply_order(docs: &[Doc]) -> Vec<Doc> {
    let mut out = docs.to_vec();
    out.sort_by_key(|d| match d.kind() {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        _ => 2,
    });
    out
}

/// API resources by `apiVersion` and `kind`, discovered once.
pub struct Kinds {
    client: Client,
    known: HashMap<(String, String), (ApiResource, bool)>,
    /// The schema of each custom kind's CRD version, as the cluster serves
    /// it (`None`: a built-in kind).
    schemas: HashMap<(String, String), Option<Value>>,
}

impl Kinds {
    /// Discovery through `client`.
    pub fn new(client: Client) -> Self {
        Kinds {
            client,
            known: HashMap::new(),
            schemas: HashMap::new(),
        }
    }

    /// The resource of `api_version`/`kind` and whether it is namespaced.
    pub async fn resolve(
        &mut self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), ProviderError> {
        let k = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.known.get(&k) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = ::kube::discovery::pinned_kind(&self.client, &gvk).await.map_err(|e| {
            if errors::status(&e) == Some(404) || matches!(e, ::kube::Error::Discovery(_)) {
                ProviderError::fatal(format!(
                    "the cluster does not serve {kind} in {api_version} (is its CustomResourceDefinition installed?)"
                )).with_help("apply what installs that CustomResourceDefinition (the operator's manifests) in an earlier step and list it in `depends_on`")
            } else {
                errors::kube(&format!("discover {kind} in {api_version}"), e)
            }
        })?;
        let found = (ar, caps.scope == Scope::Namespaced);
        self.known.insert(k, found.clone());
        Ok(found)
    }

    /// The `openAPIV3Schema` the cluster serves for a custom kind (read from
    /// its CustomResourceDefinition once per kind); `None` for a built-in
    /// kind, or a custom one without a structural schema.
    pub async fn crd_schema(
        &mut self,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<Value>, ProviderError> {
        let k = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.schemas.get(&k) {
            return Ok(found.clone());
        }
        let (ar, _) = self.resolve(api_version, kind).await?;
        let builtin = !ar.group.contains('.') || ar.group.ends_with("k8s.io");
        let schema = if builtin {
            None
        } else {
            let crds: Api<DynamicObject> = Api::all_with(
                self.client.clone(),
                &ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "apiextensions.k8s.io",
                    "v1",
                    "CustomResourceDefinition",
                )),
            );
            let name = format!("{}.{}", ar.plural, ar.group);
            let crd = crds
                .get_opt(&name)
                .await
                .map_err(|e| errors::kube(&format!("read CustomResourceDefinition {name}"), e))?;
            crd.and_then(|c| serde_json::to_value(c).ok())
                .and_then(|c| crd_schema::version_schema(&c, &ar.version).cloned())
        };
        self.schemas.insert(k, schema.clone());
        Ok(schema)
    }

    /// The API for objects of `ar` in `namespace` (ignored for cluster-scoped kinds).
    pub fn api(
        &self,
        ar: &ApiResource,
        namespaced: bool,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, ar),
            _ => Api::all_with(self.client.clone(), ar),
        }
    }

    /// The API for the object `r` names.
    pub async fn api_for(&mut self, r: &Record) -> Result<Api<DynamicObject>, ProviderError> {
        let (ar, namespaced) = self.resolve(&r.api_version, &r.kind).await?;
        Ok(self.api(&ar, namespaced, r.namespace.as_deref()))
    }

    /// `doc` with its namespace settled: `default_ns` for namespaced kinds
    /// that name none, none for cluster-scoped kinds.
    pub async fn place(&mut self, doc: &Doc, default_ns: &str) -> Result<Doc, ProviderError> {
        let (_, namespaced) = self.resolve(doc.api_version(), doc.kind()).await?;
        let mut doc = doc.clone();
        let meta = doc
            .object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| {
                ProviderError::bad_input(format!("{}: `metadata` must be a mapping", doc.source))
            })?;
        if namespaced {
            meta.entry("namespace")
                .or_insert_with(|| Value::String(default_ns.to_string()));
        } else {
            meta.remove("namespace");
        }
        Ok(doc)
    }

    /// The record `doc` will have (its uid unknown until applied).
    pub fn record_of(doc: &Doc) -> Record {
        Record {
            api_version: doc.api_version().to_string(),
            kind: doc.kind().to_string(),
            namespace: doc.namespace().map(str::to_string),
            name: doc.name().to_string(),
            uid: String::new(),
            digest: crate::fingerprint::current().fingerprint(doc.object.to_string().as_bytes()),
        }
    }

    /// Server-side applies the placed `doc` (field manager `flow`, taking
    /// over conflicting fields) and returns its record, with a note when the
    /// server is older than the object (see [`Kinds::server_side_apply`]).
    pub async fn apply(&mut self, doc: &Doc) -> Result<(Record, Option<String>), ProviderError> {
        let mut record = Self::record_of(doc);
        let (applied, note) = self.server_side_apply(doc, false).await?;
        record.uid = applied.metadata.uid.unwrap_or_default();
        Ok((record, note))
    }

    /// Asks the server whether it would apply the placed `doc` (a
    /// server-side dry run: schema, admission and webhooks, nothing kept).
    pub async fn dry_run(&mut self, doc: &Doc) -> Result<Option<String>, ProviderError> {
        Ok(self.server_side_apply(doc, true).await?.1)
    }

    /// One server-side apply. A CustomResourceDefinition whose schema uses
    /// fields the server predates (CEL `x-kubernetes-validations`, which
    /// Kubernetes 1.25 added) is applied again without them, and the note
    /// says how many rules were left out: the server would refuse the whole
    /// CRD otherwise ("field not declared in schema"). Any other refusal is
    /// the error.
    async fn server_side_apply(
        &mut self,
        doc: &Doc,
        dry_run: bool,
    ) -> Result<(DynamicObject, Option<String>), ProviderError> {
        let record = Self::record_of(doc);
        if let Some(schema) = self.crd_schema(doc.api_version(), doc.kind()).await? {
            let unknown = crd_schema::unknown_fields(&doc.object, &schema);
            if let Some(refusal) = unknown_field_error(&record, doc, &unknown) {
                return Err(refusal);
            }
        }
        let api = self.api_for(&record).await?;
        let mut params = PatchParams::apply(super::FIELD_MANAGER).force();
        params.dry_run = dry_run;
        // Kubernetes 1.25 and later refuse unknown and duplicate fields;
        // older servers ignore the parameter.
        params.field_validation = Some(ValidationDirective::Strict);
        let what = format!(
            "{} {} ({})",
            if dry_run { "dry-run apply" } else { "apply" },
            record.label(),
            doc.source
        );
        match api
            .patch(&record.name, &params, &Patch::Apply(&doc.object))
            .await
        {
            Ok(o) => Ok((o, None)),
            Err(e)
                if doc.kind() == "CustomResourceDefinition"
                    && crd_schema::predates_cel(&e.to_string()) =>
            {
                let mut object = doc.object.clone();
                let rules = crd_schema::remove_key(&mut object, crd_schema::CEL_RULES);
                let o = api
                    .patch(&record.name, &params, &Patch::Apply(&object))
                    .await
                    .map_err(|e| errors::kube(&what, e))?;
                Ok((
                    o,
                    Some(format!(
                        "the API server predates CEL validation rules (`{}`, Kubernetes 1.25): {rules} rule(s) of {} were left out; the rest of its schema applies",
                        crd_schema::CEL_RULES,
                        record.label()
                    )),
                ))
            }
            Err(e) => Err(errors::kube(&what, e)),
        }
    }

    /// The object `r` names as it is now, if it exists.
    pub async fn get(&mut self, r: &Record) -> Result<Option<DynamicObject>, ProviderError> {
        let api = self.api_for(r).await?;
        api.get_opt(&r.name)
            .await
            .map_err(|e| errors::kube(&format!("read {}", r.label()), e))
    }

    /// Deletes the object `r` names (if it is still the one recorded) and
    /// waits until it is gone.
    pub async fn delete(
        &mut self,
        r: &Record,
        reporter: &dyn crate::contract::Reporter,
    ) -> Result<(), ProviderError> {
        let api = match self.api_for(r).await {
            Ok(api) => api,
            // The kind is gone (its CRD deleted): so is the object.
            Err(e) if e.message.contains("does not serve") => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut params = DeleteParams::background();
        if !r.uid.is_empty() {
            params.preconditions = Some(::kube::api::Preconditions {
                uid: Some(r.uid.clone()),
                resource_version: None,
            });
        }
        match api.delete(&r.name, &params).await {
            Ok(_) => reporter.event(&format!("deleting {}", r.label())),
            Err(e) if matches!(errors::status(&e), Some(404) | Some(409)) => return Ok(()),
            Err(e) => return Err(errors::kube(&format!("delete {}", r.label()), e)),
        }
        let what = format!("deletion of {}", r.label());
        until(KUBE_PACE, reporter, &what, || async {
            match api.get_opt(&r.name).await {
                Ok(None) => Ok(Step::Done(())),
                Ok(Some(o))
                    if !r.uid.is_empty() && o.metadata.uid.as_deref() != Some(r.uid.as_str()) =>
                {
                    Ok(Step::Done(()))
                }
                Ok(Some(o)) => Ok(Step::Pending(vec![
                    match o.metadata.finalizers.as_deref() {
                        Some(f) if !f.is_empty() => {
                            format!("{} waits for finalizers {}", r.label(), f.join(", "))
                        }
                        _ => format!("{} is terminating", r.label()),
                    },
                ])),
                Err(e) => Err(errors::kube(&format!("read {}", r.label()), e)),
            }
        })
        .await
    }
}

/// The refusal of `doc` for fields its CRD's schema does not declare.
fn unknown_field_error(
    record: &Record,
    doc: &Doc,
    unknown: &[(String, Option<String>)],
) -> Option<ProviderError> {
    let first = unknown.first()?;
    let fields: Vec<String> = unknown
        .iter()
        .map(|(path, close)| match close {
            Some(c) => format!("`{path}` (did you mean `{c}`?)"),
            None => format!("`{path}`"),
        })
        .collect();
    let group = doc.api_version().split('/').next().unwrap_or_default();
    Some(
        ProviderError::invalid(format!(
            "{} ({}): unknown field {}: the schema of its CustomResourceDefinition ({} in {group}, as the cluster serves it) does not declare {}",
            record.label(),
            doc.source,
            fields.join(", "),
            doc.kind(),
            if unknown.len() == 1 { "it" } else { "them" },
        ))
        .with_help(format!(
            "fix `{}` in the manifest: a field the schema does not declare is dropped by the API server (before Kubernetes 1.25) or refused",
            first.0
        )),
    )
}

#[cfg(test)]
mod tests {

    use super::*;
    use serde_json::json;

    fn rec(kind: &str, ns: Option<&str>, name: &str) -> Record {
        Record {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            name: name.into(),
            uid: String::new(),
            digest: String::new(),
        }
    }

    #[test]
    fn custom_resources_go_before_crds_namespaced_before_namespaces() {
        let applied = vec![
            rec("Namespace", None, "ml"),
            rec("CustomResourceDefinition", None, "widgets.example.com"),
            rec("ClusterRole", None, "reader"),
            rec("Widget", Some("ml"), "w1"),
            rec("Deployment", Some("ml"), "web"),
        ];
        let order: Vec<String> = deletion_order(&applied)
            .iter()
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(order, ["web", "w1", "reader", "widgets.example.com", "ml"]);
    }

    #[test]
    fn namespaces_and_crds_are_applied_first() {
        let doc = |kind: &str, name: &str| Doc {
            source: "f#1".into(),
            object: json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}),
        };
        let docs = vec![
            doc("Widget", "w"),
            doc("CustomResourceDefinition", "c"),
            doc("Namespace", "n"),
            doc("ConfigMap", "m"),
        ];
        let order: Vec<String> = apply_order(&docs)
            .iter()
            .map(|d| d.name().to_string())
            .collect();
        assert_eq!(order, ["n", "c", "w", "m"]);
    }

    #[test]
    fn keys_ignore_the_version() {
        assert_eq!(
            key("apps/v1", "Deployment", Some("d"), "web"),
            key("apps/v1beta2", "Deployment", Some("d"), "web")
        );
        assert_ne!(
            key("v1", "Service", Some("a"), "x"),
            key("v1", "Service", Some("b"), "x")
        );
        let r = rec("Service", Some("a"), "x");
        assert_eq!(r.label(), "Service a/x");
        assert_eq!(r.public()["uid"], "");
    }
}
