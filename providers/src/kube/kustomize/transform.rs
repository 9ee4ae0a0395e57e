//! The transformers of one level: namespace, labels, annotations and
//! images, and the namespaces of references to objects the namespace
//! moved.

use serde_json::{Map, Value, json};

use super::fieldspec::{
    AFFINITY_SELECTORS, ANNOTATIONS, CLAIM_TEMPLATE_LABELS, FieldSpec, IMAGE_VOLUMES,
    METADATA_LABELS, NAMESPACES, SELECTOR_LABELS,
};
use super::file::{Kustomization, strings_only};
use super::{KustomizeError, Res};

/// Extra field specs from a level's `configurations` files.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// More places `namespace` is written.
    pub namespace: Vec<FieldSpec>,
    /// More places `commonLabels` (and selector labels) go.
    pub common_labels: Vec<FieldSpec>,
    /// More places `commonAnnotations` go.
    pub common_annotations: Vec<FieldSpec>,
}

/// Kinds that live outside any namespace: `metadata.namespace` is not set
/// on them. A custom kind is taken as namespaced, as kustomize does.
const CLUSTER_SCOPED: [&str; 24] = [
    "APIService",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "ComponentStatus",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "FlowSchema",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
    "ClusterTrustBundle",
];

/// Whether objects of `kind` have a namespace.
pub fn is_namespaced(kind: &str) -> bool {
    !CLUSTER_SCOPED.contains(&kind)
}

/// `namespace`: on every namespaced object, the Namespace objects' names,
/// the role binding subjects named `default`, and the other namespace
/// fields of the defaults and of `configurations`.
pub fn namespace(k: &Kustomization, config: &Config, set: &mut [Res]) {
    let Some(ns) = k.namespace() else { return };
    let value = json!(ns);
    let specs = FieldSpec::with_extra(&NAMESPACES, &config.namespace);
    for res in set {
        let kind = res.kind().to_string();
        let obj = &mut res.object;
        if is_namespaced(&kind) {
            obj["metadata"]["namespace"] = value.clone();
        }
        if kind == "Namespace" && obj.get("apiVersion").and_then(Value::as_str) == Some("v1") {
            obj["metadata"]["name"] = value.clone();
        }
        if matches!(kind.as_str(), "RoleBinding" | "ClusterRoleBinding")
            && let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut)
        {
            for s in subjects {
                if s.get("name").and_then(Value::as_str) == Some("default") {
                    s["namespace"] = value.clone();
                }
            }
        }
        for spec in &specs {
            spec.visit(obj, &mut |v| *v = value.clone());
        }
    }
}

/// `commonLabels` and `labels`.
pub fn labels(k: &Kustomization, config: &Config, set: &mut [Res]) -> Result<(), KustomizeError> {
    let common = k.string_map("commonLabels")?;
    if !common.is_empty() {
        apply_labels(&common, Reach::Selectors, config, set);
    }
    for (i, entry) in k.list("labels")?.iter().enumerate() {
        k.only_fields(
            "labels",
            i,
            entry,
            &["pairs", "includeSelectors", "includeTemplates"],
        )?;
        let pairs = entry
            .get("pairs")
            .and_then(Value::as_object)
            .map(strings_only)
            .unwrap_or_default();
        let flag = |f: &str| entry.get(f).and_then(Value::as_bool).unwrap_or(false);
        let reach = if flag("includeSelectors") {
            Reach::Selectors
        } else if flag("includeTemplates") {
            Reach::Templates
        } else {
            Reach::Metadata
        };
        apply_labels(&pairs, reach, config, set);
    }
    Ok(())
}

/// How far labels go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reach {
    /// `metadata.labels` only.
    Metadata,
    /// And the pod templates.
    Templates,
    /// And the selectors (commonLabels).
    Selectors,
}

fn apply_labels(pairs: &Map<String, Value>, reach: Reach, config: &Config, set: &mut [Res]) {
    let mut specs: Vec<FieldSpec> = match reach {
        Reach::Metadata => vec![METADATA_LABELS[0].owned()],
        _ => METADATA_LABELS.iter().map(|s| s.owned()).collect(),
    };
    if reach == Reach::Selectors {
        specs.extend(SELECTOR_LABELS.iter().map(|s| s.owned()));
        specs.push(CLAIM_TEMPLATE_LABELS.owned());
        for kind in ["Deployment", "StatefulSet"] {
            specs.extend(AFFINITY_SELECTORS.iter().map(|path| FieldSpec {
                group: Some("apps".into()),
                version: None,
                kind: Some(kind.into()),
                path: path.to_string(),
                create: false,
            }));
        }
        specs.extend(config.common_labels.iter().cloned());
    }
    for res in set {
        for spec in &specs {
            spec.visit(&mut res.object, &mut |v| merge_strings(v, pairs));
        }
    }
}

/// `commonAnnotations`.
pub fn annotations(
    k: &Kustomization,
    config: &Config,
    set: &mut [Res],
) -> Result<(), KustomizeError> {
    let pairs = k.string_map("commonAnnotations")?;
    if pairs.is_empty() {
        return Ok(());
    }
    let specs = FieldSpec::with_extra(&ANNOTATIONS, &config.common_annotations);
    for res in set {
        for spec in &specs {
            spec.visit(&mut res.object, &mut |v| merge_strings(v, &pairs));
        }
    }
    Ok(())
}

/// `pairs` set into the map `v` (made a map when it is not one).
fn merge_strings(v: &mut Value, pairs: &Map<String, Value>) {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    if let Value::Object(m) = v {
        for (key, value) in pairs {
            m.insert(key.clone(), value.clone());
        }
    }
}

/// One `images` entry.
#[derive(Debug, Clone)]
struct ImageRule {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
    digest: Option<String>,
}

/// `images`: every container and init container image (at any depth, so
/// a PyTorchJob's replicas too) and image volumes whose name matches.
pub fn images(k: &Kustomization, set: &mut [Res]) -> Result<(), KustomizeError> {
    let mut rules = Vec::new();
    for (i, entry) in k.list("images")?.iter().enumerate() {
        k.only_fields("images", i, entry, &["name", "newName", "newTag", "digest"])?;
        let s = |f: &str| {
            entry.get(f).and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
        };
        let Some(name) = s("name") else {
            return Err(k.error_at(
                &["images", &i.to_string()],
                "an `images` entry needs `name`",
                "",
            ));
        };
        rules.push(ImageRule {
            name,
            new_name: s("newName"),
            new_tag: s("newTag"),
            digest: s("digest"),
        });
    }
    if rules.is_empty() {
        return Ok(());
    }
    for res in set {
        retag_containers(&mut res.object, &rules);
        for path in IMAGE_VOLUMES {
            FieldSpec::existing(path).visit(&mut res.object, &mut |v| retag(v, &rules));
        }
    }
    Ok(())
}

fn retag_containers(v: &mut Value, rules: &[ImageRule]) {
    match v {
        Value::Object(m) => {
            for (key, child) in m.iter_mut() {
                if (key == "containers" || key == "initContainers")
                    && let Value::Array(items) = child
                {
                    for c in items.iter_mut() {
                        if let Some(image) = c.get_mut("image") {
                            retag(image, rules);
                        }
                    }
                }
                retag_containers(child, rules);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| retag_containers(i, rules)),
        _ => {}
    }
}

/// The image reference `v` after the first rule whose name matches.
fn retag(v: &mut Value, rules: &[ImageRule]) {
    let Some(image) = v.as_str() else { return };
    let (name, tag, digest) = split_image(image);
    let Some(rule) = rules.iter().find(|r| r.name == name) else {
        return;
    };
    let mut out = rule.new_name.clone().unwrap_or_else(|| name.to_string());
    if let Some(d) = &rule.digest {
        out.push('@');
        out.push_str(d);
    } else if let Some(t) = &rule.new_tag {
        out.push(':');
        out.push_str(t);
    } else {
        if let Some(t) = tag {
            out.push(':');
            out.push_str(t);
        }
        if let Some(d) = digest {
            out.push('@');
            out.push_str(d);
        }
    }
    *v = Value::String(out);
}

/// `registry:5000/repo/name:tag@sha256:…` as (name, tag, digest).
pub fn split_image(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[last_slash..].rfind(':') {
        Some(c) => (
            &rest[..last_slash + c],
            Some(&rest[last_slash + c + 1..]),
            digest,
        ),
        None => (rest, None, digest),
    }
}

/// Where objects refer to others by name and namespace: the referring
/// kind, the pointer to the reference (lists walked), and the kind
/// referred to.
const REFERENCES: [(&str, &str, &str); 5] = [
    ("RoleBinding", "subjects", "ServiceAccount"),
    ("ClusterRoleBinding", "subjects", "ServiceAccount"),
    (
        "ValidatingWebhookConfiguration",
        "webhooks/clientConfig/service",
        "Service",
    ),
    (
        "MutatingWebhookConfiguration",
        "webhooks/clientConfig/service",
        "Service",
    ),
    ("APIService", "spec/service", "Service"),
];

/// References to a ServiceAccount (binding subjects) or a Service
/// (webhooks, API services) in the set follow its namespace: the one
/// object of that kind and name, or of that name in the reference's
/// namespace when several share the name.
pub fn references(set: &mut [Res]) {
    let targets: Vec<(String, String, String)> = set
        .iter()
        .map(|r| {
            (
                r.kind().to_string(),
                r.name().to_string(),
                r.namespace().to_string(),
            )
        })
        .collect();
    for res in set.iter_mut() {
        let kind = res.kind().to_string();
        for (referrer, path, target_kind) in REFERENCES {
            if kind != referrer {
                continue;
            }
            FieldSpec::existing(path).visit(&mut res.object, &mut |r| {
                if target_kind == "ServiceAccount"
                    && r.get("kind").and_then(Value::as_str) != Some("ServiceAccount")
                {
                    return;
                }
                let Some(name) = r.get("name").and_then(Value::as_str) else {
                    return;
                };
                let own_ns = r.get("namespace").and_then(Value::as_str).unwrap_or("");
                let named: Vec<&(String, String, String)> = targets
                    .iter()
                    .filter(|(k, n, _)| k == target_kind && n == name)
                    .collect();
                let found = match named.as_slice() {
                    [one] => Some(*one),
                    several => {
                        let same: Vec<_> = several.iter().filter(|t| t.2 == own_ns).collect();
                        (same.len() == 1).then(|| *same[0])
                    }
                };
                if let Some((_, _, ns)) = found
                    && !ns.is_empty()
                {
                    r["namespace"] = json!(ns);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_split_at_the_right_colon() {
        assert_eq!(
            split_image("localhost:5000/team/app:v2@sha256:ab"),
            ("localhost:5000/team/app", Some("v2"), Some("sha256:ab"))
        );
        assert_eq!(
            split_image("localhost:5000/team/app"),
            ("localhost:5000/team/app", None, None)
        );
        assert_eq!(split_image("nginx:1.25"), ("nginx", Some("1.25"), None));
    }

    #[test]
    fn retag_keeps_what_the_rule_does_not_set() {
        let rules = [
            ImageRule {
                name: "kubeflow/training-operator".into(),
                new_name: None,
                new_tag: Some("v1-5170a36".into()),
                digest: None,
            },
            ImageRule {
                name: "nginx".into(),
                new_name: Some("registry.local/nginx".into()),
                new_tag: None,
                digest: None,
            },
        ];
        let mut a = json!("kubeflow/training-operator");
        retag(&mut a, &rules);
        assert_eq!(a, json!("kubeflow/training-operator:v1-5170a36"));
        let mut b = json!("nginx:1.25");
        retag(&mut b, &rules);
        assert_eq!(b, json!("registry.local/nginx:1.25"));
        let mut c = json!("other:1");
        retag(&mut c, &rules);
        assert_eq!(c, json!("other:1"));
    }
}
