//! The `$FLOW_OUTPUT` file: `key=value` lines a command appends to report
//! its outputs, and the environment names outputs get when passed back.

use serde_json::Value;

use crate::contract::{ProviderError, Values};

/// Whether `key` is a valid output name: `[A-Za-z_][A-Za-z0-9_.-]*`.
fn valid_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Parses the contents of `$FLOW_OUTPUT` written by the command `label`.
///
/// Each line is `key=value` (the value is everything after the first `=`,
/// kept as written); blank lines and lines starting with `#` are skipped;
/// a key written twice keeps its last value. Any other line fails.
pub(super) fn parse(label: &str, text: &str) -> Result<Values, ProviderError> {
    let mut outputs = Values::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let number = index + 1;
        let Some((key, value)) = line.split_once('=') else {
            return Err(ProviderError::fatal(format!(
                "`{label}` wrote line {number} of $FLOW_OUTPUT without `=`: `{line}`; \
                 write outputs as `key=value` lines"
            )));
        };
        if !valid_key(key) {
            return Err(ProviderError::fatal(format!(
                "`{label}` wrote an invalid output name `{key}` on line {number} of \
                 $FLOW_OUTPUT: `{line}`; names are letters, digits, `_`, `.` and `-`, \
                 starting with a letter or `_`"
            )));
        }
        outputs.insert(key.to_string(), Value::String(value.to_string()));
    }
    Ok(outputs)
}

/// The environment variable an output is passed back in to `destroy`:
/// `FLOW_OUTPUT_` and the key uppercased, other characters than letters and
/// digits replaced by `_` (`vpc.id` → `FLOW_OUTPUT_VPC_ID`).
pub(super) fn env_name(key: &str) -> String {
    let mut name = String::from("FLOW_OUTPUT_");
    name.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    name
}

/// The environment variables that pass `outputs` back to a command; string
/// outputs as they are, any other value as JSON.
pub(super) fn as_env(outputs: &Values) -> Vec<(String, String)> {
    outputs
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (env_name(k), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_pairs_skipping_blanks_and_comments() {
        let text = "# a comment\n\nvpc_id=vpc-1\nurl=http://x/?a=b\r\n  \nempty=\nvpc_id=vpc-2\n";
        let outputs = parse("run", text).unwrap();
        assert_eq!(
            Value::Object(outputs),
            json!({"vpc_id": "vpc-2", "url": "http://x/?a=b", "empty": ""})
        );
        assert!(parse("run", "").unwrap().is_empty());
    }

    #[test]
    fn a_line_without_equals_names_the_line() {
        let err = parse("run", "a=1\nnot a pair\n").unwrap_err();
        assert!(!err.is_retryable());
        assert!(err.message.contains("line 2"), "{}", err.message);
        assert!(err.message.contains("`not a pair`"), "{}", err.message);
    }

    #[test]
    fn invalid_keys_fail() {
        for line in ["1abc=x", "a b=x", "=x", "key =x", "ké=x"] {
            let err = parse("run", line).unwrap_err();
            assert!(err.message.contains(line), "{}", err.message);
        }
        for line in ["_a=x", "a.b-c_1=x", "A=x"] {
            assert!(parse("run", line).is_ok(), "{line}");
        }
    }

    #[test]
    fn env_names_are_upper_snake() {
        assert_eq!(env_name("vpc.id"), "FLOW_OUTPUT_VPC_ID");
        assert_eq!(env_name("Queue-Name_2"), "FLOW_OUTPUT_QUEUE_NAME_2");
        let outputs = json!({"a": "x", "n": 3}).as_object().cloned().unwrap();
        assert_eq!(
            as_env(&outputs),
            vec![
                ("FLOW_OUTPUT_A".into(), "x".into()),
                ("FLOW_OUTPUT_N".into(), "3".into())
            ]
        );
    }
}
