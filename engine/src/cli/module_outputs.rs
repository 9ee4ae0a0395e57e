//! What `flow output` and `flow logs` know of a workflow beyond state's
//! records: a module call's declared outputs (`[outputs]` of the module,
//! `flow output FILE cluster.busbw`, or all of them for `cluster`),
//! evaluated over the recorded step outputs, and where a `[[moved]]` entry
//! says a step went (`nccl` → `cluster.nccl`).

use std::collections::BTreeMap;
use std::path::Path;

use flow_providers::Registry;
use flow_state::StepRecord;
use serde_json::Value;

use super::common::CliError;
use crate::lang::load::Loaded;
use crate::lang::resolve::{Context, Lookup};
use crate::lang::vars::VarInputs;

/// The workflow of `file` with its variables' defaults and environment, if
/// it loads as it is (a workflow that needs `--var`s does not, and these
/// lookups are then skipped).
pub fn load_quietly(file: &Path) -> Option<Loaded> {
    crate::lang::load::load(file, &VarInputs::default(), &Registry::builtin(), &|n| {
        std::env::var(n).ok()
    })
    .ok()
}

/// `selector` as a module call (every output of it) or a module's output
/// (`CALL.KEY`); `None` when it names neither.
pub fn module_value(
    loaded: &Loaded,
    records: &BTreeMap<String, StepRecord>,
    selector: &str,
) -> Option<Result<Value, CliError>> {
    let wf = &loaded.workflow;
    let lookup = |step: &str, key: &str| match records.get(step).filter(|r| r.applied) {
        Some(rec) => match rec.outputs.get(key) {
            Some(v) => Lookup::Known(v.clone()),
            None => Lookup::Missing(rec.outputs.keys().cloned().collect()),
        },
        None => Lookup::Unknown,
    };
    let ctx = Context {
        wf,
        vars: &loaded.vars,
        outputs: &lookup,
    };
    let one = |module: &str, key: &str| -> Result<Value, CliError> {
        match ctx.module_output_value(module, key) {
            Ok((Some(_), true)) => Ok(Value::String(crate::secrets::MASK.into())),
            Ok((Some(v), false)) => Ok(v),
            Ok((None, _)) => Err(CliError::help(
                format!(
                    "module output `{module}.{key}` is not known yet: a step it reads has not been applied"
                ),
                "run `flow apply` first; `flow state list` shows what is applied",
            )),
            Err(e) => Err(CliError::msg(format!(
                "module output `{module}.{key}`: {}",
                e.message
            ))),
        }
    };
    if let Some(outputs) = wf.module_outputs.get(selector) {
        let mut all = serde_json::Map::new();
        for (entry, _) in &outputs.entries {
            let value = match one(selector, &entry.key) {
                Ok(v) => v,
                Err(_) => Value::String("(not known yet)".into()),
            };
            all.insert(entry.key.clone(), value);
        }
        return Some(Ok(Value::Object(all)));
    }
    let (module, key) = selector.rsplit_once('.')?;
    let outputs = wf.module_outputs.get(module)?;
    outputs.get(key)?;
    Some(one(module, key))
}

/// Where `[[moved]]` says `name` went, as a hint for a name state lacks;
/// only when state holds what it went to (`held`), so that an empty state
/// is not sent to an address that has nothing either.
pub fn moved_hint(loaded: &Loaded, name: &str, held: impl Fn(&str) -> bool) -> Option<String> {
    let m = loaded
        .workflow
        .moved
        .iter()
        .find(|m| m.from == name && held(&m.to))?;
    Some(format!(
        "`{name}` moved to `{}` ([[moved]] in {}): use that address",
        m.to,
        loaded.path.display()
    ))
}
