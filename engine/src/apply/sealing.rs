//! Secrets in a step's inputs and outputs during a run: recorded inputs
//! hold seals (`sealed:hmac-sha256:…`) where secrets were, and outputs that carry
//! a secret are kept in state as a sensitive marker, never in clear.

use flow_providers::Values;
use serde_json::Value;

use crate::lang::inputs::Desired;
use crate::secrets::{Redactor, sensitive_marker};

/// `outputs` as kept in state: each value that carries a secret known to
/// `redactor` replaced by its sensitive marker.
pub fn kept_outputs(outputs: &Values, redactor: &Redactor) -> Values {
    outputs
        .iter()
        .map(|(k, v)| {
            let kept = if redactor.touches(v) {
                sensitive_marker(v)
            } else {
                v.clone()
            };
            (k.clone(), kept)
        })
        .collect()
}

/// Recorded inputs with sealed secrets put back where the workflow still
/// gives the same value (same digest), so that update and delete see real
/// values. Without `desired` (a destroy), the recorded inputs as they are.
pub(super) fn unsealed(recorded: &Values, desired: Option<&Desired>) -> Values {
    let Some(desired) = desired else {
        return recorded.clone();
    };
    recorded
        .iter()
        .map(|(k, v)| {
            let real = match (desired.stored.get(k), desired.actual.get(k)) {
                (Some(stored), Some(actual)) => unseal(v, stored, actual),
                _ => v.clone(),
            };
            (k.clone(), real)
        })
        .collect()
}

/// `recorded` with every sealed leaf that equals the same leaf of `stored`
/// (the desired value in its stored form) replaced by the leaf of `actual`.
fn unseal(recorded: &Value, stored: &Value, actual: &Value) -> Value {
    match (recorded, stored, actual) {
        (r, s, a) if flow_providers::is_sealed(r) => {
            if r == s {
                a.clone()
            } else {
                r.clone()
            }
        }
        (Value::Object(r), Value::Object(s), Value::Object(a)) => Value::Object(
            r.iter()
                .map(|(k, v)| {
                    let real = match (s.get(k), a.get(k)) {
                        (Some(sv), Some(av)) => unseal(v, sv, av),
                        _ => v.clone(),
                    };
                    (k.clone(), real)
                })
                .collect(),
        ),
        (r, _, _) => r.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unseal_restores_only_leaves_whose_digest_still_matches() {
        let d1 = flow_providers::seal_hex(&"a".repeat(64));
        let d2 = flow_providers::seal_hex(&"b".repeat(64));
        let recorded = json!({"REGION": "x", "TOKEN": d1, "OLD": d2});
        let stored =
            json!({"REGION": "x", "TOKEN": d1, "OLD": flow_providers::seal_hex(&"c".repeat(64))});
        let actual = json!({"REGION": "x", "TOKEN": "real", "OLD": "new"});
        assert_eq!(
            unseal(&recorded, &stored, &actual),
            json!({"REGION": "x", "TOKEN": "real", "OLD": d2})
        );
        assert_eq!(unseal(&json!(d1), &json!(d1), &json!("v")), json!("v"));
    }

    #[test]
    fn unseal_leaves_plain_digests_alone() {
        // An image digest recorded as a plain input is a value, not a seal.
        let image = format!("sha256:{}", "d".repeat(64));
        assert_eq!(
            unseal(&json!(image), &json!(image), &json!("other")),
            json!(image)
        );
    }
}
