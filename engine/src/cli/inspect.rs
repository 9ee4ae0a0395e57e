//! `flow graph`, `flow output` and `flow state list/show`: read-only views.

use std::collections::BTreeMap;
use std::path::Path;

use flow_providers::Registry;
use flow_state::{StepRecord, timefmt::format_rfc3339};
use serde_json::Value;

use super::args::{GraphArgs, OutputArgs, StateArgs};
use super::common::{CliError, CliResult, Ui, load_workflow, records_of};
use super::display::{Rows, SHOW_LIMIT, Table, cut_strings, shell_word};
use super::run_plan::var_inputs;
use super::state_open::{Access, open_if_exists, target, target_with};
use crate::lang::ast::base_name;
use crate::secrets::is_sensitive_marker;

/// `flow graph FILE`: the graph in the chosen format on stdout.
pub fn graph(args: &GraphArgs, registry: &Registry) -> CliResult<i32> {
    let wf = &args.workflow;
    let loaded = load_workflow(&wf.file, &var_inputs(wf), registry)?;
    let target = target_with(&wf.file, &wf.state, loaded.workflow.state.as_ref())?;
    // State that cannot be read (an apply holds the lock) leaves every step
    // uncoloured rather than failing the graph.
    let records: BTreeMap<String, StepRecord> = super::block_on(async {
        open_if_exists(&target, &wf.state, "flow graph", Access::Read)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.steps().ok())
    })
    .unwrap_or_default()
    .into_iter()
    .map(|r| (r.name.clone(), r))
    .collect();
    let shades = super::graph::shades(&loaded, &records);
    print!("{}", super::graph::render(&loaded, &shades, args.format));
    Ok(0)
}

/// Every record of the state of `file`, read without taking its lock.
pub(super) fn open_records(
    file: &Path,
    args: &StateArgs,
    command: &str,
) -> CliResult<Vec<StepRecord>> {
    let target = target(file, args)?;
    super::block_on(async {
        let store = open_if_exists(&target, args, command, Access::Read).await?;
        Ok(records_of(store.as_deref())?.into_values().collect())
    })
}

/// A stored value for display: sensitive placeholders and sealed inputs masked.
fn visible(v: &Value) -> Value {
    match v {
        v if is_sensitive_marker(v) || flow_providers::is_sealed(v) => {
            Value::String(crate::secrets::MASK.into())
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), visible(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(visible).collect()),
        other => other.clone(),
    }
}

/// `flow output FILE [STEP[.KEY]]`.
pub fn output(args: &OutputArgs) -> CliResult<i32> {
    let records = open_records(&args.file, &args.state, "flow output")?;
    // The workflow, for module outputs and `[[moved]]` hints, when it loads
    // without `--var`s (only once a selector is not a recorded step).
    let loaded = std::cell::OnceCell::new();
    let loaded = || {
        loaded
            .get_or_init(|| super::module_outputs::load_quietly(&args.file))
            .as_ref()
    };
    let find = |name: &str| {
        records.iter().find(|r| r.name == name).ok_or_else(|| {
            let moved = loaded().and_then(|l| {
                super::module_outputs::moved_hint(l, name, |to| {
                    records.iter().any(|r| r.name == to)
                })
            });
            CliError::help(
                format!("there is no step `{name}` in state"),
                moved.unwrap_or_else(|| {
                    "run `flow apply` first, or check the name with `flow state list`".into()
                }),
            )
        })
    };
    // The value, and what its table's rows are (for the commands that
    // print a cut value whole).
    let (value, rows) = match args.selector.as_deref() {
        None => (
            Value::Object(
                records
                    .iter()
                    .filter(|r| r.applied)
                    .map(|r| (r.name.clone(), visible(&Value::Object(r.outputs.clone()))))
                    .collect(),
            ),
            Rows::Steps(None),
        ),
        Some(sel) => match find(sel) {
            Ok(rec) => (
                visible(&Value::Object(rec.outputs.clone())),
                Rows::Keys(sel),
            ),
            Err(_)
                if records
                    .iter()
                    .any(|r| base_name(&r.name) == sel && r.name != sel) =>
            {
                // A step with `for_each`: every instance's outputs.
                (
                    Value::Object(
                        records
                            .iter()
                            .filter(|r| r.applied && base_name(&r.name) == sel)
                            .map(|r| (r.name.clone(), visible(&Value::Object(r.outputs.clone()))))
                            .collect(),
                    ),
                    Rows::Steps(Some(sel)),
                )
            }
            Err(_)
                if let Some(module) = loaded().and_then(|l| {
                    let by_name: BTreeMap<String, StepRecord> = records
                        .iter()
                        .map(|r| (r.name.clone(), r.clone()))
                        .collect();
                    super::module_outputs::module_value(l, &by_name, sel)
                }) =>
            {
                // A module call's outputs are `CALL.KEY`; one output is whole.
                let rows = if sel.contains('.') {
                    Rows::Within(sel)
                } else {
                    Rows::Keys(sel)
                };
                (module?, rows)
            }
            Err(e) => {
                // `STEP.KEY`: the longest recorded step the selector starts
                // with (`cluster.nccl.busbw` is `cluster.nccl`'s `busbw`,
                // `nccl["8"].busbw` is `nccl["8"]`'s).
                let split = records
                    .iter()
                    .filter(|r| {
                        sel.len() > r.name.len() + 1
                            && sel.starts_with(&r.name)
                            && sel.as_bytes()[r.name.len()] == b'.'
                    })
                    .max_by_key(|r| r.name.len())
                    .map(|r| (&sel[..r.name.len()], &sel[r.name.len() + 1..]))
                    .or_else(|| sel.split_once('.'));
                let Some((step, key)) = split else {
                    return Err(e);
                };
                let rec = find(step)?;
                let v = rec.outputs.get(key).ok_or_else(|| {
                    CliError::msg(format!(
                        "step `{step}` has no output `{key}`; its outputs are: {}",
                        rec.outputs.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })?;
                (visible(v), Rows::Within(sel))
            }
        },
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value).expect("json"));
        return Ok(0);
    }
    match &value {
        // One value asked for by name prints whole, as scripts read it.
        Value::String(s) => println!("{s}"),
        Value::Object(map) => {
            let file = args.file.display().to_string();
            let mut table = Table {
                file: &file,
                lines: Vec::new(),
            };
            table.add(map, 0, rows, true);
            for line in table.lines {
                println!("{line}");
            }
        }
        other => println!("{other}"),
    }
    Ok(0)
}

/// `flow state list FILE`.
pub fn state_list(file: &Path, state: &StateArgs, json: bool, ui: Ui) -> CliResult<i32> {
    let records = open_records(file, state, "flow state list")?;
    if json {
        let rows: Vec<Value> = records
            .iter()
            .map(|r| {
                serde_json::json!({
                    "step": r.name,
                    "provider": r.provider,
                    "status": r.status.to_string(),
                    "applied": r.applied,
                    "resource_id": r.resource_id,
                    "in_flight": r.in_flight.as_ref().map(|f| f.operation.to_string()),
                    "updated_at": format_rfc3339(r.updated_at),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
        return Ok(0);
    }
    if records.is_empty() {
        println!("State is empty.");
        return Ok(0);
    }
    let w = records
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let p = records
        .iter()
        .map(|r| r.provider.len())
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:<w$}  {:<p$}  {:<8}  {:<20}  ID",
        "STEP", "PROVIDER", "STATUS", "UPDATED"
    );
    for r in &records {
        let status = match (&r.in_flight, r.status) {
            (Some(f), _) => format!("{}…", f.operation),
            (None, s) => s.to_string(),
        };
        let status = match r.status {
            flow_state::Status::Failed => ui.style.err(&format!("{status:<8}")),
            flow_state::Status::Pending => ui.style.warn(&format!("{status:<8}")),
            flow_state::Status::Applied => format!("{status:<8}"),
        };
        println!(
            "{:<w$}  {:<p$}  {status}  {:<20}  {}",
            r.name,
            r.provider,
            format_rfc3339(r.updated_at),
            r.resource_id.as_deref().unwrap_or("-")
        );
    }
    Ok(0)
}

/// `flow state show FILE STEP [--full]`: strings over [`SHOW_LIMIT`]
/// characters cut (whole with `--full`).
pub fn state_show(file: &Path, step: &str, state: &StateArgs, full: bool) -> CliResult<i32> {
    let records = open_records(file, state, "flow state show")?;
    let rec = records.iter().find(|r| r.name == step).ok_or_else(|| {
        CliError::help(
            format!("there is no step `{step}` in state"),
            "`flow state list FILE` shows the steps state holds",
        )
    })?;
    let shown = serde_json::json!({
        "step": rec.name,
        "provider": rec.provider,
        "status": rec.status.to_string(),
        "applied": rec.applied,
        "resource_id": rec.resource_id,
        "inputs": visible(&Value::Object(rec.inputs.clone())),
        "outputs": visible(&Value::Object(rec.outputs.clone())),
        "depends_on": rec.depends_on,
        "prevent_destroy": rec.prevent_destroy,
        "in_flight": rec.in_flight.as_ref().map(|f| serde_json::json!({
            "operation": f.operation.to_string(),
            "token": f.token,
            "id": f.id,
            "started_at": format_rfc3339(f.started_at),
        })),
        "attempts": rec.attempts,
        "last_error": rec.last_error,
        "name_suffix": rec.name_suffix,
        "deposed": rec.deposed.as_ref().map(|d| serde_json::json!({
            "stage": d.stage.to_string(),
            "resource_id": d.resource_id,
            "name_suffix": d.name_suffix,
            "outputs": visible(&Value::Object(d.outputs.clone())),
            "deposed_at": format_rfc3339(d.deposed_at),
        })),
        "created_at": format_rfc3339(rec.created_at),
        "updated_at": format_rfc3339(rec.updated_at),
    });
    let shown = if full {
        shown
    } else {
        let whole = format!(
            "flow state show {} {} --full",
            shell_word(&file.display().to_string()),
            shell_word(step)
        );
        cut_strings(&shown, SHOW_LIMIT, &whole)
    };
    println!("{}", serde_json::to_string_pretty(&shown).expect("json"));
    Ok(0)
}
