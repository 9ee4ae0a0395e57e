//! What a provider kind declares about its inputs: their types and specs,
//! the schema, and the problems offline validation reports.

use serde_json::Value;

/// Whether a provider kind creates a long-lived object or runs to completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// Exists until destroyed (a stack, a file system, a cluster).
    Resource,
    /// Runs to a success condition and re-runs when its inputs change (a test, a job).
    Task,
}

/// The type an input accepts, checked offline before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputType {
    /// A string.
    String,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Bool,
    /// A list whose items all have the inner type.
    List(Box<InputType>),
    /// A table whose values all have the inner type.
    Map(Box<InputType>),
    /// Any value at all.
    Any,
    /// A path to a local file, relative to the workflow file's folder; it must exist.
    LocalFile,
    /// A duration such as `"45m"` or `"1h 30m"`.
    Duration,
}

impl InputType {
    /// A short human name of the type, for diagnostics.
    pub fn describe(&self) -> String {
        match self {
            InputType::String => "a string".into(),
            InputType::Integer => "an integer".into(),
            InputType::Number => "a number".into(),
            InputType::Bool => "a boolean".into(),
            InputType::List(inner) => format!("a list of {}", inner.plural()),
            InputType::Map(inner) => format!("a table of {}", inner.plural()),
            InputType::Any => "any value".into(),
            InputType::LocalFile => "a path to a local file (a string)".into(),
            InputType::Duration => "a duration such as \"45m\" (a string)".into(),
        }
    }

    fn plural(&self) -> String {
        match self {
            InputType::String | InputType::LocalFile | InputType::Duration => "strings".into(),
            InputType::Integer => "integers".into(),
            InputType::Number => "numbers".into(),
            InputType::Bool => "booleans".into(),
            InputType::Any => "values".into(),
            other => format!("({})", other.describe()),
        }
    }

    /// `value` with numbers and booleans turned into text where this type
    /// wants a string: `"${vars.epochs}"` in an `env` table is the text `20`,
    /// as written. Anything else is returned as it is.
    pub fn coerce(&self, value: Value) -> Value {
        match (value, self) {
            (Value::Number(n), InputType::String | InputType::Duration | InputType::LocalFile) => {
                Value::String(n.to_string())
            }
            (Value::Bool(b), InputType::String) => Value::String(b.to_string()),
            (Value::Array(items), InputType::List(inner)) => {
                Value::Array(items.into_iter().map(|v| inner.coerce(v)).collect())
            }
            (Value::Object(map), InputType::Map(inner)) => {
                Value::Object(map.into_iter().map(|(k, v)| (k, inner.coerce(v))).collect())
            }
            (v, _) => v,
        }
    }

    /// Whether `value` has this type. `LocalFile` and `Duration` only check the
    /// JSON type here; the engine checks existence and syntax with spans.
    pub fn accepts(&self, value: &Value) -> bool {
        match (self, value) {
            (InputType::Any, _) => true,
            (InputType::String | InputType::LocalFile | InputType::Duration, Value::String(_)) => {
                true
            }
            (InputType::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (InputType::Number, Value::Number(_)) => true,
            (InputType::Bool, Value::Bool(_)) => true,
            (InputType::List(inner), Value::Array(items)) => items.iter().all(|v| inner.accepts(v)),
            (InputType::Map(inner), Value::Object(map)) => map.values().all(|v| inner.accepts(v)),
            _ => false,
        }
    }
}

/// One input a provider kind accepts.
#[derive(Debug, Clone)]
pub struct InputSpec {
    /// The input's name under `[steps.NAME.inputs]`.
    pub name: &'static str,
    /// Its type.
    pub ty: InputType,
    /// Whether the step must set it.
    pub required: bool,
    /// Whether the value is secret whatever it references (never printed or stored in clear).
    pub sensitive: bool,
    /// Whether changing it replaces the object instead of updating it in place.
    pub force_new: bool,
    /// Whether the value is YAML text (an inline manifest): what `${…}`
    /// interpolates into it enters as YAML scalars, never as structure.
    pub yaml: bool,
    /// One line for the reference docs and diagnostics.
    pub description: &'static str,
}

impl InputSpec {
    /// An optional input of the given type that updates in place.
    pub const fn optional(name: &'static str, ty: InputType, description: &'static str) -> Self {
        InputSpec {
            name,
            ty,
            required: false,
            sensitive: false,
            force_new: false,
            yaml: false,
            description,
        }
    }

    /// A required input of the given type that updates in place.
    pub const fn required(name: &'static str, ty: InputType, description: &'static str) -> Self {
        InputSpec {
            name,
            ty,
            required: true,
            sensitive: false,
            force_new: false,
            yaml: false,
            description,
        }
    }

    /// The same input, marked as replacing the object when it changes.
    pub fn forces_new(mut self) -> Self {
        self.force_new = true;
        self
    }

    /// The same input, marked as YAML text (see [`InputSpec::yaml`]).
    pub fn yaml_text(mut self) -> Self {
        self.yaml = true;
        self
    }

    /// The same input, marked as secret.
    pub fn secret(mut self) -> Self {
        self.sensitive = true;
        self
    }
}

/// What a provider kind declares about itself.
#[derive(Debug, Clone)]
pub struct Schema {
    /// Resource or task.
    pub kind: StepKind,
    /// One line describing the kind.
    pub description: &'static str,
    /// The inputs it accepts.
    pub inputs: Vec<InputSpec>,
    /// Whether inputs not listed are accepted too (the `null` provider's echo).
    pub open_inputs: bool,
}

impl Schema {
    /// The spec of the input called `name`, if declared.
    pub fn input(&self, name: &str) -> Option<&InputSpec> {
        self.inputs.iter().find(|i| i.name == name)
    }
}

/// An input as known at validation or plan time.
#[derive(Debug, Clone, PartialEq)]
pub enum InputValue {
    /// Fully known.
    Known(Value),
    /// Depends on an output not known until apply.
    Unknown,
}

/// A problem a provider found in a step's inputs, offline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The input it concerns, as a path (`["parameters", "VpcCidr"]`); empty for the step itself.
    pub path: Vec<String>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// Whether the last element of `path` is itself the problem (a bad table
    /// key), rather than its value.
    pub on_key: bool,
}

impl Problem {
    /// A problem with the named top-level input.
    pub fn at(input: &str, message: impl Into<String>) -> Self {
        Problem {
            path: vec![input.to_string()],
            message: message.into(),
            help: None,
            on_key: false,
        }
    }

    /// The problem at `path` (an input, then keys or list indexes inside it).
    pub fn at_path(path: &[&str], message: impl Into<String>) -> Self {
        Problem {
            path: path.iter().map(|p| p.to_string()).collect(),
            message: message.into(),
            help: None,
            on_key: false,
        }
    }

    /// The same problem, pointing at the key that ends its path rather than the value.
    pub fn on_key(mut self) -> Self {
        self.on_key = true;
        self
    }

    /// The same problem with a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// The outputs a step will have, as its inputs tell before apply (a
/// CloudFormation template's `Outputs`, plus what the provider adds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeclaredOutputs {
    /// Every key the step may output.
    pub keys: Vec<String>,
    /// Those of `keys` that may be absent after apply (an output under a
    /// CloudFormation `Condition`).
    pub conditional: Vec<String>,
    /// Where they are declared, for messages (`its template vpc.yaml`).
    pub source: String,
}

impl DeclaredOutputs {
    /// The outputs of a kind that always gives the same keys, every one.
    pub fn fixed(kind: &str, keys: &[&str]) -> DeclaredOutputs {
        DeclaredOutputs {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            conditional: Vec::new(),
            source: format!("as every {kind} step does"),
        }
    }

    /// The same outputs and `keys`, which a step gives only for some
    /// inputs or some answers of the service (a VPC it made, an OIDC
    /// provider): references to them pass, though the step may lack them.
    pub fn with_conditional(mut self, keys: &[&str]) -> DeclaredOutputs {
        for k in keys {
            if !self.keys.iter().any(|have| have == k) {
                self.keys.push(k.to_string());
            }
            if !self.conditional.iter().any(|have| have == k) {
                self.conditional.push(k.to_string());
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scalars_become_text_where_strings_are_wanted() {
        let env = InputType::Map(Box::new(InputType::String));
        assert_eq!(
            env.coerce(json!({"EPOCHS": 20, "DEBUG": true, "NAME": "x"})),
            json!({"EPOCHS": "20", "DEBUG": "true", "NAME": "x"})
        );
        assert_eq!(InputType::Integer.coerce(json!(3)), json!(3));
        assert_eq!(
            InputType::List(Box::new(InputType::String)).coerce(json!([1, 2])),
            json!(["1", "2"])
        );
    }

    #[test]
    fn types_accept_matching_values() {
        let list = InputType::List(Box::new(InputType::String));
        assert!(list.accepts(&json!(["a", "b"])));
        assert!(!list.accepts(&json!(["a", 1])));
        assert!(InputType::Integer.accepts(&json!(3)));
        assert!(!InputType::Integer.accepts(&json!(3.5)));
        assert!(InputType::Number.accepts(&json!(3.5)));
        assert_eq!(list.describe(), "a list of strings");
    }
}
