//! Answers lost after the request reached the server.

use std::time::Duration;

use crate::kill::kill_chain;
use crate::support::aws::{
    Aws, MANY, assert_made_once, assert_many_made_once, destroy_many_under_faults,
};
use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::moto::Moto;

/// The many-kinds workflow of the fault tests with the workflow's default
/// retries: every `retries = 8` taken out.
fn lossy() -> String {
    MANY.replace("retries = 8\n", "")
}

/// One call in ten reaches moto and then loses its answer: dropped, cut off
/// halfway, or held past the SDK's attempt timeout; and the first create of
/// every kind loses its answer for sure. With the default retries the
/// apply converges, every object is there once, the creates moto did made
/// each object once (counted at the proxy, so a file system made twice
/// shows though moto keeps both, and a name made again after a delete
/// shows though moto lists it once), and destroy removes everything of
/// every kind under the same faults.
#[test]
fn answers_lost_after_the_request_reached_the_server_make_no_duplicate() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let mut a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.env.push(("FLOW_AWS_ATTEMPT_TIMEOUT".into(), "1s".into()));
    for i in 0..4 {
        a.p.write(&format!("data/f{i}.txt"), &format!("file {i}\n"));
    }
    let workflow = lossy();
    assert!(!workflow.contains("retries"));
    a.p.write("wf.toml", &workflow);
    proxy.stall_for(Duration::from_secs(2));
    let kinds = [Fault::Lost, Fault::Truncated, Fault::Stalled];
    // The first create of every kind loses its answer for sure (the
    // bucket's is its first PUT); every other call one time in ten.
    let first = [
        ("CreateFileSystem", Fault::Lost),
        ("CreateStack", Fault::Truncated),
        ("CreateSecret", Fault::Stalled),
        ("CreateRepository", Fault::Lost),
        ("s3:PUT /flow-flaky-data", Fault::Truncated),
        ("x-id=PutObject", Fault::Stalled),
    ];
    for (op, fault) in first {
        proxy.schedule(op, &[Some(fault)]);
    }
    proxy.faults(0.10, &kinds, None);
    let apply = a.apply();
    let counts = proxy.counts();
    assert_eq!(apply.code, 0, "{}\n{counts:?}", apply.all());
    for kind in kinds {
        assert!(proxy.injected(kind) > 0, "no {kind:?} injected: {counts:?}");
    }
    // Every fault here forwarded the request first: moto acted on it.
    eprintln!(
        "{} answers lost of {} calls forwarded: {:?}",
        counts.faulted.len(),
        counts.forwarded.len(),
        counts.faulted
    );
    let lost: Vec<String> = proxy
        .calls()
        .iter()
        .filter(|c| c.sent.is_some() && c.answered.is_none())
        .filter_map(|c| c.name())
        .collect();
    for create in [
        "CreateFileSystem",
        "CreateStack",
        "CreateSecret",
        "CreateRepository",
        "CreateBucket",
        "PutObject",
    ] {
        assert!(
            lost.iter().any(|op| op == create),
            "no answer to {create} lost: {lost:?}"
        );
    }

    proxy.calm();
    assert_many_made_once(&moto, &proxy);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    destroy_many_under_faults(&a, &moto, &proxy, 0.10, &kinds);
}

/// SubmitJob has no idempotency token, so a retry after a lost answer is
/// the classic duplicate job. The SDK does not retry it; the engine's retry
/// looks for the job by the operation's token first and follows it.
#[test]
fn a_submitted_job_whose_answer_was_lost_is_not_submitted_again() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("data/a.txt", "a\n");
    a.p.write("wf.toml", &kill_chain());
    proxy.schedule("batch:submitjob", &[Some(Fault::Lost)]);
    let apply = a.run(&["apply", "wf.toml", "--auto-approve", "--target", "nccl"]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert_eq!(proxy.injected(Fault::Lost), 1);
    assert_eq!(
        proxy.forwarded("batch:submitjob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    assert_made_once(
        "apply",
        &proxy.calls(),
        &[("CreateSecret", 1), ("CreateStack", 2), ("SubmitJob", 1)],
    );
    let log = a.p.read(".flow/wf/logs/nccl.log");
    assert!(
        log.contains("was already submitted by this operation"),
        "{log}"
    );
}
