//! The Kubernetes providers: `kube.manifest` (server-side apply of YAML
//! manifests, pruning, ordered deletion, readiness waits) and `kube.job` (a
//! Job, PyTorchJob or MPIJob run to completion, its pods' logs streamed into
//! the step log, outputs captured from them).
//!
//! Both connect the same way ([`connection`]): a kubeconfig file and
//! context, or an `eks.cluster` step's `connection` output with an EKS token
//! signed from the AWS credentials.

pub mod connection;
mod crd_schema;
mod documents;
mod drift;
mod dry_run;
pub(crate) mod errors;
pub(crate) mod eviction;
mod fetch;
mod file_entry;
mod job;
mod job_object;
mod jsonpath;
pub mod kustomize;
mod logs;
mod manifest;
mod node_check;
mod objects;
mod placeholders;
mod ready;
mod render;

pub use placeholders::fill;

use std::sync::Arc;

use crate::contract::{InputSpec, InputType, Provider};

pub use job::KubeJob;
pub use manifest::KubeManifest;
pub use node_check::KubeNodeCheck;

/// Every Kubernetes provider kind, for [`Registry::builtin`](crate::Registry::builtin).
pub fn providers() -> Vec<Arc<dyn Provider>> {
    vec![
        Arc::new(KubeManifest::new()),
        Arc::new(KubeJob::new()),
        Arc::new(KubeNodeCheck::new()),
    ]
}

/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "flow";

/// The annotation holding the operation token of the apply that made an object.
pub const TOKEN_ANNOTATION: &str = "flow.dev/token";

/// The connection inputs both kinds accept.
fn connection_inputs() -> Vec<InputSpec> {
    vec![
        InputSpec::optional(
            "kubeconfig",
            InputType::String,
            "A kubeconfig file (default: $KUBECONFIG, else ~/.kube/config); relative to the workflow's folder",
        )
        .forces_new(),
        InputSpec::optional("context", InputType::String, "The kubeconfig context (default: its current one)").forces_new(),
        InputSpec::optional(
            "cluster",
            InputType::Map(Box::new(InputType::String)),
            "An EKS cluster to reach with a token signed from the AWS credentials: \"${steps.NAME.outputs.connection}\" of an eks.cluster step",
        )
        .forces_new(),
    ]
}

/// The manifest inputs both kinds accept.
fn manifest_inputs() -> Vec<InputSpec> {
    vec![
        InputSpec::optional(
            "files",
            InputType::List(Box::new(InputType::Any)),
            "Local YAML files or kustomize folders (relative to the workflow's folder) or https URLs, each with one or more documents; a URL may be a table { url = \"https://…\", sha256 = \"…\" } to pin its content, and plain http needs { url = \"http://…\", insecure = true }",
        ),
        InputSpec::optional(
            "manifest",
            InputType::String,
            "Inline YAML, one or more documents (`${...}` references resolved by flow, each value entering as a YAML scalar)",
        )
        .yaml_text(),
        InputSpec::optional(
            "values",
            InputType::Map(Box::new(InputType::String)),
            "Values for `${NAME}` placeholders in the files (`$${` writes a literal `${`)",
        ),
        crate::substitute::input_spec(
            "The published files' own placeholders and their values, filled before `values`, e.g. { \"<account>\" = \"${steps.caller.outputs.account}\", MAX_NODES = \"2\" } (PLACEHOLDER_X, <x>, $X and ${X} forms)",
        ),
        crate::substitute::required_spec(),
        InputSpec::optional(
            "namespace",
            InputType::String,
            "Namespace for namespaced objects that name none",
        ),
    ]
}
