//! The records kept per step, as stored (JSON inside sled).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The version of the record layout this build writes. Older versions are
/// migrated on open; newer ones are refused. 2: sealed inputs are
/// `sealed:sha256:<hex>` (`sha256:<hex>` in 1). 4: the latest batches may
/// be only in the write-ahead log (see the `migrate` module).
pub const SCHEMA_VERSION: u32 = 4;

/// The operation a step was in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Creating the object (or running the task).
    Create,
    /// Changing it in place.
    Update,
    /// Deleting it (also the first half of a replace).
    Delete,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operation::Create => "create",
            Operation::Update => "update",
            Operation::Delete => "delete",
        })
    }
}

/// An operation whose intent is durable but whose result is not yet known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// What was being done.
    pub operation: Operation,
    /// The idempotency token handed to the provider (and to AWS as ClientRequestToken).
    pub token: String,
    /// The inputs the operation was issued with (sensitive ones sealed, as in
    /// [`StepRecord::inputs`]).
    pub inputs: Map<String, Value>,
    /// When it started (seconds since the Unix epoch).
    pub started_at: u64,
    /// The id of what the operation made, once the provider had one and
    /// recorded it before waiting (a submitted job's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// An operation is in flight (see [`StepRecord::in_flight`]).
    Pending,
    /// The last operation succeeded; `inputs` and `outputs` describe the object.
    Applied,
    /// The last operation failed; `inputs` and `outputs` describe the last
    /// applied object, if `applied` is true.
    Failed,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Pending => "pending",
            Status::Applied => "applied",
            Status::Failed => "failed",
        })
    }
}

/// Everything the engine knows about one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step's name in the workflow.
    pub name: String,
    /// The provider kind (`exec`, `cloudformation.stack`, …).
    pub provider: String,
    /// Where it stands.
    pub status: Status,
    /// Whether an object exists (or a task completed) as described by `inputs`/`outputs`.
    pub applied: bool,
    /// The real object's id, if it has one.
    pub resource_id: Option<String>,
    /// The inputs it was last applied with; sensitive values only sealed, as
    /// `sealed:sha256:<hex>` (a salted digest), never in the clear.
    pub inputs: Map<String, Value>,
    /// The outputs it produced.
    pub outputs: Map<String, Value>,
    /// Provider-private data (never shown).
    #[serde(default)]
    pub private: Value,
    /// The steps it depended on when last applied: destroy order comes from here.
    pub depends_on: Vec<String>,
    /// Whether destroy must refuse it unless told otherwise.
    #[serde(default)]
    pub prevent_destroy: bool,
    /// The cloud region it was applied in, so destroy needs no workflow file.
    #[serde(default)]
    pub region: Option<String>,
    /// The operation in flight, if any: durable before the side effect starts.
    pub in_flight: Option<InFlight>,
    /// How many attempts the last operation took (including retries).
    pub attempts: u32,
    /// The last error, if the last operation failed.
    pub last_error: Option<String>,
    /// Attributes a refresh found changed outside flow that no input shows
    /// (a stack's status, a template digest), with the real value found
    /// (`"(sensitive)"` for secret ones): shown once, then remembered; apply
    /// updates a resource back to the workflow, which clears them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drifted: BTreeMap<String, Value>,
    /// The suffix the object's name carries when a create-before-destroy
    /// replacement made it under another name than the workflow's (`gpu`
    /// made as `gpu-3f9a`); the engine hands the provider the name with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    /// The object a create-before-destroy replacement put aside and has not
    /// deleted yet; apply and destroy finish it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deposed: Option<crate::Deposed>,
    /// When the step was first recorded (seconds since the Unix epoch).
    pub created_at: u64,
    /// When the record last changed (seconds since the Unix epoch).
    pub updated_at: u64,
}

impl StepRecord {
    /// A fresh record for a step about to be created.
    pub fn new(name: &str, provider: &str, now: u64) -> Self {
        StepRecord {
            name: name.to_string(),
            provider: provider.to_string(),
            status: Status::Pending,
            applied: false,
            resource_id: None,
            inputs: Map::new(),
            outputs: Map::new(),
            private: Value::Null,
            depends_on: Vec::new(),
            prevent_destroy: false,
            region: None,
            in_flight: None,
            attempts: 0,
            last_error: None,
            drifted: BTreeMap::new(),
            name_suffix: None,
            deposed: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// Seconds since the Unix epoch, now.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
