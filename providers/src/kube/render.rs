//! Turning a step's `files`, `manifest` and `values` into Kubernetes
//! objects: read (or fetch), fill `${NAME}` placeholders from `values`,
//! split the YAML documents, expand `kind: List`.
//!
//! Placeholders: `${NAME}` is replaced when `values` has `NAME`; any other
//! `${...}` stays as written (shell scripts inside manifests keep theirs);
//! `$${` writes `${`. A `${vars.X}` or `${steps.S.outputs.K}` inside a file
//! is an error that says to pass it through `values`, where flow resolves
//! it (and adds the dependency).

use std::collections::BTreeMap;

use serde_json::Value;

use super::fetch::{self, Rules};
use super::file_entry;
use super::kustomize::{self, KustomizeError, is_kustomization_dir};
use crate::Workdir;
use crate::contract::{ErrorKind, Problem, ProviderError, Values};
use crate::substitute::Substitutions;

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
            let text = self.substitute.apply(&text);
            docs.extend(
                fill(file, &text, &self.values)
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
                    match fill(file, &self.substitute.apply(&text), &self.values)
                        .and_then(|t| parse(file, &t))
                    {
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
        let prepare = |shown: &str, text: &str| {
            fill(shown, &self.substitute.apply(text), &self.values).map_err(|e| e.to_string())
        };
        let built = kustomize::build(workdir, dir, &prepare).map_err(ManifestError::Kustomize)?;
        let docs = built
            .objects
            .into_iter()
            .map(|(source, object)| check(&source, object))
            .collect::<Result<_, _>>()?;
        Ok((docs, built.texts))
    }

    /// The local files (not URLs) with their index in `files`.
    fn local_files(&self) -> impl Iterator<Item = (usize, &String)> {
        self.files
            .iter()
            .enumerate()
            .filter(|(_, f)| !fetch::is_url(f))
    }
}

/// An error met while rendering the manifests on the way to applying them
/// (a refused URL, a pin that does not match): nothing has reached the
/// cluster, so the engine may forget the operation instead of checking it
/// again with the same inputs. A transient failure stays retryable.
pub fn nothing_sent(mut e: ProviderError) -> ProviderError {
    if e.kind != ErrorKind::Retryable {
        e.kind = ErrorKind::NotCreated;
    }
    e
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

/// `text` with `${NAME}` placeholders from `values` filled in.
pub fn fill(
    source: &str,
    text: &str,
    values: &BTreeMap<String, String>,
) -> Result<String, ManifestError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
            continue;
        }
        if let Some(body) = tail.strip_prefix("${")
            && let Some(end) = body.find('}')
        {
            let name = &body[..end];
            if let Some(v) = values.get(name) {
                out.push_str(v);
                rest = &body[end + 1..];
                continue;
            }
            if name.starts_with("vars.") || name.starts_with("steps.") {
                let line = text[..text.len() - rest.len() + at].lines().count().max(1);
                let key = name.rsplit('.').next().unwrap_or(name);
                return Err(ManifestError::ReferenceInFile {
                    file: source.to_string(),
                    line,
                    name: name.to_string(),
                    key: key.to_string(),
                });
            }
        }
        out.push('$');
        rest = &tail[1..];
    }
    out.push_str(rest);
    Ok(out)
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
fn check(source: &str, mut object: Value) -> Result<Doc, ManifestError> {
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

    fn vals(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_fill_from_values_others_stay() {
        let v = vals(&[("IMAGE", "repo/fsdp:1"), ("N", "2")]);
        let out = fill(
            "f",
            "image: ${IMAGE}\nargs: [\"--nodes=${N}\", \"${HOME}\", \"$${IMAGE}\", \"$5\"]",
            &v,
        )
        .unwrap();
        assert_eq!(
            out,
            "image: repo/fsdp:1\nargs: [\"--nodes=2\", \"${HOME}\", \"${IMAGE}\", \"$5\"]"
        );
        let err = fill("job.yaml", "a: 1\nimage: ${vars.image}\n", &v)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("job.yaml:2:"), "{err}");
        assert!(err.contains("add `image = \"${vars.image}\"`"), "{err}");
    }

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
