//! `[modules.NAME]` calls: `source`, the module's folder, and `inputs`,
//! a value for each input the module declares.

use super::ast::{ModuleCall, Node, NodeKind};
use super::template::is_name;
use super::toml_nodes::type_name;
use crate::diag::{Diag, Diagnostics, Source};

/// The calls under `[modules]`, every problem pushed onto `diags`.
pub fn parse_calls(source: &Source, diags: &mut Diagnostics, node: &Node) -> Vec<ModuleCall> {
    let err = |diags: &mut Diagnostics, msg: String, node: &Node, help: &str| {
        diags.push(
            Diag::new("flow::bad-module", msg)
                .in_source(source)
                .label(node.span.clone(), "here")
                .help(help.to_string()),
        )
    };
    let shape = "write [modules.NAME] with source = \"modules/FOLDER\" and inputs = { … }";
    let NodeKind::Table(calls) = &node.kind else {
        err(
            diags,
            format!("`modules` must be a table, found {}", type_name(node)),
            node,
            shape,
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for call in calls {
        if !is_name(&call.key) {
            diags.push(
                Diag::new(
                    "flow::bad-name",
                    format!("`{}` is not a valid name", call.key),
                )
                .in_source(source)
                .label(call.key_span.clone(), "invalid name")
                .help("names start with a letter or `_` and contain letters, digits, `_` and `-`"),
            );
            continue;
        }
        let NodeKind::Table(fields) = &call.value.kind else {
            err(
                diags,
                format!(
                    "[modules.{}] must be a table, found {}",
                    call.key,
                    type_name(&call.value)
                ),
                &call.value,
                shape,
            );
            continue;
        };
        let mut folder = None;
        let mut inputs = Vec::new();
        let mut inputs_span = call.key_span.clone();
        for f in fields {
            match f.key.as_str() {
                "source" => match f.value.as_plain_str() {
                    Some(s) if !s.trim().is_empty() => folder = Some((s, f.value.span.clone())),
                    _ => err(
                        diags,
                        "`source` must be a folder's path, as plain text".into(),
                        &f.value,
                        "source = \"modules/batch-efa\": relative to this file's folder",
                    ),
                },
                "inputs" => match &f.value.kind {
                    NodeKind::Table(entries) => {
                        inputs = entries.clone();
                        inputs_span = f.value.span.clone();
                    }
                    _ => err(
                        diags,
                        format!("`inputs` must be a table, found {}", type_name(&f.value)),
                        &f.value,
                        "inputs = { NAME = value, … }",
                    ),
                },
                other => {
                    let help = match flow_providers::suggest::closest(other, ["source", "inputs"]) {
                        Some(s) => {
                            format!("did you mean `{s}`? A module call has `source` and `inputs`")
                        }
                        None => "a module call has `source` and `inputs`".into(),
                    };
                    diags.push(
                        Diag::new(
                            "flow::unknown-key",
                            format!("unknown key `{other}` in [modules.{}]", call.key),
                        )
                        .in_source(source)
                        .label(f.key_span.clone(), "not recognised")
                        .help(help),
                    );
                }
            }
        }
        let Some((folder, source_span)) = folder else {
            diags.push(
                Diag::new(
                    "flow::bad-module",
                    format!("module `{}` has no `source`", call.key),
                )
                .in_source(source)
                .label(call.key_span.clone(), "this call")
                .help(shape.to_string()),
            );
            continue;
        };
        out.push(ModuleCall {
            name: call.key.clone(),
            name_span: call.key_span.clone(),
            source: folder,
            source_span,
            inputs,
            inputs_span,
        });
    }
    out
}
