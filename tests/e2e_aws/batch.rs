//! Batch: a multi-node job run through the Batch chain with a generated SSH
//! key, and a job interrupted mid-run terminated.

use std::time::Duration;

use crate::at;
use crate::support::aws::{Aws, BATCH_CHAIN};
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;
use crate::support::{finish, signal, wait_until};

#[test]
fn batch_chain_runs_a_multi_node_job_with_a_generated_ssh_key() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", BATCH_CHAIN);
    let apply = a.apply().expect(0);
    assert!(
        apply.stdout.contains("Apply complete: 4 created"),
        "{}",
        apply.stdout
    );
    assert!(apply.stdout.contains("nccl-test-2node"), "{}", apply.stdout);
    assert!(
        apply.stdout.contains("SUCCEEDED"),
        "the job's status is shown: {}",
        apply.stdout
    );

    let status = a.run(&["output", "wf.toml", "nccl.status"]).expect(0);
    assert_eq!(status.stdout.trim(), "SUCCEEDED");
    let job_id = a.run(&["output", "wf.toml", "nccl.job_id"]).expect(0);
    assert!(!job_id.stdout.trim().is_empty());

    // The private key is only in Secrets Manager; the public key is an output.
    let private = moto.secret_value("flow-batch-ssh-key");
    assert!(
        private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{private}"
    );
    let public = a.run(&["output", "wf.toml", "ssh.public_key"]).expect(0);
    assert!(
        public.stdout.trim().starts_with("ssh-ed25519 "),
        "{}",
        public.stdout
    );
    for f in a.p.state_files() {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("PRIVATE KEY"),
            "{} holds the private key",
            f.display()
        );
    }
    assert!(!apply.all().contains("PRIVATE KEY"));

    // Unchanged inputs: the job does not run again.
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let all = destroy.all();
    assert!(
        at(&all, "batch ") < at(&all, "vpc "),
        "destroy order:\n{all}"
    );
    assert!(moto.stacks().is_empty());
    assert!(moto.secrets().is_empty(), "{:?}", moto.secrets());
}

#[test]
fn an_interrupted_batch_job_is_terminated() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write(
        "wf.toml",
        &BATCH_CHAIN.replace("generate = \"ssh-ed25519\"", "value = \"x\""),
    );
    a.run(&[
        "apply",
        "wf.toml",
        "--auto-approve",
        "--target",
        "batch",
        "--target",
        "ssh",
    ])
    .expect(0);

    // moto finishes jobs at once; the proxy shows this one running.
    proxy.rewrite(
        "batch:describejobs",
        r#""status": "SUCCEEDED""#,
        r#""status": "RUNNING""#,
        1000,
    );
    let child = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "the job to be watched", || {
        proxy.forwarded("batch:describejobs") >= 2
    });
    signal(&child, libc::SIGINT);
    let run = finish(child);
    assert_ne!(run.code, 0, "{}", run.all());
    assert_eq!(
        proxy.forwarded("batch:terminatejob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    assert!(run.all().contains("terminat"), "{}", run.all());

    // Ctrl-C kept the intent: the next apply reads the job by its token
    // before anything else. moto had in fact finished it (the proxy only
    // showed it running), so it is adopted, not submitted a second time.
    let show = a.run(&["state", "show", "wf.toml", "nccl"]).expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert!(rec["in_flight"]["token"].is_string(), "{rec}");
    proxy.calm();
    a.apply().expect(0);
    assert_eq!(
        proxy.forwarded("batch:submitjob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    let log = a.p.read(".flow/wf/logs/nccl.log");
    assert!(
        log.contains("the interrupted create had completed: adopting it"),
        "{log}"
    );
}
