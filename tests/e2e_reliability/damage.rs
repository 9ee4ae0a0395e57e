//! Damaged, deleted and old states: a clear error and a way out, and no
//! byte changed by a command that only reads.

use std::path::PathBuf;

use crate::support::{self, Project};

/// `files` with their bytes, sorted by path.
fn with_bytes(files: impl IntoIterator<Item = PathBuf>) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = files
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn damaged_state_gives_a_clear_error_and_a_way_out() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.a]
provider = "null"
[steps.a.inputs]
x = 1

[steps.b]
provider = "null"
[steps.b.inputs]
y = "${steps.a.outputs.x}"
"#,
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.write("wf.toml", &p.read("wf.toml").replace("x = 1", "x = 2"));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);

    // Cut the database file short, as a full disk or a bad copy would.
    let db = p.path().join(".flow/wf/db/db");
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(512).unwrap();
    drop(f);

    let broken = p.run(&["plan", "wf.toml"]).expect(1);
    assert!(broken.stderr.contains("damaged"), "{}", broken.stderr);
    assert!(
        broken.stderr.contains("flow state restore"),
        "{}",
        broken.stderr
    );
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(apply.stderr.contains("damaged"), "{}", apply.stderr);

    let newest = p.newest_backup("wf.toml");
    let restored = p.run(&["state", "restore", "wf.toml", &newest]).expect(0);
    assert!(
        restored.stdout.contains("Restored 2 steps"),
        "{}",
        restored.stdout
    );
    // The newest backup was taken before the second apply: `a` has x = 1,
    // so the plan updates it again, and nothing else is lost.
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("~ a"), "{}", plan.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// `flow plan` on a state in an older schema (schema 1, put in place with
/// `flow state restore` from a backup that says so): the plan reads it
/// through the migrations, and leaves every file of the state byte for byte
/// as it was; no backup, no new serial. The next apply, which has nothing
/// to change, migrates it: its only backup is the one taken before that.
#[test]
fn plan_on_an_old_schema_state_changes_no_byte_of_it() {
    let p = Project::new();
    let wf = |x: u32| format!("[steps.a]\nprovider = \"null\"\n[steps.a.inputs]\nx = {x}\n");
    p.write("wf.toml", &wf(1));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.write("wf.toml", &wf(2));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    // The backup taken before the second apply holds `a` with x = 1: put
    // it back, saying schema 1 (whose records are the same for `a`).
    let mut doc: serde_json::Value =
        serde_json::from_str(&p.read(&p.newest_backup("wf.toml"))).unwrap();
    assert_eq!(doc["steps"].as_array().unwrap().len(), 1, "{doc}");
    doc["schema_version"] = 1.into();
    p.write("old.json", &doc.to_string());
    p.run(&["state", "restore", "wf.toml", "old.json"])
        .expect(0);
    p.write("wf.toml", &wf(1));
    let state = p.path().join(".flow/wf");

    let snapshot = || {
        with_bytes(
            support::files_under(&state)
                .into_iter()
                .filter(|f| f.file_name().is_some_and(|n| n != "lock")),
        )
    };
    let before = snapshot();
    let backups_before = support::files_under(&state.join("backups")).len();
    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.all());
    let after = snapshot();
    assert_eq!(
        before.iter().map(|(f, _)| f).collect::<Vec<_>>(),
        after.iter().map(|(f, _)| f).collect::<Vec<_>>(),
        "plan added or removed files"
    );
    for ((file, a), (_, b)) in before.iter().zip(&after) {
        assert!(a == b, "plan changed {}", file.display());
    }

    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("No changes"), "{}", apply.all());
    assert_eq!(
        support::files_under(&state.join("backups")).len(),
        backups_before + 1,
        "apply migrates, after a backup"
    );
}

/// A state folder whose db/ was deleted, with its watermark and backups
/// still there, is refused by every command, naming the restore and the
/// way to start afresh; no file of the state folder changes. Restoring the newest backup
/// brings it back.
#[test]
fn a_deleted_database_is_refused_not_taken_for_a_new_state() {
    let p = Project::new();
    p.write(
        "wf.toml",
        "[steps.a]\nprovider = \"exec\"\n[steps.a.inputs]\nrun = \"echo a >> runs.log\"\n",
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let db = p.path().join(".flow/wf/db");
    std::fs::remove_dir_all(&db).unwrap();
    let contents = || with_bytes(p.state_files());
    let before = contents();
    for args in [
        &["apply", "wf.toml", "--auto-approve"][..],
        &["plan", "wf.toml"][..],
        &["state", "list", "wf.toml"][..],
    ] {
        let refused = p.run(args).expect(1);
        let text = refused.stderr.clone();
        assert!(text.contains("has no database (db/ is missing)"), "{text}");
        assert!(text.contains("flow state restore"), "{text}");
        assert!(text.contains("delete the whole state folder"), "{text}");
        assert!(!db.exists(), "{args:?} created a database");
        assert!(contents() == before, "{args:?} changed the state folder");
    }
    assert_eq!(p.read("runs.log"), "a\n", "the step ran again");

    let newest = p.newest_backup("wf.toml");
    p.run(&["state", "restore", "wf.toml", &newest]).expect(0);
    // The only backup was taken before the first apply, so `a` is created
    // again; the state converges.
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// What a kill -9 inside sled's own snapshot write leaves: sled writes a
/// snapshot when it opens a database whose log has moved on, under a `.generating`
/// name that it renames once complete, and takes a partial one for its
/// newest snapshot on every later open (a CI run lost a state this way). The
/// read-only plan opens the state as it is, changing nothing; the apply
/// removes the partial file; nothing recorded is lost.
#[test]
fn a_snapshot_half_written_by_a_killed_run_is_not_damage() {
    let p = Project::new();
    p.write(
        "wf.toml",
        "[steps.a]\nprovider = \"null\"\n[steps.a.inputs]\nx = 1\n",
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    // The second apply opens an existing database: sled writes a snapshot.
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let db = p.path().join(".flow/wf/db");
    let snapshot = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snap.")
        })
        .max()
        .expect("sled wrote a snapshot");
    let bytes = std::fs::read(&snapshot).unwrap();
    let partial = db.join(format!(
        "{}.generating",
        snapshot.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&partial, &bytes[..bytes.len() / 2]).unwrap();

    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.all());
    assert!(partial.exists(), "plan changed the state folder");
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("No changes"), "{}", apply.all());
    assert!(!partial.exists(), "the partial snapshot is still there");
    let shown = p.run(&["state", "show", "wf.toml", "a"]).expect(0);
    assert!(shown.stdout.contains("\"x\": 1"), "{}", shown.stdout);
}
