//! The S3 state's log: each batch a delta object after the snapshot, so a
//! write carries what changed, not the state; a kill between a delta and
//! what follows it (the next delta, the snapshot folding them in) leaves a
//! state every reader reads; deltas missing, out of order or duplicated are
//! named and refused with the restore that mends them, never merged.

use std::time::Duration;

use serde_json::Value;

use super::view;
use super::{BUCKET, KEY, checkouts, remote_record, workflow};
use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;
use crate::support::wait_until;

/// The snapshot's PutObject as the proxy names it.
const SNAPSHOT_PUT: &str = "s3:PUT /team-flow-state/training/shared.json?x-id=PutObject";

/// The key of delta `seq`.
fn delta_key(seq: u64) -> String {
    format!("{KEY}.log/{seq:020}.json")
}

/// `n` null steps, each with inputs of about 1 kB, `changed` with another
/// value; the state in S3.
fn wide(n: usize, changed: Option<usize>) -> String {
    let head = workflow(0, "60s");
    let head = &head[..head.find("[steps.one]").unwrap()];
    let mut text = head.to_string();
    let filler = "x".repeat(1000);
    for i in 0..n {
        let value = if Some(i) == changed {
            "changed"
        } else {
            "first"
        };
        text.push_str(&format!(
            "\n[steps.s{i}]\nprovider = \"null\"\n[steps.s{i}.inputs]\nvalue = \"{value}\"\nfiller = \"{filler}\"\n"
        ));
    }
    text
}

/// The snapshot's bytes as S3 holds them.
fn snapshot(moto: &Moto) -> String {
    moto.object(BUCKET, KEY)
}

#[test]
fn writes_carry_what_changed_and_a_single_document_state_is_read_then_extended() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &wide(60, None));
    a.apply().expect(0);

    // The state as an earlier flow wrote it: one document, no log.
    let mut doc = view::state(&moto, BUCKET, KEY).unwrap();
    assert_eq!(
        doc["format"], "flow-state-snapshot",
        "an older flow refuses it"
    );
    let map = doc.as_object_mut().unwrap();
    map.remove("log_seq");
    map.remove("log_etag");
    map.insert("format".into(), "flow-state-backup".into());
    for (key, _) in view::deltas(&moto, BUCKET, KEY) {
        view::delete(&moto, BUCKET, &key);
    }
    let single = doc.to_string();
    view::put(&moto, BUCKET, KEY, single.as_bytes());
    assert!(single.len() > 60_000, "{} bytes", single.len());

    // Read as it is by a checkout that never saw it...
    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("No changes. 60 steps are up to date."),
        "{}",
        plan.stdout
    );
    // ... and extended by deltas: one step's update writes its intent and
    // result, each a delta of one record; the document stays as it was.
    b.p.write("wf.toml", &wide(60, Some(7)));
    b.apply().expect(0);
    assert_eq!(snapshot(&moto), single, "the snapshot is not written again");
    let deltas = view::deltas(&moto, BUCKET, KEY);
    assert_eq!(
        deltas
            .iter()
            .map(|(k, _)| view::seq_of(k))
            .collect::<Vec<_>>(),
        vec![1, 2],
        "{deltas:?}"
    );
    for (key, size) in &deltas {
        assert!(
            *size < 4_000,
            "{key} is {size} bytes, for one record of ~1.2 kB (the state is {} bytes)",
            single.len()
        );
        let delta: Value = serde_json::from_str(&moto.object(BUCKET, key)).unwrap();
        assert_eq!(delta["changes"].as_array().unwrap().len(), 1, "{delta}");
        assert_eq!(delta["changes"][0]["name"], "s7");
    }
    let s7 = remote_record(&moto, "s7").unwrap();
    assert_eq!(s7["inputs"]["value"], "changed");
    assert!(s7["in_flight"].is_null(), "{s7}");
    // The other checkout follows the snapshot and both deltas.
    a.p.write("wf.toml", &wide(60, Some(7)));
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
}

#[test]
fn a_kill_between_a_delta_and_what_follows_leaves_a_state_every_reader_reads() {
    let moto = Moto::start();
    super::make_bucket(&moto, BUCKET);
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    let b = Aws::new(&moto, None);
    let text = workflow(100, "3s");
    a.p.write("wf.toml", &text);
    b.p.write("wf.toml", &text);
    // The snapshot is written first, then a delta per batch (intents and
    // results, grouped as they come). Delta 2 reaches S3; its answer is
    // held, and the writer is killed before it hears of it.
    let second = format!("s3:PUT /{BUCKET}/{}", delta_key(2));
    proxy.hold(&second, Duration::from_secs(60));
    let mut run = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(30), "delta 2 in S3", || {
        view::deltas(&moto, BUCKET, KEY).len() == 2
    });
    run.kill().unwrap();
    let _ = run.wait();
    proxy.calm();
    assert_eq!(
        view::deltas(&moto, BUCKET, KEY).len(),
        2,
        "nothing after it"
    );
    let delta: Value = serde_json::from_str(&moto.object(BUCKET, &delta_key(2))).unwrap();
    let last = delta["changes"].as_array().unwrap().last().unwrap().clone();
    let name = last["name"].as_str().unwrap().to_string();

    // Once the lease has run out, the other checkout reads the snapshot and
    // both deltas: the record delta 2 wrote is the one it shows, and it
    // plans from there.
    std::thread::sleep(Duration::from_millis(4500));
    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("slow") && !plan.stdout.contains("No changes"),
        "{}",
        plan.stdout
    );
    let shown = b.run(&["state", "show", "wf.toml", &name]).expect(0);
    let shown: Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(
        (&shown["status"], &shown["in_flight"]["token"]),
        (
            &last["record"]["status"],
            &last["record"]["in_flight"]["token"]
        ),
        "{shown}"
    );
    // The killed checkout's journal holds the batch it never heard was
    // written: S3 has exactly that, so it goes on from there.
    let resumed = a.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(resumed.code, 0, "{}", resumed.all());
    assert!(
        !resumed.all().contains("changed by another writer"),
        "{}",
        resumed.all()
    );
    assert_eq!(remote_record(&moto, "slow").unwrap()["status"], "applied");
    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
}

#[test]
fn a_kill_after_the_snapshot_folds_the_deltas_in_leaves_them_skipped_not_applied_twice() {
    let moto = Moto::start();
    super::make_bucket(&moto, BUCKET);
    let proxy = FaultProxy::start(moto.addr);
    let mut a = Aws::new(&moto, Some(&proxy.endpoint()));
    let b = Aws::new(&moto, None);
    a.env.push(("FLOW_STATE_MAX_DELTAS".into(), "4".into()));
    // A first run: the snapshot (`s0`'s intent) and delta 1 (its result).
    let short_lease = |text: String| text.replace("lease = \"60s\"", "lease = \"3s\"");
    a.p.write("wf.toml", &short_lease(wide(1, None)));
    a.apply().expect(0);
    let text = short_lease(wide(6, None));
    a.p.write("wf.toml", &text);
    b.p.write("wf.toml", &text);
    // The second run's deltas 2, 3, 4 make four after the snapshot: it is
    // written again with them folded in. That write reaches S3 and the
    // writer is killed before it hears of it.
    proxy.hold(SNAPSHOT_PUT, Duration::from_secs(60));
    let run = a.spawn(&["apply", "wf.toml", "--auto-approve", "--parallelism", "1"]);
    wait_until(
        Duration::from_secs(60),
        "the snapshot folding 4 deltas in",
        || {
            serde_json::from_str::<Value>(&snapshot(&moto))
                .is_ok_and(|doc| doc["log_seq"].as_u64() == Some(4))
        },
    );
    let mut run = run;
    run.kill().unwrap();
    let _ = run.wait();
    proxy.calm();
    // The deltas it folded in are still there, and skipped: each record
    // once, as of the last delta.
    let deltas = view::deltas(&moto, BUCKET, KEY);
    assert!(deltas.len() >= 4, "{deltas:?}");
    std::thread::sleep(Duration::from_millis(4500));
    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    let snapshot_doc = view::state(&moto, BUCKET, KEY).unwrap();
    let applied = snapshot_doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "applied")
        .count();
    // The writer folds the snapshot off its critical path: it may have
    // written every delta before the kill, and then nothing is left.
    let wanted = match 6 - applied {
        0 => "No changes. 6 steps are up to date.".to_string(),
        n => format!("{n} to create"),
    };
    assert!(
        plan.stdout.contains(&wanted),
        "{applied} applied:\n{}",
        plan.stdout
    );
    std::thread::sleep(Duration::from_millis(4500));
    a.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("No changes. 6 steps are up to date."),
        "{}",
        plan.stdout
    );
}

/// Runs `flow plan` in both checkouts; both must refuse the state with
/// `what` and point to a restore.
fn refused(a: &Aws, b: &Aws, what: &str) {
    for checkout in [a, b] {
        let plan = checkout.run(&["plan", "wf.toml"]);
        assert_eq!(plan.code, 1, "{}", plan.all());
        assert!(
            plan.stderr.contains(&format!(
                "error: state s3://{BUCKET}/{KEY} is damaged: {what}"
            )) && plan.stderr.contains("flow merges nothing")
                && plan
                    .stderr
                    .contains("restore a good state with `flow state restore wf.toml BACKUP`"),
            "{}",
            plan.stderr
        );
    }
}

#[test]
fn deltas_missing_out_of_order_or_duplicated_are_named_and_refused_then_restored() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &workflow(0, "60s"));
    a.apply().expect(0);
    // A second run (an update of `slow`) keeps a copy of the applied state
    // under KEY.backups/ first.
    let changed = workflow(1, "60s");
    a.p.write("wf.toml", &changed);
    b.p.write("wf.toml", &changed);
    a.apply().expect(0);
    let deltas = view::deltas(&moto, BUCKET, KEY);
    let last = view::seq_of(&deltas.last().unwrap().0);
    assert!(last >= 5, "{deltas:?}");
    let body = |seq| moto.object(BUCKET, &delta_key(seq));

    // Missing: delta 2 deleted.
    let second = body(2);
    view::delete(&moto, BUCKET, &delta_key(2));
    refused(
        &a,
        &b,
        "delta 2 of the state's log is missing (the next one there is 3)",
    );
    view::put(&moto, BUCKET, &delta_key(2), second.as_bytes());
    b.run(&["plan", "wf.toml"]).expect(0);

    // Out of order: deltas 2 and 3 swapped.
    let third = body(3);
    view::put(&moto, BUCKET, &delta_key(2), third.as_bytes());
    view::put(&moto, BUCKET, &delta_key(3), second.as_bytes());
    refused(
        &a,
        &b,
        &format!(
            "the deltas are out of order: s3://{BUCKET}/{} holds delta 3",
            delta_key(2)
        ),
    );
    view::put(&moto, BUCKET, &delta_key(2), second.as_bytes());
    view::put(&moto, BUCKET, &delta_key(3), third.as_bytes());

    // The snapshot gone, its deltas left: not an empty state, even for a
    // checkout that never saw it.
    let kept = snapshot(&moto);
    view::delete(&moto, BUCKET, KEY);
    let fresh = Aws::new(&moto, None);
    fresh.p.write("wf.toml", &changed);
    refused(
        &fresh,
        &b,
        &format!(
            "the snapshot is gone, and {last} deltas are left after it, from s3://{BUCKET}/{}",
            delta_key(1)
        ),
    );
    view::put(&moto, BUCKET, KEY, kept.as_bytes());

    // Duplicated: a second writer's delta made on the same version as the
    // last one, in the next place.
    let mut twin: Value = serde_json::from_str(&body(last)).unwrap();
    twin["seq"] = Value::from(last + 1);
    view::put(
        &moto,
        BUCKET,
        &delta_key(last + 1),
        twin.to_string().as_bytes(),
    );
    refused(
        &a,
        &b,
        &format!(
            "s3://{BUCKET}/{} duplicates s3://{BUCKET}/{}: both were made on the same version (a copy, or two writers)",
            delta_key(last + 1),
            delta_key(last)
        ),
    );

    // The restore the message names mends it: a new snapshot past every
    // delta, from the copy kept before the second run.
    let copies = moto.objects(BUCKET, &format!("{KEY}.backups/state-"));
    let newest = copies.iter().max().expect("a backup copy");
    let restored = b
        .run(&[
            "state",
            "restore",
            "wf.toml",
            &format!("s3://{BUCKET}/{newest}"),
        ])
        .expect(0);
    assert!(
        restored.stdout.contains("Restored 3 steps"),
        "{}",
        restored.stdout
    );
    let snapshot_doc: Value = serde_json::from_str(&snapshot(&moto)).unwrap();
    assert_eq!(snapshot_doc["log_seq"].as_u64(), Some(last + 1));
    for checkout in [&a, &b] {
        let plan = checkout.run(&["plan", "wf.toml"]).expect(0);
        assert!(
            plan.stdout.contains("1 to update") || plan.stdout.contains("No changes."),
            "{}",
            plan.stdout
        );
    }
}
