//! kube.node_check `policy = "replace"` (issue 40 part 3, EKS) against moto
//! and a real kube-apiserver: an eks.nodegroup made by flow is an Auto
//! Scaling group whose instances the local cloud launches
//! (scripts/local-cloud/cloud_eks_nodegroup_asg.py); each running instance
//! becomes a Node through the test kubelets (support/kube/kubelets.rs:
//! named by its private DNS name, `spec.providerID` `aws:///ZONE/i-…`), and
//! a terminated one's Node is removed. A planted fault (`test.flow/
//! nvidia-smi` on a Node: 7 GPUs of 8) makes one node bad; the step names
//! it, cordons, taints and drains it, terminates its instance through its
//! group without lowering the desired count, waits for the node the group
//! launches instead, and checks it. Every AWS call goes through the fault
//! proxy, whose log of forwarded calls is what the tests count.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::fleet::{CHECK, PAIR, seven_gpus};
use super::nodegroup_replace::{cluster_and_group, line_of};
use crate::support::fault_proxy::{FaultProxy, Landing};
use crate::support::kube::KubeServer;
use crate::support::kube::kubelets::{Kubelets, instances};
use crate::support::moto::{Moto, between_all};
use crate::support::{Project, Run, finish, signal, wait_until};
use crate::{fixture, log};

const TERMINATE: &str = "TerminateInstanceInAutoScalingGroup";

/// The checks of the node group, policy replace.
const CHECKS: &str = r#"
[steps.operator]
provider = "kube.manifest"
depends_on = ["ng"]
[steps.operator.inputs]
kubeconfig = "KUBECONFIG"
files = ["pytorchjob-crd.yaml"]

[steps.fleet]
provider = "kube.node_check"
depends_on = ["operator"]
[steps.fleet.inputs]
kubeconfig = "KUBECONFIG"
nodes = "eks.amazonaws.com/nodegroup=gpu"
policy = "replace"
replace_timeout = "2m"

[steps.fleet.inputs.check]
files = ["node-check.yaml"]
gpus = "instance-type"
success_pattern = "NVIDIA-SMI"

[steps.fleet.inputs.pairs]
files = ["nccl-pair.yaml"]
floor = 10
"#;

/// A node group made by flow, its kubelets, and the project checking it.
struct Group {
    moto: Moto,
    proxy: FaultProxy,
    k: KubeServer,
    p: Project,
    env: Vec<(String, String)>,
    kubelets: Kubelets,
}

/// Runs `test` on a new [`Group`] while its kubelets run.
fn with_group(test: impl FnOnce(&Group)) {
    let g = Group::new();
    std::thread::scope(|scope| {
        let _kubelets = g.kubelets.watch(scope, &g.moto, &g.k);
        test(&g);
    });
}

impl Group {
    fn new() -> Group {
        let moto = Moto::start();
        let proxy = FaultProxy::start(moto.addr);
        let env = moto.env_for(&proxy.endpoint());
        let p = Project::new();
        fixture(&p, "pytorchjob-crd.yaml");
        p.write("node-check.yaml", CHECK);
        p.write("nccl-pair.yaml", PAIR);
        Group {
            moto,
            proxy,
            k: KubeServer::start(),
            p,
            env,
            kubelets: Kubelets::new("dlc"),
        }
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

    /// Makes the node group of `nodes` and waits for its Ready nodes; then
    /// writes the checks into the workflow.
    fn make(&self, nodes: usize) {
        let infra = cluster_and_group("p4d.24xlarge", nodes);
        self.p.write("wf.toml", &infra);
        self.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
        wait_until(Duration::from_secs(30), "the group's nodes", || {
            self.nodes().len() == nodes
        });
        let checks = CHECKS.replace("KUBECONFIG", &self.k.kubeconfig_path());
        self.p.write("wf.toml", &format!("{infra}{checks}"));
    }

    /// The Ready nodes of group `gpu`, by name.
    fn nodes(&self) -> Vec<Value> {
        let all = self.k.get("/api/v1/nodes").unwrap_or_default();
        let mut nodes: Vec<Value> = all["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == "gpu")
            .filter(|n| {
                n["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .collect();
        nodes.sort_by_key(|n| {
            n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        });
        nodes
    }

    /// The node group's Auto Scaling group: its name, desired count and
    /// instances in service (read from moto itself, not through flow).
    fn asg(&self) -> (String, u64, Vec<String>) {
        let (_, ng) = self
            .moto
            .rest_call("eks", "GET", "/clusters/dlc/node-groups/gpu", "");
        let ng: Value = serde_json::from_str(&ng).unwrap();
        let name = ng["nodegroup"]["resources"]["autoScalingGroups"][0]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let xml = self.moto.query_call(
            "autoscaling",
            &format!("Action=DescribeAutoScalingGroups&Version=2011-01-01&AutoScalingGroupNames.member.1={name}"),
        );
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let field = |n: roxmltree::Node, tag: &str| {
            n.descendants()
                .find(|c| c.tag_name().name() == tag)
                .and_then(|c| c.text())
                .unwrap_or_default()
                .to_string()
        };
        let desired = field(doc.root(), "DesiredCapacity").parse().unwrap();
        let mut serving: Vec<String> = doc
            .descendants()
            .filter(|n| n.tag_name().name() == "Instances")
            .flat_map(|set| set.children().filter(|c| c.tag_name().name() == "member"))
            .filter(|m| field(*m, "LifecycleState") == "InService")
            .map(|m| field(m, "InstanceId"))
            .collect();
        serving.sort();
        (name, desired, serving)
    }

    /// Plants 7 GPUs of 8 on node `name`.
    fn plant_seven_gpus(&self, name: &str) {
        self.k.merge_patch(
            &format!("/api/v1/nodes/{name}"),
            &json!({"metadata": {"annotations": {"test.flow/nvidia-smi": seven_gpus()}}}),
        );
    }

    fn output(&self, key: &str) -> Value {
        let out = self
            .run(&["output", "wf.toml", &format!("fleet.{key}"), "--json"])
            .expect(0);
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!(out.stdout.trim()))
    }

    /// A Running pod of the workload on `node`.
    fn workload_on(&self, pod: &str, node: &str) {
        let pods = "/api/v1/namespaces/default/pods";
        self.k.post(
            pods,
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "test/image"}]}}),
        );
        self.k.merge_patch(&format!("{pods}/{pod}/status"),
            &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}));
    }
}

fn name(n: &Value) -> String {
    n["metadata"]["name"].as_str().unwrap().to_string()
}

fn instance_of(n: &Value) -> String {
    let p = n["spec"]["providerID"].as_str().unwrap();
    p.rsplit('/').next().unwrap().to_string()
}

/// Sixteen nodes, one listing 7 GPUs: the plan says what a bad node gets;
/// apply names it, cordons, taints and drains it (its pod evicted), sends
/// exactly one TerminateInstanceInAutoScalingGroup for its instance, waits
/// for the instance the group launches instead (the desired count stays 16)
/// to become a Ready node, checks it alone and in a pair, and records every
/// verdict: outputs and `flow runs`.
#[test]
fn a_bad_node_is_replaced_and_its_replacement_checked() {
    with_group(|g| {
        g.make(16);
        let nodes = g.nodes();
        let bad = &nodes[5];
        let (bad_name, bad_instance) = (name(bad), instance_of(bad));
        // The local cloud made the nodes as AWS does: the providerID names
        // the instance, whose aws:autoscaling:groupName tag names the group.
        let (group, desired, before) = g.asg();
        assert_eq!((desired, before.len()), (16, 16));
        assert!(before.contains(&bad_instance), "{before:?}");
        let running = instances(&g.moto, "dlc");
        let bad_ec2 = running.iter().find(|i| i.id == bad_instance).unwrap();
        assert_eq!(bad_ec2.dns, bad_name, "the node is named as its instance");
        assert_eq!(bad_ec2.group.as_ref(), Some(&group), "{bad_ec2:?}");
        g.plant_seven_gpus(&bad_name);
        g.workload_on("web-bad", &bad_name);
        g.workload_on("web-ok", &name(&nodes[6]));

        let plan = g.run(&["plan", "wf.toml"]).expect(0).all();
        assert!(plan.contains("a bad node is replaced: cordoned, tainted flow.dev/unhealthy:NoSchedule and drained, its EC2 instance terminated through its Auto Scaling group (TerminateInstanceInAutoScalingGroup, desired count kept)"), "{plan}");
        let from = g.proxy.calls().len();
        g.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);

        // The new instance is a Ready node; the old node is gone.
        let new = g.one_replacement(from, &before, 16);
        let (group_after, _, after) = g.asg();
        assert_eq!(group_after, group);
        assert!(!after.contains(&bad_instance), "{after:?}");
        let now = g.nodes();
        assert_eq!(now.len(), 16);
        let new_name = name(&new);
        assert!(now.iter().all(|n| name(n) != bad_name));

        let replaced = g.output("replaced");
        assert_eq!(
            replaced,
            json!([{"node": bad_name, "instance": bad_instance, "group": group, "new_node": new_name}])
        );
        let verdicts = g.output("verdicts");
        assert_eq!(verdicts[&bad_name]["status"], "bad", "{verdicts}");
        assert_eq!(
            verdicts[&bad_name]["reason"],
            "nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8"
        );
        assert_eq!(verdicts[&bad_name]["replaced_by"], json!(new_name));
        assert_eq!(verdicts[&new_name]["status"], "healthy", "{verdicts}");
        assert_eq!(verdicts[&new_name]["by"], "pairs", "{verdicts}");
        assert_eq!(verdicts[&new_name]["check"]["reason"], "its check passed");
        assert_eq!(g.output("bad"), json!([bad_name]));
        assert_eq!(g.output("cordoned"), json!([bad_name]));

        let l = log(&g.p, "fleet");
        let order = [
            format!("bad node {bad_name}: nvidia-smi lists 7 GPUs"),
            format!("cordoned node {bad_name}, tainted flow.dev/unhealthy=gpus-7-of-8:NoSchedule"),
            "evicted pod default/web-bad".to_string(),
            format!(
                "terminated instance {bad_instance} of node {bad_name} through Auto Scaling group {group}"
            ),
            format!("checking the new node(s) {new_name}"),
            format!("check {new_name}: its check passed"),
        ];
        let lines: Vec<usize> = order.iter().map(|t| line_of(&l, t)).collect();
        assert!(
            lines.windows(2).all(|w| w[0] < w[1]),
            "{order:?} at {lines:?}:\n{l}"
        );
        assert!(
            g.k.get("/api/v1/namespaces/default/pods/web-ok").is_some(),
            "web-ok stays"
        );
        assert!(
            l.contains("started Job default/gpu-check-new-node-0"),
            "{l}"
        );

        // The run history holds every verdict, the new node's among them.
        let runs = g
            .run(&["runs", "wf.toml", "fleet", "--json"])
            .expect(0)
            .stdout;
        let runs: Value = serde_json::from_str(&runs).unwrap();
        let last = runs.as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["values"][&new_name]["status"], "healthy", "{last}");
        assert_eq!(
            last["values"][&bad_name]["replaced_by"],
            json!(new_name),
            "{last}"
        );
        assert_eq!(last["verdicts"].as_array().unwrap().len(), 17, "{last}");
    });
}

/// Where a run killed while waiting for a new node left things.
struct Killed {
    bad_name: String,
    bad_instance: String,
    /// The group's instances in service before.
    before: Vec<String>,
    /// The proxy's calls before the killed run.
    from: usize,
}

impl Group {
    /// Makes a group of 4, plants 7 GPUs on its third node, holds the new
    /// node's registration (and, with `hold_removal`, the old node's
    /// removal), and kills flow with SIGKILL once it waits for the new node.
    fn kill_while_waiting(&self, hold_removal: bool) -> Killed {
        self.make(4);
        let nodes = self.nodes();
        let (bad_name, bad_instance) = (name(&nodes[2]), instance_of(&nodes[2]));
        let (_, _, before) = self.asg();
        self.plant_seven_gpus(&bad_name);
        self.kubelets.hold_registration(true);
        self.kubelets.hold_removal(hold_removal);
        let from = self.proxy.calls().len();
        let child = self.spawn_apply();
        wait_until(
            Duration::from_secs(120),
            "flow to wait for the new node",
            || log(&self.p, "fleet").contains("waiting for new nodes: group"),
        );
        signal(&child, libc::SIGKILL);
        let _ = finish(child);
        Killed {
            bad_name,
            bad_instance,
            before,
            from,
        }
    }

    /// The TerminateInstanceInAutoScalingGroup calls the proxy forwarded
    /// from its `from`th call on.
    fn terminations(&self, from: usize) -> usize {
        self.proxy
            .calls_from(from)
            .iter()
            .filter(|c| c.op == TERMINATE && c.sent.is_some())
            .count()
    }

    /// The Ready node of the one instance launched in place of a bad one:
    /// from the proxy's `from`th call on, one
    /// TerminateInstanceInAutoScalingGroup reached the cloud, the group kept
    /// its desired count `nodes`, and one of its instances was not among
    /// `before` (those in service before).
    fn one_replacement(&self, from: usize, before: &[String], nodes: u64) -> Value {
        assert_eq!(self.terminations(from), 1, "one termination in all");
        let (_, desired, after) = self.asg();
        assert_eq!(desired, nodes, "the desired count is kept");
        let launched: Vec<&String> = after.iter().filter(|i| !before.contains(i)).collect();
        assert_eq!(launched.len(), 1, "no double replacement: {after:?}");
        self.nodes()
            .into_iter()
            .find(|n| instance_of(n) == *launched[0])
            .expect("the new node")
    }
}

/// kill -9 of flow while it waits for the new node (the kubelet's boot and
/// the old node's removal held), then apply again: the second run finds the
/// node it marked and the replacement its id kept, sees its instance
/// already leaving the group and does not terminate it again; exactly one
/// TerminateInstanceInAutoScalingGroup reached the cloud (the proxy's log),
/// one instance was launched, and the new node is checked.
#[test]
fn a_replacement_killed_midway_resumes_without_a_second_termination() {
    with_group(|g| {
        let Killed {
            bad_name,
            bad_instance,
            before,
            from,
        } = g.kill_while_waiting(true);
        let old =
            g.k.get(&format!("/api/v1/nodes/{bad_name}"))
                .expect("the old node stays");
        assert_eq!(
            old["metadata"]["annotations"]["flow.dev/replacing"]
                .as_str()
                .unwrap()
                .split('@')
                .next(),
            Some(bad_instance.as_str())
        );

        let child = g.spawn_apply();
        wait_until(
            Duration::from_secs(120),
            "the resumed run to take up the replacement",
            || {
                log(&g.p, "fleet").contains(&format!(
                    "instance {bad_instance} of node {bad_name} is already leaving group"
                ))
            },
        );
        g.kubelets.hold_registration(false);
        g.kubelets.hold_removal(false);
        finish(child).expect(0);

        let new = g.one_replacement(from, &before, 4);
        let verdicts = g.output("verdicts");
        assert_eq!(verdicts[&name(&new)]["status"], "healthy", "{verdicts}");
        // The verdict it was taken out for, kept with the replacement.
        assert_eq!(
            verdicts[&bad_name]["reason"],
            "nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8",
            "{verdicts}"
        );
        assert_eq!(g.output("replaced")[0]["new_node"], json!(name(&new)));
    });
}

/// A bad node whose instance is in no Auto Scaling group cannot be
/// replaced: the step fails naming it and why, and touches no node.
#[test]
fn a_node_outside_an_auto_scaling_group_is_refused_by_name() {
    with_group(|g| {
        g.make(4);
        // An instance launched by hand, its node registered into the group's label.
        let xml = g.moto.query_call("ec2", "Action=RunInstances&Version=2016-11-15&ImageId=ami-12c6146b&MinCount=1&MaxCount=1&InstanceType=p4d.24xlarge");
        let id = between_all(&xml, "<instanceId>", "</instanceId>")[0].clone();
        g.k.post("/api/v1/nodes", &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "by-hand", "labels": {"eks.amazonaws.com/nodegroup": "gpu",
                "kubernetes.io/hostname": "by-hand", "node.kubernetes.io/instance-type": "p4d.24xlarge"}},
            "spec": {"providerID": format!("aws:///us-east-1a/{id}")}}));
        g.plant_seven_gpus("by-hand");
        let all = g
            .run(&["apply", "wf.toml", "--auto-approve"])
            .expect(1)
            .all();
        assert!(all.contains(&format!("policy replace cannot replace node by-hand: its instance {id} is in no Auto Scaling group (no aws:autoscaling:groupName tag)")), "{all}");
        let n = g.k.get("/api/v1/nodes/by-hand").unwrap();
        assert!(n["spec"]["unschedulable"].is_null(), "{n}");
        assert!(g.proxy.calls().iter().all(|c| c.op != TERMINATE));
    });
}

/// kill -9 while flow waits for the new node, and the old Node deleted
/// meanwhile (its instance is terminated) with the new one not yet Ready:
/// the next apply finds no marked node, but the replacement its id kept;
/// it waits for the group, checks the new node as a new one and records
/// which node replaced which; still one termination and one instance
/// launched.
#[test]
fn a_replacement_whose_old_node_is_gone_is_waited_for_not_made_again() {
    with_group(|g| {
        let Killed {
            bad_name,
            before,
            from,
            ..
        } = g.kill_while_waiting(false);
        wait_until(Duration::from_secs(30), "the old node's removal", || {
            g.k.get(&format!("/api/v1/nodes/{bad_name}")).is_none()
        });
        let said = log(&g.p, "fleet").len();
        let child = g.spawn_apply();
        wait_until(
            Duration::from_secs(120),
            "the resumed run to wait for the group",
            || {
                log(&g.p, "fleet")
                    .get(said..)
                    .is_some_and(|l| l.contains("waiting for new nodes: group"))
            },
        );
        g.kubelets.hold_registration(false);
        finish(child).expect(0);
        let new = g.one_replacement(from, &before, 4);
        assert_eq!(g.output("verdicts")[&name(&new)]["status"], "healthy");
        assert_eq!(g.output("nodes").as_array().unwrap().len(), 5);
        assert_eq!(
            g.output("replaced")[0]["node"],
            json!(bad_name),
            "{}",
            log(&g.p, "fleet")
        );
        assert_eq!(g.output("replaced")[0]["new_node"], json!(name(&new)));
    });
}

/// kill -9 once moto has terminated the bad node's instance but before
/// flow heard so (the fault proxy holds the answer); the old Node, and
/// flow's mark on it, is removed with its instance, and the new node
/// registers before the next apply. The id kept the replacement before the
/// termination: the next apply sends no second one, checks the new node as
/// a new one, and records which node replaced which, with the old node's
/// verdict, as an uninterrupted run does.
#[test]
fn a_kill_after_the_termination_records_the_replacement_the_id_kept() {
    with_group(|g| {
        g.make(4);
        let nodes = g.nodes();
        let (bad_name, bad_instance) = (name(&nodes[2]), instance_of(&nodes[2]));
        let (group, _, before) = g.asg();
        g.plant_seven_gpus(&bad_name);
        g.proxy.hold(TERMINATE, Duration::from_secs(300));
        let from = g.proxy.calls().len();
        let child = g.spawn_apply();
        wait_until(Duration::from_secs(120), "moto to terminate", || {
            g.proxy
                .calls_from(from)
                .iter()
                .any(|c| c.op == TERMINATE && c.replied.is_some())
        });
        let killed_at = Instant::now();
        signal(&child, libc::SIGKILL);
        let _ = finish(child);
        assert!(g.proxy.settle(from, killed_at, Duration::from_secs(10)));
        let landings: Vec<Landing> = g
            .proxy
            .calls_from(from)
            .iter()
            .filter(|c| c.op == TERMINATE)
            .filter_map(|c| c.landing(killed_at))
            .collect();
        assert_eq!(
            landings,
            vec![Landing::AfterAnswer],
            "moto did it, flow had no answer"
        );
        let shown = g
            .run(&["state", "show", "wf.toml", "fleet", "--full"])
            .expect(0)
            .stdout;
        let shown: Value = serde_json::from_str(&shown).unwrap();
        assert!(
            shown["in_flight"]["id"]
                .as_str()
                .is_some_and(|id| id.contains(&bad_instance)),
            "the replacement kept before the termination: {shown}"
        );
        g.proxy.calm();
        wait_until(
            Duration::from_secs(60),
            "the old node gone, the new one Ready",
            || g.k.get(&format!("/api/v1/nodes/{bad_name}")).is_none() && g.nodes().len() == 4,
        );
        let said = log(&g.p, "fleet").len();
        g.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
        let new = g.one_replacement(from, &before, 4);
        let new_name = name(&new);
        assert_eq!(
            g.output("replaced"),
            json!([{"node": bad_name, "instance": bad_instance, "group": group, "new_node": new_name}])
        );
        let verdicts = g.output("verdicts");
        assert_eq!(
            verdicts[&bad_name]["reason"],
            "nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8",
            "{verdicts}"
        );
        assert_eq!(verdicts[&bad_name]["replaced_by"], json!(new_name));
        assert_eq!(verdicts[&new_name]["status"], "healthy", "{verdicts}");
        assert_eq!(g.output("bad"), json!([bad_name]));
        let l = log(&g.p, "fleet")[said..].to_string();
        assert!(
            l.contains(&format!(
                "instance {bad_instance} of node {bad_name} is already leaving group"
            )),
            "{l}"
        );
        assert!(
            l.contains(&format!("checking the new node(s) {new_name}")),
            "{l}"
        );
    });
}
