//! What refresh compares for Kubernetes objects: the fields flow applied
//! (those its field manager owns), against the live object. Fields the
//! server rewrites in its own form (resource quantities) and values flow
//! only knows sealed are not compared; a Secret's data is never shown.

use serde_json::{Value, json};

use super::crd_schema;
use crate::contract::{Drift, SEALED_PREFIX};

/// How many fields of one object are named; past that, one line counts them.
const NAMED: usize = 10;

/// The fields of `applied` whose live value differs, for the object `label`.
pub fn owned_drift(label: &str, applied: &Value, live: &Value) -> Vec<Drift> {
    let kind = applied.get("kind").and_then(Value::as_str);
    let secret = kind == Some("Secret");
    // A server older than the CRD's CEL rules took the CRD without them
    // (see `Kinds::apply`); it keeps none, so their absence is not drift.
    let stripped;
    let applied = if kind == Some("CustomResourceDefinition")
        && !crd_schema::has_key(live, crd_schema::CEL_RULES)
    {
        let mut a = applied.clone();
        crd_schema::remove_key(&mut a, crd_schema::CEL_RULES);
        stripped = a;
        &stripped
    } else {
        applied
    };
    let mut found = Vec::new();
    compare("", applied, live, secret, &mut found);
    if found.len() > NAMED {
        return vec![Drift::of_attribute(
            label.to_string(),
            json!("as applied"),
            json!(format!("{} fields changed", found.len())),
        )];
    }
    found
        .into_iter()
        .map(|(path, was, now)| {
            let d = Drift::of_attribute(format!("{label} {path}"), was, now);
            if secret { d.secret() } else { d }
        })
        .collect()
}

/// Walks `applied`, noting each leaf whose value `live` does not share.
fn compare(
    path: &str,
    applied: &Value,
    live: &Value,
    secret: bool,
    out: &mut Vec<(String, Value, Value)>,
) {
    match applied {
        Value::Object(fields) => {
            for (key, value) in fields {
                if skipped(path, key, secret) {
                    continue;
                }
                let at = format!("{path}.{key}");
                compare(
                    &at,
                    value,
                    live.get(key).unwrap_or(&Value::Null),
                    secret,
                    out,
                );
            }
        }
        Value::Array(items) if items.is_empty() && live.is_null() => {}
        Value::Array(items) => match live.as_array() {
            Some(real) if real.len() == items.len() => {
                for (i, (a, l)) in items.iter().zip(real).enumerate() {
                    compare(&format!("{path}[{i}]"), a, l, secret, out);
                }
            }
            _ => out.push((path.to_string(), applied.clone(), live.clone())),
        },
        leaf => {
            let sealed = leaf.as_str().is_some_and(|s| s.contains(SEALED_PREFIX));
            if !sealed && !same_leaf(leaf, live) {
                out.push((path.to_string(), leaf.clone(), live.clone()));
            }
        }
    }
}

/// Fields not compared: what the server owns or rewrites.
fn skipped(path: &str, key: &str, secret: bool) -> bool {
    match path {
        "" => {
            matches!(key, "status" | "apiVersion" | "kind")
                || (secret && matches!(key, "data" | "stringData"))
        }
        ".metadata" => !matches!(key, "labels" | "annotations"),
        ".metadata.annotations" => key.starts_with("flow."),
        _ => key == "resources",
    }
}

/// Whether two leaves are the same value as the server holds it: `8` and
/// `"8"` are (flow sends quantities as text), and an empty or zero value
/// the server leaves out (Go's `omitempty`: `storageClassName: ""`) is the
/// same as absent.
fn same_leaf(applied: &Value, live: &Value) -> bool {
    let zero = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    };
    match (applied, live) {
        (a, l) if a == l => true,
        (a, Value::Null) if zero(a) => true,
        (Value::Number(a), Value::String(l)) | (Value::String(l), Value::Number(a)) => {
            a.to_string() == *l
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: Value, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ml", "labels": {"app": "web"}, "uid": "u"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "c", "image": image, "resources": {"limits": {"cpu": "0.5"}}}
            ]}}},
        })
    }

    #[test]
    fn only_the_fields_flow_applied_are_compared() {
        let applied = deployment(json!(1), "nginx:1");
        let mut live = deployment(json!(1), "nginx:1");
        live["status"] = json!({"readyReplicas": 1});
        live["metadata"]["resourceVersion"] = json!("42");
        live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
            json!("500m");
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        assert!(owned_drift("Deployment ml/web", &applied, &live).is_empty());
    }

    #[test]
    fn a_scaled_and_edited_object_drifts_field_by_field() {
        let applied = deployment(json!(1), "nginx:1");
        let live = deployment(json!(3), "nginx:2");
        let d = owned_drift("Deployment ml/web", &applied, &live);
        let names: Vec<&str> = d.iter().map(|d| d.attribute.as_str()).collect();
        assert_eq!(
            names,
            [
                "Deployment ml/web .spec.replicas",
                "Deployment ml/web .spec.template.spec.containers[0].image"
            ]
        );
        assert_eq!(
            (d[0].recorded.clone(), d[0].real.clone()),
            (json!(1), json!(3))
        );
    }

    #[test]
    fn numbers_sent_as_text_sealed_values_and_secret_data_are_not_drift() {
        assert!(same_leaf(&json!(8), &json!("8")));
        // The server leaves empty values out.
        let pv = json!({"kind": "PersistentVolume", "spec": {"storageClassName": "", "mountOptions": [], "x": {}}});
        assert!(
            owned_drift(
                "PersistentVolume p",
                &pv,
                &json!({"kind": "PersistentVolume", "spec": {}})
            )
            .is_empty()
        );
        assert!(!same_leaf(&json!("gp3"), &Value::Null));
        let applied = json!({"kind": "ConfigMap", "data": {"token": format!("{SEALED_PREFIX}{}", "a".repeat(64))}});
        let live = json!({"kind": "ConfigMap", "data": {"token": "the real one"}});
        assert!(owned_drift("ConfigMap x", &applied, &live).is_empty());
        let applied =
            json!({"kind": "Secret", "data": {"k": "YQ=="}, "metadata": {"labels": {"a": "1"}}});
        let live =
            json!({"kind": "Secret", "data": {"k": "Yg=="}, "metadata": {"labels": {"a": "2"}}});
        let d = owned_drift("Secret x", &applied, &live);
        assert_eq!(d.len(), 1);
        assert!(d[0].sensitive);
    }
}
