//! The controllers and kubelets the test cluster lacks, played through the
//! real API (see `support::kube`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::super::workspace_root;
use super::pace::{Clock, Held, Pace};
use super::training;

/// Plays the controllers and kubelets the test cluster lacks.
pub struct Driver {
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<HashSet<String>>>,
    pace: Arc<Mutex<Option<Pace>>>,
    scheduling: Arc<AtomicBool>,
    /// Held by each pass, and by a test that changes several things the
    /// next pass must see at once ([`Driver::pause`]).
    turn: Arc<tokio::sync::Mutex<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Driver {
    pub(super) fn start(client: kube::Client) -> Driver {
        let stop = Arc::new(AtomicBool::new(false));
        let held: Arc<Mutex<HashSet<String>>> = Arc::default();
        let pace: Arc<Mutex<Option<Pace>>> = Arc::default();
        let scheduling = Arc::new(AtomicBool::new(false));
        let turn: Arc<tokio::sync::Mutex<()>> = Arc::default();
        let (s, h, p, t) = (stop.clone(), held.clone(), pace.clone(), turn.clone());
        let bind = scheduling.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut clock: Option<Clock> = None;
                while !s.load(Ordering::SeqCst) {
                    let by_hand = h.lock().unwrap().clone();
                    let paced = *p.lock().unwrap();
                    let held = match paced {
                        Some(pace) => {
                            let clock = clock.get_or_insert_with(|| Clock::new(pace));
                            clock.held(&client, by_hand).await
                        }
                        None => Held::by_hand(by_hand),
                    };
                    {
                        let _turn = t.lock().await;
                        tick(&client, &held, bind.load(Ordering::SeqCst)).await;
                    }
                    // Paced, a pass is a pace's unit of resolution: a finer
                    // one keeps what the driver adds to each length small.
                    let pass = if paced.is_some() { 40 } else { 150 };
                    tokio::time::sleep(Duration::from_millis(pass)).await;
                }
            });
        });
        Driver {
            stop,
            held,
            pace,
            scheduling,
            turn,
            thread: Some(thread),
        }
    }

    /// From now on, takes as long over each rollout and job as `pace` says
    /// (see `pace.rs`); objects already there count from this call.
    pub fn pace(&self, pace: Pace) {
        *self.pace.lock().unwrap() = Some(pace);
    }

    /// From now on, binds the pods of jobs a `nodeSelector` sends to a
    /// group of nodes as kube-scheduler would (`training.rs`); until then
    /// such pods, as every pod not pinned to a hostname, run on no node.
    pub fn schedule(&self) {
        self.scheduling.store(true, Ordering::SeqCst);
    }

    /// Waits for the pass under way to end and keeps the next from starting
    /// until the guard is dropped: what a test changes meanwhile (two nodes
    /// dying) is seen by one pass, at once.
    pub fn pause(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.blocking_lock()
    }

    /// Leaves objects named `name` (any kind) as they are until released.
    pub fn hold(&self, name: &str) {
        self.held.lock().unwrap().insert(name.to_string());
    }

    /// Lets the driver finish objects named `name`.
    pub fn release(&self, name: &str) {
        self.held.lock().unwrap().remove(name);
    }

    pub(super) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The API resource of `kind` (`plural`) in `group`/`version`.
pub(super) fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn list(client: &kube::Client, r: &ApiResource) -> Vec<DynamicObject> {
    Api::<DynamicObject>::all_with(client.clone(), r)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Merges `status` into `obj`'s status, as its controller would.
pub(super) async fn set_status(
    client: &kube::Client,
    r: &ApiResource,
    obj: &DynamicObject,
    status: Value,
) {
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = if ns.is_empty() {
        Api::all_with(client.clone(), r)
    } else {
        Api::namespaced_with(client.clone(), &ns, r)
    };
    let _ = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await;
}

fn generation(o: &DynamicObject) -> i64 {
    o.metadata.generation.unwrap_or(1)
}

/// One pass over everything the driver looks after.
async fn tick(client: &kube::Client, held: &Held, scheduling: bool) {
    let skip = |o: &DynamicObject, kind: &str| {
        o.metadata.deletion_timestamp.is_some()
            || o.metadata
                .name
                .as_ref()
                .is_some_and(|n| held.holds(kind, n))
    };
    let deployments = ar("apps", "v1", "Deployment", "deployments");
    for d in list(client, &deployments).await {
        if skip(&d, &deployments.kind)
            || d.data["status"]["observedGeneration"].as_i64() == Some(generation(&d))
        {
            continue;
        }
        let n = d.data["spec"]["replicas"].as_i64().unwrap_or(1);
        set_status(client, &deployments, &d, json!({
            "observedGeneration": generation(&d), "replicas": n, "updatedReplicas": n,
            "readyReplicas": n, "availableReplicas": n,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
        }))
        .await;
    }
    let daemonsets = ar("apps", "v1", "DaemonSet", "daemonsets");
    for d in list(client, &daemonsets).await {
        if skip(&d, &daemonsets.kind)
            || d.data["status"]["observedGeneration"].as_i64() == Some(generation(&d))
        {
            continue;
        }
        set_status(client, &daemonsets, &d, json!({
            "observedGeneration": generation(&d), "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
            "numberReady": 2, "updatedNumberScheduled": 2, "numberAvailable": 2, "numberMisscheduled": 0
        }))
        .await;
    }
    let statefulsets = ar("apps", "v1", "StatefulSet", "statefulsets");
    for s in list(client, &statefulsets).await {
        if skip(&s, &statefulsets.kind)
            || s.data["status"]["observedGeneration"].as_i64() == Some(generation(&s))
        {
            continue;
        }
        let n = s.data["spec"]["replicas"].as_i64().unwrap_or(1);
        set_status(
            client,
            &statefulsets,
            &s,
            json!({
                "observedGeneration": generation(&s), "replicas": n, "readyReplicas": n,
                "currentReplicas": n, "updatedReplicas": n
            }),
        )
        .await;
    }
    let pvcs = ar("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims");
    for c in list(client, &pvcs).await {
        if !skip(&c, &pvcs.kind) && c.data["status"]["phase"].as_str() != Some("Bound") {
            set_status(client, &pvcs, &c, json!({"phase": "Bound"})).await;
        }
    }
    finalize_namespaces(client).await;
    super::disruption::tick(client, held).await;
    let jobs = ar("batch", "v1", "Job", "jobs");
    for j in list(client, &jobs).await {
        let pods = j.data["spec"]["completions"].as_i64().unwrap_or(1).max(1);
        let replicas = [("", pods)];
        run_job(client, &jobs, &j, held, "job-name", &replicas, scheduling).await;
    }
    // The training operator's v1 kinds, and the MPI operator's v2beta1
    // MPIJob (a cluster serves one of the two MPIJob versions).
    for (version, kind, plural, specs) in [
        ("v1", "PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"),
        ("v1", "MPIJob", "mpijobs", "mpiReplicaSpecs"),
        ("v2beta1", "MPIJob", "mpijobs", "mpiReplicaSpecs"),
    ] {
        let r = ar("kubeflow.org", version, kind, plural);
        for j in list(client, &r).await {
            let specs = j.data["spec"][specs]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let mut replicas: Vec<(String, i64)> = specs
                .iter()
                .map(|(k, v)| (k.to_lowercase(), v["replicas"].as_i64().unwrap_or(1)))
                .collect();
            replicas.sort_by_key(|(k, _)| {
                if k == "master" || k == "launcher" {
                    0
                } else {
                    1
                }
            });
            let replicas: Vec<(&str, i64)> =
                replicas.iter().map(|(k, n)| (k.as_str(), *n)).collect();
            run_job(
                client,
                &r,
                &j,
                held,
                "training.kubeflow.org/job-name",
                &replicas,
                scheduling,
            )
            .await;
        }
    }
    super::training::tick(client).await;
}

/// Namespaces stuck in `Terminating` lose their finalizer (the namespace
/// controller's part) once flow has deleted what they held.
async fn finalize_namespaces(client: &kube::Client) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    for ns in list.items {
        if ns.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let name = ns.metadata.name.clone().unwrap_or_default();
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "spec": {"finalizers": []}});
        let req = http::Request::put(format!("/api/v1/namespaces/{name}/finalize"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let _ = client.request_text(req).await;
    }
}

/// Runs a job: pods `NAME[-REPLICA]-I` Running, then (unless held)
/// terminated, then the job's status.
async fn run_job(
    client: &kube::Client,
    r: &ApiResource,
    job: &DynamicObject,
    held: &Held,
    label: &str,
    replicas: &[(&str, i64)],
    scheduling: bool,
) {
    if job.metadata.deletion_timestamp.is_some() {
        return;
    }
    let done = job.data["status"]["conditions"]
        .as_array()
        .is_some_and(|c| {
            c.iter().any(|c| {
                matches!(
                    c["type"].as_str(),
                    Some("Complete" | "Succeeded" | "Failed")
                )
            })
        });
    if done {
        return;
    }
    let name = job.metadata.name.clone().unwrap_or_default();
    let ns = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let notes = job.metadata.annotations.clone().unwrap_or_default();
    let mut failed = notes
        .get("test.flow/outcome")
        .is_some_and(|o| o == "Failed");
    let mut hosts = pinned_hosts(&job.data);
    let listed = training::listing(&job.data);
    let log = match (notes.get("test.flow/logs"), listed) {
        (Some(log), _) => log.clone(),
        (None, Some((text, ok))) => {
            failed |= !ok;
            text
        }
        (None, None) => {
            let (program, text) = emulated_output(&job.data);
            planted(client, &hosts, &program, text).await
        }
    };
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let mut names = Vec::new();
    for (kind, n) in replicas {
        for i in 0..*n {
            let pod = if kind.is_empty() {
                format!("{name}-{i}")
            } else {
                format!("{name}-{kind}-{i}")
            };
            names.push((pod, kind.to_string(), i));
        }
    }
    // Pods a nodeSelector sends to a group are bound by the scheduler
    // (`training.rs`), all at once, or not yet.
    let group = training::group_selector(&job.data).filter(|_| scheduling && hosts.is_empty());
    if let Some(selector) = &group
        && let Some((first, _, _)) = names.first()
        && pods.get_opt(first).await.ok().flatten().is_none()
    {
        match training::bind(client, selector, label, &name, names.len()).await {
            Some(bound) => hosts = bound,
            None => return,
        }
    }
    let container = first_container(&job.data)
        .and_then(|c| c["name"].as_str())
        .unwrap_or("main")
        .to_string();
    let finishing = !held.holds(&r.kind, &name);
    let last = names.len().saturating_sub(1);
    for (idx, (pod, kind, i)) in names.iter().enumerate() {
        let existing = pods.get_opt(pod).await.ok().flatten();
        if existing.is_none() {
            let mut body = json!({
                "metadata": {"name": pod, "labels": {label: name, "training.kubeflow.org/replica-type": kind,
                    "training.kubeflow.org/replica-index": i.to_string()}},
                "spec": {"containers": [{"name": container, "image": "test/image"}]}
            });
            if group.is_some() {
                body["metadata"]["labels"]["flow.test/scheduled"] = json!("true");
            }
            // A job held to nodes (by hostname) has its pods there, in turn.
            if !hosts.is_empty() {
                body["spec"]["nodeName"] = json!(hosts[idx % hosts.len()]);
            }
            let body: k8s_openapi::api::core::v1::Pod = serde_json::from_value(body).unwrap();
            if pods.create(&PostParams::default(), &body).await.is_err() {
                return;
            }
        }
        let (phase, state) = if !finishing {
            (
                "Running",
                json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
            )
        } else if failed && idx == last {
            (
                "Failed",
                json!({"terminated": {"exitCode": 1, "reason": "Error", "message": log}}),
            )
        } else {
            let text = if idx == 0 {
                log.clone()
            } else {
                format!("{pod} done")
            };
            (
                "Succeeded",
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": text}}),
            )
        };
        let status = json!({"status": {"phase": phase, "containerStatuses": [{
            "name": container, "image": "test/image", "imageID": "", "ready": phase == "Running",
            "restartCount": 0, "state": state}]}});
        let _ = pods
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
    let now = "2026-01-01T00:00:00Z";
    let status = if !finishing {
        if r.kind == "Job" {
            json!({"active": names.len(), "startTime": now})
        } else {
            json!({"conditions": [
                {"type": "Created", "status": "True", "reason": "Created"},
                {"type": "Running", "status": "True", "reason": "Running"}], "startTime": now})
        }
    } else if r.kind == "Job" {
        if failed {
            json!({"failed": 1, "startTime": now, "conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
        } else {
            json!({"succeeded": names.len(), "startTime": now, "completionTime": now,
                "conditions": [{"type": "Complete", "status": "True"}]})
        }
    } else if failed {
        json!({"conditions": [
            {"type": "Created", "status": "True", "reason": "Created"},
            {"type": "Running", "status": "False", "reason": "Running"},
            {"type": "Failed", "status": "True", "reason": format!("{}Failed", r.kind),
             "message": format!("{} {name} is failed because 1 Worker replica(s) failed.", r.kind)}]})
    } else {
        json!({"conditions": [
            {"type": "Created", "status": "True", "reason": "Created"},
            {"type": "Running", "status": "False", "reason": "Running"},
            {"type": "Succeeded", "status": "True", "reason": format!("{}Succeeded", r.kind),
             "message": format!("{} {name} is successfully completed.", r.kind)}], "completionTime": now})
    };
    set_status(client, r, job, status).await;
}

/// The first container of a Job's pod template, or of a Kubeflow job's
/// first replica (the launcher or master when there is one).
fn first_container(job: &Value) -> Option<&Value> {
    if let Some(c) = job.pointer("/spec/template/spec/containers/0") {
        return Some(c);
    }
    let specs = job["spec"]
        .as_object()?
        .iter()
        .find(|(k, _)| k.ends_with("ReplicaSpecs"))?
        .1
        .as_object()?;
    let first = ["Launcher", "Master"]
        .iter()
        .find_map(|k| specs.get(*k))
        .or_else(|| specs.values().next())?;
    first.pointer("/template/spec/containers/0")
}

/// What the job's program prints, as the local cloud emulates it: the
/// text of `scripts/local-cloud/outputs/PROGRAM.txt` for the first PROGRAM
/// named in the first container's command, args or environment values (the
/// same files the Batch compute emulator uses), filled by the rule of
/// `outputs/README` from the container's environment and the program's own
/// arguments (`emulated.rs`); "done" for programs it does not know.
fn emulated_output(job: &Value) -> (String, String) {
    let Some(c) = first_container(job) else {
        return (String::new(), "done".into());
    };
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|k| c[*k].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let env: std::collections::BTreeMap<String, String> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
        .collect();
    let mut line = words.join(" ");
    for value in env.values() {
        line.push(' ');
        line.push_str(value);
    }
    let dir = workspace_root().join("scripts/local-cloud/outputs");
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    programs.sort();
    for path in programs {
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".txt"))
        else {
            continue;
        };
        if line.contains(name) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let names = super::emulated::names_for(name, &line, &env);
            return (name.to_string(), super::emulated::fill(&text, &names));
        }
    }
    (String::new(), "done".into())
}

/// The hostnames a job's pods are held to: a nodeSelector on
/// `kubernetes.io/hostname`, or a required node affinity `In` hostnames.
fn pinned_hosts(job: &Value) -> Vec<String> {
    let mut specs: Vec<&Value> = job.pointer("/spec/template/spec").into_iter().collect();
    if let Some(spec) = job["spec"].as_object() {
        for (_, r) in spec.iter().filter(|(k, _)| k.ends_with("ReplicaSpecs")) {
            let replicas = r.as_object().into_iter().flat_map(|r| r.values());
            specs.extend(replicas.filter_map(|r| r.pointer("/template/spec")));
        }
    }
    let key = "kubernetes.io/hostname";
    let mut hosts: Vec<String> = Vec::new();
    for spec in specs {
        let selected = spec["nodeSelector"][key]
            .as_str()
            .map(|h| vec![h.to_string()]);
        let terms = "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions";
        let affine = spec.pointer(terms).and_then(Value::as_array).map(|e| {
            e.iter()
                .filter(|e| e["key"] == key && e["operator"] == "In")
                .flat_map(|e| e["values"].as_array().into_iter().flatten())
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        });
        for h in selected.into_iter().chain(affine).flatten() {
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
    }
    hosts
}

/// A fault a test planted on the nodes (named by hostname) a job runs on,
/// as annotations of their Node objects: `test.flow/PROGRAM` is what
/// PROGRAM prints there instead (`test.flow/nvidia-smi`); and
/// `test.flow/busbw-factor` scales the `# Avg bus bandwidth` figure of a
/// job on the node (the slowest node of a pair sets its pace).
async fn planted(client: &kube::Client, hosts: &[String], program: &str, text: String) -> String {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let mut factor: Option<f64> = None;
    for host in hosts {
        let Ok(Some(node)) = nodes.get_opt(host).await else {
            continue;
        };
        let notes = node.metadata.annotations.unwrap_or_default();
        if let Some(out) = notes.get(&format!("test.flow/{program}")) {
            return out.clone();
        }
        if let Some(f) = notes
            .get("test.flow/busbw-factor")
            .and_then(|f| f.parse().ok())
        {
            factor = Some(factor.map_or(f, |g: f64| g.min(f)));
        }
    }
    let Some(factor) = factor else {
        return text;
    };
    let scaled = |l: &str| {
        let (head, figure) = l.split_once(':')?;
        let v: f64 = figure.trim().parse().ok()?;
        Some(format!("{head}: {:.4}", v * factor))
    };
    text.split('\n')
        .map(|l| match l.contains("Avg bus bandwidth") {
            true => scaled(l).unwrap_or_else(|| l.to_string()),
            false => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
