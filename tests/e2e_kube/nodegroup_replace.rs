//! An eks.nodegroup replaced create-before-destroy, against moto (EKS) and
//! a real kube-apiserver reached with an EKS token. The test plays what the
//! test cluster lacks: a [`Fleet`] thread registers a Ready node for each
//! node of every ACTIVE group moto has and removes the nodes of groups
//! that are gone; the driver keeps the PodDisruptionBudget's status as the
//! disruption controller would and removes evicted pods as a kubelet would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::log;
use crate::support::kube::{KubeServer, Options};
use crate::support::moto::Moto;
use crate::support::{Project, Run, finish, signal, wait_until};

const PODS: &str = "/api/v1/namespaces/default/pods";

/// A workflow of the EKS cluster `dlc` and its node group `gpu` of `nodes`
/// `instance_type` nodes, the group's inputs last, for a caller to add to.
pub(super) fn cluster_and_group(instance_type: &str, nodes: usize) -> String {
    format!(
        r#"
[workflow]
name = "wf"
region = "us-east-1"

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
name = "dlc"
subnet_ids = ["subnet-0a", "subnet-0b"]
role_arn = "arn:aws:iam::123456789012:role/eks"

[steps.ng]
provider = "eks.nodegroup"
[steps.ng.inputs]
cluster = "${{steps.eks.outputs.name}}"
name = "gpu"
instance_types = ["{instance_type}"]
subnet_ids = ["subnet-0b"]
desired_size = {nodes}
max_size = {nodes}
node_role_arn = "arn:aws:iam::123456789012:role/nodes"
"#
    )
}

/// What the test saw, in order, with when.
#[derive(Default)]
struct Seen(Mutex<Vec<(Instant, String)>>);

impl Seen {
    fn note(&self, what: String) {
        let mut v = self.0.lock().unwrap();
        if !v.iter().any(|(_, w)| *w == what) {
            v.push((Instant::now(), what));
        }
    }

    /// When `what` was first seen.
    fn at(&self, what: &str) -> Instant {
        let v = self.0.lock().unwrap();
        v.iter()
            .find(|(_, w)| w == what)
            .map(|(t, _)| *t)
            .unwrap_or_else(|| {
                panic!(
                    "never saw {what}: {:?}",
                    v.iter().map(|(_, w)| w).collect::<Vec<_>>()
                )
            })
    }

    fn saw(&self, what: &str) -> bool {
        self.0.lock().unwrap().iter().any(|(_, w)| w == what)
    }
}

/// Plays EKS registering nodes, and watches: `group G ready`, `group G
/// gone`, `node N cordoned`, `pod P evicted`.
struct Fleet {
    stop: Arc<AtomicBool>,
    seen: Arc<Seen>,
}

/// Stops the fleet when dropped, so a failed assertion ends the test
/// instead of waiting on the fleet's thread.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Fleet {
    fn new() -> Fleet {
        Fleet {
            stop: Arc::new(AtomicBool::new(false)),
            seen: Arc::default(),
        }
    }

    fn watch<'s>(
        &self,
        scope: &'s std::thread::Scope<'s, '_>,
        moto: &'s Moto,
        k: &'s KubeServer,
    ) -> StopOnDrop {
        let (stop, seen) = (self.stop.clone(), self.seen.clone());
        scope.spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                tick(moto, k, &seen);
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        StopOnDrop(self.stop.clone())
    }
}

fn tick(moto: &Moto, k: &KubeServer, seen: &Seen) {
    let (_, groups) = moto.rest_call("eks", "GET", "/clusters/dlc/node-groups", "");
    let groups: Vec<String> = serde_json::from_str::<Value>(&groups)
        .ok()
        .and_then(|v| v["nodegroups"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    let mut live = Vec::new();
    for g in &groups {
        let (_, ng) = moto.rest_call("eks", "GET", &format!("/clusters/dlc/node-groups/{g}"), "");
        let ng: Value = serde_json::from_str(&ng).unwrap_or_default();
        if ng["nodegroup"]["status"] != "ACTIVE" {
            continue;
        }
        live.push(g.clone());
        let n = ng["nodegroup"]["scalingConfig"]["desiredSize"]
            .as_u64()
            .unwrap_or(0);
        for i in 0..n {
            let node = format!("{g}-node-{i}");
            if k.get(&format!("/api/v1/nodes/{node}")).is_none() {
                k.post(
                    "/api/v1/nodes",
                    &json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node, "labels": {"eks.amazonaws.com/nodegroup": g}}}),
                );
                k.merge_patch(&format!("/api/v1/nodes/{node}/status"), &json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}));
            }
        }
        seen.note(format!("group {g} ready"));
    }
    let nodes = k.get("/api/v1/nodes").unwrap_or_default();
    for node in nodes["items"].as_array().into_iter().flatten() {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        let group = node["metadata"]["labels"]["eks.amazonaws.com/nodegroup"]
            .as_str()
            .unwrap_or_default();
        if node["spec"]["unschedulable"] == true {
            seen.note(format!("node {name} cordoned"));
        }
        if !live.iter().any(|g| g == group) && seen.saw(&format!("group {group} ready")) {
            seen.note(format!("group {group} gone"));
            k.delete(&format!("/api/v1/nodes/{name}"));
        }
    }
    for pod in ["web-0", "web-1", "web-a", "web-b"] {
        let p = k.get(&format!("{PODS}/{pod}"));
        let started = seen.saw(&format!("pod {pod} started"));
        match p {
            Some(p) if p["metadata"]["deletionTimestamp"].is_null() => {
                seen.note(format!("pod {pod} started"))
            }
            _ if started => seen.note(format!("pod {pod} evicted")),
            _ => {}
        }
    }
}

/// A Running, Ready pod of app `web` on `node`; `daemon`: a DaemonSet's.
fn run_pod(k: &KubeServer, name: &str, node: &str, daemon: bool) {
    let mut meta = json!({"name": name, "labels": {"app": if daemon { "dns" } else { "web" }}});
    if daemon {
        meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "name": "dns", "uid": "00000000-0000-0000-0000-000000000001"}]);
    }
    k.post(
        PODS,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "test/image"}]}}),
    );
    k.merge_patch(
        &format!("{PODS}/{name}/status"),
        &json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
}

/// The cluster, the API server, the project and the environment `flow` runs in.
struct Setup {
    moto: Moto,
    k: KubeServer,
    p: Project,
    env: Vec<(String, String)>,
}

fn setup() -> Setup {
    setup_with(Moto::start(), &[])
}

/// [`setup`] against `moto`, with `extra` in flow's environment.
fn setup_with(moto: Moto, extra: &[(&str, &str)]) -> Setup {
    let k = KubeServer::start_with(Options {
        eks_sts: Some(moto.addr),
        eks_cluster: "dlc".into(),
    });
    let p = Project::new();
    let ca = p.write("api-server-ca.pem", &k.ca_pem);
    let mut env = moto.env();
    env.push(("FLOW_EKS_API_SERVER".into(), k.url.clone()));
    env.push((
        "FLOW_EKS_API_SERVER_CA".into(),
        ca.to_string_lossy().into_owned(),
    ));
    env.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
    Setup { moto, k, p, env }
}

impl Setup {
    /// Applies the workflow as written and waits until `gpu`'s nodes are
    /// Ready (the fleet registers them).
    fn first_apply(&self, fleet: &Fleet) {
        self.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
        wait_until(Duration::from_secs(30), "gpu's nodes", || {
            fleet.seen.saw("group gpu ready")
        });
    }

    fn write(&self, instance_type: &str, timeout: &str) {
        let group = cluster_and_group(instance_type, 2);
        self.p.write(
            "wf.toml",
            &format!("{group}drain_timeout = \"{timeout}\"\n"),
        );
    }

    fn run(&self, args: &[&str]) -> Run {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        self.p.run_env(args, &env)
    }

    fn spawn_apply(&self) -> std::process::Child {
        let mut c = self.p.cmd(&["apply", "wf.toml", "--auto-approve"]);
        c.envs(self.env.iter().map(|(a, b)| (a, b)))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().expect("spawn flow")
    }

    /// The node groups moto has.
    fn groups(&self) -> Vec<String> {
        let (status, body) = self
            .moto
            .rest_call("eks", "GET", "/clusters/dlc/node-groups", "");
        if status != 200 {
            // The cluster is gone, and its groups with it.
            return Vec::new();
        }
        let v: Value = serde_json::from_str(&body).unwrap();
        let mut g: Vec<String> = v["nodegroups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap().to_string())
            .collect();
        g.sort();
        g
    }

    /// `flow state show` of the node group step.
    fn record(&self) -> Value {
        let shown = self.run(&["state", "show", "wf.toml", "ng"]).expect(0);
        serde_json::from_str(&shown.stdout).unwrap_or_else(|e| panic!("{e}: {}", shown.stdout))
    }

    /// The old group's workload: web-0 and web-1 (under a budget of
    /// minAvailable 2) and a DaemonSet's pod, on the nodes of `group`.
    fn workload(&self, group: &str) {
        run_pod(&self.k, "web-0", &format!("{group}-node-0"), false);
        run_pod(&self.k, "web-1", &format!("{group}-node-1"), false);
        run_pod(&self.k, "dns-0", &format!("{group}-node-0"), true);
        self.k.post(
            "/apis/policy/v1beta1/namespaces/default/poddisruptionbudgets",
            &json!({"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web-pdb"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        );
    }

    /// Waits until the drain waits on the budget: the step's log says so
    /// after its first `from` bytes.
    fn wait_blocked(&self, from: usize) {
        wait_until(
            Duration::from_secs(120),
            "the drain to wait on web-pdb",
            || {
                std::fs::read_to_string(self.p.path().join(".flow/wf/logs/ng.log")).is_ok_and(|l| {
                    l.get(from..)
                        .is_some_and(|l| l.contains("waits for its disruption budget"))
                })
            },
        );
    }

    /// How long the step's log is now.
    fn log_len(&self) -> usize {
        std::fs::read_to_string(self.p.path().join(".flow/wf/logs/ng.log")).map_or(0, |l| l.len())
    }
}

/// The group the replacement made, as the step's log names it.
fn made(log: &str) -> String {
    let rest = log
        .split("create before destroy: creating `")
        .nth(1)
        .unwrap_or_else(|| panic!("no replacement in the log:\n{log}"));
    rest.split('`').next().unwrap().to_string()
}

/// The index of the first line of `log` containing `text`.
pub(super) fn line_of(log: &str, text: &str) -> usize {
    log.lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("`{text}` not in the log:\n{log}"))
}

/// p4d → p5: the new group is made and Ready before any node is cordoned
/// or pod evicted; evictions wait while the budget allows none and go on
/// once the workload has pods on the new nodes; the DaemonSet's pod is
/// left; the old group is deleted last.
#[test]
fn an_instance_type_change_creates_the_new_group_then_drains_and_deletes_the_old() {
    let s = setup();
    s.write("p4d.24xlarge", "2m");
    let seen = Fleet::new();
    std::thread::scope(|scope| {
        let _stop = seen.watch(scope, &s.moto, &s.k);
        s.first_apply(&seen);
        s.workload("gpu");

        s.write("p5.48xlarge", "2m");
        let plan = s.run(&["plan", "wf.toml"]).expect(0);
        assert!(plan.stdout.contains("+/- ng"), "{}", plan.stdout);
        assert!(
            plan.stdout.contains("create before destroy: creates `gpu-")
                && plan
                    .stdout
                    .contains("then retires (drains) and deletes `gpu`"),
            "{}",
            plan.stdout
        );
        assert!(plan.stdout.contains("1 to replace"), "{}", plan.stdout);

        let child = s.spawn_apply();
        s.wait_blocked(0);
        // The budget allows no eviction: both pods stay while flow waits.
        std::thread::sleep(Duration::from_secs(2));
        for pod in ["web-0", "web-1"] {
            let p = s.k.get(&format!("{PODS}/{pod}")).expect("still there");
            assert!(
                p["metadata"]["deletionTimestamp"].is_null(),
                "{pod} was evicted under the budget"
            );
        }
        let new = made(&log(&s.p, "ng"));
        // The workload moves: two pods on the new group's nodes.
        seen.seen.note("freed".into());
        run_pod(&s.k, "web-a", &format!("{new}-node-0"), false);
        run_pod(&s.k, "web-b", &format!("{new}-node-1"), false);
        let applied = finish(child).expect(0);
        assert!(applied.stdout.contains("1 replaced"), "{}", applied.all());
        wait_until(Duration::from_secs(10), "gpu's nodes to go", || {
            seen.seen.saw("group gpu gone")
        });
        seen.stop.store(true, Ordering::SeqCst);

        let ready = seen.seen.at(&format!("group {new} ready"));
        let cordoned = seen.seen.at("node gpu-node-0 cordoned");
        let freed = seen.seen.at("freed");
        let evicted = seen
            .seen
            .at("pod web-0 evicted")
            .min(seen.seen.at("pod web-1 evicted"));
        let gone = seen.seen.at("group gpu gone");
        assert!(
            ready < cordoned,
            "the old nodes were cordoned before the new group was ready"
        );
        assert!(
            freed < evicted,
            "a pod was evicted while the budget allowed none"
        );
        assert!(
            evicted < gone,
            "the old group went before its pods were evicted"
        );
        assert!(!seen.seen.saw("pod web-a evicted") && !seen.seen.saw("pod web-b evicted"));
        let dns =
            s.k.get(&format!("{PODS}/dns-0"))
                .expect("the DaemonSet's pod stays");
        assert!(dns["metadata"]["deletionTimestamp"].is_null());
    });
    let log = log(&s.p, "ng");
    let new = s.groups();
    assert_eq!(new.len(), 1, "{new:?}");
    let new = &new[0];
    assert!(new.starts_with("gpu-") && new.len() == 8, "{new}");
    let order = [
        format!("create before destroy: creating `{new}` while `gpu` stays"),
        format!("node group {new}: 2 of 2 nodes Ready"),
        "cordoned node gpu-node-0".into(),
        "eviction of pod default/web-".into(),
        "evicted pod default/web-0".into(),
        "drained node group gpu: 2 nodes".into(),
        "deleting node group gpu".into(),
        "deleted `gpu`".into(),
    ];
    let lines: Vec<usize> = order.iter().map(|t| line_of(&log, t)).collect();
    assert!(
        lines.windows(2).all(|w| w[0] < w[1]),
        "out of order {lines:?}:\n{log}"
    );
    assert!(!log.contains("evicted pod default/dns-0"), "{log}");
    let rec = s.record();
    assert!(rec["deposed"].is_null(), "{rec}");
    assert_eq!(rec["outputs"]["name"], new.as_str());
    // Nothing left to do; the next replacement goes back to `gpu`.
    s.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    s.write("p4d.24xlarge", "2m");
    let plan = s.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains(&format!(
            "creates `gpu` and waits until it is ready, then retires (drains) and deletes `{new}`"
        )),
        "{}",
        plan.stdout
    );
}

/// A kill -9 while the drain waits on the budget: state holds both groups
/// (the old one deposed, stage `draining`); the next apply, with the budget
/// still refusing, gives up after `drain_timeout` naming the pod and the
/// budget, leaving both; once the workload moves, apply finishes the
/// drain and deletes the old group. A second replacement killed the same
/// way is cleaned up by destroy, deposed group included.
#[test]
fn a_killed_replacement_resumes_with_both_groups_accounted_for() {
    let s = setup();
    s.write("p4d.24xlarge", "4s");
    let fleet = Fleet::new();
    std::thread::scope(|scope| {
        let _stop = fleet.watch(scope, &s.moto, &s.k);
        s.first_apply(&fleet);
        s.workload("gpu");
        let old_arn = s.record()["resource_id"].as_str().unwrap().to_string();

        s.write("p5.48xlarge", "4s");
        let child = s.spawn_apply();
        s.wait_blocked(0);
        signal(&child, libc::SIGKILL);
        let killed = finish(child);
        assert_ne!(killed.code, 0);

        // Where the kill landed: the replacement made, the old group
        // deposed mid-drain; both in moto.
        let rec = s.record();
        assert_eq!(rec["deposed"]["stage"], "draining", "{rec}");
        assert_eq!(rec["deposed"]["resource_id"], old_arn.as_str(), "{rec}");
        assert_eq!(rec["applied"], true, "{rec}");
        let new = format!("gpu-{}", rec["name_suffix"].as_str().expect("suffix"));
        assert_eq!(s.groups(), vec!["gpu".to_string(), new.clone()]);
        let plan = s.run(&["plan", "wf.toml"]).expect(0);
        assert!(
            plan.stdout
                .contains("the replacement exists; retires (drains) and deletes the old `gpu`"),
            "{}",
            plan.stdout
        );

        // The budget still refuses: a bounded wait, then a one-line reason.
        let refused = s.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
        assert!(
            refused.all().contains(
                "draining node group `gpu` timed out after 4s: the eviction of pod `default/web-"
            ) && refused
                .all()
                .contains("is refused by PodDisruptionBudget `web-pdb`"),
            "{}",
            refused.all()
        );
        assert!(
            refused.all().contains("raise the step's `drain_timeout`"),
            "{}",
            refused.all()
        );
        assert_eq!(s.record()["deposed"]["stage"], "draining");
        assert_eq!(s.groups(), vec!["gpu".to_string(), new.clone()]);

        // The workload moves; apply finishes the replacement.
        run_pod(&s.k, "web-a", &format!("{new}-node-0"), false);
        run_pod(&s.k, "web-b", &format!("{new}-node-1"), false);
        let done = s.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
        assert!(done.stdout.contains("1 replaced"), "{}", done.all());
        assert_eq!(s.groups(), vec![new.clone()]);
        assert!(s.record()["deposed"].is_null());
        assert!(s.k.get(&format!("{PODS}/web-0")).is_none());

        // Replaced again (back to `gpu`), killed mid-drain, then destroyed.
        s.write("p4d.24xlarge", "4s");
        let from = s.log_len();
        let child = s.spawn_apply();
        s.wait_blocked(from);
        signal(&child, libc::SIGKILL);
        let _ = finish(child);
        let rec = s.record();
        assert_eq!(rec["deposed"]["stage"], "draining", "{rec}");
        assert!(rec["name_suffix"].is_null(), "{rec}");
        assert_eq!(s.groups(), vec!["gpu".to_string(), new.clone()]);
        let destroyed = s.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
        assert!(
            destroyed.stdout.contains("2 deleted"),
            "{}",
            destroyed.all()
        );
        assert!(s.groups().is_empty(), "{:?}", s.groups());
        fleet.stop.store(true, Ordering::SeqCst);
    });
}

/// A kill -9 while the replacement is still CREATING (the latency model
/// holds a node group for 300 s / 60): state holds the old group as
/// deposed, stage `replacing`, and the replacement's create intent; the old
/// group is untouched (none of its nodes cordoned). The next apply finds the
/// replacement that intent made instead of making another (the model counts
/// one CreateNodegroup for it), waits for it, then drains and deletes the
/// old group.
#[test]
fn a_replacement_killed_while_it_is_created_is_found_again_not_made_twice() {
    let s = setup_with(Moto::start_with_latency(60), &[("FLOW_TIME_SCALE", "1/60")]);
    s.write("p4d.24xlarge", "20s");
    let fleet = Fleet::new();
    std::thread::scope(|scope| {
        let _stop = fleet.watch(scope, &s.moto, &s.k);
        s.first_apply(&fleet);
        let old_arn = s.record()["resource_id"].as_str().unwrap().to_string();

        s.write("p5.48xlarge", "20s");
        let child = s.spawn_apply();
        wait_until(
            Duration::from_secs(60),
            "the replacement's CreateNodegroup",
            || s.groups().len() == 2,
        );
        signal(&child, libc::SIGKILL);
        let killed = finish(child);
        assert_ne!(killed.code, 0);

        // Where the kill landed: inside the replacement's create, which
        // EKS (the model) still holds CREATING.
        let rec = s.record();
        assert_eq!(rec["deposed"]["stage"], "replacing", "{rec}");
        assert_eq!(rec["deposed"]["resource_id"], old_arn.as_str(), "{rec}");
        assert_eq!(rec["in_flight"]["operation"], "create", "{rec}");
        let new = format!("gpu-{}", rec["name_suffix"].as_str().expect("suffix"));
        assert_eq!(s.groups(), vec!["gpu".to_string(), new.clone()]);
        let describe = |name: &str| -> Value {
            let path = format!("/clusters/dlc/node-groups/{name}");
            serde_json::from_str(&s.moto.rest_call("eks", "GET", &path, "").1).unwrap()
        };
        let held = describe(&new);
        assert_eq!(held["nodegroup"]["status"], "CREATING", "{held}");
        let new_arn = held["nodegroup"]["nodegroupArn"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!killed.all().contains("cordoned"), "{}", killed.all());

        let done = s.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
        assert!(done.stdout.contains("1 replaced"), "{}", done.all());
        assert_eq!(s.groups(), vec![new.clone()]);
        assert_eq!(
            describe(&new)["nodegroup"]["nodegroupArn"],
            new_arn.as_str()
        );
        assert!(s.record()["deposed"].is_null());
        assert!(
            done.stdout.contains("cordoned node gpu-node-0"),
            "{}",
            done.all()
        );
        let calls = &s.moto.latency_report()["calls"];
        assert_eq!(
            calls["eks:POST /clusters/dlc/node-groups"], 2,
            "the first group and its replacement, each once: {calls}"
        );
        fleet.stop.store(true, Ordering::SeqCst);
    });
}
