//! Offline checks of an `exec` step's inputs, beyond their types.

use std::path::Path;

use serde_json::Value;

use crate::contract::{InputValue, Problem};

/// The problems with the known inputs among `inputs`; `base` is the workflow
/// file's folder.
pub(super) fn problems(inputs: &[(String, InputValue)], base: &Path) -> Vec<Problem> {
    let mut problems =
        crate::capture::Matchers::output_problems(&crate::contract::known_inputs(inputs));
    for (name, value) in inputs {
        match (name.as_str(), value) {
            ("workdir", InputValue::Known(Value::String(workdir))) => {
                problems.extend(workdir_problem(workdir, base));
            }
            ("env", InputValue::Known(Value::Object(table))) => {
                problems.extend(table.keys().filter_map(|key| env_name_problem(key)));
            }
            ("parse", InputValue::Known(Value::String(program))) => {
                problems.extend(
                    crate::capture::Matchers::default()
                        .reading(Some(program))
                        .err(),
                );
            }
            ("pass_env", InputValue::Known(Value::Array(patterns))) => {
                problems.extend(
                    patterns
                        .iter()
                        .enumerate()
                        .filter_map(|(i, p)| pass_env_problem(i, p)),
                );
            }
            _ => {}
        }
    }
    problems
}

/// A problem if `workdir`, relative to `base`, is not an existing folder.
fn workdir_problem(workdir: &str, base: &Path) -> Option<Problem> {
    let message = match std::fs::metadata(base.join(workdir)) {
        Ok(meta) if meta.is_dir() => return None,
        Ok(_) => format!("`workdir` {workdir:?} is not a folder"),
        Err(_) => format!("`workdir` {workdir:?} does not exist"),
    };
    Some(Problem::at("workdir", message).with_help(format!(
        "`workdir` is relative to the workflow file's folder ({})",
        std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf()).display()
    )))
}

/// A problem if `key` cannot be an environment variable's name.
fn env_name_problem(key: &str) -> Option<Problem> {
    if !key.is_empty() && !key.contains(['=', '\0']) {
        return None;
    }
    Some(
        Problem::at_path(
            &["env", key],
            format!("{key:?} cannot be an environment variable's name"),
        )
        .on_key()
        .with_help("names must be non-empty and contain no `=`"),
    )
}

/// A problem if `pattern` is not a name or a `PREFIX*` that `pass_env`
/// can take.
fn pass_env_problem(index: usize, pattern: &Value) -> Option<Problem> {
    let text = pattern.as_str()?;
    if super::environment::valid_pattern(text) {
        return None;
    }
    Some(
        Problem::at_path(
            &["pass_env", &index.to_string()],
            format!("{text:?} is not an environment variable's name, or a prefix ending in `*`"),
        )
        .with_help("name each variable flow's environment passes to the commands (`AWS_PROFILE`), or a prefix (`AWS_*`); letters, digits and `_` only"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(name: &str, value: InputValue, base: &Path) -> Vec<Problem> {
        problems(
            &[
                ("run".into(), InputValue::Known(json!("true"))),
                (name.into(), value),
            ],
            base,
        )
    }

    #[test]
    fn workdir_must_be_an_existing_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let base = dir.path();
        assert!(check("workdir", InputValue::Known(json!("sub")), base).is_empty());
        assert!(check("workdir", InputValue::Unknown, base).is_empty());
        let missing = check("workdir", InputValue::Known(json!("nope")), base);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].path, vec!["workdir".to_string()]);
        assert!(missing[0].message.contains("does not exist"));
        assert!(missing[0].help.is_some());
        let file = check("workdir", InputValue::Known(json!("file")), base);
        assert!(file[0].message.contains("is not a folder"));
    }

    #[test]
    fn env_names_must_be_usable() {
        let base = Path::new(".");
        let good = json!({"AWS_REGION": "x", "lower.case": "y"});
        assert!(check("env", InputValue::Known(good), base).is_empty());
        let bad = check("env", InputValue::Known(json!({"A=B": "x", "": "y"})), base);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[1].path, vec!["env".to_string(), "A=B".to_string()]);
    }

    #[test]
    fn pass_env_takes_names_and_prefixes() {
        let base = Path::new(".");
        let good = json!(["AWS_PROFILE", "AWS_*"]);
        assert!(check("pass_env", InputValue::Known(good), base).is_empty());
        let bad = check(
            "pass_env",
            InputValue::Known(json!(["A B", "*", "OK"])),
            base,
        );
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].message.contains("\"A B\""), "{}", bad[0].message);
    }
}
