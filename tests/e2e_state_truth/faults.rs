//! Answers lost after the request reached the server.

use std::time::Duration;

use crate::kill::kill_chain;
use crate::support::aws::{Aws, MANY, assert_many_made_once, destroy_many_under_faults};
use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::moto::Moto;

/// The many-kinds workflow of the fault tests with the workflow's default
/// retries: every `retries = 8` taken out.
fn lossy() -> String {
    MANY.replace("retries = 8\n", "")
}

/// One call in ten reaches moto and then loses its answer: dropped, cut off
/// halfway through the body, or held past the SDK's attempt timeout. With
/// the default retries the apply converges, every step ends with exactly
/// one object, and destroy removes them all under the same faults.
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
    // The creates that make duplicates in real life lose their first
    // answer for sure; every other call one time in ten.
    proxy.schedule("CreateFileSystem", &[Some(Fault::Lost)]);
    proxy.schedule("CreateStack", &[Some(Fault::Truncated)]);
    proxy.schedule("CreateSecret", &[Some(Fault::Stalled)]);
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
    for create in ["CreateFileSystem", "CreateStack", "CreateSecret"] {
        assert!(
            counts.faulted.iter().any(|(op, _)| op == create),
            "{create}: {:?}",
            counts.faulted
        );
    }

    proxy.calm();
    assert_many_made_once(&moto);
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
    let log = a.p.read(".flow/wf/logs/nccl.log");
    assert!(
        log.contains("was already submitted by this operation"),
        "{log}"
    );
}
