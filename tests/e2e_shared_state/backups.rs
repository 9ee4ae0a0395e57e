//! Backups of an S3 state: copies beside it or the bucket's versions,
//! listed and restored.

use crate::support;
use crate::support::aws::Aws;
use crate::support::moto::Moto;
use crate::{BUCKET, KEY, checkouts, make_bucket, state_object, workflow};

#[test]
fn backups_of_an_s3_state_are_copies_beside_it_or_the_buckets_versions() {
    let moto = Moto::start();
    let (a, _b) = checkouts(&moto, &workflow(0, "60s"));
    let none = a.run(&["state", "backups", "wf.toml"]).expect(0);
    assert!(none.stdout.contains("No backups of"), "{}", none.stdout);
    a.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    // Unversioned bucket: a copy under KEY.backups/ before each run.
    let copies = moto.objects(BUCKET, &format!("{KEY}.backups/state-"));
    assert_eq!(copies.len(), 2, "{copies:?}");
    let listed = a.run(&["state", "backups", "wf.toml"]).expect(0);
    for key in &copies {
        assert!(
            listed.stdout.contains(&format!("s3://{BUCKET}/{key}")),
            "{key} is listed:\n{}",
            listed.stdout
        );
    }
    // The copy taken before the destroy holds the applied steps.
    let before_destroy = copies.iter().max().unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&moto.object(BUCKET, before_destroy)).unwrap();
    assert_eq!(doc["steps"].as_array().unwrap().len(), 3, "{doc}");

    // Versioned bucket: no copies; the versions are the backups.
    let versioned = "team-flow-state-versioned";
    make_bucket(&moto, versioned);
    let (status, body) = moto.http(
        "PUT",
        &format!("/{versioned}?versioning"),
        &[
            ("Authorization", &support::moto::authorization("s3")),
            ("Content-Type", "application/xml"),
        ],
        br#"<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>"#,
    );
    assert_eq!(status, 200, "{body}");
    let c = Aws::new(&moto, None);
    c.p.write("wf.toml", &workflow(0, "60s").replace(BUCKET, versioned));
    c.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let listed = c.run(&["state", "backups", "wf.toml"]).expect(0);
    assert!(
        moto.objects(versioned, &format!("{KEY}.backups/"))
            .is_empty(),
        "{}",
        listed.stdout
    );
    assert!(
        listed
            .stdout
            .contains("is versioned: the state as each run ended is kept"),
        "{}",
        listed.stdout
    );
    let rows: Vec<&str> = listed.stdout.lines().skip(2).collect();
    assert!(rows.len() >= 2, "one version per write:\n{}", listed.stdout);
    // The newest version holds the applied steps: destroy, then restore it.
    let version = rows[0].split_whitespace().last().unwrap().to_string();
    c.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let restored = c.run(&["state", "restore", "wf.toml", &version]).expect(0);
    assert!(
        restored.stdout.contains("Restored 3 steps")
            && restored.stdout.contains("the bucket keeps every version"),
        "{}",
        restored.stdout
    );
    let plan = c.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
    assert!(
        moto.objects(versioned, &format!("{KEY}.backups/"))
            .is_empty()
    );
}

#[test]
fn an_s3_state_is_restored_from_a_backup_copy_or_a_version() {
    let moto = Moto::start();
    let (a, b) = checkouts(&moto, &workflow(0, "60s"));
    a.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(state_object(&moto)["steps"], serde_json::json!([]));
    let serial_before = state_object(&moto)["serial"].as_u64().unwrap();
    // The copy taken before the destroy holds the three applied steps.
    let copy = moto
        .objects(BUCKET, &format!("{KEY}.backups/state-"))
        .into_iter()
        .max()
        .unwrap();
    let url = format!("s3://{BUCKET}/{copy}");
    let restored = b.run(&["state", "restore", "wf.toml", &url]).expect(0);
    assert!(
        restored.stdout.contains("Restored 3 steps into"),
        "{}",
        restored.stdout
    );
    let doc = state_object(&moto);
    assert_eq!(doc["steps"].as_array().unwrap().len(), 3, "{doc}");
    assert!(doc["serial"].as_u64().unwrap() > serial_before, "{doc}");
    // The state it replaced is kept beside it.
    let replaced = moto.objects(BUCKET, &format!("{KEY}.backups/state-replaced-"));
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    // Both checkouts now plan from the restored state.
    for checkout in [&a, &b] {
        let plan = checkout.run(&["plan", "wf.toml"]).expect(0);
        assert!(plan.stdout.contains("No changes."), "{}", plan.stdout);
    }
    // A backup that is not there, or in another bucket, changes nothing.
    let etag_before = state_object(&moto);
    let missing = b.run(&[
        "state",
        "restore",
        "wf.toml",
        &format!("s3://{BUCKET}/{KEY}.backups/state-9-9.json"),
    ]);
    assert_eq!(missing.code, 1, "{}", missing.all());
    assert!(
        missing.stderr.contains("does not exist"),
        "{}",
        missing.stderr
    );
    let elsewhere = b.run(&["state", "restore", "wf.toml", "s3://other/x.json"]);
    assert_eq!(elsewhere.code, 1, "{}", elsewhere.all());
    assert_eq!(state_object(&moto), etag_before);
}
