//! The one input resolver: a step's inputs interpolated for the provider,
//! and the form kept in state (secrets sealed, `sealed:sha256:<hex>`) that
//! plans compare against. `validate` (with every output unknown), `plan`
//! (with recorded outputs) and `apply` (with this run's outputs) all call
//! [`resolve_inputs`]; "known after apply" is a value here
//! ([`InputValue::Unknown`]), not a case each caller handles.

use flow_providers::{InputValue, Provider, Values};
use serde_json::Value;

use super::ast::{Node, NodeKind, StepDecl, Workflow};
use super::resolve::{Context, Lookup};
use super::vars::VarValues;
use crate::diag::Diag;
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
    /// Text that functions made from secrets (`upper(vars.token)`): mask it
    /// like the secrets themselves.
    pub derived_secrets: Vec<String>,
}

impl Desired {
    /// Whether every input is known.
    pub fn is_known(&self) -> bool {
        self.unknown.is_empty()
    }

    /// Every input of `step` as known or known after apply, in the order
    /// written, for the provider's offline checks.
    pub fn into_input_values(mut self, step: &StepDecl) -> Vec<(String, InputValue)> {
        step.inputs
            .iter()
            .filter_map(|i| {
                if self.unknown.contains(&i.key) {
                    Some((i.key.clone(), InputValue::Unknown))
                } else {
                    let v = self.actual.remove(&i.key)?;
                    Some((i.key.clone(), InputValue::Known(v)))
                }
            })
            .collect()
    }

    /// Keep the digest of the local files these inputs name among the
    /// recorded inputs (under [`flow_providers::CONTENT_KEY`]), so that a file
    /// edited in place plans as a change. Only once every input is known;
    /// plan and apply ask for it, validate does not read the files.
    pub fn add_content_digest(
        &mut self,
        provider: &dyn Provider,
        workdir: &flow_providers::Workdir,
    ) {
        if !self.is_known() {
            return;
        }
        let ctx = flow_providers::ValidateContext {
            workdir: workdir.clone(),
        };
        if let Some(d) = provider.content_digest(&self.actual, &ctx) {
            self.stored
                .insert(flow_providers::CONTENT_KEY.to_string(), Value::String(d));
        }
    }
}

/// `value` (the evaluation of `node`) with only the parts that carry a secret
/// replaced by seals: table entries are sealed one by one, so that
/// `env = { REGION = "x", TOKEN = "${vars.token}" }` keeps `REGION` readable.
fn seal(
    node: &Node,
    value: &Value,
    is_secret: &dyn Fn(&Node) -> bool,
    legacy_salt: &[u8],
) -> Value {
    match (&node.kind, value) {
        (NodeKind::Table(entries), Value::Object(map)) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let entry = entries.iter().find(|e| &e.key == k);
                    let secret = entry.is_none_or(|e| is_secret(&e.value));
                    let kept = match (secret, entry) {
                        (false, _) => v.clone(),
                        (true, Some(e)) => seal(&e.value, v, is_secret, legacy_salt),
                        (true, None) => Value::String(secrets::seal(legacy_salt, v)),
                    };
                    (k.clone(), kept)
                })
                .collect(),
        ),
        _ => Value::String(secrets::seal(legacy_salt, value)),
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

/// Resolve `step` of `wf` (run by `provider`) with the variables `vars` and
/// `outputs` giving earlier steps' outputs: every value interpolated and
/// coerced to its input's type, secrets sealed with `legacy_salt` in the stored
/// form, and each input that waits for an output listed as unknown. Every
/// reference problem comes back, each with its span.
pub fn resolve_inputs(
    wf: &Workflow,
    vars: &VarValues,
    step: &StepDecl,
    provider: &dyn Provider,
    legacy_salt: &[u8],
    outputs: &dyn Fn(&str, &str) -> Lookup,
) -> Result<Desired, Vec<Diag>> {
    let (desired, errors) = resolve_each(wf, vars, step, provider, legacy_salt, outputs);
    if errors.is_empty() {
        Ok(desired)
    } else {
        Err(errors)
    }
}

/// [`resolve_inputs`], going on past inputs that cannot be resolved: those
/// are listed as unknown and their problems returned beside, so that
/// validation can still run the provider's checks on the rest.
pub fn resolve_each(
    wf: &Workflow,
    vars: &VarValues,
    step: &StepDecl,
    provider: &dyn Provider,
    legacy_salt: &[u8],
    outputs: &dyn Fn(&str, &str) -> Lookup,
) -> (Desired, Vec<Diag>) {
    let schema = provider.schema();
    let mut desired = Desired::default();
    let mut errors = Vec::new();
    let cx = Context { wf, vars, outputs };
    // Whether a part of a value carries a secret, whatever the outputs.
    let no_outputs = |_: &str, _: &str| Lookup::Unknown;
    let offline = Context {
        outputs: &no_outputs,
        ..cx
    };
    // An output made from a secret in this apply is one too.
    let is_secret = |node: &Node| {
        offline.evaluate(step, node).map_or(true, |ev| ev.sensitive)
            || cx.evaluate(step, node).is_ok_and(|ev| ev.sensitive)
    };
    for input in &step.inputs {
        let yaml = schema.input(&input.key).is_some_and(|s| s.yaml);
        // An input that is YAML text takes each `${…}` as a YAML scalar.
        let evaluated = if yaml {
            let source = wf.source_of(step);
            cx.with_step_scope(step, |scope| {
                super::yaml_text::evaluate(&input.value, scope, source)
            })
        } else {
            cx.evaluate(step, &input.value)
        };
        match evaluated {
            Err(e) => {
                errors.push(e.to_diag(wf.source_of(step)));
                desired.unknown.push(input.key.clone());
            }
            Ok(ev) => {
                desired.derived_secrets.extend(ev.derived.iter().cloned());
                let spec = schema.input(&input.key);
                let secret_input = spec.is_some_and(|s| s.sensitive);
                let secret = ev.sensitive || secret_input;
                if secret {
                    desired.sensitive.push(input.key.clone());
                }
                let value = match (ev.value, spec) {
                    (Some(v), Some(spec)) => Some(spec.ty.coerce(v)),
                    (v, _) => v,
                };
                match value {
                    // `null` is as if the input were not written:
                    // `kubeconfig = "${vars.create ? null : vars.kubeconfig}"`.
                    Some(Value::Null) => {}
                    None => {
                        desired.unknown.push(input.key.clone());
                        desired
                            .stored
                            .insert(input.key.clone(), Value::String(UNKNOWN.into()));
                    }
                    Some(v) => {
                        // An input the provider calls secret is masked
                        // wherever it shows, even when written in clear.
                        if secret_input {
                            crate::lang::expr::ops::strings_in(&v, &mut desired.derived_secrets);
                        }
                        let whole = !ev.sensitive || secret_input;
                        let kept = match (secret, whole) {
                            (false, _) => v.clone(),
                            (true, true) => Value::String(secrets::seal(legacy_salt, &v)),
                            (true, false) => seal(&input.value, &v, &is_secret, legacy_salt),
                        };
                        desired.stored.insert(input.key.clone(), kept);
                        desired.actual.insert(input.key.clone(), v);
                    }
                }
            }
        }
    }
    (desired, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_seals_are_masked_for_display() {
        let image = format!("sha256:{}", "ab".repeat(32));
        let sealed = crate::secrets::seal(b"legacy_salt", &json!("hunter22"));
        assert_eq!(
            mask_sealed(&json!({"IMAGE": image, "TOKEN": sealed, "(content)": image})),
            json!({"IMAGE": image, "TOKEN": "(sensitive)", "(content)": image})
        );
    }
}
