//! The objects of a manifest's text: its YAML documents split, `kind:
//! List` expanded, and each object checked and normalised for server-side
//! apply.

use serde_json::Value;

use super::kustomize::KustomizeError;

/// One object of the manifests, before it is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// Where it came from: `file.yaml#2` (the document's index, from 1).
    pub source: String,
    /// The object.
    pub object: Value,
}

impl Doc {
    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `metadata.namespace`, if set.
    pub fn namespace(&self) -> Option<&str> {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }
}

/// A manifest that cannot be applied as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    /// A workflow reference written inside a file, where it is not resolved.
    #[error(
        "{file}:{line}: `${{{name}}}` is not resolved inside files: add `{key} = \"${{{name}}}\"` to the step's `values` and write `${{{key}}}` in the file"
    )]
    ReferenceInFile {
        /// The file.
        file: String,
        /// The line it is on.
        line: usize,
        /// The reference (`vars.image`).
        name: String,
        /// Its last part, the name to use in `values`.
        key: String,
    },
    /// A value that cannot enter the YAML as a scalar where its placeholder is.
    #[error("{file}:{line}: {message}")]
    Misplaced {
        /// The file.
        file: String,
        /// The placeholder's line.
        line: usize,
        /// What is wrong and what to do.
        message: String,
    },
    /// The text is not YAML.
    #[error("{file}: not valid YAML: {detail}")]
    NotYaml {
        /// The file.
        file: String,
        /// What the YAML reader said.
        detail: String,
    },
    /// A document is not a mapping.
    #[error("{file}: a document must be a Kubernetes object (a mapping)")]
    NotAnObject {
        /// The file and document number.
        file: String,
    },
    /// An object without `apiVersion` or `kind`.
    #[error("{file}: every object needs `apiVersion` and `kind`")]
    NoKind {
        /// The file and document number.
        file: String,
    },
    /// A kustomize folder that cannot be rendered.
    #[error("{0}")]
    Kustomize(KustomizeError),
    /// An object without a name.
    #[error("{file}: {kind} has no `metadata.name` (generateName cannot be applied idempotently)")]
    NoName {
        /// The file and document number.
        file: String,
        /// Its kind.
        kind: String,
    },
}

/// The objects in `text` (YAML, one or more documents).
pub fn parse(source: &str, text: &str) -> Result<Vec<Doc>, ManifestError> {
    let values: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| ManifestError::NotYaml {
            file: source.to_string(),
            detail: e.to_string(),
        })?;
    let mut docs = Vec::new();
    for (i, v) in values.into_iter().enumerate() {
        let src = format!("{source}#{}", i + 1);
        match v {
            Value::Null => continue,
            Value::Object(_) if v.get("kind").and_then(Value::as_str) == Some("List") => {
                for item in v
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                {
                    docs.push(check(&src, item)?);
                }
            }
            Value::Object(_) => docs.push(check(&src, v)?),
            _ => {
                return Err(ManifestError::NotAnObject { file: src });
            }
        }
    }
    Ok(docs)
}

/// `object` if it has what server-side apply needs.
pub(super) fn check(source: &str, mut object: Value) -> Result<Doc, ManifestError> {
    quantities_as_strings(&mut object);
    service_port_protocols(&mut object);
    let doc = Doc {
        source: source.to_string(),
        object,
    };
    if doc.api_version().is_empty() || doc.kind().is_empty() {
        return Err(ManifestError::NoKind {
            file: source.to_string(),
        });
    }
    if doc.name().is_empty() {
        return Err(ManifestError::NoName {
            file: source.to_string(),
            kind: doc.kind().to_string(),
        });
    }
    Ok(doc)
}

/// Resource quantities written as numbers (`nvidia.com/gpu: 8`, as the
/// runbooks write them) become strings: `kubectl apply` converts them on
/// the client, but server-side apply rejects a number where the schema has
/// a quantity ("expected string"). Only the maps of `resources.limits`,
/// `resources.requests` and a pod's `overhead` are touched.
fn quantities_as_strings(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if let ("resources", Value::Object(res)) = (key.as_str(), &mut *child) {
                    for (k, q) in res.iter_mut() {
                        if k == "limits" || k == "requests" {
                            numbers_to_strings(q);
                        }
                    }
                }
                if key == "overhead" {
                    numbers_to_strings(child);
                }
                quantities_as_strings(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(quantities_as_strings),
        _ => {}
    }
}

/// A Service port without `protocol` gets `TCP`, the value the API server
/// defaults it to: `protocol` is part of the ports' list key, and
/// server-side apply on Kubernetes 1.20 refuses an item that omits it
/// ("associative list with keys has an element that omits key field
/// \"protocol\""), as the published training operator's Service does.
fn service_port_protocols(object: &mut Value) {
    if object.get("kind").and_then(Value::as_str) != Some("Service")
        || object.get("apiVersion").and_then(Value::as_str) != Some("v1")
    {
        return;
    }
    let Some(ports) = object
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
        port.entry("protocol")
            .or_insert_with(|| Value::String("TCP".into()));
    }
}

/// The number values of a map, as strings.
fn numbers_to_strings(map: &mut Value) {
    if let Value::Object(m) = map {
        for q in m.values_mut() {
            if let Value::Number(n) = q {
                *q = Value::String(n.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ports_get_the_protocol_the_server_defaults() {
        let docs = parse(
            "svc.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports:\n  - {port: 8080}\n  - {port: 53, protocol: UDP}\n",
        )
        .unwrap();
        assert_eq!(
            docs[0].object["spec"]["ports"],
            serde_json::json!([{"port": 8080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}])
        );
    }

    #[test]
    fn resource_quantities_written_as_numbers_become_strings() {
        let docs = parse(
            "job.yaml",
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 2\n  template:\n    spec:\n      containers:\n        - name: c\n          resources:\n            limits: {nvidia.com/gpu: 8, memory: 1Gi}\n            requests: {cpu: 0.5}\n",
        )
        .unwrap();
        let o = &docs[0].object;
        let c = &o["spec"]["template"]["spec"]["containers"][0]["resources"];
        assert_eq!(c["limits"]["nvidia.com/gpu"], "8");
        assert_eq!(c["limits"]["memory"], "1Gi");
        assert_eq!(c["requests"]["cpu"], "0.5");
        assert_eq!(o["spec"]["parallelism"], 2, "other numbers stay numbers");
    }

    #[test]
    fn documents_split_lists_expand_names_required() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b, namespace: a}\n";
        let docs = parse("m.yaml", text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].source, "m.yaml#1");
        assert_eq!(
            (docs[1].kind(), docs[1].name(), docs[1].namespace()),
            ("ConfigMap", "b", Some("a"))
        );
        let err = parse(
            "m.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {generateName: x-}\n",
        )
        .unwrap_err();
        assert!(matches!(&err, ManifestError::NoName { kind, .. } if kind == "Pod"));
        assert!(err.to_string().contains("no `metadata.name`"), "{err}");
        assert!(matches!(
            parse("m.yaml", "- a\n").unwrap_err(),
            ManifestError::NotAnObject { .. }
        ));
    }
}
