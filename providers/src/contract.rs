//! The provider contract: what every provider kind declares and implements.
//!
//! The engine owns state, ordering, retries and timeouts. A provider only
//! knows how to validate its inputs offline, compare two sets of inputs, and
//! create / read / update / delete one object, each idempotent by the
//! operation token the engine persisted before calling it.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

/// A step's inputs or outputs: a JSON object, keys in a stable order.
pub type Values = Map<String, Value>;

/// Whether a provider kind creates a long-lived object or runs to completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// Exists until destroyed (a stack, a file system, a cluster).
    Resource,
    /// Runs to a success condition and re-runs when its inputs change (a test, a job).
    Task,
}

/// The type an input accepts, checked offline before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputType {
    /// A string.
    String,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Bool,
    /// A list whose items all have the inner type.
    List(Box<InputType>),
    /// A table whose values all have the inner type.
    Map(Box<InputType>),
    /// Any value at all.
    Any,
    /// A path to a local file, relative to the workflow file's folder; it must exist.
    LocalFile,
    /// A duration such as `"45m"` or `"1h 30m"`.
    Duration,
}

impl InputType {
    /// A short human name of the type, for diagnostics.
    pub fn describe(&self) -> String {
        match self {
            InputType::String => "a string".into(),
            InputType::Integer => "an integer".into(),
            InputType::Number => "a number".into(),
            InputType::Bool => "a boolean".into(),
            InputType::List(inner) => format!("a list of {}", inner.plural()),
            InputType::Map(inner) => format!("a table of {}", inner.plural()),
            InputType::Any => "any value".into(),
            InputType::LocalFile => "a path to a local file (a string)".into(),
            InputType::Duration => "a duration such as \"45m\" (a string)".into(),
        }
    }

    fn plural(&self) -> String {
        match self {
            InputType::String | InputType::LocalFile | InputType::Duration => "strings".into(),
            InputType::Integer => "integers".into(),
            InputType::Number => "numbers".into(),
            InputType::Bool => "booleans".into(),
            InputType::Any => "values".into(),
            other => format!("({})", other.describe()),
        }
    }

    /// `value` with numbers and booleans turned into text where this type
    /// wants a string: `"${vars.epochs}"` in an `env` table is the text `20`,
    /// as written. Anything else is returned as it is.
    pub fn coerce(&self, value: Value) -> Value {
        match (value, self) {
            (Value::Number(n), InputType::String | InputType::Duration | InputType::LocalFile) => {
                Value::String(n.to_string())
            }
            (Value::Bool(b), InputType::String) => Value::String(b.to_string()),
            (Value::Array(items), InputType::List(inner)) => {
                Value::Array(items.into_iter().map(|v| inner.coerce(v)).collect())
            }
            (Value::Object(map), InputType::Map(inner)) => {
                Value::Object(map.into_iter().map(|(k, v)| (k, inner.coerce(v))).collect())
            }
            (v, _) => v,
        }
    }

    /// Whether `value` has this type. `LocalFile` and `Duration` only check the
    /// JSON type here; the engine checks existence and syntax with spans.
    pub fn accepts(&self, value: &Value) -> bool {
        match (self, value) {
            (InputType::Any, _) => true,
            (InputType::String | InputType::LocalFile | InputType::Duration, Value::String(_)) => {
                true
            }
            (InputType::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (InputType::Number, Value::Number(_)) => true,
            (InputType::Bool, Value::Bool(_)) => true,
            (InputType::List(inner), Value::Array(items)) => items.iter().all(|v| inner.accepts(v)),
            (InputType::Map(inner), Value::Object(map)) => map.values().all(|v| inner.accepts(v)),
            _ => false,
        }
    }
}

/// One input a provider kind accepts.
#[derive(Debug, Clone)]
pub struct InputSpec {
    /// The input's name under `[steps.NAME.inputs]`.
    pub name: &'static str,
    /// Its type.
    pub ty: InputType,
    /// Whether the step must set it.
    pub required: bool,
    /// Whether the value is secret whatever it references (never printed or stored in clear).
    pub sensitive: bool,
    /// Whether changing it replaces the object instead of updating it in place.
    pub force_new: bool,
    /// One line for the reference docs and diagnostics.
    pub description: &'static str,
}

impl InputSpec {
    /// An optional input of the given type that updates in place.
    pub const fn optional(name: &'static str, ty: InputType, description: &'static str) -> Self {
        InputSpec {
            name,
            ty,
            required: false,
            sensitive: false,
            force_new: false,
            description,
        }
    }

    /// A required input of the given type that updates in place.
    pub const fn required(name: &'static str, ty: InputType, description: &'static str) -> Self {
        InputSpec {
            name,
            ty,
            required: true,
            sensitive: false,
            force_new: false,
            description,
        }
    }

    /// The same input, marked as replacing the object when it changes.
    pub fn forces_new(mut self) -> Self {
        self.force_new = true;
        self
    }

    /// The same input, marked as secret.
    pub fn secret(mut self) -> Self {
        self.sensitive = true;
        self
    }
}

/// What a provider kind declares about itself.
#[derive(Debug, Clone)]
pub struct Schema {
    /// Resource or task.
    pub kind: StepKind,
    /// One line describing the kind.
    pub description: &'static str,
    /// The inputs it accepts.
    pub inputs: Vec<InputSpec>,
    /// Whether inputs not listed are accepted too (the `null` provider's echo).
    pub open_inputs: bool,
}

impl Schema {
    /// The spec of the input called `name`, if declared.
    pub fn input(&self, name: &str) -> Option<&InputSpec> {
        self.inputs.iter().find(|i| i.name == name)
    }
}

/// An input as known at validation or plan time.
#[derive(Debug, Clone, PartialEq)]
pub enum InputValue {
    /// Fully known.
    Known(Value),
    /// Depends on an output not known until apply.
    Unknown,
}

/// A problem a provider found in a step's inputs, offline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The input it concerns, as a path (`["parameters", "VpcCidr"]`); empty for the step itself.
    pub path: Vec<String>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// Whether the last element of `path` is itself the problem (a bad table
    /// key), rather than its value.
    pub on_key: bool,
}

impl Problem {
    /// A problem with the named top-level input.
    pub fn at(input: &str, message: impl Into<String>) -> Self {
        Problem {
            path: vec![input.to_string()],
            message: message.into(),
            help: None,
            on_key: false,
        }
    }

    /// The problem at `path` (an input, then keys or list indexes inside it).
    pub fn at_path(path: &[&str], message: impl Into<String>) -> Self {
        Problem {
            path: path.iter().map(|p| p.to_string()).collect(),
            message: message.into(),
            help: None,
            on_key: false,
        }
    }

    /// The same problem, pointing at the key that ends its path rather than the value.
    pub fn on_key(mut self) -> Self {
        self.on_key = true;
        self
    }

    /// The same problem with a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// What validation may look at besides the inputs.
#[derive(Debug, Clone)]
pub struct ValidateContext {
    /// The workflow file's folder; relative paths are resolved against it.
    pub workdir: PathBuf,
}

/// How a step's desired inputs differ from those it was applied with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Nothing to do.
    NoOp,
    /// Change in place; the names of the inputs that differ.
    Update(Vec<String>),
    /// Delete and create again; the names of the inputs that force it.
    Replace(Vec<String>),
}

/// The result of a successful create, update or read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// The real object's id (stack id, file-system id, …), if it has one.
    pub id: Option<String>,
    /// Outputs that later steps may reference.
    pub outputs: Values,
    /// Provider-private data kept in state for later calls (never shown).
    pub private: Value,
}

/// What the engine recorded of a step the last time it was applied.
#[derive(Debug, Clone, Copy)]
pub struct Prior<'a> {
    /// The object's id.
    pub id: Option<&'a str>,
    /// The inputs it was applied with (sensitive ones as digests).
    pub inputs: &'a Values,
    /// The outputs it produced.
    pub outputs: &'a Values,
    /// The provider-private data.
    pub private: &'a Value,
}

/// What `read` found for an operation or object.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadOutcome {
    /// The object exists (the operation completed, or was still running and
    /// the provider waited for it): adopt it.
    Present(Applied),
    /// The operation left nothing behind: issue it again with the same token.
    Missing,
}

/// What kind of failure a [`ProviderError`] is. The engine decides by it
/// whether to retry, and whether the operation may have acted (its intent is
/// kept and reconciled) or provably did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient: throttling, a 5xx answer, a timeout or a broken connection.
    /// The engine retries with backoff.
    Retryable,
    /// The answer proves that nothing was created or changed: the request was
    /// refused before the far side acted on it.
    NotCreated,
    /// An object of that name exists and is not the step's own.
    Conflict,
    /// The object the step recorded, or names, does not exist.
    NotFound,
    /// Credentials are missing, expired or not allowed to do this.
    Auth,
    /// The inputs were rejected, by the provider or by the service.
    Invalid,
    /// Anything else: the operation failed and may have acted.
    Failed,
}

impl ErrorKind {
    /// A short name for logs and JSON (`not-created`, `conflict`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Retryable => "retryable",
            ErrorKind::NotCreated => "not-created",
            ErrorKind::Conflict => "conflict",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Auth => "auth",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Failed => "failed",
        }
    }
}

/// An error from a provider operation: what failed, what kind of failure it
/// is, what the user can do next, and the underlying error if there is one.
#[derive(Debug, Clone)]
pub struct ProviderError {
    /// What kind of failure it is.
    pub kind: ErrorKind,
    /// The service's own message, with the failing resource named.
    pub message: String,
    /// The next step for the user, when there is one.
    pub help: Option<String>,
    /// The underlying error (an SDK or I/O error), kept for its chain.
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProviderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl ProviderError {
    /// An error of `kind` with `message`, no help and no source.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            message: message.into(),
            help: None,
            source: None,
        }
    }

    /// A permanent failure after which the operation may have acted.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }

    /// A transient failure the engine may retry with backoff.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Retryable, message)
    }

    /// A refusal that proves nothing was created or changed.
    pub fn not_created(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotCreated, message)
    }

    /// An object of that name exists and is not the step's.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// The object does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Credentials missing, expired or denied.
    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Auth, message)
    }

    /// The inputs were rejected.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    /// A step input the provider cannot use, found before it called anything
    /// (the engine's schema check normally catches these first).
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::invalid(message).with_help(
            "fix the step's input in the workflow; `flow validate FILE` checks inputs before anything runs",
        )
    }

    /// The object flow was creating or waiting for was deleted by something
    /// else meanwhile; `message` says which (`` cluster `x` disappeared ``).
    pub fn vanished(message: impl Into<String>) -> Self {
        Self::not_found(message).with_help(
            "something outside flow deleted it (a person, a cleanup script, another tool); \
             `flow plan` shows what flow will do next, and `flow apply --replace STEP` creates it again",
        )
    }

    /// The same error with a next step for the user.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The same error with the underlying error kept as its source.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error, of another kind.
    pub fn of_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Whether the engine may retry it.
    pub fn is_retryable(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }
}

/// Where a running operation reports to; the engine redacts secrets before
/// anything reaches a terminal or a file.
pub trait Reporter: Send + Sync {
    /// A progress event (stack event, lifecycle change, job status) shown live.
    fn event(&self, message: &str);
    /// A line of output for the step's log only.
    fn log(&self, line: &str);
}

/// Everything an operation needs besides its inputs.
#[derive(Clone)]
pub struct OpContext {
    /// The step's name.
    pub step: String,
    /// The operation token persisted before this call; the same on a retry or resume.
    pub token: String,
    /// The workflow file's folder.
    pub workdir: PathBuf,
    /// The step's log file (the engine's reporter appends to it; providers
    /// write through [`OpContext::reporter`], never to the file directly).
    pub log_path: PathBuf,
    /// The AWS region for the step, if the workflow or step set one.
    pub region: Option<String>,
    /// The AWS profile, if the workflow set one.
    pub profile: Option<String>,
    /// Progress and log sink.
    pub reporter: Arc<dyn Reporter>,
    /// Set when the user interrupts the run: tasks (a running job) stop their
    /// work and fail; resources finish what they started.
    pub cancel: Cancel,
}

/// A signal that the run was interrupted, cheap to clone and to poll.
#[derive(Clone, Debug)]
pub struct Cancel(tokio::sync::watch::Receiver<bool>);

impl Cancel {
    /// A sender and the signal it controls.
    pub fn pair() -> (tokio::sync::watch::Sender<bool>, Cancel) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Cancel(rx))
    }

    /// A signal that never fires (planning, tests).
    pub fn never() -> Cancel {
        let (tx, rx) = tokio::sync::watch::channel(false);
        // Keep the channel open for the life of the program, so it never reads as closed.
        std::mem::forget(tx);
        Cancel(rx)
    }

    /// Whether the run was interrupted.
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the run is interrupted (never, if it is not).
    pub async fn cancelled(&self) {
        let mut rx = self.0.clone();
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Something a step keeps running that costs money by the hour, for the cost
/// estimate in plans.
#[derive(Debug, Clone, PartialEq)]
pub enum Capacity {
    /// `count` EC2 instances of a type (node groups, Batch nodes).
    Instances {
        /// e.g. `p4d.24xlarge`.
        instance_type: String,
        /// How many run.
        count: u32,
    },
    /// FSx for Lustre storage.
    LustreStorage {
        /// Storage capacity in GiB.
        gib: u64,
        /// `SCRATCH_2`, `PERSISTENT_1`, `PERSISTENT_2`, …
        deployment_type: String,
        /// MB/s per TiB for persistent file systems.
        throughput: Option<u32>,
    },
}

/// What a provider adds to a planned change after looking at the real object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanDetail {
    /// Lines shown under the step, e.g. a CloudFormation change set's
    /// resource changes (`~ Modify AWS::EC2::Subnet PrivateSubnet (replacement: True)`).
    pub lines: Vec<String>,
    /// The real object must be replaced, for this reason (a stack left in
    /// `ROLLBACK_COMPLETE`, say).
    pub replace_because: Option<String>,
}

/// One provider kind. Every method that changes the world is idempotent by
/// `ctx.token`: called twice with the same token, it leaves one object.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The kind's name as written in `provider = "..."`.
    fn name(&self) -> &'static str;

    /// The inputs it accepts and whether it is a resource or a task.
    fn schema(&self) -> &Schema;

    /// Offline checks beyond the schema's types. Unknown inputs are skipped.
    fn validate(&self, _inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        Vec::new()
    }

    /// How `desired` differs from `prior`. The default compares input by input:
    /// any input marked `force_new`, or any change at all for a task, replaces;
    /// anything else updates in place.
    fn diff(&self, prior: &Values, desired: &Values) -> Change {
        default_diff(self.schema(), prior, desired)
    }

    /// Create the object (or run the task) and wait until it is ready.
    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError>;

    /// Change the object in place to match `inputs`.
    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError>;

    /// Delete the object and wait until it is gone. Deleting what is already gone succeeds.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError>;

    /// Whether [`Provider::plan_detail`] has anything to say; when false the
    /// planner does not even ask (large plans stay instant).
    fn has_plan_detail(&self) -> bool {
        false
    }

    /// Look at the real object while planning, for a step that has a change
    /// pending (never for unchanged steps: plans stay instant). `prior` is
    /// what state recorded, if the step was ever applied. The default adds
    /// nothing.
    async fn plan_detail(
        &self,
        _ctx: &OpContext,
        _prior: Option<Prior<'_>>,
        _desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        Ok(PlanDetail::default())
    }

    /// A digest of the local files these inputs name (a template, a manifest,
    /// a folder to sync), so that a changed file plans as a change even when
    /// the inputs themselves are the same. The engine keeps it among the
    /// recorded inputs under [`CONTENT_KEY`]. Offline and cheap; the default
    /// is none.
    fn content_digest(&self, _inputs: &Values, _ctx: &ValidateContext) -> Option<String> {
        None
    }

    /// What a step with these inputs keeps running, for the cost estimate.
    /// Offline and cheap; the default is nothing.
    fn capacity(&self, _inputs: &Values) -> Vec<Capacity> {
        Vec::new()
    }

    /// Find what an interrupted operation with `ctx.token` left behind, waiting
    /// for it to finish if it is still in progress on the far side. `id` is the
    /// object's id when one was recorded.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError>;
}

/// The recorded-input key under which the engine keeps a provider's
/// [`Provider::content_digest`]; it is never passed to the provider as an input.
pub const CONTENT_KEY: &str = "(content)";

/// What a sealed secret in state starts with: state keeps a sensitive input
/// only as `sealed:sha256:<64 hex>`, a salted SHA-256 of its value. The
/// `sealed:` keeps it apart from plain values shaped `sha256:<hex>` (image
/// digests, the [`CONTENT_KEY`] digest), which are not secrets. State schema 1
/// wrote seals without it; the state crate's migration to schema 2 adds it.
pub const SEALED_PREFIX: &str = "sealed:sha256:";

/// The sealed form of a SHA-256 given as hex: `sealed:sha256:<hex>`.
pub fn seal_hex(hex: &str) -> String {
    format!("{SEALED_PREFIX}{hex}")
}

/// Whether a recorded input is a sealed secret (see [`SEALED_PREFIX`]), so a
/// provider reading [`Prior::inputs`] (on delete, say) can tell that it has
/// the seal where the value used to be. Plain `sha256:<hex>` is not sealed.
pub fn is_sealed(value: &Value) -> bool {
    value.as_str().is_some_and(|s| {
        s.strip_prefix(SEALED_PREFIX)
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

/// The diff described on [`Provider::diff`].
pub fn default_diff(schema: &Schema, prior: &Values, desired: &Values) -> Change {
    let mut names: Vec<&String> = prior.keys().chain(desired.keys()).collect();
    names.sort();
    names.dedup();
    let changed: Vec<String> = names
        .into_iter()
        .filter(|k| prior.get(*k) != desired.get(*k))
        .cloned()
        .collect();
    if changed.is_empty() {
        return Change::NoOp;
    }
    if schema.kind == StepKind::Task {
        return Change::Replace(changed);
    }
    let forcing: Vec<String> = changed
        .iter()
        .filter(|k| schema.input(k).is_some_and(|s| s.force_new))
        .cloned()
        .collect();
    if forcing.is_empty() {
        Change::Update(changed)
    } else {
        Change::Replace(forcing)
    }
}

/// The known inputs of `inputs` as values, for offline checks.
pub fn known_inputs(inputs: &[(String, InputValue)]) -> Values {
    inputs
        .iter()
        .filter_map(|(k, v)| match v {
            InputValue::Known(v) => Some((k.clone(), v.clone())),
            InputValue::Unknown => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(kind: StepKind) -> Schema {
        Schema {
            kind,
            description: "test",
            inputs: vec![
                InputSpec::required("name", InputType::String, "name").forces_new(),
                InputSpec::optional("size", InputType::Integer, "size"),
            ],
            open_inputs: false,
        }
    }

    fn values(v: Value) -> Values {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn default_diff_separates_update_and_replace() {
        let s = schema(StepKind::Resource);
        let prior = values(json!({"name": "a", "size": 1}));
        assert_eq!(default_diff(&s, &prior, &prior), Change::NoOp);
        let bigger = values(json!({"name": "a", "size": 2}));
        assert_eq!(
            default_diff(&s, &prior, &bigger),
            Change::Update(vec!["size".into()])
        );
        let renamed = values(json!({"name": "b", "size": 2}));
        assert_eq!(
            default_diff(&s, &prior, &renamed),
            Change::Replace(vec!["name".into()])
        );
    }

    #[test]
    fn tasks_rerun_on_any_change() {
        let s = schema(StepKind::Task);
        let prior = values(json!({"name": "a", "size": 1}));
        let later = values(json!({"name": "a"}));
        assert_eq!(
            default_diff(&s, &prior, &later),
            Change::Replace(vec!["size".into()])
        );
    }

    #[tokio::test]
    async fn cancel_fires_once_sent() {
        let (tx, cancel) = Cancel::pair();
        assert!(!cancel.is_cancelled());
        let waiter = tokio::spawn({
            let c = cancel.clone();
            async move { c.cancelled().await }
        });
        tx.send(true).unwrap();
        waiter.await.unwrap();
        assert!(cancel.is_cancelled());
        assert!(!Cancel::never().is_cancelled());
    }

    #[test]
    fn sealed_values_are_recognised() {
        let hex = "ab".repeat(32);
        assert!(is_sealed(&json!(seal_hex(&hex))));
        assert!(is_sealed(&json!(format!("sealed:sha256:{hex}"))));
        // A plain digest (an image digest, a content digest) is a value.
        assert!(!is_sealed(&json!(format!("sha256:{hex}"))));
        assert!(!is_sealed(&json!("sealed:sha256:short")));
        assert!(!is_sealed(&json!(format!("sealed:sha256:{hex}0"))));
        assert!(!is_sealed(&json!(3)));
    }

    #[test]
    fn scalars_become_text_where_strings_are_wanted() {
        let env = InputType::Map(Box::new(InputType::String));
        assert_eq!(
            env.coerce(json!({"EPOCHS": 20, "DEBUG": true, "NAME": "x"})),
            json!({"EPOCHS": "20", "DEBUG": "true", "NAME": "x"})
        );
        assert_eq!(InputType::Integer.coerce(json!(3)), json!(3));
        assert_eq!(
            InputType::List(Box::new(InputType::String)).coerce(json!([1, 2])),
            json!(["1", "2"])
        );
    }

    #[test]
    fn types_accept_matching_values() {
        let list = InputType::List(Box::new(InputType::String));
        assert!(list.accepts(&json!(["a", "b"])));
        assert!(!list.accepts(&json!(["a", 1])));
        assert!(InputType::Integer.accepts(&json!(3)));
        assert!(!InputType::Integer.accepts(&json!(3.5)));
        assert!(InputType::Number.accepts(&json!(3.5)));
        assert_eq!(list.describe(), "a list of strings");
    }
}
