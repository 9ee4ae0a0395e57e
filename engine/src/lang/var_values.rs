//! A run's variable values: what every expression reads `vars.NAME` from.
//! `vars` works them out; this module only holds them, so that expressions
//! can read them without depending on how they were found.

use std::collections::BTreeMap;

use serde_json::Value;

/// Where a variable's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The declaration's default.
    Default,
    /// An environment variable.
    Env(String),
    /// A `--var-file`.
    File(String),
    /// A `--var` flag.
    Flag,
}

/// A variable's value for this run.
#[derive(Debug, Clone, PartialEq)]
pub struct VarValue {
    /// The value.
    pub value: Value,
    /// Whether it is secret.
    pub sensitive: bool,
    /// Where it came from.
    pub origin: Origin,
}

/// Every variable's value, by name.
pub type VarValues = BTreeMap<String, VarValue>;
