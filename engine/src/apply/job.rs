//! What one step of a run is asked to do: its planned change, its
//! declaration, what it depends on, where it runs; and the fresh operation
//! tokens its operations are recorded under.

use std::ops::Deref;
use std::sync::Arc;

use crate::lang::ast::StepDecl;
use crate::lang::load::Loaded;
use crate::plan::StepChange;

/// One step to carry out.
#[derive(Debug, Clone)]
pub struct StepJob {
    /// The planned change.
    pub change: StepChange,
    /// Its declaration, when the workflow has it (not for deletes of removed steps).
    pub decl: Option<SharedDecl>,
    /// Dependencies to record.
    pub depends_on: Vec<String>,
    /// The region to operate in (the step's, else the workflow's, else the recorded one).
    pub region: Option<String>,
}

/// A step's declaration, shared with the loaded workflow it is part of
/// instead of copied: a run has a job for each of thousands of steps, and
/// each copy was made before the first step started and freed as it ended.
#[derive(Clone)]
pub struct SharedDecl {
    loaded: Arc<Loaded>,
    index: usize,
}

impl SharedDecl {
    /// `step`'s declaration in `loaded`, when the workflow declares it.
    pub fn of(loaded: &Arc<Loaded>, step: &str) -> Option<Self> {
        loaded.workflow.step_position(step).map(|index| SharedDecl {
            loaded: loaded.clone(),
            index,
        })
    }
}

/// The step's declaration only: the loaded workflow beside it holds the
/// variables' values, secrets too.
impl std::fmt::Debug for SharedDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl Deref for SharedDecl {
    type Target = StepDecl;

    fn deref(&self) -> &StepDecl {
        &self.loaded.workflow.steps[self.index]
    }
}

/// A fresh operation token: 32 hex digits, valid as an AWS ClientRequestToken.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_declaration_shows_its_step_and_no_variable_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wf.toml");
        std::fs::write(
            &path,
            "[vars.token]\nsensitive = true\ndefault = \"hf_SECRETvalue\"\n\
             [steps.a]\nprovider = \"null\"\n[steps.a.inputs]\nt = \"${vars.token}\"\n\
             [steps.b]\nprovider = \"null\"\n",
        )
        .unwrap();
        let vars = crate::lang::vars::VarInputs::default();
        let registry = flow_providers::Registry::builtin();
        let loaded = Arc::new(crate::lang::load::load(&path, &vars, &registry, &|_| None).unwrap());
        let decl = SharedDecl::of(&loaded, "b").unwrap();
        assert_eq!(decl.name, "b");
        let shown = format!("{decl:?}");
        assert!(shown.contains("\"b\""), "{shown}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(SharedDecl::of(&loaded, "c").is_none());
    }

    #[test]
    fn tokens_are_valid_client_request_tokens() {
        let t = new_token();
        assert_eq!(t.len(), 32);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(t, new_token());
    }
}
