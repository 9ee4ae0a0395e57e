//! What every function is given: its call's context, and how values read
//! as text and numbers.

use std::path::Path;

use serde_json::{Map, Value};

/// Renders a template file's text with the given names; the path is for
/// messages.
pub type RenderTemplate<'a> =
    dyn Fn(&Path, &str, &Map<String, Value>) -> Result<String, String> + 'a;

/// What a function needs from where it is called.
pub struct CallContext<'a> {
    /// The folder relative paths (`file`, `templatefile`) resolve against.
    pub dir: &'a flow_providers::Workdir,
    /// Render a template file's text with the given names (`templatefile`);
    /// the path is for messages.
    pub render: &'a RenderTemplate<'a>,
}

/// Whether two values are equal, numbers by value (`2 == 2.0`).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A value as text: strings as they are, numbers and booleans as written.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value as a whole number; `what` names it in the error.
pub fn whole(v: &Value, what: &str) -> Result<i64, String> {
    match v.as_i64() {
        Some(i) => Ok(i),
        None => match v.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => Ok(f as i64),
            _ => Err(format!("{what} must be a whole number, not {v}")),
        },
    }
}
