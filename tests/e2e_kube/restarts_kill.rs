//! kube.job restarts (issue 40 item 4): kill -9 of flow between an
//! attempt's failure and the next attempt, in the windows a test can hold
//! open (a job the test driver keeps running), on the cluster of
//! `restarts.rs`. Each resume takes up what is there; the API server's
//! audit log counts what was created.

use std::time::Duration;

use serde_json::json;

use super::restarts::Cluster;
use crate::support::kube::training::stop_kubelet;
use crate::support::{finish, signal, wait_until};

/// Two more windows of kill -9: while the checkpoint's listing Job runs
/// (the dead node cordoned already, attempt 2 not created), and while
/// attempt 2 runs. Each resume takes up what is there: the listing Job is
/// followed, not made again, attempt 2 is created once and followed.
#[test]
fn kills_during_the_checkpoint_listing_and_attempt_2_create_nothing_twice() {
    let c = Cluster::new("");
    c.k.driver().hold("train");
    c.k.driver().hold("train-ckpt-a2");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "train's 4 pods running", || {
        let pods = c.pods("train");
        pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
    });
    let dead = c.nodes_of("train")[0].clone();
    stop_kubelet(&c.k, &dead);
    let listing = "/apis/batch/v1/namespaces/default/jobs/train-ckpt-a2";
    wait_until(Duration::from_secs(60), "the checkpoint's listing", || {
        c.k.get(listing).is_some()
    });
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    assert_eq!(
        c.cordoned(),
        vec![dead.clone()],
        "the policy ran before the listing"
    );
    assert_eq!(c.created("train-a2"), 0);
    c.k.driver().release("train-ckpt-a2");
    c.k.driver().hold("train-a2");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "attempt 2's pods running", || {
        let pods = c.pods("train-a2");
        pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
    });
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    assert_eq!(c.created("train-a2"), 1);
    c.k.driver().release("train-a2");
    let last = c.p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let writes: Vec<String> =
        c.k.job_writes()
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["verb"], e["objectRef"]["name"], e["responseStatus"]["code"]
                )
            })
            .collect();
    assert_eq!(c.created("train"), 1, "{writes:#?}\n{}", last.all());
    assert_eq!(
        c.created("train-a2"),
        1,
        "attempt 2 created once over three runs"
    );
    assert_eq!(
        c.created("train-ckpt-a2"),
        1,
        "the listing followed, not made again"
    );
    assert!(c.k.get(listing).is_none(), "the listing deleted once read");
    let attempts = c.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[1]["resumed_from"], "/fsx/ckpt/epoch-10.pt");
    assert!(!c.nodes_of("train-a2").contains(&dead));
}

/// A hung attempt (deleted, its nodes recorded first) and flow killed while
/// its nodes' checks run: the resume checks the nodes the id recorded
/// though the job and its pods are gone, cordons the 7-GPU node, and
/// creates attempt 2 once.
#[test]
fn a_kill_during_a_hung_attempts_checks_still_checks_its_nodes() {
    let c = Cluster::new("hang_after = \"3s\"");
    c.k.driver().hold("train");
    c.k.driver().hold("gpu-check-a1-node-0");
    c.k.merge_patch(
        "/api/v1/nodes/gpu-node-1",
        &json!({"metadata": {"annotations": {"test.flow/nvidia-smi": super::fleet::seven_gpus()}}}),
    );
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let check = "/apis/batch/v1/namespaces/default/jobs/gpu-check-a1-node-0";
    wait_until(Duration::from_secs(60), "the hung attempt's checks", || {
        c.k.get(check).is_some()
    });
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    assert!(
        c.job("train").is_none(),
        "the hung attempt was deleted before the kill"
    );
    assert!(c.cordoned().is_empty());
    c.k.driver().release("gpu-check-a1-node-0");
    let run = c.p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        run.all().contains("is gone: it is not started again"),
        "{}",
        run.all()
    );
    assert_eq!(
        c.cordoned(),
        vec!["gpu-node-1".to_string()],
        "{}",
        run.all()
    );
    assert_eq!(c.created("train"), 1);
    assert_eq!(c.created("train-a2"), 1);
    let attempts = c.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert!(!c.nodes_of("train-a2").contains(&"gpu-node-1".to_string()));
}
