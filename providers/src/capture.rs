//! What a job's logs (a Kubernetes or Batch job's) must show and what is taken from them:
//! `success_pattern` (a regex some line must match) and `capture` (named
//! regexes; the first group of the last match becomes an output, or the
//! whole match when the regex has no group: the last, because training logs
//! print a figure again and again and the final one is what counts).

use std::collections::BTreeMap;

use regex_lite::Regex;
use serde_json::Value;

use crate::contract::{InputSpec, InputType, Problem, Values};

/// The `success_pattern` and `capture` inputs, for the schema of a job kind.
pub fn input_specs() -> Vec<InputSpec> {
    vec![
        InputSpec::optional(
            "success_pattern",
            InputType::String,
            "A regex the logs must match for the job to count as a success",
        ),
        InputSpec::optional(
            "capture",
            InputType::Map(Box::new(InputType::String)),
            "Outputs taken from the logs: name = regex; the first group of the last match (a number when it is one)",
        ),
    ]
}

/// The compiled `success_pattern` and `capture` of a step.
#[derive(Debug, Clone, Default)]
pub struct Matchers {
    success: Option<Regex>,
    captures: Vec<(String, Regex)>,
}

impl Matchers {
    /// Compiles the inputs; each error names the input it concerns.
    pub fn new(
        success: Option<&str>,
        captures: &BTreeMap<String, String>,
    ) -> Result<Matchers, Problem> {
        let success = success
            .map(|p| {
                Regex::new(p)
                    .map_err(|e| Problem::at("success_pattern", format!("not a valid regex: {e}")))
            })
            .transpose()?;
        let captures = captures
            .iter()
            .map(|(name, p)| {
                Regex::new(p).map(|r| (name.clone(), r)).map_err(|e| {
                    Problem::at_path(&["capture", name], format!("not a valid regex: {e}"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Matchers { success, captures })
    }

    /// The matchers a step's `success_pattern` and `capture` inputs ask for
    /// (absent inputs, or ones not known yet, ask for nothing).
    pub fn from_values(values: &Values) -> Result<Matchers, Problem> {
        let captures: BTreeMap<String, String> = values
            .get("capture")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Matchers::new(
            values.get("success_pattern").and_then(Value::as_str),
            &captures,
        )
    }

    /// Whether the logs are needed at all.
    pub fn is_empty(&self) -> bool {
        self.success.is_none() && self.captures.is_empty()
    }

    /// The captured outputs from `logs`, or why the logs do not show success.
    pub fn check(&self, logs: &str) -> Result<Values, LogsMiss> {
        if let Some(re) = &self.success
            && !re.is_match(logs)
        {
            return Err(LogsMiss::NoSuccess {
                pattern: re.as_str().to_string(),
            });
        }
        let mut out = Values::new();
        for (name, re) in &self.captures {
            let Some(caps) = re.captures_iter(logs).last() else {
                return Err(LogsMiss::NoCapture {
                    name: name.clone(),
                    pattern: re.as_str().to_string(),
                });
            };
            let text = caps
                .get(1)
                .or_else(|| caps.get(0))
                .map_or("", |m| m.as_str())
                .trim();
            out.insert(name.clone(), number_or_text(text));
        }
        Ok(out)
    }
}

/// What a finished job's logs did not show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogsMiss {
    /// `success_pattern` matched no line.
    #[error("the job finished but its logs never matched success_pattern /{pattern}/")]
    NoSuccess {
        /// The pattern.
        pattern: String,
    },
    /// A `capture` pattern matched no line.
    #[error("capture `{name}`: no line of the logs matches /{pattern}/")]
    NoCapture {
        /// The output it was to fill.
        name: String,
        /// The pattern.
        pattern: String,
    },
}

/// Shows each captured output live (`captured busbw = 186.437`).
pub fn report(reporter: &dyn crate::contract::Reporter, captured: &Values) {
    for (name, value) in captured {
        let shown = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        reporter.event(&format!("captured {name} = {shown}"));
    }
}

/// `text` as a JSON number when it is one (`"186.4"` → 186.4), else a string.
fn number_or_text(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => {
            serde_json::Number::from_f64(f).map_or_else(|| Value::from(text), Value::Number)
        }
        _ => Value::from(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NCCL: &str = "#  Out of bounds values : 0 OK\n# Avg bus bandwidth    : 186.437 \n#\n";

    #[test]
    fn captures_the_first_group_of_the_last_match_as_a_number() {
        let caps = BTreeMap::from([(
            "busbw".to_string(),
            r"Avg bus bandwidth\s*:\s*([0-9.]+)".to_string(),
        )]);
        let m = Matchers::new(Some("Out of bounds values : 0 OK"), &caps).unwrap();
        let out = m.check(NCCL).unwrap();
        assert_eq!(out["busbw"], serde_json::json!(186.437));
        let err = m.check("nothing").unwrap_err();
        assert!(matches!(err, LogsMiss::NoSuccess { .. }));
        assert!(err.to_string().contains("success_pattern"), "{err}");
        let epochs = BTreeMap::from([("epoch".to_string(), r"Epoch (\d+) \|".to_string())]);
        let last = Matchers::new(None, &epochs).unwrap();
        let out = last.check("Epoch 8 | a\nEpoch 9 | b\n").unwrap();
        assert_eq!(out["epoch"], serde_json::json!(9), "the last match counts");
        let only = Matchers::new(None, &caps).unwrap();
        assert!(
            matches!(only.check("x").unwrap_err(), LogsMiss::NoCapture { name, .. } if name == "busbw")
        );
        assert_eq!(number_or_text("GPU 0: A100"), Value::from("GPU 0: A100"));
        assert_eq!(number_or_text("8"), Value::from(8));
    }

    #[test]
    fn bad_regexes_point_at_their_input() {
        let p = Matchers::new(Some("("), &BTreeMap::new()).unwrap_err();
        assert_eq!(p.path, ["success_pattern"]);
        let caps = BTreeMap::from([("x".to_string(), "[".to_string())]);
        assert_eq!(
            Matchers::new(None, &caps).unwrap_err().path,
            ["capture", "x"]
        );
    }
}
