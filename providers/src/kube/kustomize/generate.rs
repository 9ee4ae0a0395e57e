//! `configMapGenerator` and `secretGenerator`, and the content hash kustomize
//! appends to generated names (with every reference to them following).

use std::path::Path;

use base64::Engine;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::file::{Kustomization, strings_only};
use super::{Builder, KustomizeError, Res};

/// The fields of a generator entry.
const ENTRY_FIELDS: [&str; 9] = [
    "name",
    "namespace",
    "behavior",
    "files",
    "literals",
    "envs",
    "env",
    "options",
    "type",
];

/// The fields of `options` and `generatorOptions`.
const OPTION_FIELDS: [&str; 4] = [
    "disableNameSuffixHash",
    "labels",
    "annotations",
    "immutable",
];

/// Runs the level's generators, adding (or merging into) objects of `set`.
pub fn run(
    b: &mut Builder,
    k: &Kustomization,
    dir: &Path,
    set: &mut Vec<Res>,
) -> Result<(), KustomizeError> {
    let defaults = match k.get("generatorOptions") {
        None => Value::Object(Map::new()),
        Some(v) => {
            if let Some(f) = v
                .as_object()
                .and_then(|m| m.keys().find(|f| !OPTION_FIELDS.contains(&f.as_str())))
            {
                return Err(k.error_at(
                    &["generatorOptions", f],
                    format!("`generatorOptions.{f}` is outside the kustomize subset flow renders"),
                    format!("generator options may set {}", OPTION_FIELDS.join(", ")),
                ));
            }
            v.clone()
        }
    };
    for (key, kind) in [
        ("configMapGenerator", "ConfigMap"),
        ("secretGenerator", "Secret"),
    ] {
        for (i, entry) in k.list(key)?.iter().enumerate() {
            k.only_fields(key, i, entry, &ENTRY_FIELDS)?;
            if let Some(f) = entry
                .get("options")
                .and_then(Value::as_object)
                .and_then(|m| m.keys().find(|f| !OPTION_FIELDS.contains(&f.as_str())))
            {
                return Err(k.error_at(
                    &[key, &i.to_string(), "options", f],
                    format!("`options.{f}` is outside the kustomize subset flow renders"),
                    format!("generator options may set {}", OPTION_FIELDS.join(", ")),
                ));
            }
            let generated = one(b, k, key, i, entry, kind, &defaults, dir)?;
            place(k, key, i, entry, generated, set)?;
        }
    }
    Ok(())
}

/// The object entry `key[i]` generates.
#[allow(clippy::too_many_arguments)]
fn one(
    b: &mut Builder,
    k: &Kustomization,
    key: &str,
    i: usize,
    entry: &Value,
    kind: &str,
    defaults: &Value,
    dir: &Path,
) -> Result<Res, KustomizeError> {
    let at = |field: &str| vec![key.to_string(), i.to_string(), field.to_string()];
    let err = |field: &str, message: String, help: &str| {
        let path = at(field);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        k.error_at(&path, message, help)
    };
    let Some(name) = entry.get("name").and_then(Value::as_str) else {
        return Err(err("name", format!("`{key}[{i}]` needs a `name`"), ""));
    };
    let strings = |field: &str| -> Vec<String> {
        match entry.get(field) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            Some(Value::String(s)) => vec![s.clone()],
            _ => Vec::new(),
        }
    };
    let mut pairs: Vec<(String, Vec<u8>)> = Vec::new();
    for literal in strings("literals") {
        let Some((k2, v)) = literal.split_once('=') else {
            return Err(err(
                "literals",
                format!("the literal `{literal}` has no `=`"),
                "write KEY=value",
            ));
        };
        pairs.push((k2.to_string(), unquote(v).as_bytes().to_vec()));
    }
    for spec in strings("files") {
        let (file_key, rel) = match spec.split_once('=') {
            Some((fk, p)) => (fk.to_string(), p.to_string()),
            None => (
                Path::new(&spec)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                spec.clone(),
            ),
        };
        let path = dir.join(&rel);
        b.admit(&b.show(&path), &path)?;
        let bytes = std::fs::read(&path).map_err(|e| {
            err(
                "files",
                format!("could not read `{rel}`: {e}"),
                "paths are relative to the kustomization's folder",
            )
        })?;
        pairs.push((file_key, bytes));
    }
    for env_file in strings("envs").into_iter().chain(strings("env")) {
        let path = dir.join(&env_file);
        let text = b.read(&path)?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k2, v)) = line.split_once('=') else {
                return Err(KustomizeError {
                    file: b.show(&path),
                    at: Some((n + 1, 1)),
                    message: format!("`{line}` has no `=`"),
                    help: Some(
                        "flow does not copy its own environment into objects: write KEY=value"
                            .into(),
                    ),
                });
            };
            pairs.push((k2.trim().to_string(), v.as_bytes().to_vec()));
        }
    }
    let options = merged_options(defaults, entry.get("options"));
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if let Some(ns) = entry.get("namespace").and_then(Value::as_str) {
        metadata.insert("namespace".into(), json!(ns));
    }
    for field in ["labels", "annotations"] {
        if let Some(m) = options.get(field).and_then(Value::as_object)
            && !m.is_empty()
        {
            metadata.insert(field.into(), Value::Object(strings_only(m)));
        }
    }
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!(kind));
    object.insert("metadata".into(), Value::Object(metadata));
    let b64 = base64::engine::general_purpose::STANDARD;
    let (mut data, mut binary) = (Map::new(), Map::new());
    for (k2, bytes) in pairs {
        if kind == "Secret" {
            data.insert(k2, json!(b64.encode(&bytes)));
        } else {
            match String::from_utf8(bytes) {
                Ok(s) => data.insert(k2, json!(s)),
                Err(e) => binary.insert(k2, json!(b64.encode(e.as_bytes()))),
            };
        }
    }
    object.insert("data".into(), Value::Object(data));
    if !binary.is_empty() {
        object.insert("binaryData".into(), Value::Object(binary));
    }
    if kind == "Secret" {
        let ty = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("Opaque");
        object.insert("type".into(), json!(ty));
    }
    if options.get("immutable").and_then(Value::as_bool) == Some(true) {
        object.insert("immutable".into(), json!(true));
    }
    Ok(Res {
        object: Value::Object(object),
        source: format!("{}: {key}[{i}]", k.file),
        original_name: name.to_string(),
        hashed: options
            .get("disableNameSuffixHash")
            .and_then(Value::as_bool)
            != Some(true),
    })
}

/// `options` over `generatorOptions`: labels and annotations merged, the
/// rest replaced.
fn merged_options(defaults: &Value, own: Option<&Value>) -> Map<String, Value> {
    let mut out = defaults.as_object().cloned().unwrap_or_default();
    for (k, v) in own.and_then(Value::as_object).into_iter().flatten() {
        match (out.get_mut(k), v) {
            (Some(Value::Object(have)), Value::Object(more)) => {
                have.extend(more.clone());
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// A value written `"quoted"` or `'quoted'` loses its quotes.
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

/// Adds `generated` to `set`, or merges it into (or replaces) the object
/// of the same kind and name from a base, as `behavior` says.
fn place(
    k: &Kustomization,
    key: &str,
    i: usize,
    entry: &Value,
    generated: Res,
    set: &mut Vec<Res>,
) -> Result<(), KustomizeError> {
    let behavior = entry
        .get("behavior")
        .and_then(Value::as_str)
        .unwrap_or("create");
    let existing = set.iter().position(|r| {
        r.kind() == generated.kind()
            && r.original_name == generated.original_name
            && (generated.namespace().is_empty() || r.namespace() == generated.namespace())
    });
    match (behavior, existing) {
        ("create", None) => set.push(generated),
        ("create", Some(_)) => {
            return Err(k.error_at(
                &[key, &i.to_string(), "name"],
                format!(
                    "{} `{}` already comes from the resources",
                    generated.kind(),
                    generated.original_name
                ),
                "set `behavior: merge` or `behavior: replace`",
            ));
        }
        ("merge" | "replace", Some(at)) => {
            let have = &mut set[at];
            if behavior == "replace" {
                have.object["data"] = generated.object["data"].clone();
            } else {
                for field in ["data", "binaryData"] {
                    if let Some(Value::Object(more)) = generated.object.get(field) {
                        let target = &mut have.object[field];
                        if !target.is_object() {
                            *target = Value::Object(Map::new());
                        }
                        if let Value::Object(m) = target {
                            m.extend(more.clone());
                        }
                    }
                }
            }
            for field in ["labels", "annotations"] {
                if let Some(Value::Object(more)) = generated.object["metadata"].get(field) {
                    let target = &mut have.object["metadata"][field];
                    if !target.is_object() {
                        *target = Value::Object(Map::new());
                    }
                    if let Value::Object(m) = target {
                        m.extend(more.clone());
                    }
                }
            }
            have.hashed = have.hashed && generated.hashed;
        }
        ("merge" | "replace", None) => {
            return Err(k.error_at(
                &[key, &i.to_string(), "behavior"],
                format!(
                    "`behavior: {behavior}` needs a {} `{}` from the resources, and there is none",
                    generated.kind(),
                    generated.original_name
                ),
                "",
            ));
        }
        (other, _) => {
            return Err(k.error_at(
                &[key, &i.to_string(), "behavior"],
                format!("`behavior: {other}` is not one of create, merge, replace"),
                "",
            ));
        }
    }
    Ok(())
}

/// Appends the content hash to each generated name and points every
/// reference (volumes, `envFrom`, `valueFrom`, image pull secrets) at it.
pub fn hash_names(set: &mut [Res]) {
    let mut renames: Vec<(String, String, String, String)> = Vec::new();
    for res in set.iter_mut().filter(|r| r.hashed) {
        let hashed = format!("{}-{}", res.original_name, content_hash(&res.object));
        res.object["metadata"]["name"] = json!(hashed);
        renames.push((
            res.kind().to_string(),
            res.namespace().to_string(),
            res.original_name.clone(),
            hashed,
        ));
    }
    if renames.is_empty() {
        return;
    }
    for res in set.iter_mut() {
        let ns = res.namespace().to_string();
        follow(&mut res.object, &ns, &renames);
    }
}

/// References by field: the key holding the reference, the key of the
/// name inside it, and the kind referred to.
const NAME_REFERENCES: [(&str, &str, &str); 9] = [
    ("configMap", "name", "ConfigMap"),
    ("configMapRef", "name", "ConfigMap"),
    ("configMapKeyRef", "name", "ConfigMap"),
    ("secret", "secretName", "Secret"),
    ("secret", "name", "Secret"),
    ("secretRef", "name", "Secret"),
    ("secretKeyRef", "name", "Secret"),
    ("imagePullSecrets", "name", "Secret"),
    ("nodePublishSecretRef", "name", "Secret"),
];

fn follow(v: &mut Value, ns: &str, renames: &[(String, String, String, String)]) {
    match v {
        Value::Object(m) => {
            for (key, child) in m.iter_mut() {
                for (field, name_key, kind) in NAME_REFERENCES {
                    if key != field {
                        continue;
                    }
                    let targets: Vec<&mut Value> = match &mut *child {
                        Value::Array(items) => items.iter_mut().collect(),
                        other => vec![other],
                    };
                    for t in targets {
                        let Some(name) = t.get(name_key).and_then(Value::as_str) else {
                            continue;
                        };
                        if let Some((_, _, _, new)) = renames.iter().find(|(k, n, old, _)| {
                            k == kind && old == name && (n == ns || n.is_empty())
                        }) {
                            t[name_key] = json!(new);
                        }
                    }
                }
                follow(child, ns, renames);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| follow(i, ns, renames)),
        _ => {}
    }
}

/// kustomize's hash of a ConfigMap or Secret: SHA-256 of the JSON of its
/// kind, type and data, and a name that is always empty (kustomize looks
/// the name up as one key called `metadata/name`, which no object has), with
/// keys sorted and HTML characters escaped as Go does; the first ten hex
/// digits with `0 1 3 a e` spelt `g h k m t`.
pub fn content_hash(object: &Value) -> String {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let field = |f: &str| match object.get(f) {
        Some(v @ Value::Object(_)) => v.clone(),
        Some(Value::String(s)) => json!(s),
        _ => json!(""),
    };
    let mut m = Map::new();
    m.insert("kind".into(), json!(kind));
    m.insert("name".into(), json!(""));
    m.insert("data".into(), field("data"));
    let extra = if kind == "Secret" {
        m.insert("type".into(), field("type"));
        "stringData"
    } else {
        "binaryData"
    };
    if let Some(v @ Value::Object(_)) = object.get(extra) {
        m.insert(extra.into(), v.clone());
    }
    let text = serde_json::to_string(&Value::Object(m))
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let hex = hex::encode(Sha256::digest(text.as_bytes()));
    hex[..10]
        .chars()
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            other => other,
        })
        .collect()
}
