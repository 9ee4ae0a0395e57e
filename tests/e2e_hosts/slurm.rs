//! A Slurm cluster across local hosts (issue 39, parts 2 and 3): five
//! instances from RunInstances, one head (munged, slurmctld) and four
//! compute hosts (munged, slurmd), brought up by
//! `scripts/local-cloud/cloud_slurm_hosts.py`; then `flow apply` of a
//! `slurm.job` that submits over SSH on the head node, and whose job runs
//! `srun -N 4 hostname` and Open MPI's `mpirun` across the compute hosts.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::hosts::{Hosts, import_key_pair, keygen};
use super::support::moto::{Moto, between_all};
use super::support::{Project, Run, workspace_root};

/// The batch job: every compute host says its name through srun, then
/// through Open MPI's mpirun (which, inside the allocation, starts its
/// daemons with srun). The job runs as root (the AMI's default user is
/// uid 0 on a host), which Open MPI refuses unless told.
const JOB: &str = r#"#!/bin/bash
#SBATCH --job-name=hosts-hostname
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
echo "== srun"
srun -N 4 hostname | sort
echo "== mpirun"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    -n 4 --map-by node hostname | sort
echo "== end"
"#;

fn workflow(head_ip: &str, host_key: &str, chdir: &Path) -> String {
    format!(
        r#"[workflow]
name = "hosts-slurm"

[vars.ssh_key]
description = "The head node's SSH private key"
sensitive = true
env = "HEAD_NODE_SSH_KEY"

[steps.hostname]
provider = "slurm.job"
[steps.hostname.inputs]
script = "hostname.sbatch"
host = "{head_ip}"
ssh_user = "ec2-user"
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
chdir = "{chdir}"
success_pattern = "== end"
"#,
        chdir = chdir.display()
    )
}

/// Five instances (Amazon Linux's AMI: `ec2-user`) in a new subnet: ids.
fn run_instances(moto: &Moto, key_name: &str) -> Vec<String> {
    let vpc = moto.query_call(
        "ec2",
        "Action=CreateVpc&Version=2016-11-15&CidrBlock=10.40.0.0/16",
    );
    let vpc = between_all(&vpc, "<vpcId>", "</vpcId>")[0].clone();
    let subnet = moto.query_call(
        "ec2",
        &format!("Action=CreateSubnet&Version=2016-11-15&VpcId={vpc}&CidrBlock=10.40.1.0/24"),
    );
    let subnet = between_all(&subnet, "<subnetId>", "</subnetId>")[0].clone();
    let run = moto.query_call(
        "ec2",
        &format!(
            "Action=RunInstances&Version=2016-11-15&ImageId=ami-760aaa0f&MinCount=5&MaxCount=5\
             &KeyName={key_name}&SubnetId={subnet}&InstanceType=c5.large"
        ),
    );
    let ids = between_all(&run, "<instanceId>", "</instanceId>");
    assert_eq!(ids.len(), 5, "{run}");
    ids
}

/// The proportional set size (KiB) of every process in the host whose
/// PID 1 is `pid` (those sharing its PID namespace).
fn host_pss_kib(pid: u64) -> u64 {
    let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid")).expect("host's pid ns");
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let path = entry.path();
        if std::fs::read_link(path.join("ns/pid")).ok().as_ref() != Some(&ns) {
            continue;
        }
        let rollup = std::fs::read_to_string(path.join("smaps_rollup")).unwrap_or_default();
        total += rollup
            .lines()
            .find(|l| l.starts_with("Pss:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// Debian's Slurm and munge (as scripts/local-slurm installs them) and
/// Open MPI; before entering the sealed namespace, where nothing can be
/// fetched. Fails naming what could not be installed.
fn install_packages() {
    let script = workspace_root().join("scripts/local-slurm");
    let status = Command::new(&script)
        .arg("--install")
        .status()
        .expect("run scripts/local-slurm --install");
    assert!(
        status.success(),
        "scripts/local-slurm --install (Debian's slurmctld, slurmd, slurm-client, munge) failed"
    );
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("installing Debian's openmpi-bin (for `mpirun`)");
        let update = Command::new("apt-get").args(["update", "-qq"]).status();
        let install = Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "openmpi-bin",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
        assert!(
            update.is_ok()
                && install.as_ref().is_ok_and(|s| s.success())
                && Command::new("mpirun").arg("--version").output().is_ok(),
            "`mpirun` is missing and `apt-get install openmpi-bin` did not provide it ({install:?}): install Debian's openmpi-bin"
        );
    }
}

#[test]
fn a_cluster_of_hosts_runs_srun_and_mpirun_across_four_nodes_submitted_over_ssh() {
    install_packages();
    let hosts = Hosts::start();
    let _inside = hosts.enter();
    let socket = hosts.socket.to_string_lossy().into_owned();
    let moto = Moto::start_with(&[("FLOW_LOCAL_HOSTS", &socket)]);
    let p = Project::new();
    let key = keygen(p.path(), "flow-key");
    import_key_pair(&moto, "flow-key", &key);
    let ids = run_instances(&moto, "flow-key");

    let began = Instant::now();
    let up = Command::new("python3")
        .arg(workspace_root().join("scripts/local-cloud/cloud_slurm_hosts.py"))
        .args(["up", "flowhosts"])
        .args(&ids)
        .env("FLOW_LOCAL_HOSTS", &socket)
        .output()
        .expect("run python3 cloud_slurm_hosts.py");
    let up_s = began.elapsed().as_secs_f64();
    assert!(
        up.status.success(),
        "cloud_slurm_hosts.py up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let cluster: serde_json::Value = serde_json::from_slice(&up.stdout).expect("its JSON");
    let head = &cluster["head"];
    assert_eq!(head["id"], ids[0].as_str());
    let computes: Vec<String> = cluster["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["hostname"].as_str().expect("hostname").to_string())
        .collect();
    assert_eq!(computes.len(), 4, "{cluster}");
    eprintln!("slurm across hosts: 1 head + 4 compute hosts idle in {up_s:.2} s");

    // The job's folder, shared by every host as a cluster's /home is.
    let shared = p.path().join("shared");
    std::fs::create_dir_all(&shared).expect("mkdir shared");
    p.write("hostname.sbatch", JOB);
    let head_ip = head["ip"].as_str().expect("head ip");
    p.write(
        "wf.toml",
        &workflow(head_ip, head["host_key"].as_str().expect("key"), &shared),
    );
    let private = std::fs::read_to_string(&key).expect("private key");
    let env: Vec<(String, String)> = moto.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("HEAD_NODE_SSH_KEY", &private));
    let logs = || {
        std::fs::read_to_string(format!(
            "{}/log/slurmctld.log",
            cluster["dir"].as_str().unwrap_or("")
        ))
        .unwrap_or_default()
    };
    let run: Run = p.run_env(&["apply", "--auto-approve", "wf.toml"], &env);
    assert_eq!(run.code, 0, "{}\nslurmctld.log:\n{}", run.all(), logs());
    assert!(
        run.stdout
            .contains(&format!("submitted on ec2-user@{head_ip}")),
        "{}",
        run.stdout
    );

    // The job's output, as flow read it over SSH on the head node.
    let out = p.run_env(&["logs", "wf.toml", "hostname"], &env).expect(0);
    // Each line of the step's log is "TIMESTAMP TEXT"; flow's own lines
    // (`[event] …`, `[flow] …`) fall between the job's as they happen (the
    // job's end may be seen while its last lines are still being read).
    let text: Vec<&str> = out
        .stdout
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest))
        .filter(|l| !l.starts_with("[event] ") && !l.starts_with("[flow] "))
        .collect();
    let section = |name: &str| -> Vec<String> {
        text.iter()
            .skip_while(|l| **l != format!("== {name}"))
            .skip(1)
            .take_while(|l| !l.starts_with("== "))
            .map(|l| l.to_string())
            .collect()
    };
    let mut expected = computes.clone();
    expected.sort();
    assert_eq!(section("srun"), expected, "srun:\n{}", out.stdout);
    assert_eq!(section("mpirun"), expected, "mpirun:\n{}", out.stdout);
    let mut distinct = expected.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{expected:?}");
    assert!(!expected.iter().any(|h| h == &head["hostname"]));

    // Memory of a compute host with munged and slurmd (and sshd) running.
    for node in cluster["nodes"].as_array().expect("nodes") {
        let host = hosts
            .list()
            .into_iter()
            .find(|h| h["id"] == node["id"])
            .expect("the node's host");
        let daemons = host["daemons"].as_array().expect("daemons");
        assert!(daemons.iter().any(|d| d == "slurmd"), "{host}");
        let pss = host_pss_kib(host["pid"].as_u64().expect("pid"));
        eprintln!(
            "slurm across hosts: {} (munged, slurmd, sshd, init): {:.1} MiB PSS",
            host["hostname"].as_str().unwrap_or("?"),
            pss as f64 / 1024.0
        );
        assert!(pss > 0, "no process measured in {host}");
    }
    let pss = host_pss_kib(head["pid"].as_u64().expect("pid"));
    eprintln!(
        "slurm across hosts: head (munged, slurmctld, sshd, init): {:.1} MiB PSS",
        pss as f64 / 1024.0
    );
}
