//! End-to-end: a state kept in S3 (moto's, which honours `If-Match` and
//! `If-None-Match: *` on PutObject), shared by two checkouts of the same
//! workflow in two folders, each with its own local copy, run as users
//! would run `flow`.

#[path = "e2e_shared_state/backups.rs"]
mod backups;
#[path = "e2e_shared_state/hands.rs"]
mod hands;
#[path = "e2e_shared_state/log.rs"]
mod log;
mod support;
#[path = "e2e_shared_state/view.rs"]
mod view;

use std::time::Duration;

use support::aws::Aws;
use support::fault_proxy::{Fault, FaultProxy};
use support::moto::Moto;
use support::{finish, wait_until};

const BUCKET: &str = "team-flow-state";
const KEY: &str = "training/shared.json";

/// The workflow: `one` → `two` → `slow` (a `null` step that takes
/// `slow_ms`), its state in S3 with a `lease`.
fn workflow(slow_ms: u64, lease: &str) -> String {
    format!(
        r#"
[workflow]
name = "shared"

[workflow.state]
backend = "s3"
bucket = "{BUCKET}"
key = "{KEY}"
region = "us-east-1"
lease = "{lease}"

[steps.one]
provider = "null"

[steps.two]
provider = "null"
depends_on = ["one"]

[steps.slow]
provider = "null"
depends_on = ["two"]
[steps.slow.inputs]
delay_ms = {slow_ms}
"#
    )
}

fn make_bucket(moto: &Moto, name: &str) {
    let (status, body) = moto.rest_call("s3", "PUT", &format!("/{name}"), "");
    assert_eq!(status, 200, "{body}");
}

/// Two checkouts of the same workflow against one moto.
fn checkouts(moto: &Moto, text: &str) -> (Aws, Aws) {
    make_bucket(moto, BUCKET);
    let a = Aws::new(moto, None);
    let b = Aws::new(moto, None);
    a.p.write("wf.toml", text);
    b.p.write("wf.toml", text);
    (a, b)
}

/// The S3 state as a reader sees it (snapshot and deltas), straight from moto.
fn state_object(moto: &Moto) -> serde_json::Value {
    view::state(moto, BUCKET, KEY).expect("a state in S3")
}

/// The record of `step` in the S3 state (none before it exists).
fn remote_record(moto: &Moto, step: &str) -> Option<serde_json::Value> {
    view::state(moto, BUCKET, KEY)?["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == step).cloned())
}

fn lock_exists(moto: &Moto) -> bool {
    moto.objects(BUCKET, &format!("{KEY}.lock"))
        .iter()
        .any(|k| k == &format!("{KEY}.lock"))
}

#[test]
fn a_second_checkout_is_refused_while_the_first_applies_then_plans_no_changes() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &workflow(3000, "60s"));
    let first = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(30), "the first apply's lock", || {
        lock_exists(&moto)
    });

    let refused = b.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(refused.code, 1, "{}", refused.all());
    assert!(
        refused.stderr.contains(&format!(
            "state s3://{BUCKET}/{KEY} is locked by `flow apply` ("
        )) && refused.stderr.contains(&format!("pid {}", first.id())),
        "the refusal names the holder:\n{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("lease renewed"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("flow state unlock wf.toml "),
        "{}",
        refused.stderr
    );
    // A read-only plan needs no lock.
    let peek = b.run(&["plan", "wf.toml", "--lock=false"]);
    assert_eq!(peek.code, 0, "{}", peek.all());

    let first = finish(first);
    assert_eq!(first.code, 0, "{}", first.all());
    assert!(
        !lock_exists(&moto),
        "the lock is deleted when the apply ends"
    );
    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("No changes. 3 steps are up to date."),
        "{}",
        plan.stdout
    );
    assert_eq!(remote_record(&moto, "slow").unwrap()["status"], "applied");

    // Destroy from the second checkout; the first then sees an empty state.
    let destroyed = b.run(&["destroy", "wf.toml", "--auto-approve"]);
    assert_eq!(destroyed.code, 0, "{}", destroyed.all());
    assert_eq!(state_object(&moto)["steps"], serde_json::json!([]));
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("3 to create"), "{}", plan.stdout);
}

#[test]
fn kill_during_an_apply_then_resume_from_the_other_checkout() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &workflow(30_000, "60s"));
    let mut first = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    // The kill lands inside `slow`'s provider call: its intent is in S3.
    wait_until(Duration::from_secs(30), "slow's intent in S3", || {
        remote_record(&moto, "slow").is_some_and(|r| r["in_flight"]["operation"] == "create")
    });
    let intent = remote_record(&moto, "slow").unwrap();
    let token = intent["in_flight"]["token"].as_str().unwrap().to_string();
    assert_eq!(remote_record(&moto, "two").unwrap()["status"], "applied");
    first.kill().unwrap();
    let _ = first.wait();

    // Its lock outlives it; the refusal gives the id to break it with.
    let refused = b.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(refused.code, 1, "{}", refused.all());
    let id = refused
        .stderr
        .split("flow state unlock wf.toml ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the unlock command")
        .to_string();
    let wrong = b.run(&["state", "unlock", "wf.toml", "0000000000000000"]);
    assert_eq!(wrong.code, 1, "{}", wrong.all());
    assert!(lock_exists(&moto), "a wrong id breaks nothing");
    let unlocked = b.run(&["state", "unlock", "wf.toml", &id]).expect(0);
    assert!(
        unlocked.stdout.contains("Broke the lock"),
        "{}",
        unlocked.stdout
    );

    let plan = b.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains(&token[..8]),
        "the plan shows the resumed token:\n{}",
        plan.stdout
    );
    b.p.write("wf.toml", &workflow(100, "60s"));
    let resumed = b.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(resumed.code, 0, "{}", resumed.all());
    let rec = remote_record(&moto, "slow").unwrap();
    assert_eq!(rec["status"], "applied");
    assert!(rec["in_flight"].is_null(), "{rec}");
    // The first checkout's copy follows S3 on its next run.
    a.p.write("wf.toml", &workflow(100, "60s"));
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
}

#[test]
fn an_expired_lease_is_taken_over_with_a_warning() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &workflow(30_000, "3s"));
    let mut first = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(30), "slow's intent in S3", || {
        remote_record(&moto, "slow").is_some_and(|r| !r["in_flight"].is_null())
    });
    first.kill().unwrap();
    let _ = first.wait();
    // Renewed at most a second ago: still held.
    let refused = b.run(&["plan", "wf.toml"]);
    assert_eq!(refused.code, 1, "{}", refused.all());
    std::thread::sleep(Duration::from_millis(4500));
    b.p.write("wf.toml", &workflow(100, "3s"));
    let taken = b.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(taken.code, 0, "{}", taken.all());
    assert!(
        taken
            .stderr
            .contains("warning: took over the lock of `flow apply`")
            && taken.stderr.contains("its lease ran out"),
        "{}",
        taken.stderr
    );
    assert_eq!(remote_record(&moto, "slow").unwrap()["status"], "applied");
}

#[test]
fn a_snapshot_rewritten_underneath_is_refused_as_two_writers_then_pushed_back() {
    let moto = Moto::start();
    let (a, _b) = checkouts(&moto, &workflow(2500, "60s"));
    let run = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(30), "slow's intent in S3", || {
        remote_record(&moto, "slow").is_some_and(|r| !r["in_flight"].is_null())
    });
    // Another writer (one that ignored the lock and the log) rewrites the
    // snapshot without `one`. The run's next deltas land after it, made on
    // a version that is no longer the snapshot: the chain is broken there.
    let mut doc = state_object(&moto);
    doc["steps"]
        .as_array_mut()
        .unwrap()
        .retain(|s| s["name"] != "one");
    doc.as_object_mut().unwrap().remove("log_seq");
    view::put(&moto, BUCKET, KEY, doc.to_string().as_bytes());
    let _ = finish(run);

    // No reader merges the two: every command refuses the state, names the
    // first delta that does not follow, and points to a restore.
    let next = a.run(&["plan", "wf.toml"]);
    assert_eq!(next.code, 1, "{}", next.all());
    assert!(
        next.stderr.contains(&format!("state s3://{BUCKET}/{KEY} is damaged: s3://{BUCKET}/{KEY}.log/00000000000000000001.json was made on a version"))
            && next.stderr.contains("(two writers)")
            && next.stderr.contains("flow merges nothing")
            && next.stderr.contains("flow state restore wf.toml BACKUP"),
        "{}",
        next.stderr
    );
    // The local copy holds every change: pushing it replaces both.
    let pushed = a.run(&["state", "push", "wf.toml", "--force"]).expect(0);
    assert!(
        pushed.stdout.contains("Pushed 3 steps"),
        "{}",
        pushed.stdout
    );
    assert_eq!(remote_record(&moto, "slow").unwrap()["status"], "applied");
    assert_eq!(remote_record(&moto, "one").unwrap()["status"], "applied");
    let replaced = moto.objects(BUCKET, &format!("{KEY}.backups/state-replaced-"));
    assert_eq!(
        replaced.len(),
        1,
        "the replaced object is kept: {replaced:?}"
    );
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
}

#[test]
fn moving_a_local_state_to_s3_and_back() {
    let moto = Moto::start();
    make_bucket(&moto, BUCKET);
    let a = Aws::new(&moto, None);
    let local = workflow(0, "60s").replace(
        &format!("[workflow.state]\nbackend = \"s3\"\nbucket = \"{BUCKET}\"\nkey = \"{KEY}\"\nregion = \"us-east-1\"\nlease = \"60s\"\n"),
        "",
    );
    a.p.write("wf.toml", &local);
    a.apply().expect(0);

    a.p.write("wf.toml", &workflow(0, "60s"));
    let plan = a.run(&["plan", "wf.toml"]);
    assert_eq!(plan.code, 1, "{}", plan.all());
    assert!(
        plan.stderr
            .contains("which holds no state yet, but the local state at"),
        "{}",
        plan.stderr
    );
    assert!(
        plan.stderr.contains("flow state push wf.toml"),
        "{}",
        plan.stderr
    );
    a.run(&["state", "push", "wf.toml"]).expect(0);
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("No changes. 3 steps are up to date."),
        "{}",
        plan.stdout
    );

    // Back: the workflow says local again, the copy is refused until pulled.
    a.p.write("wf.toml", &local);
    let plan = a.run(&["plan", "wf.toml"]);
    assert_eq!(plan.code, 1, "{}", plan.all());
    assert!(
        plan.stderr
            .contains(&format!("is the copy of s3://{BUCKET}/{KEY}")),
        "{}",
        plan.stderr
    );
    let url = format!("s3://{BUCKET}/{KEY}");
    a.run(&["state", "pull", "wf.toml", "--state", &url])
        .expect(0);
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("No changes. 3 steps are up to date."),
        "{}",
        plan.stdout
    );
}

#[test]
fn bad_buckets_and_objects_get_one_clear_line_and_change_nothing() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", &workflow(0, "60s"));
    let run = a.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr
            .contains(&format!("error: bucket `{BUCKET}` does not exist")),
        "{}",
        run.stderr
    );
    assert!(a.p.state_files().is_empty(), "{:?}", a.p.state_files());

    // A bucket in another region than the one configured.
    let (status, body) = moto.http(
        "PUT",
        &format!("/{BUCKET}"),
        &[("Authorization", &support::moto::authorization("s3"))],
        b"<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>",
    );
    assert_eq!(status, 200, "{body}");
    let run = a.run(&["plan", "wf.toml"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr.contains(&format!(
            "bucket `{BUCKET}` is in region eu-west-1, not us-east-1"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("set region = \"eu-west-1\" under [workflow.state]"),
        "{}",
        run.stderr
    );

    // A state object written by a newer flow, and one that is not JSON:
    // refused, never overwritten.
    a.p.write(
        "wf.toml",
        &workflow(0, "60s").replace("us-east-1", "eu-west-1"),
    );
    for (body, says) in [
        (
            r#"{"format":"flow-state-backup","schema_version":9,"serial":4,"salt":"00","created_at":0,"steps":[]}"#,
            "was written by a newer flow (schema 9)",
        ),
        ("{not json", "cannot be read: it is not valid JSON"),
    ] {
        let (status, text) = moto.http(
            "PUT",
            &format!("/{BUCKET}/{KEY}"),
            &[("Authorization", &support::moto::authorization("s3"))],
            body.as_bytes(),
        );
        assert_eq!(status, 200, "{text}");
        let run = a.run(&["apply", "wf.toml", "--auto-approve"]);
        assert_eq!(run.code, 1, "{}", run.all());
        assert!(run.stderr.contains(says), "{}", run.stderr);
        assert_eq!(
            moto.object(BUCKET, KEY),
            body,
            "the object is left as it was"
        );
    }

    // A lock object that is not a flow lock: shown raw, with the unlock command.
    let (status, text) = moto.http(
        "PUT",
        &format!("/{BUCKET}/{KEY}.lock"),
        &[("Authorization", &support::moto::authorization("s3"))],
        b"held by a shell script",
    );
    assert_eq!(status, 200, "{text}");
    let run = a.run(&["plan", "wf.toml"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr
            .contains("is not a flow lock; it holds:\nheld by a shell script"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("flow state unlock wf.toml "),
        "{}",
        run.stderr
    );

    // No permission: a bucket policy that denies everything.
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::{BUCKET}","arn:aws:s3:::{BUCKET}/*"]}}]}}"#
    );
    let (status, text) = moto.http(
        "PUT",
        &format!("/{BUCKET}?policy"),
        &[("Authorization", &support::moto::authorization("s3"))],
        policy.as_bytes(),
    );
    assert!(status == 200 || status == 204, "{status} {text}");
    let run = a.run(&["plan", "wf.toml"]);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.stderr.contains("error: no permission to"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("s3:PutObject"), "{}", run.stderr);
}

/// The state's deltas' PutObject as the proxy names it (neither the lock,
/// the snapshot, nor the runs and backups match).
const STATE_PUT: &str = "s3:PUT /team-flow-state/training/shared.json.log/";

#[test]
fn a_state_write_whose_answer_is_lost_is_recognised_not_taken_for_a_conflict() {
    let moto = Moto::start();
    make_bucket(&moto, BUCKET);
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", &workflow(0, "60s"));
    // The first delta passes; the second reaches moto, which stores it, and
    // its answer is lost. The retry's If-None-Match finds the place taken:
    // flow must see that the object there is its own.
    proxy.schedule(STATE_PUT, &[None, Some(Fault::Lost)]);
    let run = a.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(run.code, 0, "{}", run.all());
    let counts = proxy.counts();
    let lost: Vec<_> = counts
        .faulted
        .iter()
        .filter(|(op, f)| op.contains(STATE_PUT) && *f == Fault::Lost)
        .collect();
    assert_eq!(lost.len(), 1, "{:?}", counts.faulted);
    // The lost request was forwarded: moto acted on it.
    let state_puts: Vec<_> = counts
        .forwarded
        .iter()
        .filter(|op| op.contains(STATE_PUT))
        .collect();
    assert!(state_puts.len() >= 3, "{:?}", counts.forwarded);
    assert!(
        !run.all().contains("changed by another writer"),
        "{}",
        run.all()
    );
    for step in ["one", "two", "slow"] {
        assert_eq!(remote_record(&moto, step).unwrap()["status"], "applied");
    }
    let other = Aws::new(&moto, None);
    other.p.write("wf.toml", &workflow(0, "60s"));
    let plan = other.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
}

#[test]
fn an_unreachable_bucket_stops_new_steps_and_the_journal_reaches_s3_later() {
    let moto = Moto::start();
    make_bucket(&moto, BUCKET);
    let proxy = FaultProxy::start(moto.addr);
    let mut a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.env.push(("FLOW_STATE_RETRY_FOR".into(), "3s".into()));
    let text = format!(
        "{}\n[steps.after]\nprovider = \"null\"\ndepends_on = [\"slow\"]\n",
        workflow(2500, "60s")
    );
    a.p.write("wf.toml", &text);
    let run = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(30), "slow's intent in S3", || {
        remote_record(&moto, "slow").is_some_and(|r| !r["in_flight"].is_null())
    });
    // S3 goes away while `slow` runs: every write of the state object has
    // its connection reset before it reaches moto.
    proxy.faults(1.0, &[Fault::Reset], Some(STATE_PUT));
    let run = finish(run);
    assert_eq!(run.code, 1, "{}", run.all());
    assert!(
        run.all().contains("this run stops starting steps")
            && run.all().contains("kept in the local journal"),
        "{}",
        run.all()
    );
    assert!(proxy.injected(Fault::Reset) >= 1);
    // S3 still has the intent; `after` never started.
    assert!(!remote_record(&moto, "slow").unwrap()["in_flight"].is_null());
    assert!(remote_record(&moto, "after").is_none());

    // Back again: the journal goes to S3 first, so `slow` is not redone and
    // only `after` is left.
    proxy.calm();
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("1 to create") && !plan.stdout.contains("slow (resume"),
        "{}",
        plan.stdout
    );
    assert_eq!(remote_record(&moto, "slow").unwrap()["status"], "applied");
    assert!(remote_record(&moto, "slow").unwrap()["in_flight"].is_null());
    a.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(remote_record(&moto, "after").unwrap()["status"], "applied");
}

#[test]
fn lock_timeout_waits_for_the_holder_and_a_lost_local_copy_is_rebuilt_from_s3() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &workflow(2000, "60s"));
    let first = a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(30), "the first apply's lock", || {
        lock_exists(&moto)
    });
    // The second waits for the lock instead of failing, then has nothing to do.
    let waited = b.run(&[
        "apply",
        "wf.toml",
        "--auto-approve",
        "--lock-timeout",
        "60s",
    ]);
    let first = finish(first);
    assert_eq!(first.code, 0, "{}", first.all());
    assert_eq!(waited.code, 0, "{}", waited.all());
    assert!(
        waited.stdout.contains("No changes."),
        "it planned after the first ended:\n{}",
        waited.stdout
    );
    // A checkout whose local copy is gone rebuilds it from S3.
    std::fs::remove_dir_all(a.p.path().join(".flow")).unwrap();
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
    assert!(a.p.path().join(".flow/wf/db").is_dir());
}

/// The run history of an S3 state is shared too: a job run in one checkout
/// is written once as `KEY.runs/ID.json` and listed by the other.
#[test]
fn runs_recorded_in_one_checkout_are_listed_in_the_other() {
    let moto = Moto::start();
    let state = format!(
        "[workflow.state]\nbackend = \"s3\"\nbucket = \"{BUCKET}\"\nkey = \"{KEY}\"\nregion = \"us-east-1\"\nlease = \"60s\"\n"
    );
    let text = support::aws::BATCH_CHAIN.replace(
        "region = \"us-east-1\"\n",
        &format!("region = \"us-east-1\"\n\n{state}"),
    );
    assert!(text.contains("backend = \"s3\""), "{text}");
    let (a, b) = checkouts(&moto, &text);
    a.apply().expect(0);
    let objects = moto.objects(BUCKET, &format!("{KEY}.runs/"));
    assert_eq!(objects.len(), 1, "{objects:?}");
    let runs = b.run(&["runs", "wf.toml", "--json"]).expect(0).stdout;
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["step"], "nccl");
    assert_eq!(runs[0]["outcome"], "succeeded");
    assert_eq!(
        objects[0],
        format!("{KEY}.runs/{}.json", runs[0]["id"].as_str().unwrap())
    );
}
