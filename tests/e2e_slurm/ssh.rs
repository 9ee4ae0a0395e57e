//! slurm.job over SSH: submitted on a "head node" (a throwaway sshd on
//! loopback whose sessions reach the test Slurm), with the key and pinned
//! host key handed in as inputs, the key a sensitive variable.

use crate::support::slurm::Slurm;
use crate::support::slurm::sshd::Sshd;
use crate::{emulators, log, project, record};

fn workflow(port: u16, host_key: &str) -> String {
    format!(
        r#"
[workflow]
name = "slurm-ssh"

[vars.ssh_key]
description = "The head node's SSH private key"
sensitive = true
env = "HEAD_NODE_SSH_KEY"

[steps.nccl]
provider = "slurm.job"
[steps.nccl.inputs]
script = "slurm/nccl-tests.sbatch"
host = "127.0.0.1"
ssh_port = {port}
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
nodes = 1
sbatch_args = ["--ntasks-per-node=1"]
args = ["{bin}/all_reduce_perf"]
environment = {{ PATH = "{bin}:/usr/bin:/bin" }}
chdir = "{chdir}"
success_pattern = "Out of bounds values : 0 OK"
capture = {{ busbw = "Avg bus bandwidth\\s*:\\s*([0-9.]+)" }}
"#,
        bin = emulators().display(),
        chdir = std::env::temp_dir().display(),
    )
}

#[test]
fn the_nccl_job_is_submitted_and_followed_over_ssh() {
    let slurm = Slurm::start();
    let sshd = Sshd::start(&slurm);
    let p = project(&workflow(sshd.port, &sshd.host_key()));
    let key = sshd.client_key();
    let run = p.run_env(
        &["apply", "--auto-approve", "wf.toml"],
        &[("HEAD_NODE_SSH_KEY", key.as_str())],
    );
    assert_eq!(
        run.code,
        0,
        "{}\n{}\n{}",
        run.all(),
        sshd.log(),
        slurm.logs()
    );
    assert!(
        run.stdout.contains("submitted on 127.0.0.1:"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("captured busbw = 17.9053"),
        "{}",
        run.stdout
    );
    let jobs = slurm.jobs_named("nccl-all_reduce_perf");
    assert_eq!(jobs.len(), 1);
    assert_eq!(record(&p, "nccl")["resource_id"], jobs[0].0.as_str());
    assert!(log(&p, "nccl").contains("# Out of bounds values : 0 OK"));
    // Every command of the apply (the comment look-up, sbatch, and two per
    // poll) shares one SSH connection: sshd let the key in once.
    let sshd_log = sshd.log();
    let logins = sshd_log.matches("Accepted publickey").count();
    assert_eq!(logins, 1, "one connection for the whole apply:\n{sshd_log}");
    // ... and flow closed it when the step ended: no connection to sshd
    // is left open (ssh's master would keep one for 30 s).
    assert_eq!(
        connections_to(sshd.port),
        0,
        "a connection to sshd outlived flow"
    );
    // The private key is nowhere flow writes: not in state, logs or output.
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(body.len() > 40);
    for file in p.state_files() {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !key.lines()
                .filter(|l| !l.starts_with("-----") && l.len() > 20)
                .any(|l| text.contains(l)),
            "the key is in {}",
            file.display()
        );
    }
    assert!(!run.all().contains(&body[..40]));
    // A plan has no key to read the job with (state holds it sealed): the
    // job is left as recorded, not reported unreadable.
    let plan = p
        .run_env(&["plan", "wf.toml"], &[("HEAD_NODE_SSH_KEY", key.as_str())])
        .expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.stdout);
    assert!(!plan.all().contains("could not read"), "{}", plan.all());
}

/// The established TCP connections from loopback to `port` (/proc/net/tcp).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.get(2) == Some(&remote.as_str()) && cols.get(3) == Some(&"01")
        })
        .count()
}

#[test]
fn destroy_over_ssh_cancels_a_job_a_killed_apply_left_running() {
    let slurm = Slurm::start();
    let sshd = Sshd::start(&slurm);
    let p = project(&workflow(sshd.port, &sshd.host_key()).replace(
        "environment = {",
        "environment = { FLOW_TEST_SLEEP = \"300\", ",
    ));
    let key = sshd.client_key();
    let child = p
        .cmd(&["apply", "--auto-approve", "wf.toml"])
        .env("HEAD_NODE_SSH_KEY", &key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flow");
    crate::support::wait_until(std::time::Duration::from_secs(30), "the job to run", || {
        slurm
            .jobs_named("nccl-all_reduce_perf")
            .iter()
            .any(|j| j.2 == "RUNNING")
    });
    crate::support::signal(&child, libc::SIGKILL);
    crate::support::finish(child);
    // The intent's inputs hold the key sealed; destroy unseals it with the
    // value the workflow gives, reads the job over SSH and cancels it.
    let run = p.run_env(
        &["destroy", "--auto-approve", "wf.toml"],
        &[("HEAD_NODE_SSH_KEY", key.as_str())],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.all(), sshd.log());
    let jobs = slurm.jobs_named("nccl-all_reduce_perf");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].2, "CANCELLED", "{jobs:?}");
}

#[test]
fn an_unreachable_host_and_a_wrong_host_key_are_one_line_each() {
    let slurm = Slurm::start();
    let sshd = Sshd::start(&slurm);
    let key = sshd.client_key();
    // Nobody listens on this port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = project(&workflow(closed, &sshd.host_key()));
    let run = p
        .run_env(
            &["apply", "--auto-approve", "wf.toml"],
            &[("HEAD_NODE_SSH_KEY", key.as_str())],
        )
        .expect(1);
    assert!(
        run.all()
            .contains(&format!("could not reach 127.0.0.1:{closed} over SSH")),
        "{}",
        run.all()
    );
    assert!(run.all().contains("Connection refused"), "{}", run.all());
    // The right port, but the host presents another key than the pinned one.
    let other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    let p = project(&workflow(sshd.port, other));
    let run = p
        .run_env(
            &["apply", "--auto-approve", "wf.toml"],
            &[("HEAD_NODE_SSH_KEY", key.as_str())],
        )
        .expect(1);
    assert!(
        run.all().contains("host key is not the one expected"),
        "{}",
        run.all()
    );
    assert!(slurm.jobs().is_empty());
}
