//! Field specs, as kustomize writes them: which kinds a transformer
//! touches, at which path, and whether it creates the path when absent.
//! The default lists are kustomize v5's (`api/internal/konfig/
//! builtinpluginconsts`), for the fields flow renders.

use serde_json::{Map, Value};

/// One place a transformer writes.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldSpec {
    /// The API group, if the spec is limited to one (`apps`; `""` is core).
    pub group: Option<String>,
    /// The version, if limited (`v1`).
    pub version: Option<String>,
    /// The kind, if limited.
    pub kind: Option<String>,
    /// Keys separated by `/`; a list on the way is walked item by item
    /// (`containers[]` says so explicitly).
    pub path: String,
    /// Whether the path is created when absent.
    pub create: bool,
}

impl FieldSpec {
    /// The spec written in a `configurations` file.
    pub fn from_value(v: &Value) -> Option<FieldSpec> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(FieldSpec {
            group: s("group"),
            version: s("version"),
            kind: s("kind"),
            path: s("path")?,
            create: v.get("create").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// A spec of every kind at `path`, never creating it.
    pub fn existing(path: &str) -> FieldSpec {
        FieldSpec {
            group: None,
            version: None,
            kind: None,
            path: path.to_string(),
            create: false,
        }
    }

    /// The default specs `defaults` followed by `extra` (a level's
    /// `configurations`).
    pub fn with_extra(defaults: &[StaticSpec], extra: &[FieldSpec]) -> Vec<FieldSpec> {
        defaults
            .iter()
            .map(StaticSpec::owned)
            .chain(extra.iter().cloned())
            .collect()
    }

    /// Whether the spec applies to `object`.
    pub fn matches(&self, object: &Value) -> bool {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        self.kind.as_deref().is_none_or(|k| k == kind)
            && self.group.as_deref().is_none_or(|g| g == group)
            && self.version.as_deref().is_none_or(|v| v == version)
    }

    /// Calls `f` on each value at the path of `object` (created first when
    /// the spec says so: a missing map as `{}`, a missing leaf as null).
    pub fn visit(&self, object: &mut Value, f: &mut dyn FnMut(&mut Value)) {
        if !self.matches(object) {
            return;
        }
        let keys: Vec<&str> = self
            .path
            .split('/')
            .map(|k| k.trim_end_matches("[]"))
            .collect();
        walk(object, &keys, self.create, f);
    }
}

/// A default spec, in static form.
#[derive(Debug, Clone, Copy)]
pub struct StaticSpec {
    group: Option<&'static str>,
    kind: Option<&'static str>,
    path: &'static str,
    create: bool,
}

impl StaticSpec {
    /// As a [`FieldSpec`].
    pub fn owned(&self) -> FieldSpec {
        FieldSpec {
            group: self.group.map(str::to_string),
            version: None,
            kind: self.kind.map(str::to_string),
            path: self.path.to_string(),
            create: self.create,
        }
    }
}

fn walk(value: &mut Value, keys: &[&str], create: bool, f: &mut dyn FnMut(&mut Value)) {
    if let Value::Array(items) = value {
        for item in items {
            walk(item, keys, create, f);
        }
        return;
    }
    let Some((first, rest)) = keys.split_first() else {
        f(value);
        return;
    };
    let Value::Object(map) = value else { return };
    if !map.contains_key(*first) {
        if !create {
            return;
        }
        let fresh = if rest.is_empty() {
            Value::Null
        } else {
            Value::Object(Map::new())
        };
        map.insert(first.to_string(), fresh);
    }
    if let Some(child) = map.get_mut(*first) {
        if child.is_null() && !rest.is_empty() {
            *child = Value::Object(Map::new());
        }
        walk(child, rest, create, f);
    }
}

/// A default spec.
const fn spec(
    group: Option<&'static str>,
    kind: Option<&'static str>,
    path: &'static str,
    create: bool,
) -> StaticSpec {
    StaticSpec {
        group,
        kind,
        path,
        create,
    }
}

const APPS: Option<&str> = Some("apps");
const BATCH: Option<&str> = Some("batch");

/// Where `metadata.labels`-like labels go (labels without selectors).
pub const METADATA_LABELS: [StaticSpec; 9] = [
    spec(None, None, "metadata/labels", true),
    spec(
        None,
        Some("ReplicationController"),
        "spec/template/metadata/labels",
        true,
    ),
    spec(
        None,
        Some("Deployment"),
        "spec/template/metadata/labels",
        true,
    ),
    spec(
        None,
        Some("ReplicaSet"),
        "spec/template/metadata/labels",
        true,
    ),
    spec(
        None,
        Some("DaemonSet"),
        "spec/template/metadata/labels",
        true,
    ),
    spec(
        APPS,
        Some("StatefulSet"),
        "spec/template/metadata/labels",
        true,
    ),
    spec(BATCH, Some("Job"), "spec/template/metadata/labels", true),
    spec(
        BATCH,
        Some("CronJob"),
        "spec/jobTemplate/metadata/labels",
        true,
    ),
    spec(
        BATCH,
        Some("CronJob"),
        "spec/jobTemplate/spec/template/metadata/labels",
        true,
    ),
];

/// Where selector labels go as well (`commonLabels`, `labels` with
/// `includeSelectors`).
pub const SELECTOR_LABELS: [StaticSpec; 12] = [
    spec(Some(""), Some("Service"), "spec/selector", true),
    spec(
        Some(""),
        Some("ReplicationController"),
        "spec/selector",
        true,
    ),
    spec(None, Some("Deployment"), "spec/selector/matchLabels", true),
    spec(None, Some("ReplicaSet"), "spec/selector/matchLabels", true),
    spec(None, Some("DaemonSet"), "spec/selector/matchLabels", true),
    spec(APPS, Some("StatefulSet"), "spec/selector/matchLabels", true),
    spec(BATCH, Some("Job"), "spec/selector/matchLabels", false),
    spec(
        BATCH,
        Some("CronJob"),
        "spec/jobTemplate/spec/selector/matchLabels",
        false,
    ),
    spec(
        Some("policy"),
        Some("PodDisruptionBudget"),
        "spec/selector/matchLabels",
        false,
    ),
    spec(
        Some("networking.k8s.io"),
        Some("NetworkPolicy"),
        "spec/podSelector/matchLabels",
        false,
    ),
    spec(
        Some("networking.k8s.io"),
        Some("NetworkPolicy"),
        "spec/ingress/from/podSelector/matchLabels",
        false,
    ),
    spec(
        Some("networking.k8s.io"),
        Some("NetworkPolicy"),
        "spec/egress/to/podSelector/matchLabels",
        false,
    ),
];

/// Pod affinity selectors of Deployments and StatefulSets, which selector
/// labels reach when present.
pub const AFFINITY_SELECTORS: [&str; 5] = [
    "spec/template/spec/affinity/podAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels",
    "spec/template/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels",
    "spec/template/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels",
    "spec/template/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels",
    "spec/template/spec/topologySpreadConstraints/labelSelector/matchLabels",
];

/// A StatefulSet's volume claim templates carry the labels too.
pub const CLAIM_TEMPLATE_LABELS: StaticSpec = spec(
    APPS,
    Some("StatefulSet"),
    "spec/volumeClaimTemplates[]/metadata/labels",
    true,
);

/// Where `commonAnnotations` go.
pub const ANNOTATIONS: [StaticSpec; 9] = [
    spec(None, None, "metadata/annotations", true),
    spec(
        None,
        Some("ReplicationController"),
        "spec/template/metadata/annotations",
        true,
    ),
    spec(
        None,
        Some("Deployment"),
        "spec/template/metadata/annotations",
        true,
    ),
    spec(
        None,
        Some("ReplicaSet"),
        "spec/template/metadata/annotations",
        true,
    ),
    spec(
        None,
        Some("DaemonSet"),
        "spec/template/metadata/annotations",
        true,
    ),
    spec(
        None,
        Some("StatefulSet"),
        "spec/template/metadata/annotations",
        true,
    ),
    spec(
        BATCH,
        Some("Job"),
        "spec/template/metadata/annotations",
        true,
    ),
    spec(
        BATCH,
        Some("CronJob"),
        "spec/jobTemplate/metadata/annotations",
        true,
    ),
    spec(
        BATCH,
        Some("CronJob"),
        "spec/jobTemplate/spec/template/metadata/annotations",
        true,
    ),
];

/// Namespace fields besides `metadata.namespace`.
pub const NAMESPACES: [StaticSpec; 2] = [
    spec(
        Some("apiregistration.k8s.io"),
        Some("APIService"),
        "spec/service/namespace",
        true,
    ),
    spec(
        Some("apiextensions.k8s.io"),
        Some("CustomResourceDefinition"),
        "spec/conversion/webhook/clientConfig/service/namespace",
        false,
    ),
];

/// Where `images` look besides every `containers` and `initContainers`
/// list: image volumes.
pub const IMAGE_VOLUMES: [&str; 2] = [
    "spec/volumes[]/image/reference",
    "spec/template/spec/volumes[]/image/reference",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_walk_lists_and_create_only_when_told() {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"template": {"spec": {"affinity": {"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"a": "1"}}},
                    {"labelSelector": {}}]}}}}}});
        let spec = FieldSpec {
            group: Some("apps".into()),
            version: None,
            kind: Some("Deployment".into()),
            path: AFFINITY_SELECTORS[1].into(),
            create: false,
        };
        let mut seen = 0;
        spec.visit(&mut d, &mut |v| {
            seen += 1;
            v["b"] = json!("2");
        });
        assert_eq!(seen, 1, "the second term has no matchLabels to touch");
        assert_eq!(
            d.pointer("/spec/template/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/0/labelSelector/matchLabels/b"),
            Some(&json!("2"))
        );
        let mut svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
        SELECTOR_LABELS[0]
            .owned()
            .visit(&mut svc, &mut |v| *v = json!({"app": "x"}));
        assert_eq!(svc["spec"]["selector"], json!({"app": "x"}));
        let mut deploy_in_other_group = json!({"apiVersion": "v1", "kind": "Service"});
        assert!(!SELECTOR_LABELS[5].owned().matches(&deploy_in_other_group));
        SELECTOR_LABELS[1]
            .owned()
            .visit(&mut deploy_in_other_group, &mut |_| panic!("not a match"));
    }
}
