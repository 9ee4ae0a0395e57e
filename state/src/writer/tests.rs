//! The writer's tests: crash safety, checkpoints, the batch hold.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::commit::Mutation;
use crate::error::StateError;
use crate::records::StepRecord;
use crate::store::Store;

/// A 4 MiB tmpfs mounted on a temporary folder, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts it; panics naming what is missing where mounting is
    /// refused (the store writes to it from this process, so it cannot
    /// live in a namespace of its own as the e2e out-of-disk test's).
    fn mount() -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => SmallDisk { dir },
            Ok(o) => panic!(
                "this test mounts a 4 MiB tmpfs and needs root (CAP_SYS_ADMIN) for it; `mount` said: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!("cannot run `mount` (util-linux's mount): {e}"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk is full.
    fn fill(&self) {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            match f.write_all(&chunk).and_then(|()| f.sync_all()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: the halted store's files stay open until exit.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The child half of the crash test: commits one record, then dies
/// at once, before the writer applies it to sled or checkpoints.
fn crash_after_commit(root: &Path) -> ! {
    let store = Store::open(root, "flow apply").unwrap();
    store
        .committer()
        .commit_blocking(vec![Mutation::Put(StepRecord::new("kept", "exec", 1))])
        .unwrap();
    std::process::abort();
}

#[test]
fn an_acknowledged_batch_survives_a_crash_before_any_checkpoint() {
    const CHILD: &str = "FLOW_TEST_CRASH_AFTER_COMMIT";
    if let Some(root) = std::env::var_os(CHILD) {
        crash_after_commit(Path::new(&root));
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".flow");
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "writer::tests::an_acknowledged_batch_survives_a_crash_before_any_checkpoint",
            "--nocapture",
        ])
        .env(CHILD, &root)
        .status()
        .unwrap();
    assert!(!status.success(), "the child was to abort: {status}");
    let logged = log_len(&root);
    assert!(logged > 0, "the acknowledged batch is not in the log");

    let store = Store::open(&root, "flow apply").unwrap();
    assert!(store.get("kept").unwrap().is_some(), "the batch was lost");
    assert_eq!(store.serial(), 1);
    assert_eq!(log_len(&root), 0, "opening replays and empties the log");
}

fn log_len(root: &Path) -> u64 {
    std::fs::metadata(root.join("db").join(crate::wal::FILE))
        .unwrap()
        .len()
}

/// Waits (up to 10 s) for the idle writer to empty the log.
fn wait_for_idle_checkpoint(root: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while log_len(root) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle writer did not checkpoint a {} byte log",
            log_len(root)
        );
        std::thread::sleep(super::FOLD_AFTER);
    }
}

/// A result queued for its dependents is held for the intents they
/// record (one batch, one sync), and written alone once no change came
/// for the gathering time.
#[test]
fn a_queued_result_goes_out_with_the_intent_recorded_after_it() {
    use std::time::{Duration, Instant};
    let gather = Duration::from_millis(400);
    super::TEST_GATHER.with(|c| c.set(Some(gather)));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), "flow apply").unwrap();
    super::TEST_GATHER.with(|c| c.set(None));
    let committer = store.committer();
    let settled = |mut flag: crate::Durable| -> u64 {
        while flag.borrow().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let got = flag.borrow_and_update().clone().unwrap();
        got.unwrap()
    };
    // Later, but within the gathering time: the same batch.
    let result = committer.submit_record(&StepRecord::new("result", "null", 1));
    std::thread::sleep(Duration::from_millis(100));
    let intent = committer
        .commit_blocking(vec![Mutation::Put(StepRecord::new("intent", "null", 1))])
        .unwrap();
    assert_eq!(settled(result), intent, "the result was written alone");
    // A result alone: written once the gathering time is over.
    let began = Instant::now();
    let alone = settled(committer.submit_record(&StepRecord::new("leaf", "null", 1)));
    assert!(
        began.elapsed() >= gather,
        "written after {:?}",
        began.elapsed()
    );
    assert_eq!(alone, intent + 1);
}

/// Writers spawned from this thread while `f` runs never go idle.
fn never_idle<T>(f: impl FnOnce() -> T) -> T {
    super::TEST_FOLD_AFTER.with(|c| c.set(std::time::Duration::from_secs(3600)));
    let out = f();
    super::TEST_FOLD_AFTER.with(|c| c.set(super::FOLD_AFTER));
    out
}

#[test]
fn a_short_log_is_left_at_close_and_replayed_by_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".flow");
    // Idle or not, a writer does not checkpoint a log this short.
    let store = Store::open(&root, "flow apply").unwrap();
    store
        .committer()
        .commit_blocking(vec![Mutation::Put(StepRecord::new("kept", "exec", 1))])
        .unwrap();
    drop(store);
    let left = log_len(&root);
    assert!(
        left > 0 && left <= crate::wal::KEPT_AT_CLOSE_BYTES,
        "a short log is left for the next open: {left} bytes"
    );

    let store = Store::open(&root, "flow apply").unwrap();
    assert!(
        store.get("kept").unwrap().is_some(),
        "the left log was not replayed"
    );
    assert_eq!(store.serial(), 1);
    assert_eq!(log_len(&root), 0, "opening replays and empties the log");
}

#[test]
fn a_long_log_is_checkpointed_at_close() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".flow");
    let store = never_idle(|| Store::open(&root, "flow apply").unwrap());
    let c = store.committer();
    // Five 256 KiB records: past what a close may leave.
    for i in 0..5 {
        c.commit_blocking(vec![Mutation::Put(big(&format!("big{i}")))])
            .unwrap();
    }
    assert!(log_len(&root) > crate::wal::KEPT_AT_CLOSE_BYTES);
    drop(store);
    assert_eq!(log_len(&root), 0, "a long log is checkpointed at close");
    let store = Store::open(&root, "flow apply").unwrap();
    assert_eq!(store.steps().unwrap().len(), 5);
}

#[test]
fn an_idle_writer_checkpoints_a_log_past_the_idle_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".flow");
    let store = Store::open(&root, "flow apply").unwrap();
    let c = store.committer();
    c.commit_blocking(vec![Mutation::Put(StepRecord::new("small", "exec", 1))])
        .unwrap();
    std::thread::sleep(super::FOLD_AFTER * 5);
    assert!(
        log_len(&root) > 0,
        "a short log waits for a later checkpoint"
    );

    // Past the idle limit (under the 16 MiB one): only going idle
    // empties it while the store is open.
    c.commit_blocking(vec![Mutation::Put(big("big"))]).unwrap();
    wait_for_idle_checkpoint(&root);
    assert!(store.get("big").unwrap().is_some());
}

#[test]
fn an_idle_writer_checkpoints_a_long_log_a_read_already_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".flow");
    let store = Store::open(&root, "flow apply").unwrap();
    let c = store.committer();
    // The read applies the batch at once: nothing is left unapplied,
    // but the log is past the idle limit.
    c.commit_blocking(vec![Mutation::Put(big("big"))]).unwrap();
    assert!(store.get("big").unwrap().is_some());
    wait_for_idle_checkpoint(&root);
}

fn big(name: &str) -> StepRecord {
    let mut rec = StepRecord::new(name, "exec", 1);
    rec.outputs =
        serde_json::from_value(serde_json::json!({"blob": "x".repeat(256 * 1024)})).unwrap();
    rec
}

#[test]
fn a_failed_write_moves_no_serial_and_shows_nothing_unwritten() {
    let disk = SmallDisk::mount();
    let root = disk.path().join(".flow");
    let store = Store::open(&root, "flow apply").unwrap();
    let c = store.committer();
    c.commit_blocking(vec![Mutation::Put(StepRecord::new("kept", "exec", 1))])
        .unwrap();
    assert_eq!(store.serial(), 1);
    disk.fill();

    let err = c
        .commit_blocking(vec![Mutation::Put(big("lost"))])
        .unwrap_err();
    assert!(matches!(err, StateError::DiskFull { .. }), "{err:?}");
    assert!(err.to_string().contains("ENOSPC"), "{err}");
    assert_eq!(store.serial(), 1, "the serial moved past a failed flush");
    assert_eq!(
        crate::watermark::read(store.layout()).unwrap(),
        Some(1),
        "the watermark moved past a failed flush"
    );
    // Nothing that is not on disk can be read or built on.
    assert!(matches!(
        store.get("kept"),
        Err(StateError::DiskFull { .. })
    ));
    assert!(store.steps().is_err());
    assert!(
        c.commit_blocking(vec![Mutation::Remove("kept".into())])
            .is_err()
    );
    // Closing does not hang on sled's flush (the rest, reopening once
    // space is back, runs as a separate process in the end-to-end
    // test `enospc_fails_one_clear_line_and_loses_nothing`: sled's file
    // lock stays with this process).
    drop(store);
}
