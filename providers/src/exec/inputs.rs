//! The `exec` step's inputs, read from the JSON the engine passes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::contract::{ProviderError, Values, is_sealed};

/// The inputs of an `exec` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ExecInputs {
    /// The command that creates or updates.
    pub run: String,
    /// The command that deletes, if any.
    pub destroy: Option<String>,
    /// Extra environment variables, in the order given.
    pub env: Vec<(String, String)>,
    /// Names (or `PREFIX*`) of flow's environment variables the commands
    /// get besides [`DEFAULT_PASS`](super::environment::DEFAULT_PASS).
    pub pass_env: Vec<String>,
    /// The folder to run in, relative to the workflow file's folder.
    pub workdir: Option<String>,
    /// Environment variables left out because state holds them only as
    /// sealed secrets (`"env"` when the whole table is sealed).
    pub sealed: Vec<String>,
    /// Gates on the outputs: output name → gate (`">= 300"`).
    pub expect: std::collections::BTreeMap<String, String>,
    /// `parse`: the program whose output the script prints (`nccl-tests`),
    /// read as a job's log is read.
    pub parse: Option<String>,
}

impl ExecInputs {
    /// Reads the inputs, failing on a missing `run` or a mistyped value
    /// (which the engine's schema check normally catches first).
    pub fn from_values(inputs: &Values) -> Result<Self, ProviderError> {
        let run =
            string(inputs, "run")?.ok_or_else(|| ProviderError::bad_input("`run` is required"))?;
        let mut sealed = Vec::new();
        let env = match inputs.get("env") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) if is_sealed(v) => {
                sealed.push("env".to_string());
                Vec::new()
            }
            Some(Value::Object(table)) => {
                let mut env = Vec::new();
                for (k, v) in table {
                    match v {
                        v if is_sealed(v) => sealed.push(k.clone()),
                        Value::String(s) => env.push((k.clone(), s.clone())),
                        other => {
                            return Err(ProviderError::bad_input(format!(
                                "`env.{k}` must be a string, not {other}"
                            )));
                        }
                    }
                }
                env
            }
            Some(other) => {
                return Err(ProviderError::bad_input(format!(
                    "`env` must be a table of strings, not {other}"
                )));
            }
        };
        Ok(ExecInputs {
            run,
            destroy: string(inputs, "destroy")?,
            env,
            pass_env: crate::inputs::str_list(inputs, "pass_env")?,
            workdir: string(inputs, "workdir")?,
            sealed,
            parse: string(inputs, "parse")?,
            expect: inputs
                .get("expect")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The folder the commands run in: `workdir` resolved against `base`.
    pub fn dir(&self, base: &Path) -> PathBuf {
        match &self.workdir {
            Some(w) => base.join(w),
            None => base.to_path_buf(),
        }
    }
}

/// The string input `name`, if set.
fn string(inputs: &Values, name: &str) -> Result<Option<String>, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ProviderError::bad_input(format!(
            "`{name}` must be a string, not {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn reads_all_inputs() {
        let inputs = values(json!({
            "run": "make",
            "destroy": "make clean",
            "env": {"A": "1", "B": "2"},
            "workdir": "sub",
            "pass_env": ["AWS_PROFILE", "AWS_*"],
        }));
        let parsed = ExecInputs::from_values(&inputs).unwrap();
        assert_eq!(parsed.run, "make");
        assert_eq!(parsed.destroy.as_deref(), Some("make clean"));
        assert_eq!(
            parsed.env,
            vec![("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        assert_eq!(parsed.dir(Path::new("/base")), Path::new("/base/sub"));
        assert_eq!(parsed.pass_env, ["AWS_PROFILE", "AWS_*"]);
    }

    #[test]
    fn run_is_required_and_types_are_checked() {
        let missing = ExecInputs::from_values(&values(json!({}))).unwrap_err();
        assert!(missing.message.contains("`run` is required"));
        let bad_env =
            ExecInputs::from_values(&values(json!({"run": "x", "env": {"A": 1}}))).unwrap_err();
        assert!(bad_env.message.contains("`env.A` must be a string"));
    }

    #[test]
    fn dir_defaults_to_the_base() {
        let parsed = ExecInputs::from_values(&values(json!({"run": "x"}))).unwrap();
        assert_eq!(parsed.dir(Path::new("/base")), Path::new("/base"));
    }
}
