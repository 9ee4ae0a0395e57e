//! Patches: strategic merge (`patchesStrategicMerge`, and `patches` whose
//! content is a mapping) and JSON 6902 (`patchesJson6902`, and `patches`
//! whose content is a list), each on the objects its target selects.

use std::path::Path;

use serde_json::{Map, Value};

use super::file::Kustomization;
use super::{Builder, KustomizeError, Res};

/// The fields of a `target`.
const TARGET_FIELDS: [&str; 7] = [
    "group",
    "version",
    "kind",
    "name",
    "namespace",
    "labelSelector",
    "annotationSelector",
];

/// `patchesStrategicMerge`: files (or inline YAML), each document patching
/// the object its own `kind` and `metadata.name` name.
pub fn strategic_files(
    b: &mut Builder,
    k: &Kustomization,
    dir: &Path,
    set: &mut Vec<Res>,
) -> Result<(), KustomizeError> {
    for (i, entry) in k.strings("patchesStrategicMerge")?.iter().enumerate() {
        let (shown, text) = if entry.contains('\n') {
            (
                format!("{}: patchesStrategicMerge[{i}]", k.file),
                entry.clone(),
            )
        } else {
            let path = dir.join(entry);
            (b.show(&path), b.read(&path)?)
        };
        for doc in documents(&shown, &text)? {
            strategic_by_identity(&shown, &doc, set)?;
        }
    }
    Ok(())
}

/// `patches`: each entry's `path` or `patch`, on its `target` (or, for a
/// strategic merge patch without one, on the object it names).
pub fn patches(
    b: &mut Builder,
    k: &Kustomization,
    dir: &Path,
    set: &mut Vec<Res>,
) -> Result<(), KustomizeError> {
    for (i, entry) in k.list("patches")?.iter().enumerate() {
        k.only_fields("patches", i, entry, &["path", "patch", "target"])?;
        let (shown, text) = content(b, k, "patches", i, entry, dir)?;
        let target = target_of(k, "patches", i, entry)?;
        let docs = documents(&shown, &text)?;
        for doc in docs {
            match (&doc, &target) {
                (Value::Array(_), Some(t)) => json6902(&shown, &doc, t, set)?,
                (Value::Array(_), None) => {
                    return Err(k.error_at(
                        &["patches", &i.to_string()],
                        "a JSON 6902 patch needs a `target`",
                        "add `target: {kind: …, name: …}`",
                    ));
                }
                (Value::Object(_), Some(t)) => {
                    for res in set.iter_mut().filter(|r| t.selects(r)) {
                        strategic_merge(&mut res.object, &doc);
                    }
                    remove_deleted(set);
                }
                (Value::Object(_), None) => strategic_by_identity(&shown, &doc, set)?,
                _ => {
                    return Err(KustomizeError {
                        file: shown.clone(),
                        at: None,
                        message: "a patch is a mapping (strategic merge) or a list (JSON 6902)"
                            .into(),
                        help: None,
                    });
                }
            }
        }
    }
    Ok(())
}

/// `patchesJson6902`: entries with a `target` and a `path` or `patch`.
pub fn json6902_entries(
    b: &mut Builder,
    k: &Kustomization,
    dir: &Path,
    set: &mut [Res],
) -> Result<(), KustomizeError> {
    for (i, entry) in k.list("patchesJson6902")?.iter().enumerate() {
        k.only_fields("patchesJson6902", i, entry, &["path", "patch", "target"])?;
        let (shown, text) = content(b, k, "patchesJson6902", i, entry, dir)?;
        let Some(target) = target_of(k, "patchesJson6902", i, entry)? else {
            return Err(k.error_at(
                &["patchesJson6902", &i.to_string()],
                "a JSON 6902 patch needs a `target`",
                "",
            ));
        };
        for doc in documents(&shown, &text)? {
            json6902(&shown, &doc, &target, set)?;
        }
    }
    Ok(())
}

/// The text of an entry's `path` (read) or `patch` (inline), with the
/// name to show for it.
fn content(
    b: &mut Builder,
    k: &Kustomization,
    key: &str,
    i: usize,
    entry: &Value,
    dir: &Path,
) -> Result<(String, String), KustomizeError> {
    match (
        entry.get("path").and_then(Value::as_str),
        entry.get("patch").and_then(Value::as_str),
    ) {
        (Some(p), None) => {
            let path = dir.join(p);
            Ok((b.show(&path), b.read(&path)?))
        }
        (None, Some(inline)) => Ok((format!("{}: {key}[{i}].patch", k.file), inline.to_string())),
        _ => Err(k.error_at(
            &[key, &i.to_string()],
            format!("`{key}[{i}]` needs exactly one of `path` and `patch`"),
            "",
        )),
    }
}

/// The YAML (or JSON) documents of a patch.
fn documents(shown: &str, text: &str) -> Result<Vec<Value>, KustomizeError> {
    let docs = super::yaml_documents(shown, text)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Which objects a patch applies to.
#[derive(Debug, Clone, Default)]
pub struct Target {
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<regex_lite::Regex>,
    namespace: Option<regex_lite::Regex>,
    labels: Vec<(String, Option<String>, bool)>,
    annotations: Vec<(String, Option<String>, bool)>,
}

impl Target {
    /// Whether `res` is selected.
    fn selects(&self, res: &Res) -> bool {
        let api = res.str_at("/apiVersion");
        let (group, version) = api.split_once('/').unwrap_or(("", api));
        let matches_map = |pointer: &str, want: &[(String, Option<String>, bool)]| {
            want.iter().all(|(key, value, equal)| {
                let have = res
                    .object
                    .pointer(pointer)
                    .and_then(|m| m.get(key))
                    .and_then(Value::as_str);
                match value {
                    None => have.is_some(),
                    Some(v) => (have == Some(v.as_str())) == *equal,
                }
            })
        };
        self.group.as_deref().is_none_or(|g| g == group)
            && self.version.as_deref().is_none_or(|v| v == version)
            && self.kind.as_deref().is_none_or(|k| k == res.kind())
            && self.name.as_ref().is_none_or(|r| r.is_match(res.name()))
            && self
                .namespace
                .as_ref()
                .is_none_or(|r| r.is_match(res.namespace()))
            && matches_map("/metadata/labels", &self.labels)
            && matches_map("/metadata/annotations", &self.annotations)
    }
}

/// An entry's `target`, if it has one.
fn target_of(
    k: &Kustomization,
    key: &str,
    i: usize,
    entry: &Value,
) -> Result<Option<Target>, KustomizeError> {
    let Some(t) = entry.get("target").filter(|t| !t.is_null()) else {
        return Ok(None);
    };
    let Some(fields) = t.as_object() else {
        return Err(k.error_at(
            &[key, &i.to_string(), "target"],
            "`target` is a mapping",
            "",
        ));
    };
    if let Some(f) = fields.keys().find(|f| !TARGET_FIELDS.contains(&f.as_str())) {
        return Err(k.error_at(
            &[key, &i.to_string(), "target", f],
            format!("`target.{f}` is outside the kustomize subset flow renders"),
            format!("a target may set {}", TARGET_FIELDS.join(", ")),
        ));
    }
    let s = |f: &str| fields.get(f).and_then(Value::as_str).map(str::to_string);
    let regex = |f: &str| -> Result<Option<regex_lite::Regex>, KustomizeError> {
        s(f).map(|p| {
            regex_lite::Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                k.error_at(
                    &[key, &i.to_string(), "target", f],
                    format!("`{p}` is not a valid pattern: {e}"),
                    "",
                )
            })
        })
        .transpose()
    };
    Ok(Some(Target {
        group: s("group"),
        version: s("version"),
        kind: s("kind"),
        name: regex("name")?,
        namespace: regex("namespace")?,
        labels: selector(s("labelSelector").as_deref()),
        annotations: selector(s("annotationSelector").as_deref()),
    }))
}

/// `a=b,c!=d,e` as (key, value, equal) requirements.
fn selector(text: Option<&str>) -> Vec<(String, Option<String>, bool)> {
    text.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            if let Some((k, v)) = p.split_once("!=") {
                (k.trim().into(), Some(v.trim().into()), false)
            } else if let Some((k, v)) = p.split_once('=') {
                let v = v.trim_start_matches('=');
                (k.trim().into(), Some(v.trim().into()), true)
            } else {
                (p.into(), None, true)
            }
        })
        .collect()
}

/// A strategic merge patch on the one object its `kind`, name and
/// namespace name.
fn strategic_by_identity(
    shown: &str,
    doc: &Value,
    set: &mut Vec<Res>,
) -> Result<(), KustomizeError> {
    let s = |p: &str| doc.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (kind, name, ns) = (s("/kind"), s("/metadata/name"), s("/metadata/namespace"));
    let hits: Vec<usize> = set
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.kind() == kind
                && (r.name() == name || r.original_name == name)
                && (ns.is_empty() || r.namespace() == ns || r.namespace().is_empty())
        })
        .map(|(i, _)| i)
        .collect();
    match hits.as_slice() {
        [one] => {
            strategic_merge(&mut set[*one].object, doc);
            remove_deleted(set);
            Ok(())
        }
        none_or_many => Err(KustomizeError {
            file: shown.to_string(),
            at: None,
            message: format!(
                "the patch of {kind} `{name}` matches {} objects, and must match one",
                none_or_many.len()
            ),
            help: Some(
                "check its kind and metadata.name against the resources, or give the entry a `target`"
                    .into(),
            ),
        }),
    }
}

/// The marker a `$patch: delete` at an object's top leaves.
const DELETED: &str = "$flow-deleted";

fn remove_deleted(set: &mut Vec<Res>) {
    set.retain(|r| r.object.get(DELETED).is_none());
}

/// A JSON 6902 patch on each selected object.
fn json6902(
    shown: &str,
    doc: &Value,
    target: &Target,
    set: &mut [Res],
) -> Result<(), KustomizeError> {
    let fail = |message: String| KustomizeError {
        file: shown.to_string(),
        at: None,
        message,
        help: None,
    };
    let patch: json_patch::Patch = serde_json::from_value(doc.clone())
        .map_err(|e| fail(format!("not a JSON 6902 patch: {e}")))?;
    for res in set.iter_mut().filter(|r| target.selects(r)) {
        json_patch::patch(&mut res.object, &patch).map_err(|e| {
            fail(format!(
                "could not patch {} `{}`: {e}",
                res.kind(),
                res.name()
            ))
        })?;
    }
    Ok(())
}

/// The key that identifies the items of list `field` when merging, as
/// Kubernetes' strategic merge does (`x-kubernetes-patch-merge-key`), then
/// as kustomize guesses for kinds it has no schema of.
fn merge_key(field: &str, patch_items: &[Value]) -> Option<&'static str> {
    let all_have =
        |key: &str| !patch_items.is_empty() && patch_items.iter().all(|i| i.get(key).is_some());
    let known = match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        "conditions" => Some("type"),
        "ports" if all_have("containerPort") => Some("containerPort"),
        "ports" if all_have("port") => Some("port"),
        _ => None,
    };
    known.filter(|k| all_have(k)).or_else(|| {
        [
            "mountPath",
            "devicePath",
            "ip",
            "type",
            "topologyKey",
            "name",
            "containerPort",
        ]
        .into_iter()
        .find(|k| all_have(k))
    })
}

/// `patch` merged into `target` the strategic way: maps key by key, `null`
/// removes a key, lists of objects merged by their key (`name`, …), other
/// lists replaced; `$patch: replace` and `$patch: delete` honoured.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => {
            *target = Value::Object(Map::from_iter([(DELETED.into(), Value::Bool(true))]));
            return;
        }
        Some("replace") => {
            *target = without_directives(patch);
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (key, pv) in p {
        if key.starts_with('$') {
            continue;
        }
        match pv {
            Value::Null => {
                t.remove(key);
            }
            Value::Object(_) => match t.get_mut(key) {
                Some(tv) if tv.is_object() => strategic_merge(tv, pv),
                _ => {
                    t.insert(key.clone(), without_directives(pv));
                }
            },
            Value::Array(items) => match (t.get_mut(key), merge_key(key, items)) {
                (Some(Value::Array(have)), Some(mk)) => merge_list(have, items, mk),
                _ => {
                    t.insert(key.clone(), without_directives(pv));
                }
            },
            _ => {
                t.insert(key.clone(), pv.clone());
            }
        }
    }
}

/// The patch's items first, in its order (each merged into the item with
/// the same key, if any), then the other items as they were: the order
/// kustomize's strategic merge gives.
fn merge_list(have: &mut Vec<Value>, items: &[Value], key: &str) {
    let mut rest: Vec<Option<Value>> = std::mem::take(have).into_iter().map(Some).collect();
    let mut out = Vec::new();
    for item in items {
        let id = item.get(key);
        let pos = rest
            .iter()
            .position(|h| h.as_ref().is_some_and(|h| h.get(key) == id));
        let original = pos.and_then(|i| rest[i].take());
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            continue;
        }
        match original {
            Some(mut o) => {
                strategic_merge(&mut o, item);
                out.push(o);
            }
            None => out.push(without_directives(item)),
        }
    }
    out.extend(rest.into_iter().flatten());
    *have = out;
}

/// `v` without `$patch` keys and null values (what a new field is set to).
fn without_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_containers_by_name_and_env_by_name() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]},
            {"name": "b", "image": "y"}]}}}});
        strategic_merge(
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "env": [{"name": "K2", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "z"}]}}}}),
        );
        assert_eq!(
            d,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "x", "env": [{"name": "K2", "value": "2"}, {"name": "K", "value": "1"}]},
                {"name": "c", "image": "z"}]}}}})
        );
    }

    #[test]
    fn null_removes_replace_replaces_and_plain_lists_are_replaced() {
        let mut d = json!({"a": 1, "b": {"c": 1, "d": 2}, "args": ["x", "y"]});
        strategic_merge(
            &mut d,
            &json!({"a": null, "b": {"$patch": "replace", "e": 3}, "args": ["z"]}),
        );
        assert_eq!(d, json!({"b": {"e": 3}, "args": ["z"]}));
    }

    #[test]
    fn service_ports_merge_by_port_container_ports_by_container_port() {
        let mut svc = json!({"ports": [{"port": 80, "name": "http"}]});
        strategic_merge(
            &mut svc,
            &json!({"ports": [{"port": 80, "targetPort": 8080}]}),
        );
        assert_eq!(
            svc,
            json!({"ports": [{"port": 80, "name": "http", "targetPort": 8080}]})
        );
    }

    #[test]
    fn selectors_read_equality_inequality_and_existence() {
        assert_eq!(
            selector(Some("app=x, tier!=db,gpu")),
            vec![
                ("app".to_string(), Some("x".to_string()), true),
                ("tier".to_string(), Some("db".to_string()), false),
                ("gpu".to_string(), None, true),
            ]
        );
    }
}
