//! Turning a step's `files`, `manifest` and `values` into Kubernetes
//! objects: read (or fetch), fill the published files' own placeholders
//! (`substitute`), then `${NAME}` from `values` ([`super::placeholders`]),
//! then split the documents ([`super::documents`]).

use std::collections::BTreeMap;

use serde_json::Value;

pub use super::documents::{Doc, ManifestError};
use super::documents::{check, parse};
use super::fetch::{self, Rules};
use super::file_entry;
use super::kustomize::{self, is_kustomization_dir};
use super::placeholders::fill;
use crate::Workdir;
use crate::contract::{Problem, ProviderError, Values};
use crate::substitute::Substitutions;

/// What the step's inputs say to render.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Files and URLs, in order.
    pub files: Vec<String>,
    /// How each URL given as a table item of `files` may be fetched.
    pub rules: BTreeMap<String, Rules>,
    /// Inline YAML.
    pub inline: Option<String>,
    /// Placeholder values.
    pub values: BTreeMap<String, String>,
    /// The runbook's own placeholders in the files, filled first
    /// (`substitute`).
    pub substitute: Substitutions,
}

impl Sources {
    /// The sources named by a step's inputs.
    pub fn from_inputs(v: &Values) -> Result<Sources, ProviderError> {
        let entries = file_entry::parse(v.get("files")).map_err(|problems| {
            let first = problems.into_iter().next();
            ProviderError::bad_input(first.map_or_else(String::new, |p| p.message))
        })?;
        let values = match v.get("values") {
            Some(Value::Object(m)) => crate::substitute::text_table(m),
            _ => BTreeMap::new(),
        };
        Ok(Sources {
            files: entries.names,
            rules: entries.rules,
            substitute: Substitutions::from_values(v)?,
            inline: v
                .get("manifest")
                .and_then(Value::as_str)
                .map(str::to_string),
            values,
        })
    }

    /// Every object, in order: the files' documents, then the inline ones.
    pub async fn render(&self, workdir: &Workdir) -> Result<Vec<Doc>, ProviderError> {
        let mut docs = Vec::new();
        for file in &self.files {
            if !fetch::is_url(file) {
                workdir.resolve(file).map_err(ProviderError::bad_input)?;
            }
            if is_kustomization_dir(&workdir.join(file)) {
                let built = self.kustomize(workdir, file).map_err(|e| {
                    let help = match &e {
                        ManifestError::Kustomize(k) => k.help.clone(),
                        _ => None,
                    };
                    let err = ProviderError::bad_input(e.to_string());
                    match help {
                        Some(h) => err.with_help(h),
                        None => err,
                    }
                })?;
                docs.extend(built.0);
                continue;
            }
            let text = if fetch::is_url(file) {
                fetch::get(file, &self.rules.get(file).cloned().unwrap_or_default()).await?
            } else {
                let path = workdir.join(file);
                tokio::fs::read_to_string(&path).await.map_err(|e| {
                    ProviderError::fatal(format!("could not read {}: {e}", path.display()))
                })?
            };
            docs.extend(
                self.filled(file, &text)
                    .and_then(|t| parse(file, &t))
                    .map_err(|e| ProviderError::bad_input(e.to_string()))?,
            );
        }
        if let Some(text) = &self.inline {
            docs.extend(
                fill("manifest", text, &self.values)
                    .and_then(|t| parse("manifest", &t))
                    .map_err(|e| ProviderError::bad_input(e.to_string()))?,
            );
        }
        if docs.is_empty() {
            return Err(ProviderError::fatal(
                "the manifests hold no object: give `files` or `manifest`",
            ));
        }
        Ok(docs)
    }

    /// Local files that cannot be read: checked even while `values` are not
    /// known yet (the rest of [`Sources::offline`] needs them).
    pub fn unreadable_files(&self, workdir: &Workdir) -> Vec<Problem> {
        self.local_files()
            .filter_map(|(i, file)| {
                let full = match workdir.resolve(file) {
                    Ok(full) => full,
                    Err(why) => return Some(Problem::at_path(&["files", &i.to_string()], why)),
                };
                let e = std::fs::metadata(full).err()?;
                Some(cannot_read(i, file, &e))
            })
            .collect()
    }

    /// Everything that can be rendered offline, and the problems found doing
    /// it: local files that cannot be read or do not parse, placeholders that
    /// reference flow names. URLs are not fetched offline.
    pub fn offline(&self, workdir: &Workdir) -> (Vec<Doc>, Vec<Problem>) {
        let mut docs = Vec::new();
        let mut problems = Vec::new();
        let mut texts = Vec::new();
        let mut kustomized = Vec::new();
        for (i, file) in self.local_files() {
            if let Err(why) = workdir.resolve(file) {
                problems.push(Problem::at_path(&["files", &i.to_string()], why));
                continue;
            }
            if is_kustomization_dir(&workdir.join(file)) {
                match self.kustomize(workdir, file) {
                    Ok((d, read)) => {
                        docs.extend(d);
                        kustomized.extend(read);
                    }
                    Err(e) => problems.push(kustomize_problem(i, &e)),
                }
                continue;
            }
            match std::fs::read_to_string(workdir.join(file)) {
                Err(e) => problems.push(cannot_read(i, file, &e)),
                Ok(text) => {
                    match self.filled(file, &text).and_then(|t| parse(file, &t)) {
                        Ok(d) => docs.extend(d),
                        Err(e) => problems
                            .push(Problem::at_path(&["files", &i.to_string()], e.to_string())),
                    }
                    texts.push((file.as_str(), text));
                }
            }
        }
        if let Some(text) = &self.inline {
            match fill("manifest", text, &self.values).and_then(|t| parse("manifest", &t)) {
                Ok(d) => docs.extend(d),
                Err(e) => problems.push(Problem::at("manifest", e.to_string())),
            }
        }
        let texts: Vec<(&str, &str)> = texts
            .iter()
            .map(|(f, t)| (*f, t.as_str()))
            .chain(kustomized.iter().map(|(f, t)| (f.as_str(), t.as_str())))
            .collect();
        problems.extend(crate::substitute::check_texts(
            "files",
            &texts,
            &self.substitute,
        ));
        (docs, problems)
    }

    /// The objects of the kustomize folder `dir`, each read file filled as
    /// a plain file is, and the files read (as written).
    #[allow(clippy::type_complexity)]
    fn kustomize(
        &self,
        workdir: &Workdir,
        dir: &str,
    ) -> Result<(Vec<Doc>, Vec<(String, String)>), ManifestError> {
        let prepare = |shown: &str, text: &str| self.filled(shown, text).map_err(|e| e.to_string());
        let built = kustomize::build(workdir, dir, &prepare).map_err(ManifestError::Kustomize)?;
        let docs = built
            .objects
            .into_iter()
            .map(|(source, object)| check(&source, object))
            .collect::<Result<_, _>>()?;
        Ok((docs, built.texts))
    }

    /// A file's `text` (shown as `shown`) with the published placeholders
    /// (`substitute`) and then `${NAME}` from `values` filled, each value as
    /// a YAML scalar in its place.
    fn filled(&self, shown: &str, text: &str) -> Result<String, ManifestError> {
        let text = self
            .substitute
            .apply_yaml(text)
            .map_err(|m| ManifestError::Misplaced {
                file: shown.to_string(),
                line: m.line,
                message: m.message,
            })?;
        fill(shown, &text, &self.values)
    }

    /// The local files (not URLs) with their index in `files`.
    fn local_files(&self) -> impl Iterator<Item = (usize, &String)> {
        self.files
            .iter()
            .enumerate()
            .filter(|(_, f)| !fetch::is_url(f))
    }
}

/// The problem of `files[i]` that cannot be read.
fn cannot_read(i: usize, file: &str, e: &std::io::Error) -> Problem {
    Problem::at_path(
        &["files", &i.to_string()],
        format!("could not read `{file}`: {e}"),
    )
    .with_help("paths are relative to the workflow file's folder")
}

/// The problem of the kustomize folder `files[i]`, with its next step.
fn kustomize_problem(i: usize, e: &ManifestError) -> Problem {
    let p = Problem::at_path(&["files", &i.to_string()], e.to_string());
    match e {
        ManifestError::Kustomize(k) => match &k.help {
            Some(h) => p.with_help(h.clone()),
            None => p,
        },
        _ => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of awsome-distributed-training's nccl-tests.yaml: an ECR
    /// image written `<account>.dkr.ecr.<region>…`, envsubst-style counts,
    /// and the container's own `$PATH` and `$LD_LIBRARY_PATH`.
    const NCCL: &str = "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: nccl-tests\nspec:\n  mpiReplicaSpecs:\n    Worker:\n      replicas: $NUM_NODES\n      template:\n        spec:\n          containers:\n            - image: <account>.dkr.ecr.<region>.amazonaws.com/nccl-tests:latest\n              env:\n                - name: PATH\n                  value: /opt/amazon/efa/bin:$PATH\n                - name: LD_LIBRARY_PATH\n                  value: /opt/nccl/lib:$LD_LIBRARY_PATH\n              resources:\n                limits:\n                  nvidia.com/gpu: ${GPU_PER_NODE}\n";

    #[test]
    fn published_placeholders_fill_and_leftovers_are_pointed_at() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nccl-tests.yaml"), NCCL).unwrap();
        let with = |subs: serde_json::Value| {
            Sources::from_inputs(&crate::testing::values(
                serde_json::json!({"files": ["nccl-tests.yaml"], "substitute": subs}),
            ))
            .unwrap()
            .offline(&Workdir::new(dir.path()))
        };
        let (docs, problems) = with(serde_json::json!({
            "<account>": "111122223333", "<region>": "us-west-2",
            "NUM_NODES": "2", "GPU_PER_NODE": "8"
        }));
        assert!(problems.is_empty(), "{problems:?}");
        let job = &docs[0].object;
        let worker = &job["spec"]["mpiReplicaSpecs"]["Worker"];
        assert_eq!(worker["replicas"], 2);
        let c = &worker["template"]["spec"]["containers"][0];
        assert_eq!(
            c["image"],
            "111122223333.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:latest"
        );
        assert_eq!(c["env"][0]["value"], "/opt/amazon/efa/bin:$PATH");
        assert_eq!(c["env"][1]["value"], "/opt/nccl/lib:$LD_LIBRARY_PATH");
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "8");
        // Without the image's tokens: both named at their line and column.
        let (_, problems) = with(serde_json::json!({"NUM_NODES": "2", "GPU_PER_NODE": "8"}));
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "nccl-tests.yaml:12:22: the placeholder `<account>` has no value",
                "nccl-tests.yaml:12:40: the placeholder `<region>` has no value",
            ]
        );
    }

    /// The injection of issue 17, through `values` and through `substitute`:
    /// each value is one string, and the pod has no `hostNetwork`.
    #[test]
    fn values_enter_the_manifest_as_scalars() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pod.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ${NAME}\nspec:\n  containers:\n    - name: c\n      image: <registry>/app:1\n",
        )
        .unwrap();
        let evil = "x\n  hostNetwork: true";
        let (docs, problems) = Sources::from_inputs(&crate::testing::values(serde_json::json!({
            "files": ["pod.yaml"],
            "values": {"NAME": evil},
            "substitute": {"<registry>": "r\nspec:\n  hostNetwork: true\n#"},
        })))
        .unwrap()
        .offline(&Workdir::new(dir.path()));
        assert!(problems.is_empty(), "{problems:?}");
        let pod = &docs[0].object;
        assert_eq!(pod["metadata"]["name"], evil);
        assert_eq!(
            pod["spec"]["containers"][0]["image"],
            "r\nspec:\n  hostNetwork: true\n#/app:1"
        );
        assert!(pod["spec"].get("hostNetwork").is_none(), "{pod}");
        assert_eq!(pod["spec"].as_object().unwrap().len(), 1, "{pod}");
    }

    #[test]
    fn missing_files_are_found_without_the_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "kind: X\n").unwrap();
        let sources = Sources::from_inputs(&crate::testing::values(
            serde_json::json!({"files": ["a.yaml", "torchrec-typo.yaml", "https://example.com/x.yaml"]}),
        ))
        .unwrap();
        let problems = sources.unreadable_files(&Workdir::new(dir.path()));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, ["files", "1"]);
        assert!(problems[0].message.contains("torchrec-typo.yaml"));
    }
}
