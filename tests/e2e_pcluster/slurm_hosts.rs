//! The cluster's head node as a host running slurmctld (issue 39 part 2):
//! under `scripts/local-hosts` (tests/support/hosts.rs) every instance of
//! pcluster's stack is a host; at the head node's boot the local cloud
//! launches the static compute nodes (MinCount) as clustermgtd does and
//! starts munged + slurmctld on the head and slurmd on each node
//! (scripts/local-cloud/cloud_pcluster_slurm.py through
//! cloud_pcluster_head_node.py's HEAD_NODE_HOOKS). Over SSH to the head
//! node's address (flow's output), `sinfo` shows the static node idle and
//! `srun` runs on it; destroy ends every host.

use std::time::Instant;

use super::hosts::{Hosts, ensure_installed, import_key_pair, keygen};
use super::https::Cloud;
use super::{moto_config, prepared, workflow};

#[test]
fn the_head_node_is_a_host_running_slurmctld_with_its_static_node() {
    // Debian's Slurm and munge, as the hosts run them (fails naming the
    // package when it cannot be installed).
    ensure_installed("slurmctld", "slurmctld");
    ensure_installed("slurmd", "slurmd");
    ensure_installed("munged", "munge");
    ensure_installed("srun", "slurm-client");
    let hosts = Hosts::start();
    let _inside = super::enter(&hosts);
    let moto = Cloud::start(&[("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy())]);
    let _log = super::live::LogOnFailure(&moto);
    let (pcluster, values) = prepared(&moto);
    let a = moto.aws();
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
            r#"PLACEHOLDER_MIN_INSTANCES = "1""#,
        );
    a.p.write("wf.toml", &workflow(&values));
    let mut env = a.env.clone();
    env.push(("FLOW_PCLUSTER".into(), pcluster));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

    let started = Instant::now();
    let apply = a.p.run_env(&["apply", "--auto-approve", "wf.toml"], &env);
    eprintln!(
        "pcluster apply with Slurm on hosts (create): {:?}",
        started.elapsed()
    );
    assert_eq!(apply.code, 0, "{}", apply.all());
    let ip =
        a.p.run_env(&["output", "wf.toml", "cluster.head_node_ip"], &env)
            .expect(0)
            .stdout
            .trim()
            .to_string();
    let head = hosts
        .at(&ip)
        .unwrap_or_else(|| panic!("no host at the head node's {ip}: {:?}", hosts.list()));
    let out = hosts.ssh(
        &head,
        &key,
        "sinfo -h -N -o '%N %T %P'; srun -N 1 printenv SLURMD_NODENAME",
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ssh to the head node {ip}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one static node, then srun's line: {stdout}"
    );
    let node = lines[0].split_whitespace().next().unwrap();
    // Named as ParallelCluster names a static node.
    assert_eq!(node, "compute-gpu-st-distributed-ml-1", "sinfo: {stdout}");
    assert!(lines[0].ends_with(" idle compute-gpu*"), "sinfo: {stdout}");
    assert_eq!(lines[1], node, "srun ran on {}: {stdout}", lines[1]);
    assert_eq!(
        hosts.list().len(),
        2,
        "head and static node: {:?}",
        hosts.list()
    );

    // An update (MaxCount 2 → 3, which pcluster takes with the fleet
    // running): the head node applies it; the cluster keeps its one
    // slurmctld and its static node, none launched again.
    a.p.write(
        "wf.toml",
        &workflow(&values.replace(
            r#"PLACEHOLDER_MAX_INSTANCES = "2""#,
            r#"PLACEHOLDER_MAX_INSTANCES = "3""#,
        )),
    );
    let update = a.p.run_env(&["apply", "--auto-approve", "wf.toml"], &env);
    assert_eq!(update.code, 0, "{}", update.all());
    assert!(update.all().contains("UPDATE_COMPLETE"), "{}", update.all());
    // The plan said so: a MaxCount that grows needs no fleet stop.
    assert!(
        update
            .stdout
            .contains("queues grow: pcluster takes it with the compute fleet running"),
        "{}",
        update.stdout
    );
    let out = hosts.ssh(&head, &key, "sinfo -h -N -o '%N %T'; pgrep -c slurmctld");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [&format!("{node} idle"), "1"],
        "after the update: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        hosts.list().len(),
        2,
        "head and static node after the update: {:?}",
        hosts.list()
    );

    a.p.run_env(&["destroy", "--auto-approve", "wf.toml"], &env)
        .expect(0);
    assert!(hosts.list().is_empty(), "destroy left {:?}", hosts.list());
}
