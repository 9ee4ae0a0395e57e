//! pcluster's answers when it refuses: its JSON (`message`,
//! `configurationValidationErrors`, `updateValidationErrors`) turned into
//! one error that names the file, line and column of each setting pcluster
//! names, found in the configuration's own text.
//!
//! Schema errors name their setting as a Python literal of marshmallow's
//! error dict, e.g. `[('Scheduling', {'SlurmQueues': {0: {'Name':
//! ['Missing data for required field.']}}})]`: [`schema_errors`] reads it.

use serde_json::Value;

use crate::contract::ProviderError;
use crate::yaml_path::{self, Seg};

/// A Python literal, as much of it as marshmallow writes.
#[derive(Debug, Clone, PartialEq)]
enum Py {
    Str(String),
    Int(usize),
    List(Vec<Py>),
    Dict(Vec<(Py, Py)>),
}

/// Reads one literal from `s` at `*i`.
fn literal(s: &[char], i: &mut usize) -> Option<Py> {
    skip_space(s, i);
    match *s.get(*i)? {
        '\'' | '"' => {
            let quote = s[*i];
            *i += 1;
            let mut out = String::new();
            while *i < s.len() && s[*i] != quote {
                if s[*i] == '\\' && *i + 1 < s.len() {
                    *i += 1;
                }
                out.push(s[*i]);
                *i += 1;
            }
            *i += 1;
            Some(Py::Str(out))
        }
        '[' | '(' => {
            let close = if s[*i] == '[' { ']' } else { ')' };
            *i += 1;
            let mut items = Vec::new();
            loop {
                skip_space(s, i);
                if *s.get(*i)? == close {
                    *i += 1;
                    return Some(Py::List(items));
                }
                items.push(literal(s, i)?);
                skip_space(s, i);
                if s.get(*i) == Some(&',') {
                    *i += 1;
                }
            }
        }
        '{' => {
            *i += 1;
            let mut pairs = Vec::new();
            loop {
                skip_space(s, i);
                if *s.get(*i)? == '}' {
                    *i += 1;
                    return Some(Py::Dict(pairs));
                }
                let key = literal(s, i)?;
                skip_space(s, i);
                if s.get(*i) != Some(&':') {
                    return None;
                }
                *i += 1;
                let value = literal(s, i)?;
                pairs.push((key, value));
                skip_space(s, i);
                if s.get(*i) == Some(&',') {
                    *i += 1;
                }
            }
        }
        c if c.is_ascii_digit() => {
            let start = *i;
            while *i < s.len() && s[*i].is_ascii_digit() {
                *i += 1;
            }
            s[start..*i]
                .iter()
                .collect::<String>()
                .parse()
                .ok()
                .map(Py::Int)
        }
        _ => None,
    }
}

fn skip_space(s: &[char], i: &mut usize) {
    while *i < s.len() && s[*i].is_whitespace() {
        *i += 1;
    }
}

/// Each `(path, message)` in a marshmallow error literal; `None` when the
/// text is not one.
pub(crate) fn schema_errors(text: &str) -> Option<Vec<(Vec<Seg>, String)>> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let value = literal(&chars, &mut i)?;
    let mut out = Vec::new();
    walk(&value, &mut Vec::new(), &mut out);
    (!out.is_empty()).then_some(out)
}

fn seg(key: &Py) -> Option<Seg> {
    match key {
        Py::Str(s) => Some(Seg::Key(s.clone())),
        Py::Int(n) => Some(Seg::Index(*n)),
        _ => None,
    }
}

fn walk(value: &Py, path: &mut Vec<Seg>, out: &mut Vec<(Vec<Seg>, String)>) {
    match value {
        Py::Str(message) => out.push((path.clone(), message.clone())),
        Py::Dict(pairs) => {
            for (k, v) in pairs {
                if let Some(s) = seg(k) {
                    path.push(s);
                    walk(v, path, out);
                    path.pop();
                }
            }
        }
        // `[('Key', {...})]`: a list of (key, value) pairs; `['msg']`: messages.
        Py::List(items) => {
            for item in items {
                match item {
                    Py::List(pair) if pair.len() == 2 && seg(&pair[0]).is_some() => {
                        path.push(seg(&pair[0]).expect("checked"));
                        walk(&pair[1], path, out);
                        path.pop();
                    }
                    other => walk(other, path, out),
                }
            }
        }
        Py::Int(_) => {}
    }
}

/// pcluster's JSON answer, if it printed one.
pub(crate) fn answer(stdout: &str) -> Option<Value> {
    let start = stdout.find('{')?;
    serde_json::from_str(&stdout[start..]).ok()
}

/// The error for a refused `create-cluster` or `update-cluster`:
/// pcluster's message, then each validation error with its place in
/// `file` (`text` is what pcluster was given, before the token tag).
pub(crate) fn refusal(what: &str, answer: &Value, file: &str, text: &str) -> ProviderError {
    let message = answer
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("pcluster refused it");
    let mut lines: Vec<String> = Vec::new();
    let mut configuration = false;
    for e in answer
        .get("configurationValidationErrors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if e.get("level").and_then(Value::as_str) != Some("ERROR") {
            continue;
        }
        configuration = true;
        let kind = e.get("type").and_then(Value::as_str).unwrap_or("");
        let text_of = e.get("message").and_then(Value::as_str).unwrap_or("");
        match schema_errors(text_of) {
            Some(found) => {
                for (path, why) in found {
                    let place = match yaml_path::locate(text, &path) {
                        Some((l, c)) => format!("{file}:{l}:{c}: "),
                        None => format!("{file}: "),
                    };
                    lines.push(format!("{place}{}: {why}", yaml_path::display(&path)));
                }
            }
            None => lines.push(format!("{file}: {text_of} ({kind})")),
        }
    }
    let mut fleet = false;
    let mut update = false;
    for e in answer
        .get("updateValidationErrors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        update = true;
        let param = e.get("parameter").and_then(Value::as_str).unwrap_or("");
        let why = e.get("message").and_then(Value::as_str).unwrap_or("");
        fleet |= why.contains("compute fleet") || why.contains("compute nodes must be stopped");
        let place = update_path(param, text)
            .and_then(|path| yaml_path::locate(text, &path))
            .map(|(l, c)| format!("{file}:{l}:{c}: "))
            .unwrap_or_default();
        lines.push(format!("{place}{param}: {why}"));
    }
    let mut text_out = format!("{what}: {message}");
    for l in &lines {
        text_out.push_str("\n  ");
        text_out.push_str(l);
    }
    // pcluster checks the configuration, and an update's change set, before
    // it calls CloudFormation: an answer that lists either proves nothing
    // was created or changed.
    if configuration {
        ProviderError::not_created(text_out)
            .at_input(["config"])
            .with_help(format!("fix {file} (or the step's `substitute`); pcluster validates it before it creates anything"))
    } else if fleet {
        ProviderError::not_created(text_out).at_input(["stop_compute_fleet"]).with_help(
            "this change needs the compute fleet stopped: set `stop_compute_fleet = true` on the step to let flow stop it, update and start it again, or run `pcluster update-compute-fleet --status STOP_REQUESTED` yourself",
        )
    } else if update {
        ProviderError::not_created(text_out)
            .at_input(["config"])
            .with_help(format!("pcluster cannot make this change in place: change {file} back, or destroy and create the cluster"))
    } else {
        ProviderError::fatal(text_out)
    }
}

/// The path of an update error's `parameter` in the configuration: pcluster
/// names list items by their `Name` (`SlurmQueues[gpu]`), or by index.
fn update_path(param: &str, text: &str) -> Option<Vec<Seg>> {
    let parsed = super::config::parse(text).ok()?;
    let mut here = &parsed;
    let mut path = Vec::new();
    for part in param.split('.') {
        let (key, item) = match part.split_once('[') {
            Some((key, rest)) => (key, Some(rest.trim_end_matches(']'))),
            None => (part, None),
        };
        here = here.get(key)?;
        path.push(Seg::Key(key.to_string()));
        if let Some(item) = item {
            let items = here.as_array()?;
            let index = item.parse::<usize>().ok().or_else(|| {
                items
                    .iter()
                    .position(|v| v.get("Name").and_then(Value::as_str) == Some(item))
            })?;
            here = items.get(index)?;
            path.push(Seg::Index(index));
        }
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn marshmallow_literals_become_paths() {
        let found = schema_errors(
            "[('Scheduling', {'SlurmQueues': {0: {'ComputeResources': {0: {'MaxCount': ['Not a valid integer.'], 'InstanceTyp': ['Unknown field.']}}}}})]",
        )
        .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(
            yaml_path::display(&found[1].0),
            "Scheduling.SlurmQueues[0].ComputeResources[0].InstanceTyp"
        );
        assert_eq!(found[1].1, "Unknown field.");
        let os = schema_errors("[('Image', {'Os': ['Must be one of: alinux2023, ubuntu2204.']})]")
            .unwrap();
        assert_eq!(yaml_path::display(&os[0].0), "Image.Os");
        assert!(schema_errors("The subnet does not exist").is_none());
    }

    #[test]
    fn a_refusal_names_file_line_and_column() {
        let text = "Image:\n  Os: alinux2\nHeadNode:\n  InstanceType: m5.xlarge\n";
        let answer = json!({
            "message": "Invalid cluster configuration.",
            "configurationValidationErrors": [
                {"level": "ERROR", "type": "ConfigSchemaValidator",
                 "message": "[('Image', {'Os': ['Must be one of: alinux2023, ubuntu2204.']})]"},
                {"level": "WARNING", "type": "AmiOsCompatibleValidator", "message": "ignored"}
            ]
        });
        let err = refusal("create cluster `c`", &answer, "cluster.yaml", text);
        assert_eq!(
            err.message,
            "create cluster `c`: Invalid cluster configuration.\n  cluster.yaml:2:3: Image.Os: Must be one of: alinux2023, ubuntu2204."
        );
        assert_eq!(err.kind, crate::contract::ErrorKind::NotCreated);
        assert_eq!(err.input, ["config"]);
        let update = json!({"message": "Update failure", "updateValidationErrors": [
            {"parameter": "Scheduling.SlurmQueues[gpu].ComputeResources[ml].MaxCount",
             "message": "All compute nodes must be stopped. Stop the compute fleet with the pcluster update-compute-fleet command"}]});
        let err = refusal("update cluster `c`", &update, "cluster.yaml", text);
        // Refused before CloudFormation was called: nothing changed, and the
        // step input to change is named.
        assert_eq!(err.kind, crate::contract::ErrorKind::NotCreated);
        assert_eq!(err.input, ["stop_compute_fleet"]);
        assert!(err.help.unwrap().contains("stop_compute_fleet"));
        let cannot = json!({"message": "Update failure", "updateValidationErrors": [
            {"parameter": "HeadNode.InstanceType", "message": "Update actions are not currently supported for the 'InstanceType' parameter"}]});
        let both = "HeadNode:\n  InstanceType: m5.xlarge\nScheduling:\n  Scheduler: slurm\n";
        let err = refusal("update cluster `c`", &cannot, "cluster.yaml", both);
        assert_eq!(err.kind, crate::contract::ErrorKind::NotCreated);
        assert!(
            err.message
                .contains("cluster.yaml:2:3: HeadNode.InstanceType: Update actions are not"),
            "{}",
            err.message
        );
        // Anything else (a stack update that failed) may have acted.
        let failed = refusal(
            "update cluster `c`",
            &json!({"message": "stack failed"}),
            "cluster.yaml",
            text,
        );
        assert_eq!(failed.kind, crate::contract::ErrorKind::Failed);
        // Named list items are found by their Name.
        let config = "HeadNode:\n  InstanceType: m5.xlarge\nScheduling:\n  SlurmQueues:\n    - Name: gpu\n      ComputeResources:\n        - Name: ml\n          MaxCount: 4\n";
        let err = refusal("update cluster `c`", &update, "cluster.yaml", config);
        assert!(
            err.message.contains("cluster.yaml:8:11: Scheduling.SlurmQueues[gpu].ComputeResources[ml].MaxCount: All compute nodes"),
            "{}",
            err.message
        );
        assert_eq!(answer_of("noise\n{\"a\": 1}"), Some(json!({"a": 1})));
    }

    fn answer_of(s: &str) -> Option<Value> {
        answer(s)
    }
}
