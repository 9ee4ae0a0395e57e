//! The provider contract: what every provider kind declares and implements.
//!
//! The engine owns state, ordering, retries and timeouts. A provider only
//! knows how to validate its inputs offline, compare two sets of inputs, and
//! create / read / update / delete one object, each idempotent by the
//! operation token the engine persisted before calling it.

use std::path::PathBuf;
use std::sync::Arc;

mod cancel;
mod error;
mod refresh;
mod replace;
mod report;
mod schema;

pub use cancel::Cancel;
pub use error::{ErrorKind, ProviderError};
pub use refresh::{Drift, Refreshed, attribute_drift, input_drift};
pub use replace::{Rename, next_suffix};
pub use report::{Measured, Reporter, Silent, Verdict};
pub use schema::{DeclaredOutputs, InputSpec, InputType, InputValue, Problem, Schema, StepKind};

use async_trait::async_trait;

use crate::file_input::Workdir;
use serde_json::{Map, Value};

/// A step's inputs or outputs: a JSON object, keys in a stable order.
pub type Values = Map<String, Value>;

/// What validation may look at besides the inputs.
#[derive(Debug, Clone)]
pub struct ValidateContext {
    /// The workflow file's folder; relative paths are resolved against it,
    /// and stay inside it or the folders `allow_paths` opens.
    pub workdir: Workdir,
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
    /// The operation ran to its end and failed (a job that failed, a stack
    /// rolled back, a file system in `FAILED`): nothing to adopt, and issuing
    /// it again under the same token would only find the failure again. The
    /// engine deletes what it left (by `id`, else by the intent's inputs),
    /// then starts over under a new token.
    Failed {
        /// The failed object's id, if it left one.
        id: Option<String>,
        /// Why it failed, as the service says.
        reason: String,
    },
}

/// Everything an operation needs besides its inputs.
#[derive(Clone)]
pub struct OpContext {
    /// The step's name.
    pub step: String,
    /// The operation token persisted before this call; the same on a retry or resume.
    pub token: String,
    /// The workflow file's folder, and the folders `allow_paths` opens.
    pub workdir: Workdir,
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
    /// Where a long operation records the id of what it made as soon as it
    /// has one (a submitted job's id), before it waits: the intent then
    /// names the object, and a resume after a crash reads it by id.
    pub checkpoint: Arc<dyn Checkpoint>,
    /// The step's `timeout`, for checks made while planning (a reservation
    /// must last that long); `None` in other calls.
    pub timeout: Option<std::time::Duration>,
    /// Set when the call is part of `destroy`: a [`Provider::read`] then
    /// reports a task that is still running as present at once (for the
    /// delete that follows to stop it), instead of waiting for it to end.
    pub destroying: bool,
    /// Set by `flow destroy --clean-leftovers`: a cluster's or VPC's delete
    /// deletes what controllers made for the cluster and left in its VPC.
    pub clean_leftovers: bool,
}

/// Where an operation in flight records what it made so far (see
/// [`OpContext::checkpoint`]).
#[async_trait]
pub trait Checkpoint: Send + Sync {
    /// Record `id` as the object of the operation in flight, and return once
    /// that is durable.
    async fn made(&self, id: &str) -> Result<(), ProviderError>;
}

/// A checkpoint that keeps nothing: for calls no intent backs.
pub struct NoCheckpoint;

#[async_trait]
impl Checkpoint for NoCheckpoint {
    async fn made(&self, _id: &str) -> Result<(), ProviderError> {
        Ok(())
    }
}

impl OpContext {
    /// The context of a call nobody watches and no intent backs (a plan's
    /// look at a real object, refresh, import): no token, no log, a
    /// [`Silent`] reporter, never cancelled.
    pub fn unwatched(
        step: &str,
        workdir: Workdir,
        region: Option<String>,
        profile: Option<String>,
    ) -> OpContext {
        OpContext {
            step: step.to_string(),
            token: String::new(),
            workdir,
            log_path: PathBuf::new(),
            region,
            profile,
            reporter: Arc::new(Silent),
            cancel: Cancel::never(),
            checkpoint: Arc::new(NoCheckpoint),
            timeout: None,
            destroying: false,
            clean_leftovers: false,
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
    /// Instances a scheduler starts and stops, between `min` and `max` (a
    /// ParallelCluster queue); none run while the fleet is `stopped`.
    Scaled {
        /// e.g. `p5.48xlarge`.
        instance_type: String,
        /// How many run at the least.
        min: u32,
        /// How many run at the most.
        max: u32,
        /// The fleet is stopped: none run until it is started.
        stopped: bool,
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
    /// What makes the change impossible as planned (a capacity reservation
    /// in another zone, say): the plan fails with each, and nothing is done.
    pub refusals: Vec<Refusal>,
}

/// Why a planned change cannot be made, found by looking at real objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What is wrong, naming the object.
    pub message: String,
    /// What to change.
    pub help: String,
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

    /// Outputs an in-place update never changes (a cluster's head node
    /// address): planning takes them as recorded for a step it updates, so
    /// what reads only these is not planned anew. The default: none.
    fn outputs_kept_on_update(&self) -> &'static [&'static str] {
        &[]
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

    /// Lines shown under a step with a change pending in every plan: what
    /// it will make, read offline from its inputs and the files they name
    /// (a cluster configuration's queues and counts). Inputs not known yet
    /// are absent from `inputs`. The default shows nothing.
    fn plan_lines(&self, _inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        Vec::new()
    }

    /// What creating the step does, for a plan that cannot ask
    /// [`Provider::plan_detail`] because inputs named in `unknown` are known
    /// only after apply (a cluster whose subnets another step makes): read
    /// offline from the `known` inputs and the files they name. The default
    /// shows nothing.
    fn creation_lines(
        &self,
        _known: &Values,
        _unknown: &[String],
        _ctx: &ValidateContext,
    ) -> Vec<String> {
        Vec::new()
    }

    /// Whether [`Provider::plan_detail`] has anything to say; when false the
    /// planner does not even ask (large plans stay instant).
    fn has_plan_detail(&self) -> bool {
        false
    }

    /// Whether [`Provider::plan_detail`] is also asked while some inputs
    /// are known only after apply (they are then absent from `desired`):
    /// for checks that need only part of them (a capacity reservation's
    /// type and count, before the subnets exist).
    fn looks_before_inputs_are_known(&self) -> bool {
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

    /// What a step with these inputs keeps running, for the cost estimate;
    /// `ctx` says where files the inputs name are. Offline and cheap; the
    /// default is nothing.
    fn capacity(&self, _inputs: &Values, _ctx: &ValidateContext) -> Vec<Capacity> {
        Vec::new()
    }

    /// What an applied step keeps running, its recorded `outputs` telling
    /// what runs now (a stopped fleet); the default is [`Provider::capacity`].
    fn capacity_applied(
        &self,
        inputs: &Values,
        _outputs: &Values,
        ctx: &ValidateContext,
    ) -> Vec<Capacity> {
        self.capacity(inputs, ctx)
    }

    /// Which input names the object, when a replacement can be made under
    /// a suffixed name while the old object still exists
    /// (`lifecycle.create_before_destroy`); `None`: it cannot.
    fn replacement_name(&self) -> Option<Rename> {
        None
    }

    /// Whether a replacement is made before the old object is deleted even
    /// when the step does not say so (a node group: its capacity must not
    /// go away while the new group starts).
    fn creates_before_destroy(&self) -> bool {
        false
    }

    /// Take `old` out of service once its replacement `new` is created and
    /// ready, before `old` is deleted (a node group's nodes cordoned and
    /// drained). Called again after a resume: idempotent. The default does
    /// nothing.
    async fn retire(
        &self,
        _ctx: &OpContext,
        _old: Prior<'_>,
        _new: Prior<'_>,
    ) -> Result<(), ProviderError> {
        Ok(())
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

    /// Whether [`Provider::refresh`] reads anything; when false (`exec`,
    /// `null`) the planner does not ask, and the step is not read.
    fn can_refresh(&self) -> bool {
        false
    }

    /// The outputs the step will have, known from its inputs before apply;
    /// `None` (the default) when they cannot be known, so that any key may
    /// be referred to. A reference to a key outside them is refused at
    /// validate.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<DeclaredOutputs> {
        None
    }

    /// Whether the provider calls AWS with the SDK's region and credentials:
    /// commands then check, once before any step runs, that both are there
    /// (`aws::access::check`), instead of failing step by step.
    fn uses_aws(&self) -> bool {
        false
    }

    /// Read the real object of an applied step, as `flow plan` does before
    /// diffing: whether it still exists, and which attributes the provider
    /// owns differ from `prior`. Never changes anything and never reports a
    /// secret's value.
    async fn refresh(
        &self,
        _ctx: &OpContext,
        _prior: Prior<'_>,
    ) -> Result<Refreshed, ProviderError> {
        Ok(Refreshed::unchanged())
    }

    /// What an ID to import names for this kind, for help and errors
    /// (`"a stack name or ARN"`); `None` when the kind cannot import.
    fn import_id(&self) -> Option<&'static str> {
        None
    }

    /// Adopt the existing object `id` for a step with these inputs, without
    /// changing it: what state records, as if the step had created it.
    /// Fails with [`ErrorKind::NotFound`] when there is no such object, and
    /// [`ErrorKind::Invalid`] when `id` is the wrong kind of ID or names
    /// another object than the step's inputs do.
    async fn import(
        &self,
        _ctx: &OpContext,
        _id: &str,
        _inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        Err(ProviderError::invalid(format!(
            "`{}` steps cannot be imported",
            self.name()
        )))
    }
}

/// The error for an ID that names another object than the step's inputs:
/// `what` is the kind (`stack`), `id` the ID given, `wanted` the name the
/// inputs give.
pub fn import_mismatch(what: &str, id: &str, wanted: &str) -> ProviderError {
    ProviderError::invalid(format!(
        "the step's inputs name {what} `{wanted}`, but the ID to import names `{id}`"
    ))
    .with_help("import the object the step describes, or change the step's inputs to describe it")
}

/// The error for an ID that names nothing.
pub fn import_missing(what: &str, id: &str) -> ProviderError {
    ProviderError::not_found(format!("there is no {what} `{id}` to import"))
        .with_help("check the ID and the region (`[workflow] region`, `AWS_REGION`)")
}

/// The recorded-input key under which the engine keeps a provider's
/// [`Provider::content_digest`]; it is never passed to the provider as an input.
pub const CONTENT_KEY: &str = "(content)";

/// What a sealed secret in state started with before fingerprints were
/// keyed: `sealed:sha256:<64 hex>`, a SHA-256 salted with a salt kept in
/// the state itself. Still recognised, and compared through the state's
/// salt until the step is applied again (see the engine's `secrets`
/// module); new seals are [`crate::fingerprint::FingerprintKey::seal`]s.
/// The `sealed:` keeps both apart from plain values shaped `sha256:<hex>`
/// (image digests, the [`CONTENT_KEY`] digest), which are not secrets.
pub const SEALED_PREFIX: &str = "sealed:sha256:";

/// The legacy sealed form of a salted SHA-256 given as hex:
/// `sealed:sha256:<hex>`.
pub fn seal_hex(hex: &str) -> String {
    format!("{SEALED_PREFIX}{hex}")
}

/// Whether a recorded input is a sealed secret (a keyed
/// `sealed:hmac-sha256:<key id>:<hex>` or a legacy [`SEALED_PREFIX`] one),
/// so a provider reading [`Prior::inputs`] (on delete, say) can tell that
/// it has the seal where the value used to be. Plain `sha256:<hex>` is not
/// sealed.
pub fn is_sealed(value: &Value) -> bool {
    value.as_str().is_some_and(|s| {
        let legacy = s
            .strip_prefix(SEALED_PREFIX)
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        legacy || (s.starts_with("sealed:") && crate::fingerprint::key_id_of(s).is_some())
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
}
