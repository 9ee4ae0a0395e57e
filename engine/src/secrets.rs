//! Secrets: fingerprints for state, and redaction of everything printed or
//! logged.
//!
//! Fingerprints are HMAC-SHA-256 under the user's key
//! ([`flow_providers::fingerprint`]), kept outside state. States written
//! before that hold seals salted with a salt kept in the state itself
//! (`sealed:sha256:…`): [`seal`] also works out that old form for the same
//! value when the state has such a salt, so [`upgrade_legacy_seals`] can
//! tell an unchanged secret from a changed one until the step is applied
//! again and its record holds only keyed seals.

use std::collections::HashMap;
use std::sync::Mutex;

use flow_providers::Values;
use flow_providers::fingerprint;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The salted SHA-256 of a value's JSON text, hex: the legacy seal's body.
fn salted_hex(salt: &[u8], value: &Value) -> String {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(value.to_string().as_bytes());
    hex::encode(h.finalize())
}

/// The keyed fingerprint of a value's JSON text,
/// `hmac-sha256:<key id>:<hex>`: what a sensitive output's marker and a
/// saved plan keep instead of the value.
pub fn digest(value: &Value) -> String {
    fingerprint::current().fingerprint(value.to_string().as_bytes())
}

/// Legacy seal → keyed seal, for every value sealed in this process whose
/// state has a legacy salt.
static LEGACY: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// A sensitive input as kept in state:
/// `sealed:hmac-sha256:<key id>:<hex>` (marked so that
/// [`flow_providers::is_sealed`] never mistakes a plain `sha256:` value,
/// such as an image digest, for it). `legacy_salt` is the salt of a state
/// written before fingerprints were keyed (all zeros for none): the old seal
/// of the same value is remembered for [`upgrade_legacy_seals`].
pub fn seal(legacy_salt: &[u8], value: &Value) -> String {
    let sealed = fingerprint::current().seal(value.to_string().as_bytes());
    if legacy_salt.iter().any(|&b| b != 0) {
        let old = flow_providers::seal_hex(&salted_hex(legacy_salt, value));
        LEGACY
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(old, sealed.clone());
    }
    sealed
}

/// Recorded inputs with each legacy seal of a value sealed in this process
/// replaced by that value's keyed seal, so that comparing them with
/// desired inputs sees an unchanged secret as unchanged. A legacy seal of
/// another value stays, and compares as changed.
pub fn upgrade_legacy_seals(recorded: &Values) -> Values {
    let known = LEGACY.lock().unwrap_or_else(|e| e.into_inner());
    let Some(known) = known.as_ref() else {
        return recorded.clone();
    };
    fn walk(v: &Value, known: &HashMap<String, String>) -> Value {
        match v {
            Value::String(s) => match known.get(s) {
                Some(new) => Value::String(new.clone()),
                None => v.clone(),
            },
            Value::Array(items) => Value::Array(items.iter().map(|i| walk(i, known)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), walk(v, known)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    recorded
        .iter()
        .map(|(k, v)| (k.clone(), walk(v, known)))
        .collect()
}

/// The placeholder kept in state for a sensitive output: an object
/// `{"sensitive": "hmac-sha256:<key id>:<hex>"}`, which no plain output is
/// confused with.
pub fn sensitive_marker(value: &Value) -> Value {
    serde_json::json!({ "sensitive": digest(value) })
}

/// Whether a stored value is the placeholder of a sensitive output (keyed,
/// or salted by an older flow).
pub fn is_sensitive_marker(value: &Value) -> bool {
    matches!(value, Value::Object(m) if m.len() == 1
    && m.get("sensitive").and_then(Value::as_str).is_some_and(|s| {
        s.starts_with("sha256:") || fingerprint::key_id_of(s).is_some()
    }))
}

/// Replaces every known secret in text with `(sensitive)`: sensitive
/// variables, text the language's functions make from them (added by the
/// steps of an apply as they resolve their inputs), inputs a provider's
/// schema marks secret, and values providers mark themselves
/// ([`flow_providers::sensitive`]: a key they generate), each with its
/// encoded forms.
#[derive(Debug, Default)]
pub struct Redactor {
    secrets: std::sync::RwLock<Vec<String>>,
    /// How many of [`flow_providers::sensitive`]'s values are taken.
    provider_seen: std::sync::atomic::AtomicUsize,
}

impl Clone for Redactor {
    fn clone(&self) -> Self {
        Redactor {
            secrets: std::sync::RwLock::new(self.read().clone()),
            provider_seen: std::sync::atomic::AtomicUsize::new(
                self.provider_seen.load(std::sync::atomic::Ordering::SeqCst),
            ),
        }
    }
}

/// What redacted text shows in place of a secret.
pub const MASK: &str = "(sensitive)";

impl Redactor {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<String>> {
        self.take_provider_marks();
        self.secrets.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds the values providers marked since the last look.
    fn take_provider_marks(&self) {
        use std::sync::atomic::Ordering;
        let seen = self.provider_seen.load(Ordering::SeqCst);
        if flow_providers::sensitive::count() == seen {
            return;
        }
        let (new, now) = flow_providers::sensitive::marked_since(seen);
        if now != seen
            && self
                .provider_seen
                .compare_exchange(seen, now, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            new.iter().for_each(|v| self.add_text(v));
        }
    }

    /// Remember every string inside `value` as a secret (numbers and booleans
    /// by their text), with its encoded forms. Strings shorter than three
    /// characters are too common to mask without destroying the output and
    /// are not secrets worth the name.
    pub fn add(&self, value: &Value) {
        self.add_value(value);
    }

    fn add_value(&self, value: &Value) {
        match value {
            Value::String(s) => self.add_text(s),
            Value::Number(n) => self.add_text(&n.to_string()),
            Value::Array(items) => items.iter().for_each(|v| self.add_value(v)),
            Value::Object(map) => map.values().for_each(|v| self.add_value(v)),
            Value::Bool(_) | Value::Null => {}
        }
    }

    fn add_text(&self, s: &str) {
        self.add_form(s);
        for form in encoded_forms(s) {
            self.add_form(&form);
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

    fn add_form(&self, s: &str) {
        let known = self
            .secrets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|x| x == s);
        if s.chars().count() < 3 || known {
            return;
        }
        let mut secrets = self.secrets.write().unwrap_or_else(|e| e.into_inner());
        if !secrets.iter().any(|x| x == s) {
            secrets.push(s.to_string());
            // Longest first, so a secret containing another is masked whole.
            secrets.sort_by_key(|x| std::cmp::Reverse(x.len()));
        }
    }

    /// Whether nothing is secret.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// `text` with every secret masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in self.read().iter() {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), MASK);
            }
        }
        out
    }

    /// Whether `value` contains a secret anywhere.
    pub fn touches(&self, value: &Value) -> bool {
        match value {
            Value::String(s) => self.read().iter().any(|x| s.contains(x.as_str())),
            Value::Number(n) => self.read().iter().any(|x| *x == n.to_string()),
            Value::Array(items) => items.iter().any(|v| self.touches(v)),
            Value::Object(map) => map.values().any(|v| self.touches(v)),
            Value::Bool(_) | Value::Null => false,
        }
    }
}

/// Shortest encoded fragment worth masking: shorter ones match too much.
const MIN_ENCODED: usize = 8;

/// Bytes a URL leaves as they are (RFC 3986's unreserved characters).
const URL_KEEPS: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The forms a secret takes once encoded by a function, a file format or a
/// shell, so that `base64encode(vars.token)`, a token inside
/// `jsonencode(…)`, in a URL's query or quoted in a script line is masked
/// too: its JSON-escaped text, its URL-encoded text (`%20` and `+` for a
/// space), its text inside single quotes (a quote in it written `'\''` or,
/// as Python's `shlex.quote` does, `'"'"'`) and double quotes, and
/// backslash-escaped as bash's `printf %q` does, and its base64 at each of the three byte alignments
/// it can have inside longer encoded text (the characters that depend on
/// the neighbouring bytes left out).
fn encoded_forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let json = Value::String(secret.to_string()).to_string();
    let url = percent_encoding::utf8_percent_encode(secret, URL_KEEPS).to_string();
    let shell_escaped: String = secret
        .chars()
        .flat_map(|c| {
            let special = !(c.is_alphanumeric() || "-._/:@%+=".contains(c));
            special.then_some('\\').into_iter().chain([c])
        })
        .collect();
    for form in [
        json[1..json.len() - 1].to_string(),
        url.replace("%20", "+"),
        url,
        secret.replace('\'', r"'\''"),
        secret.replace('\'', r#"'"'"'"#),
        secret
            .replace('\\', r"\\")
            .replace('"', r#"\""#)
            .replace('$', r"\$")
            .replace('`', r"\`"),
        shell_escaped,
    ] {
        if form != secret && !out.contains(&form) {
            out.push(form);
        }
    }
    if secret.len() < 6 {
        return out;
    }
    for shift in 0..3usize {
        let mut bytes = vec![0u8; shift];
        bytes.extend_from_slice(secret.as_bytes());
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&bytes);
        // The first characters also carry the zero bytes put in front; the
        // last one, unless the bytes end on a 3-byte group, the bytes after.
        let skip = (shift * 4).div_ceil(3);
        let keep_last = bytes.len() % 3 == 0;
        let end = if keep_last {
            encoded.len()
        } else {
            encoded.len() - 1
        };
        if end > skip && end - skip >= MIN_ENCODED {
            out.push(encoded[skip..end].to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digests_are_keyed_and_stable() {
        let v = json!("hunter22");
        assert_eq!(digest(&v), digest(&v));
        assert_ne!(digest(&v), digest(&json!("hunter23")));
        assert!(!digest(&v).contains("hunter22"));
        let plain = hex::encode(Sha256::digest(v.to_string().as_bytes()));
        assert!(!digest(&v).contains(&plain), "not an unkeyed SHA-256");
        assert!(is_sensitive_marker(&sensitive_marker(&v)));
    }

    #[test]
    fn seals_are_recognised_and_plain_digests_are_not() {
        let v = json!("hunter22");
        let sealed = seal(&[0; 32], &v);
        assert_eq!(sealed, format!("sealed:{}", digest(&v)));
        assert!(flow_providers::is_sealed(&json!(sealed)));
        assert!(!flow_providers::is_sealed(&json!(digest(&v))));
        assert!(!flow_providers::is_sealed(&json!(format!(
            "sha256:{}",
            "ab".repeat(32)
        ))));
    }

    #[test]
    fn legacy_seals_of_an_unchanged_value_are_upgraded_and_others_are_not() {
        let salt = [7u8; 32];
        let same = json!("legacy-secret-same");
        let recorded: Values = [
            (
                "TOKEN".to_string(),
                json!(flow_providers::seal_hex(&salted_hex(&salt, &same))),
            ),
            (
                "OTHER".to_string(),
                json!(flow_providers::seal_hex(&salted_hex(
                    &salt,
                    &json!("legacy-secret-was")
                ))),
            ),
        ]
        .into_iter()
        .collect();
        let now = seal(&salt, &same);
        seal(&salt, &json!("legacy-secret-changed"));
        let upgraded = upgrade_legacy_seals(&recorded);
        assert_eq!(upgraded["TOKEN"], json!(now));
        assert_eq!(upgraded["OTHER"], recorded["OTHER"]);
    }

    #[test]
    fn redacts_nested_and_multiline_secrets() {
        let r = Redactor::default();
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
    fn encoded_secrets_are_masked_at_every_alignment() {
        use base64::Engine as _;
        let token = "hf_AbCdEfGhIjKlMnOp";
        let r = Redactor::default();
        r.add(&json!(token));
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for prefix in ["", "a", "ab", "abc", "token=", "HF_TOKEN: "] {
            let encoded = b64(&format!("{prefix}{token} and more"));
            let masked = r.redact(&encoded);
            assert!(masked.contains(MASK), "{prefix:?}: {encoded} -> {masked}");
        }
        assert_eq!(r.redact(&b64(token)).matches(MASK).count(), 1);
        let r = Redactor::default();
        r.add(&json!("line1\"quoted\"\nline2"));
        let in_json = json!({"t": "line1\"quoted\"\nline2"}).to_string();
        assert!(r.redact(&in_json).contains(MASK), "{in_json}");
        assert!(!r.redact("nothing secret here").contains(MASK));
    }

    #[test]
    fn url_encoded_and_shell_quoted_secrets_are_masked() {
        let secret = "p@ss w'rd$&\"x";
        let r = Redactor::default();
        r.add(&json!(secret));
        for shown in [
            "https://h/?token=p%40ss%20w%27rd%24%26%22x&b=1",
            "https://h/?token=p%40ss+w%27rd%24%26%22x&b=1",
            r#"echo 'p@ss w'\''rd$&"x'"#,
            r#"echo "p@ss w'rd\$&\"x""#,
            r#"echo p@ss\ w\'rd\$\&\"x"#,
        ] {
            let masked = r.redact(shown);
            assert!(masked.contains(MASK), "{shown} -> {masked}");
            assert!(!masked.contains("rd"), "{shown} -> {masked}");
        }
    }

    #[test]
    fn values_providers_mark_are_masked_in_every_redactor() {
        let r = Redactor::default();
        let copy = r.clone();
        flow_providers::sensitive::mark("generated-private-key-body");
        assert_eq!(r.redact("k=generated-private-key-body"), "k=(sensitive)");
        assert_eq!(copy.redact("k=generated-private-key-body"), "k=(sensitive)");
        assert!(r.touches(&json!({"o": "generated-private-key-body"})));
    }

    #[test]
    fn markers_are_recognised() {
        assert!(is_sensitive_marker(&sensitive_marker(&json!("x"))));
        assert!(!is_sensitive_marker(&json!({"sensitive": "plain"})));
    }
}
