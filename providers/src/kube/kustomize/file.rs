//! The kustomization file: found, parsed, and held to the subset flow
//! renders. A field outside the subset is an error at its line and column.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::KustomizeError;
use crate::yaml_path::{Seg, locate};

/// The names a kustomization file may have, in kustomize's order.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The fields flow renders.
const SUPPORTED: [&str; 16] = [
    "apiVersion",
    "kind",
    "resources",
    "bases",
    "namespace",
    "images",
    "labels",
    "commonLabels",
    "commonAnnotations",
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "configurations",
];

/// The kustomization file in `dir`, if any.
pub fn find(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILES
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// Whether a `resources` entry names something remote (a git repository or
/// a URL) rather than a local path.
pub fn is_remote(entry: &str) -> bool {
    entry.contains("://")
        || entry.starts_with("git@")
        || entry.contains("?ref=")
        || ["github.com/", "gitlab.com/", "bitbucket.org/"]
            .iter()
            .any(|host| entry.starts_with(host))
}

/// A parsed kustomization, with its text kept to point at its lines.
#[derive(Debug, Clone)]
pub struct Kustomization {
    /// The file, as shown in messages.
    pub file: String,
    text: String,
    /// The whole document.
    pub fields: Map<String, Value>,
    /// `resources` and `bases`, in order.
    pub resources: Vec<String>,
}

impl Kustomization {
    /// The kustomization in `text`, or the first field outside the subset.
    pub fn parse(file: &str, text: &str) -> Result<Kustomization, KustomizeError> {
        let plain = |message: String| KustomizeError {
            file: file.to_string(),
            at: None,
            message,
            help: None,
        };
        let value: Value =
            serde_saphyr::from_str(text).map_err(|e| plain(format!("not valid YAML: {e}")))?;
        let fields = match value {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => return Err(plain("a kustomization must be a mapping".into())),
        };
        let k = Kustomization {
            file: file.to_string(),
            text: text.to_string(),
            resources: Vec::new(),
            fields,
        };
        for key in k.fields.keys() {
            if !SUPPORTED.contains(&key.as_str()) {
                return Err(k.error_at(
                    &[key],
                    format!("`{key}` is outside the kustomize subset flow renders"),
                    format!(
                        "flow renders {}; render this folder with `kubectl kustomize` into a file and list that file instead",
                        SUPPORTED[2..].join(", ")
                    ),
                ));
            }
        }
        let mut resources = Vec::new();
        for key in ["resources", "bases"] {
            resources.extend(k.strings(key)?);
        }
        Ok(Kustomization { resources, ..k })
    }

    /// A `configurations` file: field specs for `namespace`,
    /// `commonLabels` and `commonAnnotations` (and `varReference`, which
    /// serves only `vars`); anything else is refused by name.
    pub fn parse_config(file: &str, text: &str) -> Result<Kustomization, KustomizeError> {
        const CONFIG_FIELDS: [&str; 4] = [
            "namespace",
            "commonLabels",
            "commonAnnotations",
            "varReference",
        ];
        let value: Value = serde_saphyr::from_str(text).map_err(|e| KustomizeError {
            file: file.to_string(),
            at: None,
            message: format!("not valid YAML: {e}"),
            help: None,
        })?;
        let k = Kustomization {
            file: file.to_string(),
            text: text.to_string(),
            fields: value.as_object().cloned().unwrap_or_default(),
            resources: Vec::new(),
        };
        if let Some(key) = k
            .fields
            .keys()
            .find(|f| !CONFIG_FIELDS.contains(&f.as_str()))
        {
            return Err(k.error_at(
                &[key],
                format!("`{key}` field specs are outside the kustomize subset flow renders"),
                format!(
                    "a configurations file may hold {}",
                    CONFIG_FIELDS.join(", ")
                ),
            ));
        }
        Ok(k)
    }

    /// The error `message` at the field `path` of this file.
    pub fn error_at(
        &self,
        path: &[&str],
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> KustomizeError {
        let segs: Vec<Seg> = path
            .iter()
            .map(|p| match p.parse::<usize>() {
                Ok(i) => Seg::Index(i),
                Err(_) => Seg::Key(p.to_string()),
            })
            .collect();
        KustomizeError {
            file: self.file.clone(),
            at: locate(&self.text, &segs),
            message: message.into(),
            help: Some(help.into()).filter(|h: &String| !h.is_empty()),
        }
    }

    /// Field `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key).filter(|v| !v.is_null())
    }

    /// Field `key` as a list of strings (absent: empty).
    pub fn strings(&self, key: &str) -> Result<Vec<String>, KustomizeError> {
        self.list(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    self.error_at(&[key, &i.to_string()], format!("`{key}` lists strings"), "")
                })
            })
            .collect()
    }

    /// Field `key` as a list (absent: empty).
    pub fn list(&self, key: &str) -> Result<Vec<Value>, KustomizeError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(_) => Err(self.error_at(&[key], format!("`{key}` must be a list"), "")),
        }
    }

    /// Field `key` as a map of strings (absent: empty).
    pub fn string_map(&self, key: &str) -> Result<Map<String, Value>, KustomizeError> {
        match self.get(key) {
            None => Ok(Map::new()),
            Some(Value::Object(m)) => Ok(strings_only(m)),
            Some(_) => Err(self.error_at(&[key], format!("`{key}` must be a mapping"), "")),
        }
    }

    /// `namespace`, if set.
    pub fn namespace(&self) -> Option<&str> {
        self.get("namespace").and_then(Value::as_str)
    }

    /// Refuses any field of entry `key[i]` not in `allowed`: a feature
    /// outside the subset is named, never skipped.
    pub fn only_fields(
        &self,
        key: &str,
        i: usize,
        entry: &Value,
        allowed: &[&str],
    ) -> Result<(), KustomizeError> {
        let Some(m) = entry.as_object() else {
            return Err(self.error_at(
                &[key, &i.to_string()],
                format!("each `{key}` entry must be a mapping"),
                "",
            ));
        };
        match m.keys().find(|f| !allowed.contains(&f.as_str())) {
            None => Ok(()),
            Some(f) => Err(self.error_at(
                &[key, &i.to_string(), f],
                format!("`{key}[{i}].{f}` is outside the kustomize subset flow renders"),
                format!("a `{key}` entry may set {}", allowed.join(", ")),
            )),
        }
    }
}

/// The map with every scalar as a string (labels written as `true` or `1`
/// are strings to Kubernetes).
pub fn strings_only(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (k.clone(), Value::String(s))
        })
        .collect()
}
