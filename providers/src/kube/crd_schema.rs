//! Custom resources held to the schema of their CRD as the cluster serves
//! it: a field the schema does not declare (a misspelt `tmplate`) is an
//! error naming it, before the object is sent.
//!
//! Kubernetes 1.25 and later refuse such a field themselves when asked for
//! strict field validation (flow asks, see [`super::objects`]); older
//! servers, the 1.20 one of the tests among them, silently prune it, and
//! the job then runs without what the user wrote. This check gives the same
//! answer on both.

use serde_json::Value;

/// The fields of `object` that `schema` (a CRD version's
/// `openAPIV3Schema`) does not declare, as dotted paths
/// (`spec.pytorchReplicaSpecs.Worker.tmplate`), each with the closest
/// declared name when one is close.
pub fn unknown_fields(object: &Value, schema: &Value) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    if let Value::Object(m) = object {
        for (key, child) in m {
            // The server checks these itself, with their own schemas.
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                continue;
            }
            walk(child, schema, key, key, &mut out);
        }
    }
    out
}

fn walk(
    value: &Value,
    parent: &Value,
    key: &str,
    path: &str,
    out: &mut Vec<(String, Option<String>)>,
) {
    let props = parent.get("properties").and_then(Value::as_object);
    let schema = match props.and_then(|p| p.get(key)) {
        Some(s) => s,
        None => match parent.get("additionalProperties") {
            Some(s @ Value::Object(_)) => s,
            Some(Value::Bool(true)) => return,
            _ if preserves_unknown(parent) => return,
            _ => {
                let close = props.and_then(|p| {
                    crate::suggest::closest(key, p.keys().map(String::as_str)).map(str::to_string)
                });
                out.push((path.to_string(), close));
                return;
            }
        },
    };
    check(value, schema, path, out);
}

fn check(value: &Value, schema: &Value, path: &str, out: &mut Vec<(String, Option<String>)>) {
    if schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(m) => {
            let declares =
                schema.get("properties").is_some() || schema.get("additionalProperties").is_some();
            if !declares {
                return;
            }
            for (key, child) in m {
                walk(child, schema, key, &format!("{path}.{key}"), out);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Whether the schema keeps fields it does not declare.
fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// The `openAPIV3Schema` of version `version` in a CRD object.
pub fn version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .pointer("/schema/openAPIV3Schema")
}

/// The CRD schema field for CEL validation rules.
pub const CEL_RULES: &str = "x-kubernetes-validations";

/// Whether the server's refusal `text` of a CRD is for a CEL rule it does
/// not know (Kubernetes before 1.25).
pub fn predates_cel(text: &str) -> bool {
    text.contains(CEL_RULES) && text.contains("field not declared in schema")
}

/// Whether `key` is a field anywhere under `v`.
pub fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|c| has_key(c, key)),
        Value::Array(items) => items.iter().any(|c| has_key(c, key)),
        _ => false,
    }
}

/// Removes every `key` field under `v`, returning how many values (list
/// items, for a list) went with them.
pub fn remove_key(v: &mut Value, key: &str) -> usize {
    match v {
        Value::Object(m) => {
            let here = m
                .remove(key)
                .map_or(0, |r| r.as_array().map_or(1, Vec::len));
            here + m.values_mut().map(|c| remove_key(c, key)).sum::<usize>()
        }
        Value::Array(items) => items.iter_mut().map(|c| remove_key(c, key)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "spec": {"type": "object", "properties": {
                "pytorchReplicaSpecs": {"type": "object", "additionalProperties": {
                    "type": "object", "properties": {
                        "replicas": {"type": "integer"},
                        "template": {"type": "object", "properties": {
                            "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "spec": {"type": "object", "properties": {
                                "containers": {"type": "array", "items": {"type": "object", "properties": {
                                    "name": {"type": "string"}, "image": {"type": "string"}}}}}}}}}}},
                "runPolicy": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    #[test]
    fn a_misspelt_field_is_named_with_its_path_and_the_close_name() {
        let job = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "x", "labels": {"a": "b"}},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "tmplate": {}}},
                     "runPolicy": {"anything": 1}}});
        assert_eq!(
            unknown_fields(&job, &schema()),
            vec![(
                "spec.pytorchReplicaSpecs.Worker.tmplate".to_string(),
                Some("template".to_string())
            )]
        );
    }

    #[test]
    fn list_items_and_free_maps_are_walked_and_a_good_object_passes() {
        let good = json!({"spec": {"pytorchReplicaSpecs": {"Master": {"template": {
            "metadata": {"annotations": {"x": "y"}},
            "spec": {"containers": [{"name": "a", "image": "i"}]}}}}}});
        assert!(unknown_fields(&good, &schema()).is_empty());
        let bad = json!({"spec": {"pytorchReplicaSpecs": {"Master": {"template": {
            "spec": {"containers": [{"name": "a", "imagee": "i"}]}}}}}});
        assert_eq!(
            unknown_fields(&bad, &schema()),
            vec![(
                "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagee".to_string(),
                Some("image".to_string())
            )]
        );
    }

    #[test]
    fn cel_rules_are_removed_and_counted_at_any_depth() {
        let mut crd = serde_json::json!({"spec": {"versions": [{"schema": {"openAPIV3Schema": {
            "properties": {"spec": {"properties": {
                "queue": {"type": "string", "x-kubernetes-validations": [{"rule": "a"}, {"rule": "b"}]},
                "other": {"x-kubernetes-validations": [{"rule": "c"}]}}}}}}}]}});
        assert_eq!(remove_key(&mut crd, CEL_RULES), 3);
        assert!(!crd.to_string().contains(CEL_RULES));
        assert_eq!(
            crd.pointer(
                "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/queue/type"
            ),
            Some(&serde_json::json!("string"))
        );
    }
}
