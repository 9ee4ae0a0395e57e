//! Kustomize directories rendered natively: a `files` entry of
//! `kube.manifest` (or `kube.job`) that names a folder holding a
//! `kustomization.yaml` becomes the objects `kubectl kustomize` would print.
//!
//! The subset is the one the published add-ons use (the training-operator
//! standalone overlay, the EFA device plugin, the FSx CSI driver):
//! `resources` (files and folders), `namespace`, `images`, `labels` and
//! `commonLabels`, `commonAnnotations`, `patches` (strategic merge and
//! JSON 6902), `patchesStrategicMerge`, `patchesJson6902`,
//! `configMapGenerator`, `secretGenerator`, `generatorOptions` and
//! `configurations` (namespace field specs). Anything else is refused by
//! name at its line and column, never skipped; a remote resource is refused
//! with a message to vendor it. The renderer is checked against the output
//! of kustomize v5.5.0 for the vendored training operator
//! (`workflows/manifests/training-operator/`).
//!
//! Steps at one level, in kustomize's order: the resources (a folder is
//! built first, by its own kustomization), the generators, the strategic
//! merge patches, `patches`, the namespace, the labels, the annotations,
//! the JSON 6902 patches, the images, then the references to the objects
//! whose namespace changed. Generated names get their content hash once,
//! at the end, and every reference to them follows.

mod fieldspec;
mod file;
mod generate;
mod patch;
mod transform;

use std::path::{Path, PathBuf};

use crate::Workdir;

use serde_json::Value;

pub use file::KUSTOMIZATION_FILES;

/// One object of the build, with what later steps need to know of it.
#[derive(Debug, Clone)]
struct Res {
    /// The object.
    object: Value,
    /// The file it came from, shown in messages (`base/deployment.yaml#1`).
    source: String,
    /// Its name before a hash suffix: how generators' `behavior` and
    /// references find it.
    original_name: String,
    /// Whether its name gets the content hash (a generated object).
    hashed: bool,
}

impl Res {
    fn str_at(&self, pointer: &str) -> &str {
        self.object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
    fn kind(&self) -> &str {
        self.str_at("/kind")
    }
    fn name(&self) -> &str {
        self.str_at("/metadata/name")
    }
    fn namespace(&self) -> &str {
        self.str_at("/metadata/namespace")
    }
}

/// A folder that cannot be rendered, pointing at the cause.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {message}", file, at.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
pub struct KustomizeError {
    /// The file at fault, relative to the workflow's folder.
    pub file: String,
    /// Its line and column, when known.
    pub at: Option<(usize, usize)>,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

/// The rendered objects of a folder, and every file that was read (so the
/// caller can look for unfilled placeholders in each).
#[derive(Debug, Clone, Default)]
pub struct Built {
    /// The objects, in the order of the resources, each with its source.
    pub objects: Vec<(String, Value)>,
    /// Each file read: its path (relative to the workflow's folder) and its
    /// text as written.
    pub texts: Vec<(String, String)>,
}

/// What a read file goes through before it is parsed (the step's
/// `substitute` and `values`); an error is the message to show.
pub type Prepare<'a> = &'a dyn Fn(&str, &str) -> Result<String, String>;

/// Whether `path` is a folder with a kustomization file.
pub fn is_kustomization_dir(path: &Path) -> bool {
    path.is_dir() && file::find(path).is_some()
}

/// The objects of the kustomization in `dir` (relative to `workdir`).
pub fn build(workdir: &Workdir, dir: &str, prepare: Prepare) -> Result<Built, KustomizeError> {
    let mut b = Builder {
        workdir,
        canonical_workdir: workdir.canonicalize().ok(),
        prepare,
        texts: Vec::new(),
        stack: Vec::new(),
    };
    let mut set = b.level(&workdir.join(dir))?;
    generate::hash_names(&mut set);
    Ok(Built {
        objects: set.into_iter().map(|r| (r.source, r.object)).collect(),
        texts: b.texts,
    })
}

/// The state of one build.
struct Builder<'a> {
    workdir: &'a Workdir,
    /// `workdir` resolved, to show the canonical paths of folders.
    canonical_workdir: Option<PathBuf>,
    prepare: Prepare<'a>,
    texts: Vec<(String, String)>,
    /// The folders being built, to refuse a cycle.
    stack: Vec<PathBuf>,
}

impl Builder<'_> {
    /// `path` as shown in messages: relative to the workflow's folder.
    fn show(&self, path: &Path) -> String {
        let rel = path.strip_prefix(self.workdir.path()).ok().or_else(|| {
            self.canonical_workdir
                .as_ref()
                .and_then(|w| path.strip_prefix(w).ok())
        });
        rel.unwrap_or(path).display().to_string()
    }

    /// The text of `path`, after `prepare`, recorded in `texts`.
    fn read(&mut self, path: &Path) -> Result<String, KustomizeError> {
        let shown = self.show(path);
        self.admit(&shown, path)?;
        let text = std::fs::read_to_string(path).map_err(|e| KustomizeError {
            file: shown.clone(),
            at: None,
            message: format!("could not read it: {e}"),
            help: None,
        })?;
        let prepared = (self.prepare)(&shown, &text).map_err(|message| KustomizeError {
            file: shown.clone(),
            at: None,
            message,
            help: None,
        })?;
        self.texts.push((shown, text));
        Ok(prepared)
    }

    /// Whether the file at `path`, shown as `shown`, is inside the folders
    /// the workflow may read (a `resources: [../../elsewhere]` may lead out).
    fn admit(&self, shown: &str, path: &Path) -> Result<(), KustomizeError> {
        self.workdir
            .admit(shown, path)
            .map_err(|message| KustomizeError {
                file: shown.to_string(),
                at: None,
                message,
                help: None,
            })
    }

    /// The objects of the kustomization in folder `dir`.
    fn level(&mut self, dir: &Path) -> Result<Vec<Res>, KustomizeError> {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let Some(kfile) = file::find(&dir) else {
            return Err(KustomizeError {
                file: self.show(&dir),
                at: None,
                message: format!("no kustomization file in it (one of {KUSTOMIZATION_FILES:?})"),
                help: Some("a folder in `files` or `resources` must be a kustomization".into()),
            });
        };
        if self.stack.contains(&dir) {
            return Err(KustomizeError {
                file: self.show(&kfile),
                at: None,
                message: "the kustomization includes itself through `resources`".into(),
                help: None,
            });
        }
        self.stack.push(dir.clone());
        let text = self.read(&kfile)?;
        let k = file::Kustomization::parse(&self.show(&kfile), &text)?;
        let mut set = Vec::new();
        for (i, entry) in k.resources.iter().enumerate() {
            set.extend(self.resource(&k, i, entry, &dir)?);
        }
        let config = self.configurations(&k, &dir)?;
        generate::run(self, &k, &dir, &mut set)?;
        patch::strategic_files(self, &k, &dir, &mut set)?;
        patch::patches(self, &k, &dir, &mut set)?;
        transform::namespace(&k, &config, &mut set);
        transform::labels(&k, &config, &mut set)?;
        transform::annotations(&k, &config, &mut set)?;
        patch::json6902_entries(self, &k, &dir, &mut set)?;
        transform::images(&k, &mut set)?;
        transform::references(&mut set);
        self.stack.pop();
        Ok(set)
    }

    /// The field specs of the level's `configurations` files. `varReference`
    /// is read and has no effect: it serves `vars`, which flow refuses.
    fn configurations(
        &mut self,
        k: &file::Kustomization,
        dir: &Path,
    ) -> Result<transform::Config, KustomizeError> {
        let mut config = transform::Config::default();
        for entry in k.strings("configurations")? {
            let path = dir.join(&entry);
            let shown = self.show(&path);
            let text = self.read(&path)?;
            let c = file::Kustomization::parse_config(&shown, &text)?;
            for (key, specs) in [
                ("namespace", &mut config.namespace),
                ("commonLabels", &mut config.common_labels),
                ("commonAnnotations", &mut config.common_annotations),
            ] {
                specs.extend(
                    c.list(key)?
                        .iter()
                        .filter_map(fieldspec::FieldSpec::from_value),
                );
            }
        }
        Ok(config)
    }

    /// The objects of `resources[i]`: a file's documents, or a folder's
    /// build.
    fn resource(
        &mut self,
        k: &file::Kustomization,
        i: usize,
        entry: &str,
        dir: &Path,
    ) -> Result<Vec<Res>, KustomizeError> {
        if file::is_remote(entry) {
            return Err(k.error_at(
                &["resources", &i.to_string()],
                format!("`{entry}` is a remote resource, which flow does not fetch"),
                "vendor it: copy the folder at a pinned commit next to the workflow (with a SOURCE file naming the URL and commit) and list its local path",
            ));
        }
        let path = dir.join(entry);
        if path.is_dir() {
            return self.level(&path);
        }
        if !path.exists() {
            return Err(k.error_at(
                &["resources", &i.to_string()],
                format!("`{entry}` does not exist"),
                "paths in `resources` are relative to the kustomization's folder",
            ));
        }
        let shown = self.show(&path);
        let text = self.read(&path)?;
        parse_objects(&shown, &text)
    }
}

/// The objects of a YAML file (a `List` is expanded).
fn parse_objects(shown: &str, text: &str) -> Result<Vec<Res>, KustomizeError> {
    let docs = yaml_documents(shown, text)?;
    let mut out = Vec::new();
    for (n, doc) in docs.into_iter().enumerate() {
        let items = match doc {
            Value::Null => continue,
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => m
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            Value::Object(_) => vec![doc],
            _ => {
                return Err(KustomizeError {
                    file: shown.to_string(),
                    at: None,
                    message: format!("document {} is not a Kubernetes object", n + 1),
                    help: None,
                });
            }
        };
        for object in items {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            out.push(Res {
                object,
                source: format!("{shown}#{}", n + 1),
                original_name: name,
                hashed: false,
            });
        }
    }
    Ok(out)
}

/// The YAML documents of `text` read as kustomize reads resources and
/// patches (YAML 1.2: `y`, `yes` and `on` are strings, only `true` and
/// `false` are booleans).
fn yaml_documents(shown: &str, text: &str) -> Result<Vec<Value>, KustomizeError> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| KustomizeError {
        file: shown.to_string(),
        at: None,
        message: format!("not valid YAML: {e}"),
        help: None,
    })
}

#[cfg(test)]
mod tests;
