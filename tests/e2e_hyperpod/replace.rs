//! `slurm.node_check` with policy `replace` on a HyperPod cluster of hosts
//! (issue 40 part 3): a worker planted with 7 GPUs (the stand-in
//! nvidia-smi of tests/fixtures/slurm/fleet reads the fault table by
//! $SLURMD_NODENAME) is found by the shipped workflows/slurm/nvidia-smi.sbatch,
//! named, drained with flow's reason, replaced through the local cloud's
//! BatchReplaceClusterNodes (scripts/local-cloud/cloud_hyperpod_nodes.py:
//! a new instance of its group, a new host that runs the lifecycle script
//! and joins Slurm under its own hostname), and its replacement checked
//! healthy; a kill -9 of flow while it waits for the replacement, then
//! apply again, sends BatchReplaceClusterNodes once in all (the proxy's
//! request log).

use std::io::Write;
use std::time::Duration;

use serde_json::Value;

use super::hyperpod_hosts::{Controller, HostCluster, workflow};
use crate::support::{finish, signal, wait_until, workspace_root};

/// The lifecycle script: the test's key for ubuntu.
pub(super) const ON_CREATE: &str = "#!/bin/bash\nset -euo pipefail\nmkdir -p ~ubuntu/.ssh\n\
    cat authorized_keys >> ~ubuntu/.ssh/authorized_keys\necho \"on_create: $(hostname)\"\n";

/// The node check step: every node of the cluster's partition, 8 GPUs
/// each, bad ones replaced through the cluster; `more` more of its tables
/// (`pairs`), whose scripts may use `{fleet}` (the stand-ins' folder) and
/// `{faults}` (the fault table).
fn node_check(c: &Controller, faults: &std::path::Path, more: &str) -> String {
    let fleet = workspace_root().join("tests/fixtures/slurm/fleet");
    format!(
        r#"
[steps.fleet]
provider = "slurm.node_check"
depends_on = ["hp"]
[steps.fleet.inputs]
partition = "ml-cluster"
policy = "replace"
hyperpod_cluster = "${{steps.hp.outputs.cluster_name}}"
host = "{ip}"
ssh_user = "ubuntu"
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
[steps.fleet.inputs.check]
script = "nvidia-smi.sbatch"
gpus = 8
success_pattern = "NVIDIA-SMI"
environment = {{ PATH = "{fleet}:/usr/sbin:/usr/bin:/sbin:/bin", FLOW_TEST_FAULTS = "{faults}" }}
{more}"#,
        more = more
            .replace("{fleet}", &fleet.display().to_string())
            .replace("{faults}", &faults.display().to_string()),
        ip = c.ip,
        host_key = c.host["host_key"].as_str().expect("host key"),
        fleet = fleet.display(),
        faults = faults.display(),
    )
}

/// A cluster of 1 controller and `workers` workers, up; the first worker
/// (by name) planted with 7 GPUs; the workflow with the node check
/// written. Its Slurm name and instance id.
fn planted(t: &HostCluster, faults: &tempfile::NamedTempFile, workers: u32) -> (String, String) {
    planted_with(t, faults, workers, 0, "gpus 7", "")
}

/// A cluster of 1 controller and `workers` workers, up; the `nth` worker
/// (by name) planted with `fault` (`KEY VALUE` of the fault table); the
/// workflow with the node check (and `more` of its tables: see
/// [`node_check`]) written. Its Slurm name and instance id.
pub(super) fn planted_with(
    t: &HostCluster,
    faults: &tempfile::NamedTempFile,
    workers: u32,
    nth: usize,
    fault: &str,
    more: &str,
) -> (String, String) {
    let shared = t.a.p.path().join("shared");
    t.a.p
        .write("wf.toml", &workflow(workers, None, &shared, ""));
    let began = std::time::Instant::now();
    t.a.apply().expect(0);
    eprintln!(
        "hyperpod on hosts: 1 controller + {workers} workers with Slurm in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let mut group: Vec<_> = t
        .nodes()
        .into_iter()
        .filter(|n| n.1 == "worker-group-1")
        .collect();
    group.sort_by(|a, b| a.3.cmp(&b.3));
    let bad = group[nth].clone();
    let name = bad.3.split('.').next().unwrap().to_string();
    writeln!(faults.as_file(), "{name} {fault}").unwrap();
    let check = std::fs::read_to_string(workspace_root().join("workflows/slurm/nvidia-smi.sbatch"))
        .expect("workflows/slurm/nvidia-smi.sbatch");
    t.a.p.write("nvidia-smi.sbatch", &check);
    let controller = t.controller();
    t.a.p.write(
        "wf.toml",
        &workflow(
            workers,
            Some(&controller),
            &shared,
            &node_check(&controller, faults.path(), more),
        ),
    );
    (name, bad.0)
}

/// The step's output `key`.
pub(super) fn output(t: &HostCluster, key: &str) -> Value {
    let out =
        t.a.run(&["output", "wf.toml", &format!("fleet.{key}"), "--json"])
            .expect(0);
    serde_json::from_str(&out.stdout).expect("JSON")
}

/// What is true once the bad node was replaced, however the run went:
/// one BatchReplaceClusterNodes for its instance, its instance gone, the
/// `replaced` output naming the node in its place, healthy, which Slurm
/// lists idle while the bad one is gone from Slurm.
pub(super) fn replaced_once(t: &HostCluster, bad: &str, bad_id: &str, workers: usize) -> String {
    assert_eq!(t.proxy.forwarded("BatchReplaceClusterNodes"), 1);
    // Its instance, and only it, was replaced: gone, the others there.
    let nodes = t.nodes();
    assert!(!nodes.iter().any(|n| n.0 == bad_id), "{nodes:?}");
    assert_eq!(nodes.len(), workers + 1, "{nodes:?}");
    let replaced = output(t, "replaced");
    let r = &replaced[0];
    assert_eq!(replaced.as_array().map(Vec::len), Some(1), "{replaced}");
    assert_eq!(r["node"], bad);
    assert_eq!(r["instance_id"], bad_id);
    assert_eq!(r["status"], "healthy", "{replaced}");
    let by = r["by"].as_str().expect("by").to_string();
    let by_id = r["by_instance_id"].as_str().expect("by_instance_id");
    let new = nodes
        .iter()
        .find(|n| n.0 == by_id)
        .expect("the new instance");
    assert_eq!(new.1, "worker-group-1");
    assert_eq!(new.3.split('.').next(), Some(by.as_str()));
    let sinfo = t.sinfo();
    assert!(!sinfo.iter().any(|(n, _)| n == bad), "{sinfo:?}");
    assert!(
        sinfo.iter().any(|(n, s)| *n == by && s == "idle"),
        "{sinfo:?}"
    );
    assert_eq!(sinfo.len(), workers, "{sinfo:?}");
    assert_eq!(output(t, "drained"), serde_json::json!([bad]));
    by
}

/// The last run of step `fleet` in the run history, which holds the
/// verdicts of the replaced node `bad` (bad) and of its replacement `by`
/// (healthy).
pub(super) fn last_run_of_the_replacement(t: &HostCluster, bad: &str, by: &str) -> Value {
    let runs =
        t.a.run(&["runs", "wf.toml", "fleet", "--json"])
            .expect(0)
            .stdout;
    let runs: Value = serde_json::from_str(&runs).expect("JSON");
    let last = runs
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .expect("a run");
    assert_eq!(last["values"][bad]["status"], "bad", "{last}");
    assert_eq!(last["values"][by]["status"], "healthy", "{last}");
    last
}

#[test]
fn a_node_with_7_gpus_of_16_is_named_drained_replaced_through_hyperpod_and_its_replacement_checked()
{
    let t = HostCluster::new(ON_CREATE, &[]);
    let faults = tempfile::NamedTempFile::new().unwrap();
    let (bad, bad_id) = planted(&t, &faults, 16);
    let plan = t.a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("then its instance replaced through HyperPod cluster `ml-cluster` (BatchReplaceClusterNodes, once)"),
        "{}",
        plan.stdout
    );
    let began = std::time::Instant::now();
    let run = t.a.apply();
    eprintln!(
        "hyperpod on hosts: 16 nodes checked, 1 drained, replaced and checked in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(run.code, 0, "{}", run.all());
    let all = run.all();
    assert!(
        all.contains(&format!("bad node {bad}: nvidia-smi lists 7 GPUs")),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "drained node {bad}: flow: nvidia-smi lists 7 GPUs"
        )),
        "{all}"
    );
    assert!(
        all.contains(&format!("BatchReplaceClusterNodes for {bad_id}")),
        "{all}"
    );
    let by = replaced_once(&t, &bad, &bad_id, 16);
    assert!(
        all.contains(&format!("node {bad} ({bad_id}) replaced by {by}")),
        "{all}"
    );
    // Every verdict in the outputs: the bad node's, then its replacement's.
    let verdicts = output(&t, "verdicts");
    assert_eq!(verdicts[&bad]["status"], "bad", "{verdicts}");
    assert_eq!(verdicts[&by]["status"], "healthy", "{verdicts}");
    assert_eq!(output(&t, "bad"), serde_json::json!([bad]));
    // The run history holds every verdict: the 16 checked, and the new node's.
    let last = last_run_of_the_replacement(&t, &bad, &by);
    assert_eq!(
        last["verdicts"].as_array().map(Vec::len),
        Some(17),
        "{last}"
    );
}

#[test]
fn kill_9_while_the_replacement_is_waited_for_then_apply_again_replaces_once() {
    // BatchReplaceClusterNodes' old instance stays ShuttingDown for 10 s.
    let table = tempfile::NamedTempFile::new().expect("table");
    std::fs::write(
        table.path(),
        "scale = 60\n[operations]\n\"sagemaker.hyperpod.replace\" = 600\n",
    )
    .expect("write table");
    let t = HostCluster::new(
        ON_CREATE,
        &[("FLOW_LATENCY_MODEL", &table.path().to_string_lossy())],
    );
    let faults = tempfile::NamedTempFile::new().unwrap();
    let (bad, bad_id) = planted(&t, &faults, 4);
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let replaces = || t.proxy.forwarded("BatchReplaceClusterNodes");
    wait_until(
        Duration::from_secs(120),
        "flow to send BatchReplaceClusterNodes",
        || replaces() == 1,
    );
    let listed = t.proxy.forwarded("ListClusterNodes");
    wait_until(
        Duration::from_secs(20),
        "flow to wait for the replacement",
        || t.proxy.forwarded("ListClusterNodes") > listed,
    );
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    let old = t.nodes().into_iter().find(|n| n.0 == bad_id).map(|n| n.2);
    assert_eq!(old.as_deref(), Some("ShuttingDown"), "still being replaced");

    let run = t.a.apply();
    assert_eq!(run.code, 0, "{}", run.all());
    // The recorded replacement is followed, not asked for again.
    assert!(
        run.all()
            .contains(&format!("resuming the replacement of {bad} ({bad_id})")),
        "{}",
        run.all()
    );
    assert!(
        run.all()
            .contains(&format!("node {bad} ({bad_id}) replaced by ")),
        "{}",
        run.all()
    );
    let by = replaced_once(&t, &bad, &bad_id, 4);
    // The resumed run's verdicts: the replaced node's as the killed run
    // found it, and its replacement's.
    let verdicts = output(&t, "verdicts");
    assert_eq!(verdicts[&by]["status"], "healthy", "{verdicts}");
    assert_eq!(verdicts[&bad]["status"], "bad", "{verdicts}");
    assert!(
        verdicts[&bad]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("7 GPUs")),
        "{verdicts}"
    );
    last_run_of_the_replacement(&t, &bad, &by);
    // Nothing left to do.
    let again = t.a.run(&["plan", "wf.toml", "--detailed-exitcode"]);
    assert_eq!(again.code, 0, "{}", again.all());
}

#[test]
fn replace_needs_hyperpod_cluster_and_a_node_the_cluster_lacks_fails_the_step_untouched() {
    let t = HostCluster::new(ON_CREATE, &[]);
    let faults = tempfile::NamedTempFile::new().unwrap();
    let (bad, bad_id) = planted(&t, &faults, 4);
    let wf = t.a.p.read("wf.toml");

    // Without the cluster, replace is refused at validate, at its entry.
    let line = "hyperpod_cluster = \"${steps.hp.outputs.cluster_name}\"\n";
    assert!(wf.contains(line));
    t.a.p.write("wf.toml", &wf.replace(line, ""));
    let v = t.a.run(&["validate", "wf.toml"]).expect(1);
    assert!(
        v.all()
            .contains("policy `replace` is not built yet for slurm.node_check"),
        "{}",
        v.all()
    );
    assert!(
        v.all().contains("name the cluster in `hyperpod_cluster`"),
        "{}",
        v.all()
    );

    // Another HyperPod cluster, which does not have the bad node: the
    // step fails naming it before any node is drained or replaced.
    let uri = "s3://sagemaker-flow-hosts-lifecycle/lifecycle/";
    t.call(
        "CreateCluster",
        serde_json::json!({"ClusterName": "other-cluster", "InstanceGroups": [{
            "InstanceGroupName": "controller-machine", "InstanceType": "ml.m5.2xlarge",
            "InstanceCount": 1, "ExecutionRole": super::ROLE, "ThreadsPerCore": 1,
            "LifeCycleConfig": {"SourceS3Uri": uri, "OnCreate": "on_create.sh"}}]}),
    );
    t.a.p.write(
        "wf.toml",
        &wf.replace(line, "hyperpod_cluster = \"other-cluster\"\n"),
    );
    let run = t.a.apply().expect(1);
    assert!(
        run.all().contains(&format!(
            "Slurm node {bad} is no instance of HyperPod cluster `other-cluster`: none of its 1 nodes has the hostname {bad}"
        )),
        "{}",
        run.all()
    );
    assert_eq!(t.proxy.forwarded("BatchReplaceClusterNodes"), 0);
    let sinfo = t.sinfo();
    assert!(
        sinfo.iter().any(|(n, s)| *n == bad && s == "idle"),
        "not drained: {sinfo:?}"
    );
    assert!(t.nodes().iter().any(|n| n.0 == bad_id && n.2 == "Running"));
}
