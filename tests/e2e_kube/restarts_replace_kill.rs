//! kube.job restarts with `policy = "replace"` (issue 40 item 4), flow
//! killed -9 around its TerminateInstanceInAutoScalingGroup, before the
//! failed attempt's line is recorded, in the two windows the fault proxy
//! can hold open: after moto carried the termination out (its answer held,
//! so flow never heard of it), and before moto saw the request (the
//! request held). In the first, the terminated instance's Node is then
//! removed (as the cloud controller manager removes it, taking flow's
//! `flow.dev/replacing` mark with it) and the group's new instance becomes
//! a Ready Node before the resumed run starts. The resumed run must send
//! one termination in all, create no job twice (the API server's audit
//! log), and record the replacement (old node, its instance, its group,
//! the new node) as an uninterrupted run does (restarts_replace.rs).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::nodegroup_replace::cluster_and_group;
use super::restarts_replace::{nodes_of, pods, ready_nodes, train_steps};
use crate::support::fault_proxy::{FaultProxy, Landing};
use crate::support::kube::KubeServer;
use crate::support::kube::kubelets::{Kubelets, instances};
use crate::support::kube::training::stop_kubelet;
use crate::support::moto::Moto;
use crate::support::{Project, finish, signal, wait_until};
use crate::{fixture, log};

const NODES: usize = 5;
const TERMINATE: &str = "TerminateInstanceInAutoScalingGroup";

/// How many times the audit log saw job `name` created (a plan's server-side
/// dry run, which makes nothing, left out).
fn created(k: &KubeServer, name: &str) -> usize {
    k.job_writes()
        .iter()
        .filter(|e| e["objectRef"]["name"] == name && e["responseStatus"]["code"] == 201)
        .filter(|e| {
            !e["requestURI"]
                .as_str()
                .is_some_and(|u| u.contains("dryRun="))
        })
        .count()
}

fn names(nodes: &[Value]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Where the fault proxy holds the termination while flow is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// moto's answer, the instance terminated.
    Answer,
    /// The request, moto not told.
    Request,
}

#[test]
fn a_kill_after_the_termination_resumes_recording_the_replacement_once() {
    kill_at_the_termination(Held::Answer);
}

#[test]
fn a_kill_before_the_termination_reached_the_cloud_terminates_once() {
    kill_at_the_termination(Held::Request);
}

fn kill_at_the_termination(held: Held) {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let env = moto.env_for(&proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let k = KubeServer::start();
    k.driver().schedule();
    let p = Project::new();
    let kubelets = Kubelets::new("dlc");
    fixture(&p, "pytorchjob-crd.yaml");
    let fsx = p.path().join("fsx");
    std::fs::create_dir_all(&fsx).unwrap();
    p.write(
        "train.yaml",
        &super::restarts::TRAIN.replace("HOST_DIR", &fsx.to_string_lossy()),
    );
    std::thread::scope(|scope| {
        let _kubelets = kubelets.watch(scope, &moto, &k);
        let infra = cluster_and_group("p4d.24xlarge", NODES);
        p.write("wf.toml", &infra);
        p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
            .expect(0);
        wait_until(Duration::from_secs(30), "the group's nodes", || {
            ready_nodes(&k).len() == NODES
        });
        p.write(
            "wf.toml",
            &format!("{infra}{}", train_steps(&k.kubeconfig_path())),
        );
        let before = names(&ready_nodes(&k));
        k.driver().hold("train");
        match held {
            Held::Answer => proxy.hold(TERMINATE, Duration::from_secs(300)),
            Held::Request => proxy.hold_before(TERMINATE, Duration::from_secs(300)),
        }
        let from = proxy.calls().len();
        let mut c = p.cmd(&["apply", "wf.toml", "--auto-approve"]);
        c.envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().expect("spawn flow");
        wait_until(Duration::from_secs(60), "train's 4 pods running", || {
            let pods = pods(&k, "train");
            pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
        });
        let dead = nodes_of(&k, "train")[2].clone();
        let dead_ec2 = instances(&moto, "dlc")
            .into_iter()
            .find(|i| i.dns == dead)
            .expect("the dead node's instance");
        stop_kubelet(&k, &dead);
        wait_until(Duration::from_secs(120), "the termination held", || {
            proxy
                .calls_from(from)
                .iter()
                .any(|c| c.op == TERMINATE && (held == Held::Request || c.replied.is_some()))
        });
        let killed_at = Instant::now();
        signal(&child, libc::SIGKILL);
        assert_eq!(finish(child).code, -1);
        // Where the kill landed: moto had carried the termination out and
        // flow had not had the answer, or moto had not seen it.
        assert!(proxy.settle(from, killed_at, Duration::from_secs(10)));
        let landings: Vec<Landing> = proxy
            .calls_from(from)
            .iter()
            .filter(|c| c.op == TERMINATE)
            .filter_map(|c| c.landing(killed_at))
            .collect();
        let expected = match held {
            Held::Answer => Landing::AfterAnswer,
            Held::Request => Landing::BeforeMoto,
        };
        assert_eq!(landings, vec![expected]);
        // The step's record (its id in flight) has no line for attempt 1
        // yet (a line follows `!`), so nothing recorded the replacement.
        let shown = p
            .run_env(&["state", "show", "wf.toml", "train", "--full"], &env)
            .expect(0)
            .stdout;
        let shown: Value = serde_json::from_str(&shown).unwrap();
        let id = shown["in_flight"]["id"].as_str().unwrap_or_default();
        assert!(!id.contains('!'), "{shown}");
        assert_eq!(created(&k, "train-a2"), 0);

        // The cloud goes on without flow: the old Node (and flow's mark on
        // it) is removed with its instance; the new one registers.
        proxy.calm();
        let terminated_before = held == Held::Answer;
        wait_until(
            Duration::from_secs(60),
            "the old node gone, the new one Ready",
            || {
                let now = names(&ready_nodes(&k));
                !terminated_before
                    || (k.get(&format!("/api/v1/nodes/{dead}")).is_none()
                        && now.len() == NODES
                        && now.iter().any(|n| !before.contains(n)))
            },
        );
        let said = log(&p, "train").len();

        let run = p
            .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
            .expect(0);
        let terminations = proxy
            .calls_from(from)
            .iter()
            .filter(|c| c.op == TERMINATE && c.sent.is_some())
            .count();
        println!(
            "TerminateInstanceInAutoScalingGroup sent: {terminations}; jobs created: train {}, train-a2 {}",
            created(&k, "train"),
            created(&k, "train-a2")
        );
        assert_eq!(terminations, 1, "one termination in all: {}", run.all());
        let new_node = names(&ready_nodes(&k))
            .into_iter()
            .find(|n| !before.contains(n))
            .expect("the new node");
        let resumed = log(&p, "train")[said..].to_string();
        assert!(
            resumed.contains(&format!(
                "attempt 1: an earlier run of this operation was replacing {dead}: taking it up"
            )),
            "{resumed}"
        );
        let termination = match held {
            Held::Answer => format!(
                "instance {} of node {dead} is already leaving group",
                dead_ec2.id
            ),
            Held::Request => format!("terminated instance {} of node {dead}", dead_ec2.id),
        };
        assert!(resumed.contains(&termination), "{resumed}");
        assert_eq!(created(&k, "train"), 1, "{}", run.all());
        assert_eq!(created(&k, "train-a2"), 1, "{}", run.all());
        let out = p
            .run_env(&["output", "wf.toml", "train.attempts", "--json"], &env)
            .expect(0);
        let attempts: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        assert_eq!(
            attempts[0]["replaced"],
            json!([{"node": dead, "instance": dead_ec2.id, "group": dead_ec2.group,
                "new_node": new_node}]),
            "{attempts}\n{}",
            run.all()
        );
        assert_eq!(attempts[0]["cordoned"], json!([dead]), "{attempts}");
        assert!(!nodes_of(&k, "train-a2").contains(&dead));
        let runs = p
            .run_env(&["runs", "wf.toml", "train", "--json"], &env)
            .expect(0)
            .stdout;
        let runs: Value = serde_json::from_str(&runs).unwrap();
        let last = runs.as_array().unwrap().last().unwrap();
        let line = last["values"]["attempt_1"].as_str().unwrap_or_default();
        assert!(
            line.contains(&format!("replaced {dead} ({}) by {new_node}", dead_ec2.id)),
            "{last}"
        );
    });
}
