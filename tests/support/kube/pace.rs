//! How long the driver takes over what it plays (see `support::kube`): by
//! default everything at once, as a unit test wants; with a [`Pace`], a
//! rollout and a job last as long as they do on a cluster, as the
//! benchmark's latency model says (bench/latency.toml's `kube.manifest` and
//! `kube.job` rows divided by its scale), so that a workflow's Kubernetes
//! steps take their share of time to training.
//!
//! An object's clock starts when the driver first sees it (within one pass,
//! 40 ms when paced, of its creation: the API's `creationTimestamp` counts
//! whole seconds) and it is held, as [`super::Driver::hold`] holds it, until its
//! length has passed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

/// How long the driver takes over each kind of work.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pace {
    /// A Deployment, DaemonSet or StatefulSet from creation to ready.
    pub rollout: Duration,
    /// A Job, PyTorchJob or MPIJob from creation to its end.
    pub job: Duration,
}

/// When the driver first saw each object it paces.
pub(super) struct Clock {
    pace: Pace,
    first_seen: HashMap<String, Instant>,
}

/// The kinds paced, each with the length that applies to it.
fn kinds() -> [(ApiResource, bool); 7] {
    let r = |group: &str, version: &str, kind: &str, plural: &str| ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    };
    [
        (r("apps", "v1", "Deployment", "deployments"), false),
        (r("apps", "v1", "DaemonSet", "daemonsets"), false),
        (r("apps", "v1", "StatefulSet", "statefulsets"), false),
        (r("batch", "v1", "Job", "jobs"), true),
        (r("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"), true),
        (r("kubeflow.org", "v1", "MPIJob", "mpijobs"), true),
        (r("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"), true),
    ]
}

impl Clock {
    pub(super) fn new(pace: Pace) -> Clock {
        Clock {
            pace,
            first_seen: HashMap::new(),
        }
    }

    /// What the driver holds now: paced objects whose length has not passed
    /// yet, and any object of a paced kind made since this listing (its
    /// clock not started yet).
    pub(super) async fn held(&mut self, client: &kube::Client, by_hand: HashSet<String>) -> Held {
        let now = Instant::now();
        let mut held = by_hand;
        let mut known = HashSet::new();
        for (resource, is_job) in kinds() {
            let length = if is_job {
                self.pace.job
            } else {
                self.pace.rollout
            };
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            // A kind the server does not serve (no CRD yet) has nothing to pace.
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for o in list.items {
                let (Some(uid), Some(name)) = (o.metadata.uid, o.metadata.name) else {
                    continue;
                };
                let seen = *self.first_seen.entry(uid).or_insert(now);
                if now.duration_since(seen) < length {
                    held.insert(name.clone());
                }
                known.insert((resource.kind.clone(), name));
            }
        }
        Held {
            names: held,
            known: Some(known),
        }
    }
}

/// The objects the driver leaves as they are in one pass.
pub(super) struct Held {
    /// By name, any kind.
    names: HashSet<String>,
    /// When paced: the objects of paced kinds the pace's listing saw (kind,
    /// name). One of those kinds not among them was made after the listing
    /// and has not started its clock yet, so it is held too.
    known: Option<HashSet<(String, String)>>,
}

impl Held {
    /// Only the objects held by hand ([`super::Driver::hold`]).
    pub(super) fn by_hand(names: HashSet<String>) -> Held {
        Held { names, known: None }
    }

    /// Whether the driver leaves the object `name` of `kind` as it is.
    pub(super) fn holds(&self, kind: &str, name: &str) -> bool {
        self.names.contains(name)
            || self.known.as_ref().is_some_and(|known| {
                kinds().iter().any(|(r, _)| r.kind == kind)
                    && !known.contains(&(kind.to_string(), name.to_string()))
            })
    }

    /// Whether the driver leaves objects named `name` as they are, whatever
    /// their kind (kinds the pace does not time).
    pub(super) fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }
}
