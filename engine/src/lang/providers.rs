//! Providers resolved once: each step's `provider = "..."` becomes the
//! provider kind's handle here, at the edge, stored on the step
//! ([`StepDecl::kind`](super::ast::StepDecl::kind)); nothing later looks a
//! provider up by its name again. An unknown name is one diagnostic, made
//! here and nowhere else.

use std::sync::Arc;

use flow_providers::{Provider, Registry};

use super::ast::{ProviderKind, Workflow};
use crate::diag::{Diag, Diagnostics};

/// Give every step of `wf` its provider kind from `registry`, and a
/// diagnostic for each step whose provider is unknown (with the closest
/// known name).
pub fn resolve_providers(wf: &mut Workflow, registry: &Registry) -> Diagnostics {
    let mut diags = Diagnostics::default();
    let workflow_source = wf.source.clone();
    for step in &mut wf.steps {
        let source = step
            .source
            .clone()
            .unwrap_or_else(|| workflow_source.clone());
        if step.provider.is_empty() {
            continue; // missing or empty: already reported by the parser
        }
        match registry.get(&step.provider) {
            Some(p) => {
                if let Some(span) = step.import_span.clone()
                    && p.import_id().is_none()
                {
                    diags.push(
                        Diag::new(
                            "flow::cannot-import",
                            format!("`{}` steps cannot be imported", step.provider),
                        )
                        .in_source(&source)
                        .label(span, "nothing to adopt")
                        .help("`import` adopts a long-lived object (a stack, a cluster, a bucket…); remove it from this step"),
                    );
                }
                step.kind = Some(ProviderKind(p));
            }
            None => diags.push(
                Diag::new(
                    "flow::unknown-provider",
                    format!("unknown provider `{}`", step.provider),
                )
                .in_source(&source)
                .label(step.provider_span.clone(), "not a provider")
                .help(known_providers(registry, &step.provider)),
            ),
        }
    }
    diags
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
        Box::new(
            Diag::new(
                "flow::unknown-provider",
                format!(
                    "step `{step}` was applied with provider `{provider}`, which this flow does not know"
                ),
            )
            .help(format!(
                "use the flow version that applied it; {}",
                known_providers(registry, provider)
            )),
        )
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
