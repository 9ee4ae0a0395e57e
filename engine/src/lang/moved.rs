//! `[[moved]]` entries: state recorded under one address now belongs to
//! another (a renamed step, a step that gained `for_each`, a new key scheme).

use super::ast::{Moved, Node, NodeKind};
use super::toml_nodes::type_name;
use crate::diag::{Diag, Diagnostics, Source};

/// The entries of `[[moved]]`, each with `from` and `to` addresses, every
/// problem pushed onto `diags`.
pub fn parse_moved(source: &Source, diags: &mut Diagnostics, node: &Node) -> Vec<Moved> {
    let err = |diags: &mut Diagnostics, msg: String, node: &Node, help: &str| {
        diags.push(
            Diag::new("flow::bad-moved", msg)
                .in_source(source)
                .label(node.span.clone(), "here")
                .help(help.to_string()),
        )
    };
    let shape = "write `[[moved]]` tables: from = \"old\" and to = \"new[\\\"key\\\"]\"";
    let NodeKind::Array(items) = &node.kind else {
        err(
            diags,
            format!(
                "`moved` must be an array of tables, found {}",
                type_name(node)
            ),
            node,
            shape,
        );
        return Vec::new();
    };
    let mut out: Vec<Moved> = Vec::new();
    for item in items {
        let NodeKind::Table(entries) = &item.kind else {
            err(
                diags,
                format!(
                    "each `moved` entry must be a table, found {}",
                    type_name(item)
                ),
                item,
                shape,
            );
            continue;
        };
        let mut from = None;
        let mut to = None;
        let written = |key: &str| entries.iter().any(|e| e.key == key);
        for e in entries {
            let slot = match e.key.as_str() {
                "from" => &mut from,
                "to" => &mut to,
                other => {
                    err(
                        diags,
                        format!("unknown key `{other}` in [[moved]]"),
                        &e.value,
                        "a moved entry has `from` and `to`",
                    );
                    continue;
                }
            };
            match e.value.as_plain_str() {
                Some(s) if valid_address(&s) => *slot = Some(s),
                Some(s) => err(
                    diags,
                    format!("`{s}` is not a step address"),
                    &e.value,
                    "an address is a step name, or a step name and a key: nccl[\"8\"]",
                ),
                None => err(
                    diags,
                    format!("`{}` must be a plain string", e.key),
                    &e.value,
                    "write the address as text, without `${…}`",
                ),
            }
        }
        match (from, to) {
            (Some(from), Some(to)) if from == to => err(
                diags,
                format!("[[moved]] moves `{from}` to itself"),
                item,
                "remove the entry",
            ),
            (Some(from), Some(to)) => {
                if out.iter().any(|m| m.from == from) {
                    err(
                        diags,
                        format!("`{from}` is moved twice"),
                        item,
                        "move each address once",
                    );
                    continue;
                }
                out.push(Moved {
                    from,
                    to,
                    span: item.span.clone(),
                })
            }
            (None, _) if !written("from") => {
                err(diags, "a [[moved]] entry has no `from`".into(), item, shape)
            }
            (_, None) if !written("to") => {
                err(diags, "a [[moved]] entry has no `to`".into(), item, shape)
            }
            // A `from` or `to` that is written but wrong was reported above.
            _ => {}
        }
    }
    out
}

/// The `[[moved]]` entries of an expanded workflow against its steps: `to`
/// must be one of them (or an instance of a step with `for_each` that the
/// variables do not make this time) and `from` must not be.
pub fn check_moved(wf: &super::ast::Workflow) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for m in &wf.moved {
        let problem = |msg: String, help: String| {
            Diag::new("flow::bad-moved", msg)
                .in_source(&wf.source)
                .label(m.span.clone(), "this [[moved]]")
                .help(help)
        };
        let to_base = super::ast::base_name(&m.to);
        let step_of_to = wf.is_deferred(to_base)
            || wf.steps.iter().any(|s| {
                s.name == to_base || s.instance.as_ref().is_some_and(|i| i.base == to_base)
            });
        // An instance whose key the variables do not make this time is not
        // an error: the move waits until they do.
        // `to` may be the `from` of another entry: a chain of renames.
        let moved_on = wf.moved.iter().any(|other| other.from == m.to);
        if wf.step(&m.to).is_none() && !(step_of_to && to_base != m.to) && !moved_on {
            let names = wf.steps.iter().map(|s| s.name.as_str());
            let help = match flow_providers::suggest::closest(&m.to, names) {
                Some(s) => format!("did you mean `{s}`? `to` names a step of the workflow"),
                None => {
                    "`to` names a step of the workflow, or one instance of it: nccl[\"8\"]".into()
                }
            };
            diags.push(problem(
                format!(
                    "[[moved]] points at nothing: the workflow has no step `{}`",
                    m.to
                ),
                help,
            ));
        } else if wf.step(&m.from).is_some() && !wf.is_deferred(&m.from) {
            diags.push(problem(
                format!("[[moved]] moves `{}`, which is still a step of the workflow", m.from),
                "`from` is the old address, which the workflow no longer has: remove the entry or rename the step".into(),
            ));
        }
    }
    diags
}

/// Whether `s` is `name` or `name["key"]`, `name` perhaps a module's step
/// (`cluster.nccl`).
pub fn valid_address(s: &str) -> bool {
    let is_step = |base: &str| base.split('.').all(super::template::is_name);
    match s.split_once('[') {
        None => is_step(s),
        Some((base, rest)) => {
            is_step(base)
                && rest
                    .strip_suffix(']')
                    .and_then(|k| serde_json::from_str::<String>(k).ok())
                    .is_some()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert!(valid_address("nccl"));
        assert!(valid_address(r#"nccl["8"]"#));
        assert!(!valid_address("nccl[8]"));
        assert!(!valid_address(r#"nccl["8""#));
        assert!(!valid_address("1x"));
        assert!(valid_address(r#"cluster.nccl["8"]"#));
        assert!(!valid_address("cluster..nccl"));
    }
}
