//! Refine a computed plan: the lines each provider reads offline from a
//! pending step's inputs and files ([`flow_providers::Provider::plan_lines`]),
//! then what it sees looking at the real objects of steps with pending
//! changes (change sets, stacks stuck in a failed state).
//! Unchanged steps are never looked at, so plans of large, settled states stay
//! instant.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_providers::{PlanDetail, Prior};
use flow_state::StepRecord;
use tokio::task::JoinSet;

use super::model::{Action, Plan};
use super::outputs::PlannedOutputs;
use crate::lang::load::Loaded;

/// How long one provider may take to look.
const LOOK_TIMEOUT: Duration = Duration::from_secs(120);

/// Ask each pending step's provider for details, at most `parallelism` at
/// once; with `parallelism` 0, only what it reads offline (nothing looks at
/// a real object: an offline plan). What a provider refuses (a reservation that cannot take the step)
/// comes back, one diagnostic each; the plan is then not to be carried out.
pub async fn refine_plan(
    plan: &mut Plan,
    loaded: &Loaded,
    records: &BTreeMap<String, StepRecord>,
    legacy_salt: &[u8],
    parallelism: usize,
) -> Vec<crate::diag::Diag> {
    let mut tasks: JoinSet<(String, Result<PlanDetail, LookFailed>)> = JoinSet::new();
    let outputs = PlannedOutputs::of_plan(records, plan);
    let mut offline: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // What a provider reads of the inputs may hold a secret's value: every
    // line is masked like the rest of the plan's output.
    let redactor = loaded.redactor();
    let mut pending = Vec::new();
    for change in &plan.changes {
        if !matches!(
            change.action,
            Action::Create | Action::Update | Action::Replace
        ) {
            continue;
        }
        let Some(decl) = loaded.workflow.step(&change.step) else {
            continue;
        };
        let provider = loaded.provider(decl).clone();
        let lookup = |s: &str, k: &str| outputs.lookup(s, k);
        let Ok(desired) = loaded.resolve_inputs(decl, legacy_salt, &lookup) else {
            continue;
        };
        let files = flow_providers::ValidateContext {
            workdir: loaded.workflow.dir_of(decl).clone(),
        };
        let mut lines = provider.plan_lines(&desired.actual, &files);
        if change.action == Action::Create && !desired.is_known() {
            lines.extend(provider.creation_lines(&desired.actual, &desired.unknown, &files));
        }
        if !lines.is_empty() {
            offline.insert(change.step.clone(), lines);
        }
        if parallelism == 0
            || !provider.has_plan_detail()
            || !(desired.is_known() || provider.looks_before_inputs_are_known())
        {
            continue;
        }
        let mut record = records.get(&change.step).filter(|r| r.applied).cloned();
        let mut actual = desired.actual;
        if let Some(r) = record.as_mut() {
            // Names as the objects have them (a create-before-destroy
            // replacement's carries a suffix).
            let suffix = r.name_suffix.clone();
            r.inputs =
                super::replacing::live_inputs(provider.as_ref(), &r.inputs, suffix.as_deref());
            if change.action != Action::Replace {
                actual =
                    super::replacing::live_inputs(provider.as_ref(), &actual, suffix.as_deref());
            }
        }
        let mut ctx = loaded.unwatched_context(&change.step, loaded.region_of(decl));
        ctx.timeout = decl.timeout;
        pending.push((ctx, provider, record, actual));
    }
    let parallelism = parallelism.max(1);
    let mut queue = pending.into_iter();
    let mut results = BTreeMap::new();
    loop {
        while tasks.len() < parallelism {
            let Some((ctx, provider, record, desired)) = queue.next() else {
                break;
            };
            tasks.spawn(async move {
                let prior = record.as_ref().map(|r| Prior {
                    id: r.resource_id.as_deref(),
                    inputs: &r.inputs,
                    outputs: &r.outputs,
                    private: &r.private,
                });
                let res =
                    tokio::time::timeout(LOOK_TIMEOUT, provider.plan_detail(&ctx, prior, &desired))
                        .await;
                let res = match res {
                    Ok(Ok(d)) => Ok(d),
                    Ok(Err(e)) => Err(LookFailed::Provider(e)),
                    Err(_) => Err(LookFailed::TimedOut(LOOK_TIMEOUT)),
                };
                (ctx.step, res)
            });
        }
        match tasks.join_next().await {
            Some(Ok((step, res))) => {
                results.insert(step, res);
            }
            Some(Err(_)) => {}
            None => break,
        }
    }
    let mut refused = Vec::new();
    for change in &mut plan.changes {
        if let Some(lines) = offline.remove(&change.step) {
            change
                .details
                .extend(lines.iter().map(|l| redactor.redact(l)));
        }
        match results.remove(&change.step) {
            Some(Ok(detail)) => {
                change
                    .details
                    .extend(detail.lines.iter().map(|l| redactor.redact(l)));
                refused.extend(detail.refusals.iter().map(|r| {
                    crate::diag::Diag::new(
                        "flow::refused-by-plan",
                        redactor.redact(&format!("step `{}`: {}", change.step, r.message)),
                    )
                    .help(redactor.redact(&r.help))
                }));
                if let Some(why) = detail.replace_because {
                    if change.action == Action::Update || change.action == Action::Replace {
                        change.action = Action::Replace;
                        change.reason = why;
                    } else {
                        change.details.insert(0, why);
                    }
                }
            }
            Some(Err(e)) => {
                change
                    .details
                    .push(redactor.redact(&format!("(could not look at the real object: {e})")));
            }
            None => {}
        }
    }
    refused
}

/// Why a provider could not look at the real object while planning; the
/// plan goes on and says so under the step.
#[derive(Debug, thiserror::Error)]
enum LookFailed {
    /// The provider answered with an error.
    #[error("{0}")]
    Provider(flow_providers::ProviderError),
    /// It did not answer in time.
    #[error("timed out after {}", humantime::format_duration(*.0))]
    TimedOut(std::time::Duration),
}
