//! kube.job restarts with `hang_without_loss` (issue 40 item 4): a training
//! that still prints but no longer learns. The pods' logs are served live
//! by the test kubelets' log endpoint (support/kube/pod_logs.rs) through
//! the real API server's `pods/log`, one line a beat, as the ranks print
//! them: rank 0's `ddp.py` loss lines (what `parse = "torchrun"` reads),
//! then, when a peer's GPU hangs, NCCL warnings naming that peer from the
//! ranks that wait on it, and nothing from the hung rank. The same cluster
//! as restarts.rs (6 GPU nodes, `policy = "cordon"`, `check`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::restarts::Cluster;
use crate::support::kube::pod_logs::Voice;
use crate::support::{finish, signal, wait_until};

/// The node whose GPU hangs under attempt 1: the scheduler binds the
/// first 4 nodes by name, rank 2 here.
const HUNG: &str = "gpu-node-2";
/// Losses rank 0 logs before the peer hangs.
const LOSSES: usize = 6;
/// Each rank's lines come this far apart.
const BEAT: Duration = Duration::from_millis(250);

/// The restart inputs: losses read as torchrun's, 3 s without one a hang.
const INPUTS: &str = "parse = \"torchrun\"\nhang_without_loss = \"3s\"";

/// A ddp.py rank's epoch line: `[RANK r] Epoch e | … | Loss: l`.
fn loss_line(rank: usize, epoch: usize) -> String {
    format!(
        "[RANK {rank}] Epoch {epoch} | Batchsize: 32 | Steps: 8 | Loss: {}",
        2.0 / (epoch + 1) as f64
    )
}

/// A rank's rank, by its pod: the master is rank 0, worker i rank i + 1.
fn rank(pod: &str) -> usize {
    match pod.rsplit_once("-worker-") {
        Some((_, i)) => i.parse::<usize>().unwrap_or(0) + 1,
        None => 0,
    }
}

/// What an NCCL rank waiting on a silent peer prints, on `node`.
fn waiting(node: &str, beat: usize) -> String {
    format!(
        "{node}:41:77 [0] NCCL WARN NET/Socket : peer {HUNG}<43562> sent nothing for {} ms, still waiting",
        beat * BEAT.as_millis() as usize
    )
}

/// Attempt 1 learns for [`LOSSES`] epochs, then [`HUNG`]'s GPU hangs: its
/// rank goes silent and the others print NCCL warnings naming it.
/// Attempt 2 (`train-a2-…`) learns on, an epoch a beat.
fn a_peer_hangs() -> Arc<Voice> {
    Arc::new(|pod: &str, node: &str, i: usize| {
        if pod.starts_with("train-a2-") {
            return Some(loss_line(rank(pod), 10 + i));
        }
        if i < LOSSES {
            Some(loss_line(rank(pod), i))
        } else if node == HUNG {
            None
        } else {
            Some(waiting(node, i - LOSSES))
        }
    })
}

/// Lines of `log` (the step's) a pod of job `job` printed with a loss.
fn losses_in(log: &str, job: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(&format!("[{job}-master-0] [RANK 0]")) && l.contains("Loss:"))
        .count()
}

fn env_has(job: &Value, name: &str, value: &str) -> bool {
    job.pointer("/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .is_some_and(|e| e.contains(&json!({"name": name, "value": value})))
}

/// The cluster of restarts.rs with `extra` inputs, every node's pods'
/// logs spoken by `voice`, and [`HUNG`]'s nvidia-smi listing 7 GPUs (the
/// check finds it bad).
fn cluster(extra: &str, voice: Arc<Voice>) -> Cluster {
    let c = Cluster::new(extra);
    let nodes: Vec<String> = (0..6).map(|i| format!("gpu-node-{i}")).collect();
    c.k.serve_pod_logs(&nodes, BEAT, voice);
    c.k.merge_patch(
        &format!("/api/v1/nodes/{HUNG}"),
        &json!({"metadata": {"annotations": {"test.flow/nvidia-smi": super::fleet::seven_gpus()}}}),
    );
    c
}

/// Waits for attempt 2's rank 0 to have logged `n` losses, then lets it
/// finish.
fn let_attempt_2_learn(c: &Cluster, n: usize) {
    let start = Instant::now();
    while losses_in(&crate::log(&c.p, "train"), "train-a2") < n {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "attempt 2 logged no {n} losses; the step's log:\n{}",
            crate::log(&c.p, "train")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.k.driver().release("train-a2");
}

/// Rank 0 logs 6 losses, then the ranks keep printing NCCL warnings naming
/// the peer whose GPU hangs, and no loss: flow cancels attempt 1 as hung
/// (no new loss for 3s, after 6), checks the named peer, cordons it, and
/// attempt 2, created once and resumed from the newest checkpoint, runs
/// elsewhere and succeeds. With "no new line" as the rule, the warnings
/// would keep attempt 1 alive and this test would time out.
#[test]
fn a_training_that_prints_but_logs_no_new_loss_is_hung_and_its_silent_peer_cordoned() {
    let c = cluster(INPUTS, a_peer_hangs());
    let plan = c.p.run(&["plan", "wf.toml"]).expect(0).all();
    assert!(
        plan.contains("no new loss (as `parse = \"torchrun\"` reads it) for 3s is a hang"),
        "{plan}"
    );
    c.k.driver().hold("train");
    c.k.driver().hold("train-a2");
    let started = Instant::now();
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let_attempt_2_learn(&c, 3);
    let run = finish(child).expect(0);
    let out = run.all();
    println!(
        "apply to attempt 2 done, attempt 1 hung after {LOSSES} losses (3 s window): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let cause = format!("hung: no new loss for 3s (after {LOSSES} logged)");
    assert!(out.contains(&cause), "{out}");
    let l = crate::log(&c.p, "train");
    assert!(
        l.contains("[event] attempt 1 (PyTorchJob default/train) hung: no new loss for 3s")
            && !l.contains("hung: hung:"),
        "the event says hung once:\n{l}"
    );
    assert_eq!(
        losses_in(&l, "train"),
        LOSSES,
        "attempt 1's losses, live:\n{l}"
    );
    assert!(
        l.contains(&format!("[train-worker-0] {}", waiting("gpu-node-1", 0))),
        "the warnings were followed live:\n{l}"
    );
    assert_eq!(c.cordoned(), vec![HUNG.to_string()]);
    let attempts = c.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "Hung", "{attempts:?}");
    assert_eq!(attempts[0]["cause"], json!(cause), "{attempts:?}");
    assert_eq!(attempts[0]["cordoned"], json!([HUNG]), "{attempts:?}");
    let suspects = attempts[0]["suspects"].as_str().unwrap();
    assert!(
        suspects.contains(&format!("NCCL names peer {HUNG}")),
        "{suspects}"
    );
    assert!(
        suspects.contains(&format!("check {HUNG}: bad")),
        "{suspects}"
    );
    assert_eq!(attempts[1]["state"], "Succeeded", "{attempts:?}");
    assert_eq!(attempts[1]["resumed_from"], "/fsx/ckpt/epoch-10.pt");
    assert_eq!(c.created("train"), 1);
    assert_eq!(c.created("train-a2"), 1, "{:?}", c.k.job_writes());
    let a2 = c.job("train-a2").expect("attempt 2");
    assert!(env_has(&a2, "FLOW_RESUME_FROM", "/fsx/ckpt/epoch-10.pt"));
    let second = c.nodes_of("train-a2");
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(!second.contains(&HUNG.to_string()), "{second:?}");
    let runs = c.p.run(&["runs", "wf.toml"]).expect(0).stdout;
    assert!(runs.contains("attempts=2"), "{runs}");
    assert!(runs.contains(&cause), "{runs}");
    assert!(runs.contains(&format!("cordoned {HUNG}")), "{runs}");
}

/// The control: rank 0 logs a loss every 4 beats (a second) among NCCL
/// warnings naming a peer, for 4 windows of 3 s: a loss within the window
/// keeps the training alive. Attempt 1 succeeds, no attempt 2, nothing
/// cordoned; its losses are the step's.
#[test]
fn a_training_that_logs_a_loss_within_the_window_is_not_cancelled() {
    let voice: Arc<Voice> = Arc::new(|pod: &str, node: &str, i: usize| {
        Some(if i.is_multiple_of(4) {
            loss_line(rank(pod), i / 4)
        } else {
            waiting(node, i)
        })
    });
    let c = cluster(INPUTS, voice);
    c.k.driver().hold("train");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(90), "12 losses", || {
        losses_in(&crate::log(&c.p, "train"), "train") >= 12
    });
    c.k.driver().release("train");
    let run = finish(child).expect(0);
    let out = run.all();
    assert!(!out.contains("hung"), "{out}");
    assert_eq!(c.created("train-a2"), 0, "{out}");
    assert!(c.cordoned().is_empty(), "{:?}", c.cordoned());
    let attempts = c.attempts();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "Succeeded", "{attempts:?}");
    let losses =
        c.p.run(&["output", "wf.toml", "train.losses", "--json"])
            .expect(0);
    let losses: Value = serde_json::from_str(losses.stdout.trim()).unwrap();
    assert!(losses.as_array().is_some_and(|l| l.len() >= 12), "{losses}");
}

/// Flow's own writes to node `name` (not the test's `kubectl-edit`).
fn flow_node_writes(c: &Cluster, name: &str) -> usize {
    c.k.node_writes(name)
        .iter()
        .filter(|e| {
            !e["requestURI"]
                .as_str()
                .is_some_and(|u| u.contains("fieldManager=kubectl-edit"))
        })
        .count()
}

/// Flow is killed -9 while the suspect named by NCCL's warnings is being
/// checked (attempt 1 found hung, its job deleted): the resumed apply
/// creates attempt 2 once and cordons the hung node once (the audit log
/// counts the job's creations and the node's writes), telling the same
/// cause and checking the same one suspect: the step's id keeps why the
/// attempt hung and the log lines that named a node. Before it did, the
/// resume had no log to read and checked all 4 nodes, its
/// `gpu-check-a1-node-0` then for `gpu-node-0`; and before a check job was
/// followed only when made for the same nodes, the interrupted run's job
/// of that name (for the 7-GPU `gpu-node-2`) was read as `gpu-node-0`'s
/// verdict, two of four nodes were bad, the step stopped and `train` was
/// created again.
#[test]
fn kill_9_while_the_hung_attempts_suspect_is_checked_resumes_without_a_second_attempt_or_cordon() {
    let c = cluster(INPUTS, a_peer_hangs());
    c.k.driver().hold("train");
    c.k.driver().hold("train-a2");
    c.k.driver().hold("gpu-check-a1-node-0");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "the suspect's check", || {
        c.k.get("/apis/batch/v1/namespaces/default/jobs/gpu-check-a1-node-0")
            .is_some()
    });
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "{}", killed.all());
    assert!(
        crate::log(&c.p, "train").contains("hung: no new loss for 3s"),
        "the kill landed after the hang"
    );
    assert_eq!(c.created("train-a2"), 0, "no attempt 2 before the kill");
    assert!(c.job("train").is_none(), "the hung attempt's job deleted");
    assert!(c.cordoned().is_empty(), "{:?}", c.cordoned());
    assert_eq!(flow_node_writes(&c, HUNG), 0);
    c.k.driver().release("gpu-check-a1-node-0");
    let resumed = Instant::now();
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let_attempt_2_learn(&c, 3);
    let run = finish(child).expect(0);
    println!(
        "resume to attempt 2 done: {:.1} s",
        resumed.elapsed().as_secs_f64()
    );
    assert_eq!(c.cordoned(), vec![HUNG.to_string()], "{}", run.all());
    assert_eq!(flow_node_writes(&c, HUNG), 1, "{:?}", c.k.node_writes(HUNG));
    for other in ["gpu-node-0", "gpu-node-1", "gpu-node-3"] {
        assert_eq!(flow_node_writes(&c, other), 0, "{other}");
    }
    assert_eq!(
        c.created("train"),
        1,
        "{:?}\n{}",
        c.k.job_writes(),
        crate::log(&c.p, "train")
    );
    assert_eq!(c.created("train-a2"), 1, "{:?}", c.k.job_writes());
    let attempts = c.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "Hung", "{attempts:?}");
    assert_eq!(attempts[0]["cordoned"], json!([HUNG]), "{attempts:?}");
    // The id kept why it hung and the warning naming the peer: the resume
    // tells the same cause and checks the same one suspect.
    assert_eq!(
        attempts[0]["cause"],
        json!(format!("hung: no new loss for 3s (after {LOSSES} logged)")),
        "{attempts:?}"
    );
    assert_eq!(attempts[0]["suspect_nodes"], json!([HUNG]), "{attempts:?}");
    let suspects = attempts[0]["suspects"].as_str().unwrap();
    assert!(
        suspects.contains(&format!("NCCL names peer {HUNG}"))
            && suspects.contains(&format!("check {HUNG}: bad")),
        "{suspects}"
    );
    assert_eq!(attempts[1]["state"], "Succeeded", "{attempts:?}");
    assert_eq!(attempts[1]["resumed_from"], "/fsx/ckpt/epoch-10.pt");
    assert!(!c.nodes_of("train-a2").contains(&HUNG.to_string()));
}

/// Two peers' GPUs hang: the ranks on `gpu-node-1` and [`HUNG`] go
/// silent, the others' NCCL warnings name both.
fn two_peers_hang() -> Arc<Voice> {
    Arc::new(|pod: &str, node: &str, i: usize| {
        if pod.starts_with("train-a2-") {
            return Some(loss_line(rank(pod), 10 + i));
        }
        if i < LOSSES {
            Some(loss_line(rank(pod), i))
        } else if node == "gpu-node-1" || node == HUNG {
            None
        } else {
            Some(format!(
                "{node}:41:77 [0] NCCL WARN NET/Socket : peers gpu-node-1<43562> {HUNG}<43562> sent nothing, still waiting"
            ))
        }
    })
}

/// Flow is killed -9 while the two peers NCCL named are checked
/// (`gpu-check-a1-node-0` for `gpu-node-1`, `-node-1` for [`HUNG`]); then
/// `gpu-node-1`'s Node is deleted (its instance gone). The resume finds it
/// bad by Kubernetes' word and checks only [`HUNG`], as
/// `gpu-check-a1-node-0`: the interrupted run's job of that name, made
/// for `gpu-node-1` (8 GPUs), is not its verdict; its own check finds 7
/// GPUs and cordons it. Before a check job was followed only when made
/// for the same nodes, [`HUNG`] read healthy and stayed in service.
#[test]
fn a_resume_that_checks_other_nodes_does_not_take_the_interrupted_checks_verdicts() {
    let c = cluster(
        &format!("{INPUTS}\nmax_bad_fraction = 0.5"),
        two_peers_hang(),
    );
    c.k.driver().hold("train");
    c.k.driver().hold("train-a2");
    c.k.driver().hold("gpu-check-a1-node-0");
    c.k.driver().hold("gpu-check-a1-node-1");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let check = |i: usize| {
        c.k.get(&format!(
            "/apis/batch/v1/namespaces/default/jobs/gpu-check-a1-node-{i}"
        ))
    };
    wait_until(Duration::from_secs(60), "the two suspects' checks", || {
        check(0).is_some() && check(1).is_some()
    });
    assert_eq!(
        check(0).unwrap()["metadata"]["annotations"]["flow.dev/nodes"],
        "gpu-node-1"
    );
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, libc::SIGKILL);
    assert_eq!(finish(child).code, -1);
    c.k.delete("/api/v1/nodes/gpu-node-1");
    c.k.driver().release("gpu-check-a1-node-0");
    c.k.driver().release("gpu-check-a1-node-1");
    let child = c.p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let_attempt_2_learn(&c, 3);
    let run = finish(child).expect(0);
    let attempts = c.attempts();
    let suspects = attempts[0]["suspects"].as_str().unwrap();
    assert!(
        suspects.contains("node gpu-node-1 is gone from the cluster")
            && suspects.contains(&format!("check {HUNG}: bad")),
        "{suspects}\n{}",
        run.all()
    );
    assert_eq!(c.node(HUNG)["spec"]["unschedulable"], true, "{}", run.all());
    assert_eq!(c.created("train-a2"), 1);
    assert!(!c.nodes_of("train-a2").contains(&HUNG.to_string()));
}
