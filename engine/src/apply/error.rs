//! Why a step failed, as a type: each variant carries what the user needs to
//! read the failure and, where there is one, the next step ([`StepError::help`]).
//! The step's failure is turned into text once, redacted, when it is shown
//! or recorded ([`super::events::Failure`]).

use std::sync::Arc;
use std::time::Duration;

use flow_providers::ProviderError;
use flow_state::StateError;

use super::events::Failure;
use crate::diag::Diag;
use crate::plan::Action;
use crate::secrets::Redactor;

/// Why carrying out one step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The provider's operation failed (after the retries it allowed).
    #[error("{}", .0.message)]
    Provider(ProviderError),
    /// The provider could not say what an interrupted create left behind.
    #[error("could not check the interrupted create: {}", .0.message)]
    CheckInterrupted(ProviderError),
    /// The step's own record could not be written.
    #[error("could not write state: {0}")]
    State(#[from] StateError),
    /// The record of a step this one needs could not be written.
    #[error("the state of `{step}` could not be written: {cause}")]
    DependencyState {
        /// The step whose record failed.
        step: String,
        /// Why.
        cause: Arc<StateError>,
    },
    /// The step's inputs could not be resolved.
    #[error("{}", .0.iter().map(|d| d.message.as_str()).collect::<Vec<_>>().join("; "))]
    Inputs(Vec<Diag>),
    /// Some inputs are still unknown although everything before the step ran.
    #[error("inputs still unknown: {}", .0.join(", "))]
    InputsUnknown(Vec<String>),
    /// The plan asked to change a step the workflow does not have.
    #[error("the step is not in the workflow")]
    NotInWorkflow,
    /// The provider kind the step was applied with is unknown to this flow.
    #[error("{}", .0.message)]
    UnknownProvider(Box<Diag>),
    /// With the values known now the step needs more than the plan said.
    #[error(
        "the plan said {} but with the values known now the step needs {}; run plan again",
        .planned.word(),
        .wanted.word()
    )]
    PlanOutdated {
        /// What the plan said.
        planned: Action,
        /// What the step needs now.
        wanted: Action,
    },
    /// With the values known now the step must be replaced, and it has
    /// `lifecycle.prevent_destroy`.
    #[error(
        "with the values known now the step must be replaced, but it has lifecycle.prevent_destroy: nothing was deleted"
    )]
    Protected,
    /// Create, update and delete went round without the step settling.
    #[error("the step did not settle after several operations")]
    DidNotSettle,
    /// The step ran longer than its `timeout`.
    #[error(
        "timed out after {}; the operation is recorded and will be reconciled on the next apply",
        humantime::format_duration(*.0)
    )]
    TimedOut(Duration),
    /// The step failed, and recording the failure failed too.
    #[error("{error} (and could not write state: {state})")]
    Unrecorded {
        /// The failure.
        error: Box<StepError>,
        /// Why it could not be recorded.
        state: StateError,
    },
}

impl StepError {
    /// The failure as the user sees it: message and help, with every secret
    /// `redactor` knows masked in both.
    pub fn to_failure(&self, redactor: &Redactor) -> Failure {
        Failure {
            message: redactor.redact(&self.to_string()),
            help: self.help().map(|h| redactor.redact(&h)),
            at: None,
        }
    }

    /// What the user can do next, when there is something to say.
    pub fn help(&self) -> Option<String> {
        match self {
            StepError::Provider(e) => e.help.clone(),
            StepError::CheckInterrupted(e) => Some(match &e.help {
                Some(h) => format!(
                    "{h}; the interrupted operation stays recorded, and the next `flow apply` checks it again before anything new"
                ),
                None => "the interrupted operation stays recorded; fix the cause and run `flow apply` again, which checks it before anything new".into(),
            }),
            StepError::State(e) | StepError::Unrecorded { state: e, .. } => Some(state_help(e)),
            StepError::DependencyState { cause, .. } => Some(state_help(cause)),
            StepError::Inputs(diags) => diags.iter().find_map(|d| d.help.clone()),
            StepError::InputsUnknown(_) => Some(
                "an output they reference was not produced; check that the steps they name ran and give those outputs (`flow output FILE`)".into(),
            ),
            StepError::NotInWorkflow => Some("run `flow plan` again and apply the new plan".into()),
            StepError::UnknownProvider(d) => d.help.clone(),
            StepError::PlanOutdated { .. } => {
                Some("run `flow plan` to see the change, then apply again".into())
            }
            StepError::Protected => Some(
                "`flow plan` shows what forces the replacement: revert it, or remove prevent_destroy first".into(),
            ),
            StepError::DidNotSettle => Some(
                "look at the step's log with `flow logs FILE STEP`; the provider's object keeps changing under flow".into(),
            ),
            StepError::TimedOut(_) => Some(
                "raise the step's `timeout` if the operation needs longer; the next `flow apply` waits for it instead of starting another".into(),
            ),
        }
    }
}

/// What to do when a record could not be written: the state error's own
/// advice (a conflicting writer of a shared state, an unreachable bucket), or
/// for the local state a look at its disk.
fn state_help(e: &StateError) -> String {
    match e {
        StateError::Remote { help: Some(h), .. } => h.clone(),
        _ => e.help().unwrap_or_else(|| {
            "check that the state folder's disk is writable and not full; `flow state backups` lists the backups taken before this run".into()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_in_the_message_and_the_help() {
        let redactor = Redactor::default();
        redactor.add(&serde_json::json!("hunter22hunter22"));
        let e = StepError::Provider(
            ProviderError::auth("token hunter22hunter22 was refused")
                .with_help("rotate hunter22hunter22 and run again"),
        );
        let f = e.to_failure(&redactor);
        assert!(!f.message.contains("hunter22"), "{f:?}");
        assert!(f.message.starts_with("token "), "{f:?}");
        let help = f.help.unwrap();
        assert!(!help.contains("hunter22"), "{help}");
        assert!(help.starts_with("rotate "), "{help}");
    }

    #[test]
    fn provider_help_comes_through_and_others_say_what_to_do() {
        let e = StepError::Provider(
            ProviderError::conflict("stack `vpc` already exists").with_help("choose another name"),
        );
        assert_eq!(e.to_string(), "stack `vpc` already exists");
        assert_eq!(e.help().as_deref(), Some("choose another name"));
        let t = StepError::TimedOut(Duration::from_secs(90));
        assert!(t.to_string().starts_with("timed out after 1m 30s;"), "{t}");
        assert!(t.help().unwrap().contains("timeout"));
        let outdated = StepError::PlanOutdated {
            planned: Action::Update,
            wanted: Action::Replace,
        };
        assert!(outdated.to_string().contains("run plan again"));
        let unrecorded = StepError::Unrecorded {
            error: Box::new(StepError::DidNotSettle),
            state: StateError::Closed,
        };
        assert!(unrecorded.to_string().starts_with(
            "the step did not settle after several operations (and could not write state:"
        ));
    }
}
