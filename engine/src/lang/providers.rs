//! Providers resolved once: each step's `provider = "..."` becomes the
//! provider kind's handle here, at the edge, and nothing later looks a
//! provider up by its name again. An unknown name is one diagnostic, made
//! here and nowhere else.

use std::collections::BTreeMap;
use std::sync::Arc;

use flow_providers::{Provider, Registry};

use super::ast::Workflow;
use crate::diag::{Diag, Diagnostics};

/// Each step's provider kind, by step name.
#[derive(Clone, Default)]
pub struct StepProviders {
    by_step: BTreeMap<String, Arc<dyn Provider>>,
}

impl StepProviders {
    /// The provider of step `step`, if the step exists and its provider is known.
    pub fn get(&self, step: &str) -> Option<&Arc<dyn Provider>> {
        self.by_step.get(step)
    }
}

impl std::fmt::Debug for StepProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.by_step.iter().map(|(k, p)| (k, p.name())))
            .finish()
    }
}

/// The provider of every step of `wf`, and a diagnostic for each step whose
/// provider `registry` does not know (with the closest known name).
pub fn resolve_providers(wf: &Workflow, registry: &Registry) -> (StepProviders, Diagnostics) {
    let mut diags = Diagnostics::default();
    let mut by_step = BTreeMap::new();
    for step in &wf.steps {
        if step.provider.is_empty() {
            continue; // missing or empty: already reported by the parser
        }
        match registry.get(&step.provider) {
            Some(p) => {
                by_step.insert(step.name.clone(), p);
            }
            None => diags.push(
                Diag::new(
                    "flow::unknown-provider",
                    format!("unknown provider `{}`", step.provider),
                )
                .in_source(&wf.source)
                .label(step.provider_span.clone(), "not a provider")
                .help(known_providers(registry, &step.provider)),
            ),
        }
    }
    (StepProviders { by_step }, diags)
}

/// The provider kind a state record names (a step removed from the workflow,
/// or a destroy that works from state alone), or the error that says this
/// flow does not know it.
pub fn recorded_provider(
    registry: &Registry,
    step: &str,
    provider: &str,
) -> Result<Arc<dyn Provider>, Box<Diag>> {
    registry.get(provider).ok_or_else(|| {
        Box::new(Diag::new(
            "flow::unknown-provider",
            format!(
                "step `{step}` was applied with provider `{provider}`, which this flow does not know"
            ),
        )
        .help(format!(
            "use the flow version that applied it; {}",
            known_providers(registry, provider)
        )))
    })
}

/// The help for an unknown provider name: the closest known name, and all of them.
fn known_providers(registry: &Registry, name: &str) -> String {
    let names = registry.names();
    match registry.closest(name) {
        Some(s) => format!("did you mean `{s}`? Providers: {}", names.join(", ")),
        None => format!("providers: {}", names.join(", ")),
    }
}
