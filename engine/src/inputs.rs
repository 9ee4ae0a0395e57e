//! A step's desired inputs: interpolated for the provider, and the form kept
//! in state (secrets sealed, `sealed:sha256:<hex>`) that plans compare against.

use flow_providers::{InputType, Registry, Values};
use serde_json::Value;

use crate::diag::Diag;
use crate::lang::ast::{Node, NodeKind, StepDecl};
use crate::lang::load::Loaded;
use crate::lang::resolve::{Lookup, evaluate};
use crate::secrets;

/// The stand-in for an input not known until apply: never equal to a real value.
pub const UNKNOWN: &str = "\u{0}(known after apply)";

/// A step's inputs, resolved as far as possible.
#[derive(Debug, Clone, Default)]
pub struct Desired {
    /// The values to hand the provider (complete only when `unknown` is empty).
    pub actual: Values,
    /// The values as recorded in state: secrets sealed, unknowns as [`UNKNOWN`].
    pub stored: Values,
    /// Inputs not known until earlier steps are applied.
    pub unknown: Vec<String>,
    /// Inputs that are secret.
    pub sensitive: Vec<String>,
}

impl Desired {
    /// Whether every input is known.
    pub fn is_known(&self) -> bool {
        self.unknown.is_empty()
    }
}

/// `value` (the evaluation of `node`) with only the parts that carry a secret
/// replaced by seals: table entries are sealed one by one, so that
/// `env = { REGION = "x", TOKEN = "${vars.token}" }` keeps `REGION` readable.
fn seal(node: &Node, value: &Value, loaded: &Loaded, salt: &[u8]) -> Value {
    match (&node.kind, value) {
        (NodeKind::Table(entries), Value::Object(map)) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let entry = entries.iter().find(|e| &e.key == k);
                    let secret = entry.is_none_or(|e| {
                        evaluate(&e.value, &loaded.vars, &|_, _| Lookup::Unknown)
                            .map_or(true, |ev| ev.sensitive)
                    });
                    let kept = match (secret, entry) {
                        (false, _) => v.clone(),
                        (true, Some(e)) => seal(&e.value, v, loaded, salt),
                        (true, None) => Value::String(secrets::seal(salt, v)),
                    };
                    (k.clone(), kept)
                })
                .collect(),
        ),
        _ => Value::String(secrets::seal(salt, value)),
    }
}

/// `value` with numbers and booleans turned into text where `ty` wants a
/// string: `"${vars.epochs}"` in an `env` table is the text `20`, as written.
pub fn coerce(value: Value, ty: &InputType) -> Value {
    match (value, ty) {
        (Value::Number(n), InputType::String | InputType::Duration | InputType::LocalFile) => {
            Value::String(n.to_string())
        }
        (Value::Bool(b), InputType::String) => Value::String(b.to_string()),
        (Value::Array(items), InputType::List(inner)) => {
            Value::Array(items.into_iter().map(|v| coerce(v, inner)).collect())
        }
        (Value::Object(map), InputType::Map(inner)) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, coerce(v, inner)))
                .collect(),
        ),
        (v, _) => v,
    }
}

/// A stored value for display: sealed secrets shown as `(sensitive)`.
pub fn mask_sealed(value: &Value) -> Value {
    match value {
        v if flow_providers::is_sealed(v) => Value::String(crate::secrets::MASK.into()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), mask_sealed(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(mask_sealed).collect()),
        other => other.clone(),
    }
}

/// Resolve `step`'s inputs with `outputs` giving earlier steps' outputs.
pub fn desired_inputs(
    loaded: &Loaded,
    step: &StepDecl,
    registry: &Registry,
    salt: &[u8],
    outputs: &dyn Fn(&str, &str) -> Lookup,
) -> Result<Desired, Vec<Diag>> {
    let provider = registry.get(&step.provider);
    let schema = provider.as_ref().map(|p| p.schema());
    let mut desired = Desired::default();
    let mut errors = Vec::new();
    for input in &step.inputs {
        match evaluate(&input.value, &loaded.vars, outputs) {
            Err(e) => errors.push(
                Diag::new("flow::bad-reference", e.message)
                    .in_source(&loaded.workflow.source)
                    .label(e.span, "here"),
            ),
            Ok(ev) => {
                let secret = ev.sensitive
                    || schema
                        .as_ref()
                        .and_then(|s| s.input(&input.key))
                        .is_some_and(|s| s.sensitive);
                if secret {
                    desired.sensitive.push(input.key.clone());
                }
                let spec_ty = schema
                    .as_ref()
                    .and_then(|s| s.input(&input.key))
                    .map(|s| s.ty.clone());
                let value = match (ev.value, spec_ty) {
                    (Some(v), Some(ty)) => Some(coerce(v, &ty)),
                    (v, _) => v,
                };
                match value {
                    None => {
                        desired.unknown.push(input.key.clone());
                        desired
                            .stored
                            .insert(input.key.clone(), Value::String(UNKNOWN.into()));
                    }
                    Some(v) => {
                        let whole = !ev.sensitive
                            || schema
                                .as_ref()
                                .and_then(|s| s.input(&input.key))
                                .is_some_and(|s| s.sensitive);
                        let kept = match (secret, whole) {
                            (false, _) => v.clone(),
                            (true, true) => Value::String(secrets::seal(salt, &v)),
                            (true, false) => seal(&input.value, &v, loaded, salt),
                        };
                        desired.stored.insert(input.key.clone(), kept);
                        desired.actual.insert(input.key.clone(), v);
                    }
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if desired.is_known()
        && let Some(provider) = &provider
    {
        let ctx = flow_providers::ValidateContext {
            workdir: loaded.workflow.dir.clone(),
        };
        if let Some(d) = provider.content_digest(&desired.actual, &ctx) {
            desired
                .stored
                .insert(flow_providers::CONTENT_KEY.to_string(), Value::String(d));
        }
    }
    Ok(desired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_seals_are_masked_for_display() {
        let image = format!("sha256:{}", "ab".repeat(32));
        let sealed = crate::secrets::seal(b"salt", &json!("hunter22"));
        assert_eq!(
            mask_sealed(&json!({"IMAGE": image, "TOKEN": sealed, "(content)": image})),
            json!({"IMAGE": image, "TOKEN": "(sensitive)", "(content)": image})
        );
    }

    #[test]
    fn scalars_become_text_where_strings_are_wanted() {
        let env = InputType::Map(Box::new(InputType::String));
        assert_eq!(
            coerce(json!({"EPOCHS": 20, "DEBUG": true, "NAME": "x"}), &env),
            json!({"EPOCHS": "20", "DEBUG": "true", "NAME": "x"})
        );
        assert_eq!(coerce(json!(3), &InputType::Integer), json!(3));
        assert_eq!(
            coerce(json!([1, 2]), &InputType::List(Box::new(InputType::String))),
            json!(["1", "2"])
        );
    }
}
