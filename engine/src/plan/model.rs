//! What a plan is: one change per step, with per-input differences.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What apply will do to a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Nothing.
    NoOp,
    /// Adopt an existing object (`import = "ID"`) without changing it.
    Import,
    /// Create it (or run the task).
    Create,
    /// Change it in place.
    Update,
    /// Delete it and create it again (or re-run the task).
    Replace,
    /// Delete it.
    Delete,
}

impl Action {
    /// The word used in plans.
    pub fn word(self) -> &'static str {
        match self {
            Action::NoOp => "no-op",
            Action::Import => "import",
            Action::Create => "create",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Delete => "delete",
        }
    }

    /// The one- to three-character sign shown before the step.
    pub fn sign(self) -> &'static str {
        match self {
            Action::NoOp => " ",
            Action::Import => "<=",
            Action::Create => "+",
            Action::Update => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
        }
    }
}

/// A value as a plan may show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shown {
    /// The value itself.
    Value(Value),
    /// A secret: never shown.
    Sensitive,
    /// Not known until apply.
    KnownAfterApply,
    /// Not set.
    Absent,
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shown::Value(v) => write!(f, "{v}"),
            Shown::Sensitive => f.write_str("(sensitive)"),
            Shown::KnownAfterApply => f.write_str("(known after apply)"),
            Shown::Absent => f.write_str("(none)"),
        }
    }
}

/// One input's before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputDiff {
    /// The input's name.
    pub name: String,
    /// What state recorded.
    pub before: Shown,
    /// What the workflow asks for.
    pub after: Shown,
    /// Whether this input forces a replacement.
    pub forces_replacement: bool,
}

/// The planned change of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepChange {
    /// The step.
    pub step: String,
    /// What will happen.
    pub action: Action,
    /// The provider kind.
    pub provider: String,
    /// Why, in a few words (empty for no-op).
    pub reason: String,
    /// The inputs that differ (all inputs for a create).
    pub inputs: Vec<InputDiff>,
    /// Whether some inputs are only known once earlier steps are applied.
    pub known_after_apply: bool,
    /// The operation token of an interrupted operation this change resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumes: Option<String>,
    /// What it depends on (from the workflow; from state for deletes).
    pub depends_on: Vec<String>,
    /// What the provider found looking at the real object (a change set's
    /// resource changes, say); not part of what a saved plan must match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// What the step costs to keep running, before and after, when its
    /// provider can say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<super::costs::StepCost>,
    /// The order of a replacement made before the old object is deleted
    /// (`lifecycle.create_before_destroy`), or of finishing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_before_destroy: Option<super::replacing::Replacement>,
    /// A replacement forced only by inputs known after apply (a cluster's
    /// name while the cluster is updated): apply replaces only if their
    /// values turn out to differ, and otherwise does what the real values
    /// ask (often nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace_if_changed: bool,
}

impl StepChange {
    /// The sign shown before the step: `+/-` for a replacement created
    /// before the old object is deleted.
    pub fn sign(&self) -> &'static str {
        match (&self.create_before_destroy, self.action) {
            (Some(_), Action::Replace) => "+/-",
            _ => self.action.sign(),
        }
    }

    /// The change without provider details, for comparing plans.
    pub fn essence(&self) -> StepChange {
        StepChange {
            details: Vec::new(),
            cost: None,
            ..self.clone()
        }
    }
}

/// What refresh found of one step's real object, when it is not what state
/// recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDrift {
    /// The step.
    pub step: String,
    /// Its provider kind.
    pub provider: String,
    /// What was found.
    #[serde(flatten)]
    pub found: DriftFound,
}

/// What refresh found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "drift", rename_all = "kebab-case")]
pub enum DriftFound {
    /// The object exists with these attributes changed outside flow.
    Changed {
        /// Each attribute's recorded and real value.
        attributes: Vec<AttributeDrift>,
    },
    /// The object no longer exists: it is planned for create again.
    Deleted,
    /// The object could not be read; the step is planned from state alone.
    CouldNotRead {
        /// Why.
        reason: String,
    },
}

/// One attribute changed outside flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributeDrift {
    /// The attribute (an input's name, or the provider's own).
    pub name: String,
    /// What state recorded.
    pub recorded: Shown,
    /// What the real object has.
    pub real: Shown,
}

/// A whole plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The workflow's name.
    pub workflow: String,
    /// Every step's change: workflow steps in dependency order, then deletes.
    pub changes: Vec<StepChange>,
    /// The state's serial when planned; a saved plan refuses a newer state.
    pub state_serial: u64,
    /// What the plan starts and stops costing per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<super::costs::PlanCost>,
    /// What refresh found changed or deleted outside flow, or could not read.
    #[serde(default)]
    pub drift: Vec<StepDrift>,
    /// Records that `[[moved]]` entries carry to a new address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<super::moves::MovedAddress>,
    /// What the user should know before applying: a step deleted and one
    /// created that look like the same object under a new address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Steps not planned yet: a `for_each` over outputs known only after
    /// apply, and what needs such a step. Apply plans them in a later round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred: Vec<DeferredStep>,
}

/// A step whose plan waits until other steps have applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredStep {
    /// The step (unexpanded, for one with `for_each`).
    pub step: String,
    /// Whether it is the step with the `for_each` (its instances are what
    /// is not known), not a step that needs one.
    pub for_each: bool,
    /// The steps it waits on.
    pub waits_on: Vec<String>,
    /// Why, in words.
    pub reason: String,
}

/// Counts of each action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Steps to import.
    #[serde(default)]
    pub import: usize,
    /// Steps to create.
    pub create: usize,
    /// Steps to update in place.
    pub update: usize,
    /// Steps to replace.
    pub replace: usize,
    /// Steps to delete.
    pub delete: usize,
    /// Steps left alone.
    pub unchanged: usize,
}

impl Plan {
    /// Counts of each action.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.changes {
            match c.action {
                Action::Import => s.import += 1,
                Action::Create => s.create += 1,
                Action::Update => s.update += 1,
                Action::Replace => s.replace += 1,
                Action::Delete => s.delete += 1,
                Action::NoOp => s.unchanged += 1,
            }
        }
        s
    }

    /// Whether anything would change (a deferred step will, once planned).
    pub fn has_changes(&self) -> bool {
        !self.moved.is_empty()
            || !self.deferred.is_empty()
            || self.changes.iter().any(|c| c.action != Action::NoOp)
    }

    /// How many steps refresh could not read (planned from state alone).
    pub fn unread(&self) -> usize {
        self.drift
            .iter()
            .filter(|d| matches!(d.found, DriftFound::CouldNotRead { .. }))
            .count()
    }

    /// Whether refresh found something changed or deleted outside flow.
    pub fn has_drift(&self) -> bool {
        self.drift
            .iter()
            .any(|d| !matches!(d.found, DriftFound::CouldNotRead { .. }))
    }

    /// The change for `step`.
    pub fn change(&self, step: &str) -> Option<&StepChange> {
        self.changes.iter().find(|c| c.step == step)
    }
}
