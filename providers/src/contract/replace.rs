//! Create-before-destroy replacements: the replacement is made under a
//! suffixed name while the object it replaces still exists.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Values;

/// Which input names a provider's object, for a replacement made under
/// another name while the old object still exists (see
/// [`super::Provider::replacement_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rename {
    /// The input holding the name (`name`).
    pub input: &'static str,
    /// The longest name the service takes (63 for an EKS node group).
    pub max_len: usize,
}

impl Rename {
    /// `inputs` with the name input as `NAME-SUFFIX`, `NAME` shortened so
    /// the whole fits [`Rename::max_len`] (trailing `-` and `_` dropped);
    /// unchanged when the name is absent or not a string.
    pub fn apply(&self, inputs: &Values, suffix: &str) -> Values {
        let mut out = inputs.clone();
        if let Some(Value::String(name)) = inputs.get(self.input) {
            out.insert(self.input.into(), Value::String(self.name(name, suffix)));
        }
        out
    }

    /// `name` with `suffix`, within [`Rename::max_len`].
    pub fn name(&self, name: &str, suffix: &str) -> String {
        let room = self.max_len.saturating_sub(suffix.len() + 1);
        let mut base: String = name.chars().take(room).collect();
        while base.ends_with(['-', '_']) {
            base.pop();
        }
        format!("{base}-{suffix}")
    }
}

/// The name suffix of the next replacement of an object whose live name
/// carries `current`: none (the workflow's own name again) when it carries
/// one, else four hex digits from `seed` (the replaced object's id), so
/// plan and apply, and a resumed apply, agree, and names alternate between
/// `NAME` and `NAME-xxxx`.
pub fn next_suffix(current: Option<&str>, seed: &str) -> Option<String> {
    if current.is_some() {
        return None;
    }
    let digest = Sha256::digest(seed.as_bytes());
    Some(hex::encode(&digest[..2]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_take_the_suffix_and_fit() {
        let r = Rename {
            input: "name",
            max_len: 63,
        };
        let v = json!({"name": "gpu", "cluster": "c"})
            .as_object()
            .cloned()
            .unwrap();
        assert_eq!(r.apply(&v, "3f9a")["name"], "gpu-3f9a");
        assert_eq!(r.apply(&v, "3f9a")["cluster"], "c");
        let long = format!("{}-x", "a".repeat(58));
        let named = r.name(&long, "3f9a");
        assert_eq!(named.len(), 63);
        assert!(named.ends_with("aaa-3f9a"), "{named}");
        let dash = format!("{}-bbbb", "a".repeat(57));
        assert_eq!(r.name(&dash, "3f9a"), format!("{}-3f9a", "a".repeat(57)));
    }

    #[test]
    fn suffixes_are_stable_and_alternate() {
        let first = next_suffix(None, "arn:ng/gpu/1").unwrap();
        assert_eq!(first.len(), 4);
        assert_eq!(next_suffix(None, "arn:ng/gpu/1").unwrap(), first);
        assert_ne!(next_suffix(None, "arn:ng/gpu/2").unwrap(), first);
        assert_eq!(next_suffix(Some(&first), "arn:ng/gpu-x/3"), None);
    }
}
