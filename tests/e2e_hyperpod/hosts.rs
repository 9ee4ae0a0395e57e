//! HyperPod nodes that are hosts (issue 39 part 3): under
//! `scripts/local-hosts` (tests/support/hosts.rs) each node of a Slurm
//! HyperPod cluster that `flow` makes is a host
//! (scripts/local-cloud/cloud_hyperpod_hosts.py) that runs its group's
//! lifecycle script as HyperPod does: fetched from the S3 URI the workflow
//! uploaded with s3.bucket + s3.sync, run as root, its output in the
//! cluster's CloudWatch log group, one stream per instance
//! (cloud_hyperpod_lifecycle.py). HyperPod nodes are reached through SSM,
//! not SSH: the test's lifecycle script installs the test's public key for
//! `ubuntu`, as users' lifecycle scripts install their users' keys, and the
//! test finds the controller's address as a user does, with
//! DescribeClusterNode. Then a `slurm.job` submitted over SSH on the
//! controller runs `srun` across the 4 workers; a count change that flow
//! carries out and waits for grows, then shrinks, the running Slurm.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use super::ROLE;
use crate::hosts::{Hosts, Inside, ensure_installed, keygen};
use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;

/// The lifecycle script every node runs: says where and as whom, then
/// lets the test's key in for `ubuntu`.
const ON_CREATE: &str = r#"#!/bin/bash
set -euo pipefail
echo "on_create: ran on $(hostname) as uid $(id -u) from $PWD"
mkdir -p ~ubuntu/.ssh
cat authorized_keys >> ~ubuntu/.ssh/authorized_keys
echo "on_create: key for ubuntu installed"
"#;

/// The batch job: every worker says its name through srun.
const JOB: &str = r#"#!/bin/bash
#SBATCH --job-name=hyperpod-hostname
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
echo "== srun"
srun -N 4 hostname | sort
echo "== end"
"#;

/// The controller as the test reaches it: its address and host key.
pub(super) struct Controller {
    /// The manager's HOST of the controller.
    pub host: Value,
    /// Its PrivatePrimaryIp.
    pub ip: String,
}

/// A cluster of hosts: the sealed namespace, moto in it, a proxy that
/// counts the calls, a project whose lifecycle folder holds the script and
/// the test's public key.
pub(super) struct HostCluster {
    /// The flow project.
    pub a: Aws,
    /// The calls flow made.
    pub proxy: FaultProxy,
    /// The local cloud.
    pub moto: Moto,
    /// The private key the lifecycle script lets in.
    pub key: std::path::PathBuf,
    _inside: Inside,
    /// The hosts (dropped last).
    pub hosts: Hosts,
}

impl Drop for HostCluster {
    /// On a failed test, moto's log (the local cloud's hosts and Slurm
    /// say there what went wrong).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let log = std::fs::read_to_string(&self.moto.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(80);
        eprintln!("--- moto log, last lines ---\n{}", lines[from..].join("\n"));
    }
}

impl HostCluster {
    /// Everything up to the first apply; `on_create` is the lifecycle
    /// script; `moto_env` more of moto's environment.
    pub fn new(on_create: &str, moto_env: &[(&str, &str)]) -> HostCluster {
        ensure_installed("slurmctld", "slurmctld");
        ensure_installed("slurmd", "slurmd");
        ensure_installed("munged", "munge");
        ensure_installed("srun", "slurm-client");
        let hosts = Hosts::start();
        let inside = hosts.enter();
        let socket = hosts.socket.to_string_lossy().into_owned();
        let mut env = vec![("FLOW_LOCAL_HOSTS", socket.as_str())];
        env.extend_from_slice(moto_env);
        let moto = Moto::start_with(&env);
        let proxy = FaultProxy::start(moto.addr);
        let mut a = Aws::new(&moto, Some(&proxy.endpoint()));
        let key = keygen(a.p.path(), "flow-key");
        let public = std::fs::read_to_string(key.with_extension("pub")).expect("public key");
        a.p.write("lifecycle/on_create.sh", on_create);
        a.p.write("lifecycle/authorized_keys", &public);
        a.p.write("hostname.sbatch", JOB);
        std::fs::create_dir_all(a.p.path().join("shared")).expect("mkdir shared");
        let private = std::fs::read_to_string(&key).expect("private key");
        a.env.push(("CONTROLLER_SSH_KEY".into(), private));
        HostCluster {
            a,
            proxy,
            moto,
            key,
            _inside: inside,
            hosts,
        }
    }

    /// A SageMaker call straight to moto.
    pub fn call(&self, op: &str, body: Value) -> Value {
        self.moto
            .json_call("sagemaker", &format!("SageMaker.{op}"), &body.to_string())
    }

    /// Each node: (instance id, group, status, hostname, address).
    pub fn nodes(&self) -> Vec<(String, String, String, String, String)> {
        let listed = self.call("ListClusterNodes", json!({"ClusterName": "ml-cluster"}));
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        listed["ClusterNodeSummaries"]
            .as_array()
            .expect("ClusterNodeSummaries")
            .iter()
            .map(|n| {
                let id = s(&n["InstanceId"]);
                let d = self.call(
                    "DescribeClusterNode",
                    json!({"ClusterName": "ml-cluster", "NodeId": id}),
                );
                let d = &d["NodeDetails"];
                (
                    id,
                    s(&d["InstanceGroupName"]),
                    s(&d["InstanceStatus"]["Status"]),
                    s(&d["PrivateDnsHostname"]),
                    s(&d["PrivatePrimaryIp"]),
                )
            })
            .collect()
    }

    /// The controller, found with DescribeClusterNode as a user finds it.
    pub fn controller(&self) -> Controller {
        let (_, _, _, _, ip) = self
            .nodes()
            .into_iter()
            .find(|n| n.1 == "controller-machine")
            .expect("a controller node");
        let host = self
            .hosts
            .at(&ip)
            .unwrap_or_else(|| panic!("no host at the controller's {ip}"));
        Controller { host, ip }
    }

    /// `COMMAND` over SSH on the controller as `ubuntu`, with the key the
    /// lifecycle script installed: its stdout (it must succeed).
    pub fn on_controller(&self, command: &str) -> String {
        let c = self.controller();
        let out = self.hosts.ssh(&c.host, &self.key, command);
        assert!(
            out.status.success(),
            "ssh ubuntu@{} {command}: {}{}",
            c.ip,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `sinfo -N` on the controller: (node, state) of each.
    pub fn sinfo(&self) -> Vec<(String, String)> {
        self.on_controller("sinfo -h -N -o '%N %T'")
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect()
    }

    /// The nodes Slurm drained, by slurmctld's own log (on the shared file
    /// system, beside the cluster's slurm.conf): each drained node with
    /// the reason it was given, in order. A node that was replaced since,
    /// and left Slurm, is still there.
    pub fn drained_in_slurm(&self) -> Vec<(String, String)> {
        let dir = self.controller().host["dir"]
            .as_str()
            .expect("the controller's dir")
            .to_string();
        let log = std::path::Path::new(&dir)
            .parent()
            .and_then(std::path::Path::parent)
            .expect("the hosts' work folder")
            .join("slurm/ml-cluster/log/slurmctld.log");
        let log =
            std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        crate::support::slurm::slurmctld_log::drained(&log)
    }

    /// The lifecycle output of `node` (its instance id and group) in the
    /// cluster's CloudWatch log group.
    pub fn lifecycle_log(&self, id: &str, group: &str) -> String {
        let arn = self.call("DescribeCluster", json!({"ClusterName": "ml-cluster"}))["ClusterArn"]
            .as_str()
            .expect("ClusterArn")
            .to_string();
        let cluster_id = arn.rsplit('/').next().unwrap_or_default();
        let events = self.moto.json_call(
            "logs",
            "Logs_20140328.GetLogEvents",
            &json!({
                "logGroupName": format!("/aws/sagemaker/Clusters/ml-cluster/{cluster_id}"),
                "logStreamName": format!("LifecycleConfig/{group}/{id}"),
                "startFromHead": true,
            })
            .to_string(),
        );
        events["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["message"].as_str().unwrap_or_default().to_string() + "\n")
            .collect()
    }
}

/// The workflow: the lifecycle bucket and scripts, the cluster with
/// `workers` workers, and with the controller known, the job and `more`.
pub(super) fn workflow(
    workers: u32,
    controller: Option<&Controller>,
    shared: &Path,
    more: &str,
) -> String {
    let uri = "s3://${steps.lifecycle_bucket.outputs.name}/lifecycle/";
    let mut wf = format!(
        r#"[workflow]
name = "hyperpod-hosts"
region = "us-east-1"

[vars.ssh_key]
description = "The key the lifecycle script lets in for ubuntu"
sensitive = true
env = "CONTROLLER_SSH_KEY"

[steps.lifecycle_bucket]
provider = "s3.bucket"
[steps.lifecycle_bucket.inputs]
name = "sagemaker-flow-hosts-lifecycle"

[steps.lifecycle_scripts]
provider = "s3.sync"
[steps.lifecycle_scripts.inputs]
source = "lifecycle"
destination = "{uri}"

[steps.hp]
provider = "sagemaker.hyperpod"
depends_on = ["lifecycle_scripts"]
[steps.hp.inputs]
cluster_name = "ml-cluster"
instance_groups = [
  {{ name = "controller-machine", instance_type = "ml.m5.2xlarge", count = 1, lifecycle_s3_uri = "{uri}", execution_role = "{ROLE}" }},
  {{ name = "worker-group-1", instance_type = "ml.m5.2xlarge", count = {workers}, lifecycle_s3_uri = "{uri}", execution_role = "{ROLE}" }},
]
"#
    );
    if let Some(c) = controller {
        wf.push_str(&format!(
            r#"
[steps.hostname]
provider = "slurm.job"
depends_on = ["hp"]
[steps.hostname.inputs]
script = "hostname.sbatch"
host = "{ip}"
ssh_user = "ubuntu"
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
chdir = "{shared}"
success_pattern = "== end"
{more}"#,
            ip = c.ip,
            host_key = c.host["host_key"].as_str().expect("host key"),
            shared = shared.display(),
        ));
    }
    wf
}

#[test]
fn lifecycle_scripts_run_on_every_node_srun_spans_the_workers_and_a_count_change_resizes_slurm() {
    let t = HostCluster::new(ON_CREATE, &[]);
    let shared = t.a.p.path().join("shared");
    t.a.p.write("wf.toml", &workflow(4, None, &shared, ""));
    let began = Instant::now();
    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    eprintln!(
        "hyperpod on hosts: 1 controller + 4 workers in {:?}",
        began.elapsed()
    );

    // The lifecycle script ran on each node, as root, from its S3 copy.
    let nodes = t.nodes();
    assert_eq!(nodes.len(), 5, "{nodes:?}");
    for (id, group, status, hostname, _) in &nodes {
        assert_eq!(status, "Running", "{id}");
        let log = t.lifecycle_log(id, group);
        assert!(
            log.contains(&format!("on_create: ran on {hostname} as uid 0 from ")),
            "{id} ({hostname}): {log}"
        );
        assert!(log.contains("on_create: key for ubuntu installed"), "{log}");
    }

    // Slurm across them; the job over SSH on the controller.
    let controller = t.controller();
    t.a.p
        .write("wf.toml", &workflow(4, Some(&controller), &shared, ""));
    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(
        run.stdout
            .contains(&format!("submitted on ubuntu@{}", controller.ip)),
        "{}",
        run.stdout
    );
    let out = t.a.run(&["logs", "wf.toml", "hostname"]).expect(0);
    let srun: Vec<&str> = out
        .stdout
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest))
        .skip_while(|l| *l != "== srun")
        .skip(1)
        .take_while(|l| !l.starts_with("== "))
        // flow's own events land in the log between the job's lines as
        // they happen (`[event] job … COMPLETED` before its last lines).
        .filter(|l| !l.starts_with("[event] "))
        .collect();
    let mut workers: Vec<String> = nodes
        .iter()
        .filter(|n| n.1 == "worker-group-1")
        .map(|n| n.3.clone())
        .collect();
    workers.sort();
    assert_eq!(srun, workers, "srun:\n{}", out.stdout);

    // A count up, carried out and waited for by flow: the new node runs
    // its lifecycle script and joins the running Slurm.
    t.a.p
        .write("wf.toml", &workflow(5, Some(&controller), &shared, ""));
    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(t.proxy.forwarded("UpdateCluster"), 1);
    let grown = t.nodes();
    let new: Vec<_> = grown
        .iter()
        .filter(|n| !nodes.iter().any(|o| o.0 == n.0))
        .collect();
    assert_eq!(new.len(), 1, "{grown:?}");
    assert!(
        t.lifecycle_log(&new[0].0, &new[0].1)
            .contains("on_create: ran on")
    );
    let sinfo = t.sinfo();
    assert_eq!(sinfo.len(), 5, "{sinfo:?}");
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
    assert!(
        sinfo
            .iter()
            .any(|(n, s)| *n == short(&new[0].3) && s == "idle"),
        "{sinfo:?}"
    );
    // And down again: the newest node leaves Slurm, then its host ends.
    t.a.p
        .write("wf.toml", &workflow(4, Some(&controller), &shared, ""));
    t.a.apply().expect(0);
    let sinfo = t.sinfo();
    assert_eq!(sinfo.len(), 4, "{sinfo:?}");
    assert!(
        !sinfo.iter().any(|(n, _)| *n == short(&new[0].3)),
        "{sinfo:?}"
    );
    assert!(t.hosts.at(&new[0].4).is_none(), "its host is gone");

    t.a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        t.hosts.list().is_empty(),
        "destroy left {:?}",
        t.hosts.list()
    );
}

#[test]
fn a_lifecycle_script_that_fails_fails_the_cluster_with_its_node_and_log() {
    let t = HostCluster::new(
        "#!/bin/bash\necho \"on_create: no FSx here\"\nexit 3\n",
        &[],
    );
    let shared = t.a.p.path().join("shared");
    t.a.p.write("wf.toml", &workflow(4, None, &shared, ""));
    let run = t.a.apply().expect(1);
    assert!(
        run.all()
            .contains("HyperPod cluster `ml-cluster` is Failed: 5 of 5 node(s) failed: i-"),
        "{}",
        run.all()
    );
    assert!(
        run.all().contains(
            "Lifecycle script did not run successfully: on_create.sh exited with status 3"
        ),
        "{}",
        run.all()
    );
    for (id, group, status, _, _) in t.nodes() {
        assert_eq!(status, "Failure", "{id}");
        let log = t.lifecycle_log(&id, &group);
        assert!(log.contains("on_create: no FSx here"), "{log}");
        assert!(log.contains("on_create.sh exited with status 3"), "{log}");
    }
}
