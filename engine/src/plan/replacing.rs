//! Create-before-destroy replacements: whether a step's replacement is
//! made before its old object is deleted, the name suffix the replacement
//! takes, the inputs a provider is handed for an object whose name carries
//! one, and what the plan says about it.

use flow_providers::{Provider, Values};
use flow_state::StepRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::lang::ast::StepDecl;

/// What a create-before-destroy replacement does, for plans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replacement {
    /// The name the replacement is made under (`None`: known after apply,
    /// or nothing is made: see `finishes`).
    pub creates: Option<String>,
    /// The name of the object retired and deleted once it is ready.
    pub retires: Option<String>,
    /// Whether the replacement exists already and only the old object is
    /// left to retire (an apply stopped in between).
    #[serde(default)]
    pub finishes: bool,
}

impl Replacement {
    /// The plan's line: the order of the operations.
    pub fn line(&self) -> String {
        let name = |n: &Option<String>, unknown: &str| match n {
            Some(n) => format!("`{n}`"),
            None => unknown.to_string(),
        };
        let old = name(&self.retires, "the old object");
        if self.finishes {
            return format!(
                "create before destroy: the replacement exists; retires (drains) and deletes the old {old}"
            );
        }
        format!(
            "create before destroy: creates {} and waits until it is ready, then retires (drains) and deletes {old}",
            name(&self.creates, "the replacement (known after apply)")
        )
    }
}

/// Whether `step`'s replacements are made before the old object is
/// deleted: as `lifecycle.create_before_destroy` says, else as the
/// provider does by default; never when the provider cannot name a
/// replacement (the workflow's check refuses asking for it).
pub fn wanted(step: Option<&StepDecl>, provider: &dyn Provider) -> bool {
    let asked = step
        .and_then(|s| s.create_before_destroy.as_ref())
        .map_or(provider.creates_before_destroy(), |(b, _)| *b);
    asked && provider.replacement_name().is_some()
}

/// `inputs` as the provider must see them for an object whose name
/// carries `suffix`.
pub fn live_inputs(provider: &dyn Provider, inputs: &Values, suffix: Option<&str>) -> Values {
    match (suffix, provider.replacement_name()) {
        (Some(s), Some(rename)) => rename.apply(inputs, s),
        _ => inputs.clone(),
    }
}

/// The name an object with `inputs` and `suffix` has, if the provider
/// names its objects and the name is known.
pub fn live_name(provider: &dyn Provider, inputs: &Values, suffix: Option<&str>) -> Option<String> {
    let rename = provider.replacement_name()?;
    let named = live_inputs(provider, inputs, suffix);
    match named.get(rename.input) {
        Some(Value::String(s)) if s != crate::lang::inputs::UNKNOWN => Some(s.clone()),
        _ => None,
    }
}

/// The suffix the replacement of `rec`'s object takes: none when its name
/// carries one (back to the workflow's name), else one worked out from the
/// object's id, the same in the plan, the apply and a resumed apply.
pub fn next_suffix(rec: &StepRecord) -> Option<String> {
    let seed = match &rec.resource_id {
        Some(id) => id.clone(),
        None => format!("{}@{}", rec.name, rec.created_at),
    };
    flow_providers::next_suffix(rec.name_suffix.as_deref(), &seed)
}

/// What replacing `rec`'s object create-before-destroy does, for the plan:
/// `desired` is what the workflow asks for now.
pub fn planned(provider: &dyn Provider, rec: &StepRecord, desired: &Values) -> Replacement {
    Replacement {
        creates: live_name(provider, desired, next_suffix(rec).as_deref()),
        retires: live_name(provider, &rec.inputs, rec.name_suffix.as_deref()),
        finishes: false,
    }
}

/// What finishing `rec`'s deposed object does, for the plan, if it has one.
pub fn finishing(provider: &dyn Provider, rec: &StepRecord) -> Option<Replacement> {
    // Only once the replacement exists and did not fail: else the step is
    // planned to make it first.
    if !rec.applied || rec.in_flight.is_some() {
        return None;
    }
    let old = rec.deposed.as_ref()?;
    Some(Replacement {
        creates: None,
        retires: live_name(provider, &old.inputs, old.name_suffix.as_deref()),
        finishes: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nodegroup() -> flow_providers::eks::EksNodegroup {
        flow_providers::eks::EksNodegroup::new()
    }

    #[test]
    fn names_alternate_between_the_workflows_and_a_suffixed_one() {
        let p = nodegroup();
        let inputs = json!({"cluster": "c", "name": "gpu"})
            .as_object()
            .cloned()
            .unwrap();
        let mut rec = StepRecord::new("gpu", "eks.nodegroup", 1);
        rec.resource_id = Some("arn:aws:eks:us-east-1:1:nodegroup/c/gpu/1".into());
        rec.inputs = inputs.clone();
        let first = planned(&p, &rec, &inputs);
        let suffix = next_suffix(&rec).unwrap();
        assert_eq!(first.creates, Some(format!("gpu-{suffix}")));
        assert_eq!(first.retires.as_deref(), Some("gpu"));
        assert!(
            first.line().contains(&format!("creates `gpu-{suffix}`")),
            "{}",
            first.line()
        );
        // The replacement, replaced again, goes back to the workflow's name.
        rec.name_suffix = Some(suffix.clone());
        let second = planned(&p, &rec, &inputs);
        assert_eq!(second.creates.as_deref(), Some("gpu"));
        assert_eq!(second.retires, Some(format!("gpu-{suffix}")));
    }

    #[test]
    fn only_providers_that_name_a_replacement_create_before_destroy() {
        assert!(wanted(None, &nodegroup()));
        let exec = flow_providers::exec::Exec::new();
        assert!(!wanted(None, &exec));
    }
}
