//! Refresh: before a plan is computed, read each applied step's real object
//! through its provider, in parallel, and turn what was found into records
//! as they would be if state had seen it (the object gone, inputs the
//! console changed, a stack's status) plus the plan's drift list. Nothing
//! is written here: `plan` shows the result, `apply` records it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flow_providers::{
    Drift, ErrorKind, OpContext, Prior, Provider, ProviderError, Refreshed, Registry,
};
use flow_state::StepRecord;
use serde_json::Value;
use tokio::task::JoinSet;

use super::access::AwsStep;
use super::model::{AttributeDrift, DriftFound, Shown, StepDrift};
use crate::lang::inputs::mask_sealed;
use crate::lang::load::Loaded;
use crate::lang::providers::recorded_provider;

/// How refresh runs.
#[derive(Debug, Clone)]
pub struct RefreshSettings {
    /// Reads at once.
    pub parallelism: usize,
    /// How long one read may take.
    pub timeout: Duration,
    /// Read only these steps (`--target` and what it needs); `None` for all.
    pub only: Option<BTreeSet<String>>,
}

/// What refresh found: the records as the real objects say, and the drift.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Every record, those of drifted or deleted objects rewritten.
    pub records: BTreeMap<String, StepRecord>,
    /// What changed or was deleted outside flow, or could not be read, in
    /// step order.
    pub drift: Vec<StepDrift>,
    /// The names of the records refresh rewrote (for `apply` to store).
    pub rewritten: Vec<String>,
}

/// Refresh could not reach a provider's service at all: no credentials, or
/// an endpoint that does not answer. One line per provider kind.
#[derive(Debug, thiserror::Error)]
#[error("{}\n{}", super::access::HEADER, .0.join("\n"))]
pub struct Unreachable(pub Vec<String>);

impl Unreachable {
    /// The next step for the user.
    pub fn help(&self) -> &'static str {
        super::access::HELP
    }
}

/// Read every applied step whose provider can read its object, at most
/// `settings.parallelism` at once. Steps with an operation in flight are
/// left to apply's reconcile, which reads them with their token.
pub async fn refresh_records(
    loaded: &Loaded,
    registry: &Registry,
    records: BTreeMap<String, StepRecord>,
    settings: RefreshSettings,
) -> Result<Refresh, Unreachable> {
    let mut queue = Vec::new();
    for rec in records.values() {
        if !rec.applied
            || rec.in_flight.is_some()
            || settings
                .only
                .as_ref()
                .is_some_and(|o| !o.contains(&rec.name))
        {
            continue;
        }
        let provider = match loaded.workflow.step(&rec.name) {
            Some(decl) if decl.provider == rec.provider => loaded.provider(decl).clone(),
            _ => match recorded_provider(registry, &rec.name, &rec.provider) {
                Ok(p) => p,
                Err(_) => continue,
            },
        };
        if !provider.can_refresh() {
            continue;
        }
        queue.push((rec.clone(), provider, op_context(loaded, rec)));
    }
    // Missing credentials or region stop the refresh before its first read.
    let aws: Vec<AwsStep> = queue
        .iter()
        .filter(|(_, provider, _)| provider.uses_aws())
        .map(|(rec, _, ctx)| AwsStep {
            step: rec.name.clone(),
            region: ctx.region.clone(),
            profile: ctx.profile.clone(),
        })
        .collect();
    let lines = super::access::unreachable(aws).await;
    if !lines.is_empty() {
        return Err(Unreachable(lines));
    }
    let found = read_all(queue, &settings).await;
    let redactor = loaded.redactor();
    let mut unreachable: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut refresh = Refresh {
        records,
        ..Refresh::default()
    };
    for (name, result) in found {
        let rec = refresh
            .records
            .get_mut(&name)
            .expect("read a recorded step");
        match result {
            Ok(found) => {
                let before = rec.clone();
                let shown = apply_found(rec, found);
                if *rec != before {
                    refresh.rewritten.push(name.clone());
                }
                refresh.drift.extend(shown);
            }
            Err(ReadFailed::Provider(e)) if cannot_reach(&e) => {
                let entry = unreachable
                    .entry(rec.provider.clone())
                    .or_insert_with(|| (0, reach_line(&rec.provider, &e)));
                entry.0 += 1;
            }
            Err(e) => refresh.drift.push(StepDrift {
                step: name.clone(),
                provider: rec.provider.clone(),
                found: DriftFound::CouldNotRead {
                    reason: redactor.redact(&e.to_string()),
                },
            }),
        }
    }
    if !unreachable.is_empty() {
        return Err(Unreachable(
            unreachable
                .into_iter()
                .map(|(provider, (n, line))| {
                    format!(
                        "  {provider} ({n} step{}): {line}",
                        if n == 1 { "" } else { "s" }
                    )
                })
                .collect(),
        ));
    }
    let order: Vec<&str> = loaded.dag.topo_order().unwrap_or_default();
    let rank = |s: &str| order.iter().position(|o| *o == s).unwrap_or(usize::MAX);
    refresh
        .drift
        .sort_by(|a, b| (rank(&a.step), &a.step).cmp(&(rank(&b.step), &b.step)));
    Ok(refresh)
}

/// What a read handed to a provider gets: its region as recorded (or as the
/// workflow says), the workflow's profile, no token, no output.
fn op_context(loaded: &Loaded, rec: &StepRecord) -> OpContext {
    let region = rec
        .region
        .clone()
        .or_else(|| match loaded.workflow.step(&rec.name) {
            Some(decl) => loaded.region_of(decl),
            None => loaded.workflow.region.clone(),
        });
    loaded.unwatched_context(&rec.name, region)
}

type Queued = (StepRecord, Arc<dyn Provider>, OpContext);

/// A read the service throttled (its SDK's own retries throttled too) is
/// tried again after a jittered back-off, up to this at first, doubling up
/// to [`LAST_BACK_OFF`], for as long as the read's timeout allows: a read is
/// safe to repeat, and a refresh of thousands of objects meets the service's
/// rate limit (docs/performance/workloads.md, section 3).
const FIRST_BACK_OFF: Duration = Duration::from_secs(1);

/// The longest back-off of a throttled read.
const LAST_BACK_OFF: Duration = Duration::from_secs(8);

/// Runs the reads, at most `parallelism` at once, each within the timeout;
/// a throttled read is tried again within it.
async fn read_all(
    queue: Vec<Queued>,
    settings: &RefreshSettings,
) -> Vec<(String, Result<Refreshed, ReadFailed>)> {
    let mut tasks = JoinSet::new();
    let mut queue = queue.into_iter();
    let mut results = Vec::new();
    loop {
        while tasks.len() < settings.parallelism.max(1) {
            let Some((rec, provider, ctx)) = queue.next() else {
                break;
            };
            let timeout = settings.timeout;
            tasks.spawn(async move {
                // An object a create-before-destroy replacement made has
                // its name with the suffix.
                let inputs = super::replacing::live_inputs(
                    provider.as_ref(),
                    &rec.inputs,
                    rec.name_suffix.as_deref(),
                );
                let read = async {
                    let mut delay = FIRST_BACK_OFF;
                    loop {
                        let prior = Prior {
                            id: rec.resource_id.as_deref(),
                            inputs: &inputs,
                            outputs: &rec.outputs,
                            private: &rec.private,
                        };
                        match provider.refresh(&ctx, prior).await {
                            Err(e) if e.is_throttling() => {
                                tokio::time::sleep(delay.mul_f64(rand::random::<f64>())).await;
                                delay = (delay * 2).min(LAST_BACK_OFF);
                            }
                            done => return done,
                        }
                    }
                };
                let res = match tokio::time::timeout(timeout, read).await {
                    Ok(Ok(found)) => Ok(found),
                    Ok(Err(e)) => Err(ReadFailed::Provider(e)),
                    Err(_) => Err(ReadFailed::TimedOut(timeout)),
                };
                (rec.name.clone(), res)
            });
        }
        match tasks.join_next().await {
            Some(Ok(result)) => results.push(result),
            Some(Err(_)) => {}
            None => break,
        }
    }
    results
}

/// Rewrites `rec` as `found` says, and returns the drift to show, if any:
/// drift already recorded (by an earlier `apply --refresh-only`) is not
/// shown again.
fn apply_found(rec: &mut StepRecord, found: Refreshed) -> Option<StepDrift> {
    match found {
        Refreshed::Gone => {
            rec.applied = false;
            rec.resource_id = None;
            rec.outputs = Default::default();
            rec.private = Value::Null;
            rec.drifted.clear();
            Some(StepDrift {
                step: rec.name.clone(),
                provider: rec.provider.clone(),
                found: DriftFound::Deleted,
            })
        }
        Refreshed::Present {
            drift,
            outputs,
            private,
        } => {
            // New outputs alone are recorded, not shown as drift.
            if let Some(outputs) = outputs {
                rec.outputs = outputs;
            }
            if let Some(private) = private.filter(|_| !drift.is_empty()) {
                rec.private = private;
            }
            let mut attributes = Vec::new();
            for mut d in drift {
                // A value state keeps only sealed (a sensitive variable
                // inside an input) is never shown, nor stored in clear.
                d.sensitive |= holds_seal(&d.recorded) || holds_seal(&d.real);
                if d.input && !d.sensitive {
                    attributes.push(shown(&d));
                    rec.inputs.insert(d.attribute.clone(), d.real);
                    continue;
                }
                let remembered = if d.sensitive {
                    Value::String("(sensitive)".into())
                } else {
                    d.real.clone()
                };
                if rec.drifted.get(&d.attribute) != Some(&remembered) {
                    attributes.push(shown(&d));
                    rec.drifted.insert(d.attribute.clone(), remembered);
                }
            }
            if attributes.is_empty() {
                return None;
            }
            Some(StepDrift {
                step: rec.name.clone(),
                provider: rec.provider.clone(),
                found: DriftFound::Changed { attributes },
            })
        }
    }
}

/// Whether `v` is, or holds anywhere inside it, a sealed secret.
fn holds_seal(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(holds_seal),
        Value::Object(map) => map.values().any(holds_seal),
        other => flow_providers::is_sealed(other),
    }
}

/// One drifted attribute as a plan shows it.
fn shown(d: &Drift) -> AttributeDrift {
    let show = |v: &Value| {
        if d.sensitive || flow_providers::is_sealed(v) {
            Shown::Sensitive
        } else if v.is_null() {
            Shown::Absent
        } else {
            Shown::Value(mask_sealed(v))
        }
    };
    AttributeDrift {
        name: d.attribute.clone(),
        recorded: show(&d.recorded),
        real: show(&d.real),
    }
}

/// Whether an error says the service cannot be reached at all (no
/// credentials, an endpoint that does not answer), rather than that this
/// one object could not be read.
fn cannot_reach(e: &ProviderError) -> bool {
    match e.kind {
        ErrorKind::Auth => true,
        ErrorKind::Retryable => {
            let m = e.message.to_ascii_lowercase();
            m.contains("dispatch failure")
                || m.contains("connection refused")
                || m.contains("dns error")
                || m.contains("failed to connect")
        }
        _ => false,
    }
}

/// The one line for a provider kind that cannot reach its service: what
/// failed in a few words, and what to set.
fn reach_line(provider: &str, e: &ProviderError) -> String {
    if e.message.starts_with("no AWS region") {
        return e.message.clone();
    }
    // A refusal the provider explained (an EKS API server that refused
    // flow's token names the cluster and how to refresh the credentials).
    if e.kind == ErrorKind::Auth
        && let Some(help) = &e.help
    {
        return format!("{}; {help}", e.message.lines().next().unwrap_or_default());
    }
    let what = if e.kind == ErrorKind::Auth {
        "no usable credentials"
    } else {
        "the endpoint does not answer"
    };
    let set = if provider.starts_with("kube.") {
        "check the kubeconfig (`KUBECONFIG`, its current context) or the cluster step's connection"
    } else {
        "set `AWS_PROFILE` (or `[workflow] profile`) to usable credentials, and `AWS_ENDPOINT_URL` if the API is a local one"
    };
    format!("{what}; {set}")
}

/// Why one step could not be read.
#[derive(Debug, thiserror::Error)]
enum ReadFailed {
    /// The provider answered with an error.
    #[error("{0}")]
    Provider(ProviderError),
    /// It did not answer in time.
    #[error("timed out after {}", humantime::format_duration(*.0))]
    TimedOut(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied() -> StepRecord {
        let mut rec = StepRecord::new("nodes", "eks.nodegroup", 0);
        rec.applied = true;
        rec.resource_id = Some("arn:nodes".into());
        rec.inputs = json!({"desired_size": 2, "name": "gpu"})
            .as_object()
            .cloned()
            .unwrap();
        rec
    }

    #[test]
    fn a_deleted_object_is_no_longer_applied() {
        let mut rec = applied();
        let drift = apply_found(&mut rec, Refreshed::Gone).unwrap();
        assert_eq!(drift.found, DriftFound::Deleted);
        assert!(!rec.applied && rec.resource_id.is_none());
    }

    #[test]
    fn drifted_inputs_take_the_real_value_and_attributes_are_remembered() {
        let mut rec = applied();
        let found = Refreshed::drifted(vec![
            Drift::of_input("desired_size", json!(2), json!(3)),
            Drift::of_attribute("status", json!("ACTIVE"), json!("DEGRADED")),
        ]);
        let drift = apply_found(&mut rec, found).unwrap();
        assert_eq!(rec.inputs["desired_size"], json!(3));
        assert_eq!(rec.drifted.keys().collect::<Vec<_>>(), ["status"]);
        assert_eq!(rec.drifted["status"], json!("DEGRADED"));
        // Recorded once (apply --refresh-only), it is not shown again: the
        // input now reads as recorded, the status as remembered.
        let mut again = rec.clone();
        let same = Refreshed::drifted(vec![Drift::of_attribute(
            "status",
            json!("ACTIVE"),
            json!("DEGRADED"),
        )]);
        assert!(apply_found(&mut again, same).is_none());
        assert_eq!(again, rec);
        let DriftFound::Changed { attributes } = drift.found else {
            panic!("{drift:?}")
        };
        assert_eq!(attributes[0].recorded, Shown::Value(json!(2)));
        assert_eq!(attributes[0].real, Shown::Value(json!(3)));
        assert_eq!(attributes[1].name, "status");
    }

    #[test]
    fn an_input_holding_a_sealed_secret_is_never_shown_nor_stored_in_clear() {
        let seal = flow_providers::seal_hex(&"ab".repeat(32));
        let mut rec = applied();
        rec.inputs.insert(
            "parameters".into(),
            json!({"Token": seal, "Cidr": "10.0.0.0/16"}),
        );
        let found = Refreshed::drifted(vec![Drift::of_input(
            "parameters",
            json!({"Token": seal, "Cidr": "10.0.0.0/16"}),
            json!({"Token": "the-real-secret", "Cidr": "10.0.0.0/16"}),
        )]);
        let drift = apply_found(&mut rec, found).unwrap();
        let DriftFound::Changed { attributes } = drift.found else {
            panic!("{drift:?}")
        };
        assert_eq!(attributes[0].real, Shown::Sensitive);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(!text.contains("the-real-secret"), "{text}");
    }

    #[test]
    fn nothing_changed_is_no_drift_and_secrets_are_never_shown() {
        let mut rec = applied();
        assert!(apply_found(&mut rec, Refreshed::unchanged()).is_none());
        assert_eq!(rec, applied());
        let d = Drift::of_attribute("value", json!("a"), json!("b")).secret();
        let s = shown(&d);
        assert_eq!((s.recorded, s.real), (Shown::Sensitive, Shown::Sensitive));
    }

    #[test]
    fn only_credentials_and_dead_endpoints_stop_the_refresh() {
        assert!(cannot_reach(&ProviderError::auth("denied")));
        assert!(cannot_reach(&ProviderError::retryable(
            "describe stack `x`: dispatch failure: connection refused"
        )));
        assert!(!cannot_reach(&ProviderError::retryable("Rate exceeded")));
        assert!(!cannot_reach(&ProviderError::fatal("odd")));
        assert!(reach_line("kube.manifest", &ProviderError::auth("x")).contains("kubeconfig"));
        assert!(reach_line("fsx.lustre", &ProviderError::auth("x")).contains("AWS_PROFILE"));
        let refused = ProviderError::auth("EKS cluster `dlc` refused flow's token")
            .with_help("refresh the credentials");
        assert_eq!(
            reach_line("kube.manifest", &refused),
            "EKS cluster `dlc` refused flow's token; refresh the credentials"
        );
        let region = ProviderError::auth("no AWS region: set `region` under [workflow]");
        assert!(cannot_reach(&region));
        assert_eq!(
            reach_line("cloudformation.stack", &region),
            "no AWS region: set `region` under [workflow]"
        );
    }
}
