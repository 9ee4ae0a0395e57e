//! Reading typed inputs from the JSON the engine passes. The engine checks
//! types against the schema first, so these errors are a safety net.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::contract::{ProviderError, Values};

/// The string input `name`, if set.
pub(crate) fn opt_str(inputs: &Values, name: &str) -> Result<Option<String>, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ProviderError::bad_input(format!(
            "`{name}` must be a string, not {other}"
        ))),
    }
}

/// The string input `name`, which must be set.
pub(crate) fn req_str(inputs: &Values, name: &str) -> Result<String, ProviderError> {
    opt_str(inputs, name)?.ok_or_else(|| ProviderError::bad_input(format!("`{name}` is required")))
}

/// The whole-number input `name`, if set.
pub(crate) fn opt_int(inputs: &Values, name: &str) -> Result<Option<i64>, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            ProviderError::bad_input(format!("`{name}` must be a whole number, not {v}"))
        }),
    }
}

/// The boolean input `name`, `default` when unset.
pub(crate) fn bool_or(inputs: &Values, name: &str, default: bool) -> Result<bool, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ProviderError::bad_input(format!(
            "`{name}` must be true or false, not {other}"
        ))),
    }
}

/// The list-of-strings input `name`, empty when unset.
pub(crate) fn str_list(inputs: &Values, name: &str) -> Result<Vec<String>, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    ProviderError::bad_input(format!(
                        "`{name}` must be a list of strings, found {v}"
                    ))
                })
            })
            .collect(),
        Some(other) => Err(ProviderError::bad_input(format!(
            "`{name}` must be a list of strings, not {other}"
        ))),
    }
}

/// The table-of-strings input `name`, empty when unset. Numbers and booleans
/// are written as text (`{ Size = 3 }` gives `"3"`).
pub(crate) fn str_map(
    inputs: &Values,
    name: &str,
) -> Result<BTreeMap<String, String>, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    scalar_text(v).ok_or_else(|| {
                        ProviderError::bad_input(format!(
                            "`{name}.{k}` must be a string, number or boolean, not {v}"
                        ))
                    })?,
                ))
            })
            .collect(),
        Some(other) => Err(ProviderError::bad_input(format!(
            "`{name}` must be a table, not {other}"
        ))),
    }
}

/// A scalar as text; a list of scalars as comma-separated text (for
/// CloudFormation's `CommaDelimitedList` and `List<…>` parameters).
pub(crate) fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Array(_) | Value::Object(_) => None,
                other => scalar_text(other),
            })
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join(",")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn reads_typed_inputs() {
        let v = values(json!({
            "name": "a", "size": 1200, "on": true, "ids": ["x", "y"],
            "params": {"A": "1", "B": 2, "C": false, "D": ["p", "q"]}
        }));
        assert_eq!(req_str(&v, "name").unwrap(), "a");
        assert_eq!(opt_str(&v, "nope").unwrap(), None);
        assert!(
            req_str(&v, "nope")
                .unwrap_err()
                .message
                .contains("`nope` is required")
        );
        assert_eq!(opt_int(&v, "size").unwrap(), Some(1200));
        assert!(bool_or(&v, "on", false).unwrap());
        assert!(!bool_or(&v, "off", false).unwrap());
        assert_eq!(str_list(&v, "ids").unwrap(), ["x", "y"]);
        let params = str_map(&v, "params").unwrap();
        assert_eq!(params["B"], "2");
        assert_eq!(params["C"], "false");
        assert_eq!(params["D"], "p,q");
        assert!(opt_int(&v, "name").is_err());
    }
}
