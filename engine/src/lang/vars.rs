//! Variable values: defaults, then environment variables, then `--var-file`
//! files, then `--var NAME=VALUE`, each later one winning.

use std::path::Path;

use serde_json::Value;

use super::ast::{Node, NodeKind, VarDecl, VarType, Workflow};
use super::parse::{node_matches, var_type_phrase};
use super::toml_nodes::{parse_document, type_name};
use crate::diag::{Diag, Diagnostics, Source};
use flow_providers::suggest::closest;

pub use super::var_values::{Origin, VarValue, VarValues};

/// What the command line says about variables.
#[derive(Debug, Clone, Default)]
pub struct VarInputs {
    /// `--var NAME=VALUE`, in order.
    pub flags: Vec<String>,
    /// `--var-file FILE`, in order.
    pub files: Vec<std::path::PathBuf>,
    /// Values fixed by a saved plan; they win over everything.
    pub fixed: Vec<(String, Value)>,
}

/// Work out every variable's value, reporting every problem.
pub fn resolve_vars(
    wf: &Workflow,
    inputs: &VarInputs,
    env: &dyn Fn(&str) -> Option<String>,
) -> (VarValues, Diagnostics) {
    let mut diags = Diagnostics::default();
    let mut values = VarValues::new();
    // Variables given a value that was rejected (already reported).
    let mut rejected: Vec<String> = Vec::new();
    for var in &wf.vars {
        if let Some(d) = &var.default
            && d.refs().is_empty()
            && node_matches(var.ty, d)
        {
            values.insert(
                var.name.clone(),
                value(node_to_json(d), var, Origin::Default),
            );
        }
        if let Some(name) = &var.env
            && let Some(raw) = env(name)
        {
            match parse_flag_value(var.ty, &raw) {
                Ok(v) => {
                    values.insert(var.name.clone(), value(v, var, Origin::Env(name.clone())));
                }
                Err(e) => {
                    rejected.push(var.name.clone());
                    diags.push(
                        Diag::new(
                            "flow::bad-var-value",
                            format!("environment variable {name} (for `{}`): {e}", var.name),
                        )
                        .in_source(&wf.source)
                        .label(
                            var.name_span.clone(),
                            format!("declared as {}", var.ty.name()),
                        )
                        .help(format!("set {name} to {}", var_type_phrase(var.ty))),
                    );
                }
            }
        }
    }
    for file in &inputs.files {
        apply_var_file(wf, file, &mut values, &mut rejected, &mut diags);
    }
    for flag in &inputs.flags {
        let Some((name, raw)) = flag.split_once('=') else {
            diags.push(
                Diag::new(
                    "flow::bad-var-flag",
                    format!("`--var {flag}` is not NAME=VALUE"),
                )
                .help("write --var NAME=VALUE"),
            );
            continue;
        };
        let name = name.trim();
        let Some(var) = wf.var(name) else {
            diags.push(unknown_var_diag(wf, name, "--var"));
            continue;
        };
        match parse_flag_value(var.ty, raw) {
            Ok(v) => {
                values.insert(name.to_string(), value(v, var, Origin::Flag));
            }
            Err(e) => {
                rejected.push(name.to_string());
                diags.push(
                    Diag::new("flow::bad-var-value", format!("--var {name}: {e}"))
                        .in_source(&wf.source)
                        .label(
                            var.name_span.clone(),
                            format!("declared as {}", var.ty.name()),
                        )
                        .help(format!("pass {}", var_type_phrase(var.ty))),
                );
            }
        }
    }
    for (name, fixed) in &inputs.fixed {
        match wf.var(name) {
            Some(var) => {
                values.insert(name.clone(), value(fixed.clone(), var, Origin::Flag));
            }
            None => diags.push(unknown_var_diag(wf, name, "the saved plan")),
        }
    }
    let missing: Vec<&VarDecl> = wf
        .vars
        .iter()
        .filter(|var| {
            !values.contains_key(&var.name)
                && var.default.is_none()
                && !var.broken
                && !rejected.contains(&var.name)
        })
        .collect();
    // Every missing one in one line, to copy: `--var a=VALUE --var b=VALUE`.
    let all_at_once = (missing.len() > 1).then(|| {
        missing
            .iter()
            .map(|v| format!("--var {}=VALUE", v.name))
            .collect::<Vec<_>>()
            .join(" ")
    });
    let last = missing.len().saturating_sub(1);
    for (i, var) in missing.into_iter().enumerate() {
        let mut how = format!("pass --var {}=VALUE", var.name);
        if let Some(env) = &var.env {
            how.push_str(&format!(", set the environment variable {env}"));
        }
        how.push_str(", or give it a default");
        if let Some(all) = all_at_once.as_ref().filter(|_| i == last) {
            how.push_str(&format!("\nall of them: {all}"));
        }
        diags.push(
            Diag::new(
                "flow::missing-var",
                format!("variable `{}` has no value", var.name),
            )
            .in_source(&wf.source)
            .label(var.name_span.clone(), "needs a value")
            .help(how),
        );
    }
    (values, diags)
}

fn value(v: Value, var: &VarDecl, origin: Origin) -> VarValue {
    VarValue {
        value: v,
        sensitive: var.sensitive,
        origin,
    }
}

fn unknown_var_diag(wf: &Workflow, name: &str, via: &str) -> Diag {
    let names: Vec<&str> = wf.vars.iter().map(|v| v.name.as_str()).collect();
    let d = Diag::new(
        "flow::unknown-var",
        format!("{via} sets `{name}`, but the workflow declares no such variable"),
    );
    match closest(name, names.iter().copied()) {
        Some(s) => d.help(format!("did you mean `{s}`?")),
        None if names.is_empty() => d.help("the workflow declares no variables"),
        None => d.help(format!("declared variables: {}", names.join(", "))),
    }
}

fn apply_var_file(
    wf: &Workflow,
    file: &Path,
    values: &mut VarValues,
    rejected: &mut Vec<String>,
    diags: &mut Diagnostics,
) {
    let shown = file.display().to_string();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            diags.push(
                Diag::new(
                    "flow::missing-file",
                    format!("cannot read var file {shown}: {e}"),
                )
                .help("check the path given to --var-file"),
            );
            return;
        }
    };
    let source = Source::new(shown.clone(), text);
    let (entries, file_diags) = parse_document(&source);
    let failed = !file_diags.is_empty();
    diags.extend(file_diags);
    if failed {
        return;
    }
    for entry in entries {
        let Some(var) = wf.var(&entry.key) else {
            let mut d = unknown_var_diag(wf, &entry.key, &shown);
            d = d
                .in_source(&source)
                .label(entry.key_span.clone(), "not declared");
            diags.push(d);
            continue;
        };
        if !entry.value.refs().is_empty() {
            rejected.push(var.name.clone());
            diags.push(
                Diag::new("flow::reference-not-allowed", "var files hold plain values")
                    .in_source(&source)
                    .label(entry.value.span.clone(), "reference here")
                    .help("write the value itself; references are only resolved in step inputs"),
            );
        } else if !node_matches(var.ty, &entry.value) {
            rejected.push(var.name.clone());
            diags.push(
                Diag::new(
                    "flow::wrong-type",
                    format!(
                        "`{}` must be {}, found {}",
                        var.name,
                        var_type_phrase(var.ty),
                        type_name(&entry.value)
                    ),
                )
                .in_source(&source)
                .label(
                    entry.value.span.clone(),
                    format!("expected {}", var_type_phrase(var.ty)),
                ),
            );
        } else {
            values.insert(
                var.name.clone(),
                value(node_to_json(&entry.value), var, Origin::File(shown.clone())),
            );
        }
    }
}

/// A `--var` or environment value that is not of its variable's type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{raw}` is not {wanted}")]
pub struct BadVarValue {
    /// The value as given.
    pub raw: String,
    /// The type wanted, in words (`an integer`).
    pub wanted: &'static str,
}

/// A value given on the command line or in the environment, read as the
/// variable's type (lists and tables are TOML: `--var 'azs=["a","b"]'`).
pub fn parse_flag_value(ty: VarType, raw: &str) -> Result<Value, BadVarValue> {
    let bad = || BadVarValue {
        raw: raw.to_string(),
        wanted: match ty {
            VarType::Bool => "true or false",
            other => var_type_phrase(other),
        },
    };
    match ty {
        VarType::String => Ok(Value::String(raw.to_string())),
        VarType::Integer => raw
            .trim()
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| bad()),
        // A whole number stays whole (`300`, not `300.0`, in the text it
        // is put into), as the same default written in the file does.
        VarType::Number => match raw.trim().parse::<i64>() {
            Ok(i) => Ok(Value::from(i)),
            Err(_) => raw
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(bad),
        },
        VarType::Bool => match raw.trim() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(bad()),
        },
        VarType::List | VarType::Table | VarType::Any => {
            let doc = format!("v = {raw}");
            let source = Source::new("value", doc);
            let (entries, diags) = parse_document(&source);
            let node = entries.into_iter().next().map(|e| e.value);
            match node {
                Some(n) if diags.is_empty() && node_matches(ty, &n) => Ok(node_to_json(&n)),
                _ if ty == VarType::Any => Ok(Value::String(raw.to_string())),
                _ => Err(bad()),
            }
        }
    }
}

/// A reference-free value as JSON.
pub fn node_to_json(node: &Node) -> Value {
    match &node.kind {
        NodeKind::Str(t) => Value::String(t.as_literal().unwrap_or_default()),
        NodeKind::Int(i) => Value::from(*i),
        NodeKind::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        NodeKind::Bool(b) => Value::Bool(*b),
        NodeKind::Datetime(d) => Value::String(d.clone()),
        NodeKind::Array(items) => Value::Array(items.iter().map(node_to_json).collect()),
        NodeKind::Table(entries) => Value::Object(
            entries
                .iter()
                .map(|e| (e.key.clone(), node_to_json(&e.value)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_number_given_for_a_number_stays_whole() {
        let v = parse_flag_value(VarType::Number, "99999").unwrap();
        assert_eq!(v.to_string(), "99999");
        let v = parse_flag_value(VarType::Number, " 2.5 ").unwrap();
        assert_eq!(v.to_string(), "2.5");
        assert!(parse_flag_value(VarType::Number, "fast").is_err());
        assert!(parse_flag_value(VarType::Number, "NaN").is_err());
    }
}
