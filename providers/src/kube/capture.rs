//! What a job's logs must show and what is taken from them:
//! `success_pattern` (a regex some line must match) and `capture` (named
//! regexes; the first group of the first match becomes an output, or the
//! whole match when the regex has no group).

use std::collections::BTreeMap;

use regex_lite::Regex;
use serde_json::Value;

use crate::contract::{Problem, Values};

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

    /// The captured outputs from `logs`, or why the logs do not show success.
    pub fn check(&self, logs: &str) -> Result<Values, String> {
        if let Some(re) = &self.success
            && !re.is_match(logs)
        {
            return Err(format!(
                "the job finished but its logs never matched success_pattern /{}/",
                re.as_str()
            ));
        }
        let mut out = Values::new();
        for (name, re) in &self.captures {
            let Some(caps) = re.captures(logs) else {
                return Err(format!(
                    "capture `{name}`: no line of the logs matches /{}/",
                    re.as_str()
                ));
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
    fn captures_the_first_group_as_a_number() {
        let caps = BTreeMap::from([(
            "busbw".to_string(),
            r"Avg bus bandwidth\s*:\s*([0-9.]+)".to_string(),
        )]);
        let m = Matchers::new(Some("Out of bounds values : 0 OK"), &caps).unwrap();
        let out = m.check(NCCL).unwrap();
        assert_eq!(out["busbw"], serde_json::json!(186.437));
        let err = m.check("nothing").unwrap_err();
        assert!(err.contains("success_pattern"), "{err}");
        let only = Matchers::new(None, &caps).unwrap();
        assert!(only.check("x").unwrap_err().contains("capture `busbw`"));
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
