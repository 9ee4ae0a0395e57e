//! Compute a plan: compare what the workflow asks for with what state recorded.
//! No provider is called: plans are instant.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flow_providers::{Change, Provider};
use flow_state::{Operation, StepRecord};
use serde_json::Value;

use super::model::{Action, DeferredStep, InputDiff, Plan, Shown, StepChange};
use super::outputs::PlannedOutputs;
use super::replacing;
use crate::diag::{Diag, Diagnostics};
use crate::lang::ast::{StepDecl, base_name, select_addresses};
use crate::lang::inputs::{Desired, UNKNOWN, mask_sealed};
use crate::lang::load::Loaded;

/// Everything a plan is computed from.
pub struct PlanRequest<'a> {
    /// The checked workflow.
    pub loaded: &'a Loaded,
    /// The provider kinds, for steps that only state still holds.
    pub registry: &'a flow_providers::Registry,
    /// What state holds, by step name.
    pub records: &'a BTreeMap<String, StepRecord>,
    /// The salt of a state written before fingerprints were keyed (see
    /// [`crate::secrets::seal`]); zeros for none.
    pub legacy_salt: &'a [u8],
    /// The state's serial.
    pub serial: u64,
    /// `--target` steps (with what they need); empty for all.
    pub targets: &'a [String],
    /// `--replace` steps.
    pub replace: &'a [String],
}

/// The addresses `names` (`--target`, `--replace`) stand for among the
/// workflow's steps and state's records: `nccl` every instance of it,
/// `cluster` every step of that module call ([`select_addresses`]).
pub fn selected_addresses(
    loaded: &Loaded,
    records: &BTreeMap<String, StepRecord>,
    names: &[String],
) -> Vec<String> {
    let known = loaded
        .workflow
        .steps
        .iter()
        .map(|s| s.name.as_str())
        .chain(records.keys().map(String::as_str));
    select_addresses(names, known)
}

/// Plan every step of the workflow and every step state holds that the
/// workflow no longer has.
pub fn compute_plan(req: &PlanRequest<'_>) -> Result<Plan, Diagnostics> {
    let mut diags = Diagnostics::default();
    let wf = &req.loaded.workflow;
    let targets = &selected_addresses(req.loaded, req.records, req.targets)[..];
    let replace = &selected_addresses(req.loaded, req.records, req.replace)[..];
    for name in targets.iter().chain(replace) {
        if wf.step(name).is_none() && !req.records.contains_key(name) {
            diags.push(
                Diag::new("flow::unknown-step", format!("there is no step `{name}`"))
                    .help("--target and --replace name steps of the workflow or of state"),
            );
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let selected: Option<BTreeSet<String>> =
        (!targets.is_empty()).then(|| req.loaded.dag.with_ancestors(targets));
    let order = req.loaded.dag.topo_order().unwrap_or_default();
    let mut outputs = PlannedOutputs::new(req.records).keeping(req.registry);
    let mut changes = Vec::new();
    let deferred = deferred_steps(req.loaded);
    for name in order {
        if selected.as_ref().is_some_and(|s| !s.contains(name)) {
            continue;
        }
        if deferred.iter().any(|d| d.step == name) {
            continue;
        }
        let step = wf.step(name).expect("dag node is a step");
        let provider = req.loaded.provider(step);
        let lookup = |s: &str, k: &str| outputs.lookup(s, k);
        let mut desired = match req.loaded.resolve_inputs(step, req.legacy_salt, &lookup) {
            Ok(d) => d,
            Err(errs) => {
                errs.into_iter().for_each(|e| diags.push(e));
                continue;
            }
        };
        desired.add_content_digest(provider.as_ref(), wf.dir_of(step));
        let change = plan_step(req, step, provider, &desired);
        match change {
            Ok(mut c) => {
                c.depends_on = req.loaded.deps_of(name);
                outputs.planned(name, c.action);
                changes.push(c);
            }
            Err(d) => diags.push(*d),
        }
    }
    // What state holds of a deferred step stays until its plan is known.
    let waiting = |name: &str| {
        deferred
            .iter()
            .any(|d| d.step == name || d.step == base_name(name))
    };
    let mut gone: Vec<&StepRecord> = req
        .records
        .values()
        .filter(|r| wf.step(&r.name).is_none() && !waiting(&r.name))
        .filter(|r| targets.is_empty() || targets.contains(&r.name))
        .collect();
    gone.sort_by(|a, b| a.name.cmp(&b.name));
    for rec in gone {
        if rec.prevent_destroy && rec.applied {
            diags.push(
                Diag::new(
                    "flow::prevent-destroy",
                    format!(
                        "step `{}` was removed from the workflow, but it has lifecycle.prevent_destroy",
                        rec.name
                    ),
                )
                .help(format!(
                    "put the step back, or delete it on purpose with `flow destroy FILE --target {} --allow-protected`",
                    rec.name
                )),
            );
            continue;
        }
        changes.push(StepChange {
            step: rec.name.clone(),
            action: Action::Delete,
            provider: rec.provider.clone(),
            reason: "removed from the workflow".into(),
            inputs: Vec::new(),
            known_after_apply: false,
            resumes: rec.in_flight.as_ref().map(|f| f.token.clone()),
            depends_on: rec.depends_on.clone(),
            details: Vec::new(),
            cost: None,
            create_before_destroy: None,
            replace_if_changed: false,
        });
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let warnings = unmoved_warnings(&changes);
    let deferred = match &selected {
        Some(s) => deferred
            .into_iter()
            .filter(|d| s.contains(&d.step))
            .collect(),
        None => deferred,
    };
    Ok(Plan {
        workflow: wf.name.clone(),
        changes,
        state_serial: req.serial,
        cost: None,
        drift: Vec::new(),
        moved: Vec::new(),
        warnings,
        deferred,
    })
}

/// The steps that cannot be planned yet: each step whose `for_each` waits
/// on outputs, and every step that needs one of them, in dependency order.
fn deferred_steps(loaded: &Loaded) -> Vec<DeferredStep> {
    let wf = &loaded.workflow;
    if wf.deferred.is_empty() {
        return Vec::new();
    }
    let roots: Vec<String> = wf.deferred.keys().cloned().collect();
    let closure = loaded.dag.with_descendants(&roots);
    let order = loaded.dag.topo_order().unwrap_or_default();
    order
        .into_iter()
        .filter(|n| closure.contains(*n))
        .map(|name| match wf.deferred.get(name) {
            Some(d) => DeferredStep {
                step: name.to_string(),
                for_each: true,
                waits_on: d.waits_on.clone(),
                reason: format!(
                    "its for_each reads outputs of {}, known after apply",
                    quoted(&d.waits_on)
                ),
            },
            None => {
                let needs: Vec<String> = loaded
                    .deps_of(name)
                    .into_iter()
                    .filter(|d| closure.contains(d))
                    .collect();
                DeferredStep {
                    step: name.to_string(),
                    for_each: false,
                    reason: format!("it needs {}, deferred", quoted(&needs)),
                    waits_on: needs,
                }
            }
        })
        .collect()
}

/// A step removed from the workflow while another address of the same
/// step is created (`nccl` → `nccl["2"]`, or `nccl["a"]` → `nccl["b"]`),
/// or a step of the same provider and key under a new name: without a
/// `[[moved]]` entry that is a destroy and a create.
fn unmoved_warnings(changes: &[StepChange]) -> Vec<String> {
    let mut out = Vec::new();
    for gone in changes
        .iter()
        .filter(|c| c.action == Action::Delete && c.reason == "removed from the workflow")
    {
        let base = base_name(&gone.step);
        let key = &gone.step[base.len()..];
        // The same step with other keys, or a step of the same provider
        // under another name with the same key, or with a key where it had
        // none (a renamed step, perhaps one that gained `for_each`).
        let created: Vec<&str> = changes
            .iter()
            .filter(|c| c.action == Action::Create)
            .filter(|c| {
                let other_key = &c.step[base_name(&c.step).len()..];
                base_name(&c.step) == base
                    || (c.provider == gone.provider && (other_key == key || key.is_empty()))
            })
            .map(|c| c.step.as_str())
            .collect();
        if let Some(first) = created.first() {
            out.push(format!(
                "`{}` will be destroyed and {} created. If it is the same object under a new address, add\n    [[moved]]\n    from = {}\n    to = {}\n  to keep it.",
                gone.step,
                created.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
                toml_string(&gone.step),
                toml_string(first),
            ));
        }
    }
    out
}

/// `s` as a TOML string.
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn plan_step(
    req: &PlanRequest<'_>,
    step: &StepDecl,
    provider: &Arc<dyn Provider>,
    desired: &Desired,
) -> Result<StepChange, Box<Diag>> {
    let (name, provider_name) = (step.name.as_str(), step.provider.as_str());
    let prevent_destroy = step.prevent_destroy;
    let schema = provider.schema();
    let record = req.records.get(name);
    // `--replace nccl` replaces every instance, `--replace cluster` every
    // step of that module call.
    let forced = req.replace.iter().any(|r| {
        r == name
            || base_name(name) == r
            || name
                .strip_prefix(r.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    });
    let mut change = StepChange {
        step: name.to_string(),
        action: Action::NoOp,
        provider: provider_name.to_string(),
        reason: String::new(),
        inputs: Vec::new(),
        known_after_apply: !desired.is_known(),
        resumes: record
            .and_then(|r| r.in_flight.as_ref())
            .map(|f| f.token.clone()),
        depends_on: Vec::new(),
        details: Vec::new(),
        cost: None,
        create_before_destroy: None,
        replace_if_changed: false,
    };
    let after = |k: &str| shown_after(desired, k);
    let Some(rec) = record.filter(|r| r.applied) else {
        change.action = Action::Create;
        // A create-before-destroy replacement whose create did not finish:
        // the old object waits to be retired once it has.
        change.create_before_destroy =
            record.and_then(|r| replacing::finishing(provider.as_ref(), r));
        if let (Some(id), None) = (&step.import, record.and_then(|r| r.in_flight.as_ref())) {
            change.action = Action::Import;
            change.reason = format!("adopts `{id}`, changing nothing");
            return Ok(change);
        }
        change.reason = match record {
            Some(r) if r.in_flight.is_some() && r.last_error.is_some() => {
                "the last create failed; apply first reads what it left".into()
            }
            Some(r) if r.in_flight.is_some() && r.deposed.is_some() => {
                "resumes the interrupted create of a create-before-destroy replacement".into()
            }
            Some(r) if r.in_flight.is_some() => "resumes an interrupted create".into(),
            Some(r) if r.last_error.is_some() => "the last attempt failed".into(),
            _ => "new step".into(),
        };
        // The digest of the files an input names means something only as a
        // change; a new step lists its inputs alone.
        change.inputs = desired
            .stored
            .keys()
            .filter(|k| k.as_str() != flow_providers::CONTENT_KEY)
            .map(|k| InputDiff {
                name: k.clone(),
                before: Shown::Absent,
                after: after(k),
                forces_replacement: false,
            })
            .collect();
        return Ok(change);
    };
    let diff = if rec.provider != provider_name {
        Change::Replace(vec![])
    } else {
        provider.diff(
            &crate::secrets::upgrade_legacy_seals(&rec.inputs),
            &desired.stored,
        )
    };
    let (action, mut reason, forcing) = match (&diff, forced) {
        (_, true) => (
            Action::Replace,
            "requested with --replace".to_string(),
            vec![],
        ),
        (Change::Replace(f), _) if rec.provider != provider_name => (
            Action::Replace,
            format!("provider changed from {} to {provider_name}", rec.provider),
            f.clone(),
        ),
        (Change::Replace(f), _)
            if !f.is_empty() && f.iter().all(|k| desired.unknown.contains(k)) =>
        {
            change.replace_if_changed = true;
            (
                Action::Replace,
                format!("forced by {} if it changes (known after apply)", quoted(f)),
                f.clone(),
            )
        }
        (Change::Replace(f), _) => (
            Action::Replace,
            if f.is_empty() {
                "inputs changed".to_string()
            } else {
                format!("forced by {}", quoted(f))
            },
            f.clone(),
        ),
        (Change::Update(_), _) => (Action::Update, "inputs changed".into(), vec![]),
        (Change::NoOp, _) => (Action::NoOp, String::new(), vec![]),
    };
    let mut action = action;
    if let Some(flight) = &rec.in_flight {
        let resumed = match flight.operation {
            Operation::Create => Action::Replace,
            Operation::Update => Action::Update,
            Operation::Delete => Action::Replace,
        };
        if action < resumed {
            action = resumed;
            reason = if rec.last_error.is_some() {
                format!(
                    "the last {} failed; apply first reads what it left",
                    flight.operation
                )
            } else {
                format!("resumes an interrupted {}", flight.operation)
            };
        }
    } else if action == Action::NoOp && rec.last_error.is_some() {
        action = Action::Update;
        reason = "the last attempt failed".into();
    } else if action == Action::NoOp
        && !rec.drifted.is_empty()
        && schema.kind == flow_providers::StepKind::Resource
    {
        // Changed outside flow where no input shows it (a status, a
        // digest): update it back to the workflow's values.
        action = Action::Update;
        reason = "changed outside flow".into();
    }
    if action == Action::Replace
        && prevent_destroy
        && change.replace_if_changed
        && rec.in_flight.is_none()
    {
        // Replaced only if inputs known after apply turn out to change: the
        // plan cannot tell, and apply refuses before deleting anything if
        // they do (an EKS control-plane upgrade seldom changes its name).
        reason.push_str("; lifecycle.prevent_destroy: apply stops, deleting nothing, if it does");
    } else if action == Action::Replace && prevent_destroy {
        return Err(Box::new(Diag::new(
            "flow::prevent-destroy",
            format!("step `{name}` must be replaced ({reason}), but it has lifecycle.prevent_destroy"),
        )
        .help("revert the change that forces replacement, or remove prevent_destroy first")));
    }
    if action == Action::Replace && replacing::wanted(Some(step), provider.as_ref()) {
        change.create_before_destroy =
            Some(replacing::planned(provider.as_ref(), rec, &desired.stored));
    } else if let Some(finish) = replacing::finishing(provider.as_ref(), rec)
        && action != Action::Replace
    {
        // The replacement exists; the old object was not retired yet.
        reason = format!(
            "an interrupted create-before-destroy replacement left {} to retire",
            finish
                .retires
                .as_deref()
                .map_or("the old object".into(), |n| format!("`{n}`"))
        );
        action = Action::Replace;
        change.create_before_destroy = Some(finish);
    }
    change.action = action;
    change.reason = reason;
    if action != Action::NoOp {
        let mut names: Vec<&String> = rec.inputs.keys().chain(desired.stored.keys()).collect();
        names.sort();
        names.dedup();
        change.inputs = names
            .into_iter()
            .filter(|k| rec.inputs.get(*k) != desired.stored.get(*k))
            .map(|k| InputDiff {
                name: k.clone(),
                before: shown_before(rec.inputs.get(k)),
                after: if desired.stored.contains_key(k) {
                    after(k)
                } else {
                    Shown::Absent
                },
                forces_replacement: forcing.contains(k)
                    || schema.input(k).is_some_and(|s| s.force_new) && action == Action::Replace,
            })
            .collect();
    }
    Ok(change)
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shown_after(desired: &Desired, key: &str) -> Shown {
    if desired.unknown.iter().any(|k| k == key) {
        return Shown::KnownAfterApply;
    }
    let value = if desired.sensitive.iter().any(|k| k == key) {
        desired.stored.get(key)
    } else {
        // Keys flow adds (the content digest) exist only as stored.
        desired.actual.get(key).or_else(|| desired.stored.get(key))
    };
    shown_before(value)
}

fn shown_before(value: Option<&Value>) -> Shown {
    match value {
        None => Shown::Absent,
        Some(v) if flow_providers::is_sealed(v) => Shown::Sensitive,
        Some(Value::String(s)) if s == UNKNOWN => Shown::KnownAfterApply,
        Some(v) => Shown::Value(mask_sealed(v)),
    }
}
