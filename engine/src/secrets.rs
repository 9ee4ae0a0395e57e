//! Secrets: digests for state, and redaction of everything printed or logged.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The salted SHA-256 of a value's JSON text, hex.
fn salted_hex(salt: &[u8], value: &Value) -> String {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(value.to_string().as_bytes());
    hex::encode(h.finalize())
}

/// A salted digest of a value, `sha256:<hex>`: what a sensitive output's
/// marker and a saved plan keep instead of the value.
pub fn digest(salt: &[u8], value: &Value) -> String {
    format!("sha256:{}", salted_hex(salt, value))
}

/// A sensitive input as kept in state: `sealed:sha256:<hex>` (the same
/// salted digest as [`digest`], marked so that [`flow_providers::is_sealed`]
/// never mistakes a plain `sha256:` value, such as an image digest, for it).
pub fn seal(salt: &[u8], value: &Value) -> String {
    flow_providers::seal_hex(&salted_hex(salt, value))
}

/// The placeholder kept in state for a sensitive output: an object
/// `{"sensitive": "sha256:<hex>"}`, which no plain output is confused with.
pub fn sensitive_marker(salt: &[u8], value: &Value) -> Value {
    serde_json::json!({ "sensitive": digest(salt, value) })
}

/// Whether a stored value is the placeholder of a sensitive output.
pub fn is_sensitive_marker(value: &Value) -> bool {
    matches!(value, Value::Object(m) if m.len() == 1
        && m.get("sensitive").and_then(Value::as_str).is_some_and(|s| s.starts_with("sha256:")))
}

/// Replaces every known secret in text with `(sensitive)`.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// What redacted text shows in place of a secret.
pub const MASK: &str = "(sensitive)";

impl Redactor {
    /// Remember every string inside `value` as a secret (numbers and booleans
    /// by their text). Strings shorter than three characters are too common to
    /// mask without destroying the output and are not secrets worth the name.
    pub fn add(&mut self, value: &Value) {
        match value {
            Value::String(s) => self.add_text(s),
            Value::Number(n) => self.add_text(&n.to_string()),
            Value::Array(items) => items.iter().for_each(|v| self.add(v)),
            Value::Object(map) => map.values().for_each(|v| self.add(v)),
            Value::Bool(_) | Value::Null => {}
        }
    }

    fn add_text(&mut self, s: &str) {
        if s.chars().count() >= 3 && !self.secrets.iter().any(|x| x == s) {
            self.secrets.push(s.to_string());
            // Longest first, so a secret containing another is masked whole.
            self.secrets.sort_by_key(|x| std::cmp::Reverse(x.len()));
        }
        // A multi-line secret (a private key) is also masked line by line,
        // since logs are read a line at a time.
        if s.contains('\n') {
            for line in s.lines() {
                let line = line.trim();
                if line.len() >= 8 {
                    self.add_text(line);
                }
            }
        }
    }

    /// Whether nothing is secret.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), MASK);
            }
        }
        out
    }

    /// Whether `value` contains a secret anywhere.
    pub fn touches(&self, value: &Value) -> bool {
        match value {
            Value::String(s) => self.secrets.iter().any(|x| s.contains(x.as_str())),
            Value::Number(n) => self.secrets.iter().any(|x| *x == n.to_string()),
            Value::Array(items) => items.iter().any(|v| self.touches(v)),
            Value::Object(map) => map.values().any(|v| self.touches(v)),
            Value::Bool(_) | Value::Null => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digests_are_salted_and_stable() {
        let v = json!("hunter22");
        assert_eq!(digest(b"a", &v), digest(b"a", &v));
        assert_ne!(digest(b"a", &v), digest(b"b", &v));
        assert!(!digest(b"a", &v).contains("hunter22"));
    }

    #[test]
    fn seals_are_recognised_and_plain_digests_are_not() {
        let v = json!("hunter22");
        let sealed = seal(b"a", &v);
        assert_eq!(sealed, format!("sealed:{}", digest(b"a", &v)));
        assert!(flow_providers::is_sealed(&json!(sealed)));
        assert!(!flow_providers::is_sealed(&json!(digest(b"a", &v))));
        assert_ne!(seal(b"a", &v), seal(b"b", &v));
    }

    #[test]
    fn redacts_nested_and_multiline_secrets() {
        let mut r = Redactor::default();
        r.add(&json!({"k": ["hunter22"]}));
        r.add(&json!(
            "-----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY-----"
        ));
        assert_eq!(r.redact("token=hunter22!"), "token=(sensitive)!");
        assert_eq!(r.redact("line AAAABBBBCCCC"), "line (sensitive)");
        assert!(r.touches(&json!({"x": "a hunter22"})));
        assert!(!r.touches(&json!({"x": "nothing"})));
    }

    #[test]
    fn markers_are_recognised() {
        assert!(is_sensitive_marker(&sensitive_marker(b"s", &json!("x"))));
        assert!(!is_sensitive_marker(&json!({"sensitive": "plain"})));
    }
}
