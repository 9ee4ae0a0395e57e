//! `slurm.node_check` with policy `replace` on a ParallelCluster cluster
//! whose head node and 4 static nodes are hosts (issue 40 part 3): a node
//! whose machine shows 7 GPUs (the stand-in nvidia-smi of
//! tests/fixtures/slurm/fleet, its fault planted by the host's hostname)
//! is named, drained and set DOWN with flow's reason; the local cloud's
//! clustermgtd (scripts/local-cloud/cloud_pcluster_static.py) terminates
//! its instance and launches a new one under the same Slurm node name at a
//! new address; flow waits for the node back in service on the new
//! instance and checks it healthy. Then a second node, with flow killed
//! (-9) while it waits: the next apply takes the recorded replacement up
//! and the node is replaced once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::hosts::{Hosts, Inside, ensure_installed, import_key_pair, keygen};
use super::https::Cloud;
use super::support::aws::Aws;
use super::support::moto::between_all;
use super::support::{finish, signal, workspace_root};
use super::{moto_config, prepared, workflow};

/// The node check step, replacing through the cluster.
pub(super) fn node_check(head: &Value, faults: &Path, round: u32) -> String {
    let fleet = workspace_root().join("tests/fixtures/slurm/fleet");
    format!(
        r#"
[vars.ssh_key]
description = "The head node's SSH private key"
sensitive = true
env = "HEAD_NODE_SSH_KEY"

[steps.fleet]
provider = "slurm.node_check"
depends_on = ["cluster"]
[steps.fleet.inputs]
partition = "compute-gpu"
policy = "replace"
pcluster_cluster = "${{steps.cluster.outputs.cluster_name}}"
host = "${{steps.cluster.outputs.head_node_ip}}"
ssh_user = "{user}"
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
[steps.fleet.inputs.check]
script = "nvidia-smi.sbatch"
gpus = "instance-type"
success_pattern = "NVIDIA-SMI"
environment = {{ PATH = "{fleet}:/usr/sbin:/usr/bin:/sbin:/bin", FLOW_TEST_FAULTS = "{faults}", ROUND = "{round}" }}
"#,
        user = head["user"].as_str().expect("user"),
        host_key = head["host_key"].as_str().expect("host key"),
        fleet = fleet.display(),
        faults = faults.display(),
    )
}

/// A cluster of 4 static nodes on hosts, made by flow (job_replace.rs
/// runs a training on one too).
pub(super) struct Cluster {
    pub(super) hosts: Hosts,
    _inside: Inside,
    pub(super) moto: Cloud,
    pub(super) a: Aws,
    pub(super) key: PathBuf,
    pub(super) head: Value,
    pub(super) values: String,
}

impl Cluster {
    /// `sinfo -N` on the head node: (node, address, state) of each.
    pub(super) fn sinfo(&self) -> Vec<(String, String, String)> {
        let out = self
            .hosts
            .ssh(&self.head, &self.key, "sinfo -h -N -o '%N %o %T'");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[0].to_string(), f[1].to_string(), f[2].to_string())
            })
            .collect()
    }

    /// `node`'s State as `scontrol show node` gives it (`DOWN+DRAIN`).
    pub(super) fn state(&self, node: &str) -> String {
        let out = self.hosts.ssh(
            &self.head,
            &self.key,
            &format!("scontrol -o show node {node}"),
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("State="))
            .unwrap_or_default()
            .to_string()
    }

    /// The cluster's log `name` (under the host manager's work folder).
    pub(super) fn log(&self, name: &str) -> String {
        let dir = Path::new(self.head["dir"].as_str().expect("dir"));
        let log = dir
            .parent()
            .and_then(Path::parent)
            .expect("work folder")
            .join("slurm/flow-p5/log")
            .join(name);
        std::fs::read_to_string(log).unwrap_or_default()
    }

    /// The model's clustermgtd log.
    pub(super) fn clustermgtd_log(&self) -> String {
        self.log("clustermgtd.log")
    }

    /// The end of slurmctld's log.
    fn slurmctld_tail(&self) -> String {
        let log = self.log("slurmctld.log");
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The state of instance `id` (`running`, `terminated`, …), asked of
    /// EC2 by its id.
    pub(super) fn instance_state(&self, id: &str) -> String {
        let xml = self.moto.query_call(
            "ec2",
            &format!("Action=DescribeInstances&Version=2016-11-15&InstanceId.1={id}"),
        );
        let state = between_all(&xml, "<instanceState>", "</instanceState>");
        between_all(
            state.first().map_or("", String::as_str),
            "<name>",
            "</name>",
        )
        .first()
        .cloned()
        .unwrap_or_default()
    }

    /// (instance id, state, private ip) of the cluster's compute instances.
    pub(super) fn computes(&self) -> Vec<(String, String, String)> {
        let xml = self.moto.query_call(
            "ec2",
            "Action=DescribeInstances&Version=2016-11-15\
             &Filter.1.Name=tag:parallelcluster:node-type&Filter.1.Value.1=Compute",
        );
        let mut out: Vec<(String, String, String)> = Vec::new();
        for i in xml.split("<instanceId>").skip(1) {
            let id = i.split('<').next().unwrap_or_default().to_string();
            let first = |from: &str, open: &str, close: &str| {
                between_all(from, open, close)
                    .first()
                    .cloned()
                    .unwrap_or_default()
            };
            let state = first(
                &first(i, "<instanceState>", "</instanceState>"),
                "<name>",
                "</name>",
            );
            let ip = first(i, "<privateIpAddress>", "</privateIpAddress>");
            if !state.is_empty() && !out.iter().any(|o| o.0 == id) {
                out.push((id, state, ip));
            }
        }
        out
    }

    pub(super) fn write(&self, check: &str) {
        self.a
            .p
            .write("wf.toml", &format!("{}{check}", workflow(&self.values)));
    }

    pub(super) fn output(&self, key: &str) -> Value {
        let out = self
            .a
            .run(&["output", "wf.toml", &format!("fleet.{key}"), "--json"])
            .expect(0);
        serde_json::from_str(&out.stdout).expect("JSON")
    }
}

/// The cluster's hosts, the local cloud and the project, before flow
/// makes the cluster.
pub(super) fn cluster() -> Cluster {
    cluster_with(&[])
}

/// [`cluster`], `moto_env` more of the local cloud's environment.
pub(super) fn cluster_with(moto_env: &[(&str, &str)]) -> Cluster {
    ensure_installed("slurmctld", "slurmctld");
    ensure_installed("slurmd", "slurmd");
    ensure_installed("munged", "munge");
    ensure_installed("srun", "slurm-client");
    let hosts = Hosts::start();
    let inside = super::enter(&hosts);
    let socket = hosts.socket.to_string_lossy().into_owned();
    let mut env = vec![("FLOW_LOCAL_HOSTS", socket.as_str())];
    env.extend_from_slice(moto_env);
    let moto = Cloud::start(&env);
    let (pcluster, values) = prepared(&moto);
    let mut a = moto.aws();
    let key = keygen(a.p.path(), "flow-key");
    import_key_pair(&moto, "flow-key", &key);
    a.p.write("cluster.yaml", &moto_config());
    let values = values
        .replace(
            r#"PLACEHOLDER_SSH_KEY = "flow-test""#,
            r#"PLACEHOLDER_SSH_KEY = "flow-key""#,
        )
        .replace(
            r#"PLACEHOLDER_MIN_INSTANCES = "0""#,
            r#"PLACEHOLDER_MIN_INSTANCES = "4""#,
        )
        .replace(
            r#"PLACEHOLDER_MAX_INSTANCES = "2""#,
            r#"PLACEHOLDER_MAX_INSTANCES = "4""#,
        );
    a.env.push(("FLOW_PCLUSTER".into(), pcluster));
    a.env.push((
        "HEAD_NODE_SSH_KEY".into(),
        std::fs::read_to_string(&key).expect("key"),
    ));
    a.p.write("wf.toml", &workflow(&values));
    let check = std::fs::read_to_string(workspace_root().join("workflows/slurm/nvidia-smi.sbatch"))
        .expect("workflows/slurm/nvidia-smi.sbatch");
    a.p.write("nvidia-smi.sbatch", &check);
    let head = Value::Null;
    Cluster {
        hosts,
        _inside: inside,
        moto,
        a,
        key,
        head,
        values,
    }
}

/// What is true once `node` (on `old` at `old_ip`) was replaced: one
/// replacement of it in clustermgtd's log, its old instance terminated, a
/// new compute instance at a new address, the node idle at that address,
/// the `replaced` output naming the new instance, checked healthy. The
/// new instance's id.
pub(super) fn replaced_once(c: &Cluster, node: &str, old: &str, old_ip: &str) -> String {
    let log = c.clustermgtd_log();
    // One instance launched for the node, and only its old one terminated.
    // A launch the local cloud refused ("replacing N failed: …", e.g. an
    // address another test's host holds on the shared bridge) is tried
    // again at clustermgtd's next loop, as clustermgtd does: the same
    // replacement, not a second one.
    assert_eq!(
        log.matches(&format!("{node}: launched i-")).count(),
        1,
        "{log}"
    );
    let terminating = format!("{node}: set DOWN; terminating ");
    assert!(
        log.lines()
            .filter(|l| l.contains(&terminating))
            .all(|l| l.ends_with(&format!("{old} ({old_ip})"))),
        "{log}"
    );
    assert!(
        log.contains(&format!("{terminating}{old} ({old_ip})")),
        "{log}"
    );
    let replaced = c.output("replaced");
    assert_eq!(replaced.as_array().map(Vec::len), Some(1), "{replaced}");
    let r = &replaced[0];
    assert_eq!(r["node"], node, "{replaced}");
    assert_eq!(r["instance_id"], old, "{replaced}");
    assert_eq!(r["by"], node, "the node keeps its name: {replaced}");
    assert_eq!(r["status"], "healthy", "{replaced}");
    let new = r["by_instance_id"].as_str().expect("by_instance_id");
    assert_ne!(new, old);
    assert_eq!(
        log.matches(&format!("{node}: launched {new} at ")).count(),
        1,
        "{log}"
    );
    let computes = c.computes();
    let state = |id: &str| computes.iter().find(|i| i.0 == id).cloned();
    // Terminated, and no longer listed by the cluster's tags (EC2 drops a
    // terminated instance's tags).
    assert_eq!(state(old), None, "{computes:?}");
    assert_eq!(c.instance_state(old), "terminated");
    let (_, new_state, new_ip) = state(new).expect("the new instance");
    assert_eq!(new_state, "running");
    assert_ne!(new_ip, old_ip);
    assert_eq!(
        computes.iter().filter(|i| i.1 == "running").count(),
        4,
        "{computes:?}"
    );
    let sinfo = c.sinfo();
    assert!(
        sinfo
            .iter()
            .any(|(n, addr, s)| n == node && *addr == new_ip && s == "idle"),
        "{node} idle at {new_ip}: {sinfo:?}"
    );
    new.to_string()
}

#[test]
fn a_static_node_with_7_gpus_is_replaced_by_parallelclusters_clustermgtd_once_even_across_a_kill() {
    let mut c = cluster();
    let _log = super::live::LogOnFailure(&c.moto);
    let began = Instant::now();
    c.a.apply().expect(0);
    eprintln!(
        "pcluster with 4 static nodes on hosts: created in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let ip =
        c.a.run(&["output", "wf.toml", "cluster.head_node_ip"])
            .expect(0)
            .stdout
            .trim()
            .to_string();
    c.head = c.hosts.at(&ip).expect("the head node's host");
    let sinfo = c.sinfo();
    let names: Vec<&str> = sinfo.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        names,
        [1, 2, 3, 4]
            .map(|n| format!("compute-gpu-st-distributed-ml-{n}"))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        "{sinfo:?}"
    );
    let machine = |node: &str| {
        let addr = &sinfo.iter().find(|s| s.0 == node).expect("node").1;
        let host = c.hosts.at(addr).expect("the node's host");
        (
            host["id"].as_str().unwrap().to_string(),
            addr.clone(),
            host["hostname"].as_str().unwrap().to_string(),
        )
    };
    let faults = tempfile::NamedTempFile::new().unwrap();

    // 1. The first node's machine has 7 GPUs: replaced, uninterrupted.
    let bad = "compute-gpu-st-distributed-ml-1";
    let (old, old_ip, hostname) = machine(bad);
    std::fs::write(faults.path(), format!("{hostname} gpus 7\n")).unwrap();
    c.write(&node_check(&c.head, faults.path(), 1));
    let plan = c.a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("replaced by ParallelCluster cluster `flow-p5`"),
        "{}",
        plan.stdout
    );
    let began = Instant::now();
    let run = c.a.apply();
    eprintln!(
        "pcluster: 4 static nodes checked, 1 drained, replaced by clustermgtd and checked in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(run.code, 0, "{}", run.all());
    let all = run.all();
    for said in [
        format!("bad node {bad}: nvidia-smi lists 7 GPUs"),
        format!("drained node {bad}: flow: nvidia-smi lists 7 GPUs"),
        format!("set node {bad} ({old}) DOWN for ParallelCluster to replace"),
    ] {
        assert!(all.contains(&said), "{said}: {all}");
    }
    let new = replaced_once(&c, bad, &old, &old_ip);
    // The replacement as flow saw it: from its DOWN to the node back in
    // service on the new instance (clustermgtd acts on its next loop).
    let at = |said: &str| {
        all.lines()
            .find(|l| l.contains(said))
            .and_then(|l| l.trim_start_matches('[').split('s').next())
            .and_then(|t| t.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no line with {said}: {all}"))
    };
    eprintln!(
        "pcluster: node {bad} DOWN to back in service on {new}: {:.1} s",
        at(&format!("node {bad} replaced: ")) - at(&format!("set node {bad} ("))
    );
    assert!(
        all.contains(&format!("node {bad} replaced: {old} ({old_ip}) by {new}")),
        "{all}"
    );
    let verdicts = c.output("verdicts");
    assert_eq!(verdicts[bad]["status"], "bad", "{verdicts}");
    assert_eq!(
        verdicts[format!("{bad}@{new}")]["status"],
        "healthy",
        "{verdicts}"
    );
    let runs =
        c.a.run(&["runs", "wf.toml", "fleet", "--json"])
            .expect(0)
            .stdout;
    let runs: Value = serde_json::from_str(&runs).expect("JSON");
    let last = runs
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .expect("a run");
    assert_eq!(last["values"][bad]["status"], "bad", "{last}");
    assert_eq!(
        last["values"][format!("{bad}@{new}")]["status"],
        "healthy",
        "{last}"
    );

    // 2. The second node's machine: flow killed while it waits, then
    // applied again.
    let bad = "compute-gpu-st-distributed-ml-2";
    let (old, old_ip, hostname) = machine(bad);
    std::fs::write(faults.path(), format!("{hostname} gpus 7\n")).unwrap();
    c.write(&node_check(&c.head, faults.path(), 2));
    let child = c.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let waited = Instant::now();
    // sinfo shows a node DOWN and drained as `drained`: scontrol's State.
    while !c.state(bad).contains("DOWN") {
        if waited.elapsed() > Duration::from_secs(180) {
            signal(&child, libc::SIGKILL);
            panic!(
                "flow did not set {bad} DOWN: {}\nclustermgtd: {}\nslurmctld: {}\nsinfo: {:?}",
                finish(child).all(),
                c.clustermgtd_log(),
                c.slurmctld_tail(),
                c.sinfo()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    let run = c.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(
        run.all()
            .contains(&format!("resuming the replacement of {bad} ({old})")),
        "{}",
        run.all()
    );
    replaced_once(&c, bad, &old, &old_ip);
    // One DOWN from flow (the killed run's), one from clustermgtd: the
    // resumed run asked for nothing again.
    assert!(
        !run.all().contains(&format!("set node {bad} (")),
        "{}",
        run.all()
    );
    let slurmctld = c.log("slurmctld.log");
    assert_eq!(
        slurmctld
            .matches(&format!("update_node: node {bad} state set to DOWN"))
            .count(),
        2,
        "{}",
        c.slurmctld_tail()
    );
    assert_eq!(
        c.clustermgtd_log().matches("unhealthy static node").count(),
        2,
        "{}",
        c.clustermgtd_log()
    );
    let again = c.a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.all());
}
