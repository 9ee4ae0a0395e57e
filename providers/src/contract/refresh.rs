//! What refresh finds of an applied step's real object: whether it still
//! exists, and which of the attributes its provider owns differ from what
//! state recorded. The engine turns this into the plan's "changed outside
//! flow" and "deleted outside flow" sections.

use serde_json::Value;

use super::Values;

/// One attribute that differs between the record and the real object.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    /// The attribute: an input's name when [`Drift::input`] is true
    /// (`desired_size`), else the provider's own name for it (`status`,
    /// `template sha256`, `object data/a.txt`).
    pub attribute: String,
    /// What state recorded (or what the recorded inputs imply).
    pub recorded: Value,
    /// What the real object has now.
    pub real: Value,
    /// Whether `attribute` names an input and `real` is in that input's
    /// form: the engine then diffs the workflow against the real value, so
    /// the plan shows `real → workflow` and apply updates it back.
    pub input: bool,
    /// Whether the values are secret; shown as `(sensitive)`, never stored.
    pub sensitive: bool,
}

impl Drift {
    /// An input whose real value differs from the recorded one.
    pub fn of_input(name: &str, recorded: Value, real: Value) -> Self {
        Drift {
            attribute: name.to_string(),
            recorded,
            real,
            input: true,
            sensitive: false,
        }
    }

    /// A provider-owned attribute that is not an input (a status, a digest).
    pub fn of_attribute(name: impl Into<String>, recorded: Value, real: Value) -> Self {
        Drift {
            attribute: name.into(),
            recorded,
            real,
            input: false,
            sensitive: false,
        }
    }

    /// The same drift, with its values hidden wherever it is shown.
    pub fn secret(mut self) -> Self {
        self.sensitive = true;
        self
    }
}

/// What refresh found of a step's real object.
#[derive(Debug, Clone, PartialEq)]
pub enum Refreshed {
    /// The object exists. `drift` lists what differs from the record (empty
    /// when nothing does); `outputs` are its outputs as they are now, when
    /// the provider can tell (`None` keeps the recorded ones).
    Present {
        /// What differs from the record.
        drift: Vec<Drift>,
        /// The outputs as they are now.
        outputs: Option<Values>,
        /// Provider-private data to keep instead of the recorded one (a
        /// drifted object's digest cleared, so the next update re-applies
        /// it); `None` keeps it.
        private: Option<Value>,
    },
    /// The object no longer exists: something outside flow deleted it.
    Gone,
}

impl Refreshed {
    /// The object exists as recorded.
    pub fn unchanged() -> Self {
        Refreshed::Present {
            drift: Vec::new(),
            outputs: None,
            private: None,
        }
    }

    /// The object exists with these differences from the record.
    pub fn drifted(drift: Vec<Drift>) -> Self {
        Refreshed::Present {
            drift,
            outputs: None,
            private: None,
        }
    }
}

/// The drift of input `name` when the real object has `real` where the
/// recorded inputs say otherwise; none when the input was not recorded (the
/// workflow left it to the service's default) or the two agree.
pub fn input_drift(recorded: &Values, name: &str, real: Value) -> Option<Drift> {
    let before = recorded.get(name)?;
    (before != &real).then(|| Drift::of_input(name, before.clone(), real))
}

/// The drift of a provider-owned attribute when the recorded and real
/// values differ.
pub fn attribute_drift(name: &str, recorded: Value, real: Value) -> Option<Drift> {
    (recorded != real).then(|| Drift::of_attribute(name, recorded, real))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_drift_only_when_recorded_and_different() {
        let recorded = json!({"desired_size": 2}).as_object().cloned().unwrap();
        assert_eq!(input_drift(&recorded, "desired_size", json!(2)), None);
        assert_eq!(input_drift(&recorded, "max_size", json!(9)), None);
        let d = input_drift(&recorded, "desired_size", json!(3)).unwrap();
        assert!(d.input && !d.sensitive);
        assert_eq!((d.recorded, d.real), (json!(2), json!(3)));
        assert!(attribute_drift("status", json!("A"), json!("A")).is_none());
        assert!(
            !attribute_drift("status", json!("A"), json!("B"))
                .unwrap()
                .input
        );
    }
}
