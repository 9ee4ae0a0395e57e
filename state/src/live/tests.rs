//! Reads answered by the holder of a state: consistent, fresh, and without
//! writing to the state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use crate::commit::Mutation;
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::readonly::ReadOnlyStore;
use crate::records::StepRecord;
use crate::store::Store;

fn root() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".flow");
    (tmp, root)
}

const STEPS: usize = 2000;

/// The steps batch `i` changes: three of the 2,000, spread out, so that a
/// read that saw part of a batch (or of the several the writer applies to
/// the trees at once) shows records of different batches.
fn touched(i: u64) -> [usize; 3] {
    let i = i as usize;
    [i % STEPS, (i * 7 + 3) % STEPS, (i * 13 + 5) % STEPS]
}

fn record(step: usize, batch: u64) -> StepRecord {
    let mut r = StepRecord::new(&format!("s{step:04}"), "null", 1);
    r.attempts = batch as u32;
    r.last_error = Some(format!("written by batch {batch} {}", "x".repeat(200)));
    r
}

/// What each step holds once batches 1..=serial are committed (`attempts`
/// = the last batch that wrote it).
fn expected(serial: u64) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for i in 1..=serial {
        for s in touched(i) {
            out.insert(format!("s{s:04}"), i as u32);
        }
    }
    out
}

/// The bench's claim, in-process: while a writer commits 3,000 batches
/// over 2,000 steps, each read answered by the holder is exactly the state
/// after some committed batch (no batch in part), at least as new as the
/// last batch committed before the read began, and its age is known.
#[test]
fn every_read_beside_a_busy_writer_is_one_committed_batch_and_fresh() {
    let (_tmp, root) = root();
    let store = Arc::new(Store::open(&root, "flow apply").unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(2));
    let writer = {
        let (store, done, start) = (store.clone(), done.clone(), start.clone());
        std::thread::spawn(move || {
            let c = store.committer();
            start.wait();
            for i in 1..=3000u64 {
                let batch = touched(i).map(|s| Mutation::Put(record(s, i)));
                assert_eq!(c.commit_blocking(batch.to_vec()).unwrap(), i);
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    // The engine reads the store as it runs, each read bringing the trees
    // up to date: batches are applied to them all the time, as an apply's.
    let engine = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                store.get("s0000").unwrap();
            }
        })
    };
    start.wait();
    let mut reads = 0;
    let mut serials = Vec::new();
    while !done.load(Ordering::SeqCst) {
        let committed_before = store.serial();
        let ro = ReadOnlyStore::open_or_read_live(&root, "flow output")
            .unwrap()
            .expect("a state");
        let live = ro.live().expect("read from the holder").clone();
        assert_eq!(live.serial, ro.serial());
        assert!(
            live.serial >= committed_before,
            "read serial {} but {committed_before} was committed before the read",
            live.serial
        );
        if live.serial > 0 {
            assert!(live.age.is_some(), "a batch was committed, its age unknown");
        }
        let got: BTreeMap<String, u32> = ro
            .steps()
            .into_iter()
            .map(|r| (r.name.clone(), r.attempts))
            .collect();
        assert_eq!(got, expected(live.serial), "serial {}", live.serial);
        assert_eq!(
            live.holder.as_ref().map(|h| h.command.as_str()),
            Some("flow apply")
        );
        serials.push(live.serial);
        reads += 1;
    }
    writer.join().unwrap();
    engine.join().unwrap();
    serials.dedup();
    assert!(
        reads >= 20 && serials.len() >= 10,
        "only {reads} reads at {} serials while the writer ran",
        serials.len()
    );
}

/// Every file under `dir` but the lock and the socket, with its bytes and
/// modification time.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file() && e.file_name() != "lock" {
                let modified = e.metadata().unwrap().modified().unwrap();
                out.push((e.path(), std::fs::read(e.path()).unwrap(), modified));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_read_from_the_holder_writes_nothing_and_says_when_it_last_committed() {
    let (_tmp, root) = root();
    let store = Store::open(&root, "flow apply").unwrap();
    let before_any = ReadOnlyStore::open_or_read_live(&root, "flow output")
        .unwrap()
        .unwrap();
    assert_eq!(
        before_any.live().unwrap().age,
        None,
        "nothing committed yet"
    );
    let c = store.committer();
    for i in 1..=5 {
        c.commit_blocking(vec![Mutation::Put(record(i, i as u64))])
            .unwrap();
    }
    store.steps().unwrap(); // applied to the trees now, not by the read
    std::thread::sleep(std::time::Duration::from_millis(1200)); // sled's flusher
    let before = files(&root);
    let ro = ReadOnlyStore::open_or_read_live(&root, "flow state list")
        .unwrap()
        .unwrap();
    let live = ro.live().unwrap();
    assert_eq!(live.serial, 5);
    let age = live.age.expect("committed");
    assert!(age >= std::time::Duration::from_millis(1200), "{age:?}");
    assert_eq!(ro.steps().len(), 5);
    assert!(matches!(
        ro.committer()
            .commit_blocking(vec![Mutation::Remove("s0001".into())]),
        Err(StateError::ReadOnly { .. })
    ));
    drop(ro);
    assert_eq!(files(&root), before, "the read wrote to the state");
    let socket = StateLayout::new(&root).live_socket();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the socket is private as the state is");

    // Once the holder is gone, the socket is, and reads take the lock.
    drop(store);
    assert!(!StateLayout::new(&root).live_socket().exists());
    let ro = ReadOnlyStore::open_or_read_live(&root, "flow output")
        .unwrap()
        .unwrap();
    assert!(ro.live().is_none());
    assert_eq!(ro.steps().len(), 5);
}

/// A holder that answers no reads (a plan, an older flow, one killed and
/// its socket left behind) leaves the read refused as before.
#[test]
fn a_holder_that_answers_no_reads_leaves_the_read_locked() {
    let (_tmp, root) = root();
    let store = Store::open(&root, "flow apply").unwrap();
    store
        .committer()
        .commit_blocking(vec![Mutation::Put(record(1, 1))])
        .unwrap();
    drop(store);
    let plan = ReadOnlyStore::open_if_exists(&root, "flow plan")
        .unwrap()
        .unwrap();
    let socket = StateLayout::new(&root).live_socket();
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists(), "a socket nobody listens on");
    match ReadOnlyStore::open_or_read_live(&root, "flow output") {
        Err(StateError::Locked {
            info: Some(info), ..
        }) => assert_eq!(info.command, "flow plan"),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(plan);
    // The next holder replaces the dead socket with its own.
    let _store = Store::open(&root, "flow apply").unwrap();
    let ro = ReadOnlyStore::open_or_read_live(&root, "flow output").unwrap();
    assert_eq!(ro.unwrap().live().unwrap().serial, 1);
}

/// A state folder whose socket path is longer than a socket address takes
/// is served through the holder's descriptor of the folder.
#[test]
fn a_state_deeper_than_a_socket_path_is_still_served() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp
        .path()
        .join("d".repeat(60))
        .join("e".repeat(60))
        .join(".flow");
    assert!(StateLayout::new(&root).live_socket().as_os_str().len() > super::MAX_SOCKET_PATH);
    let store = Store::open(&root, "flow apply").unwrap();
    store
        .committer()
        .commit_blocking(vec![Mutation::Put(record(7, 1))])
        .unwrap();
    let ro = ReadOnlyStore::open_or_read_live(&root, "flow output")
        .unwrap()
        .unwrap();
    assert_eq!(ro.live().unwrap().serial, 1);
    assert_eq!(ro.steps()[0].name, "s0007");
}

/// The local copy of an S3 state, read as if the state were local, is
/// refused while held as it is under the lock; read as the copy it is
/// (`read_from_holder`), it is served.
#[test]
fn an_s3_copy_read_as_a_local_state_is_refused() {
    let (_tmp, root) = root();
    let store = Store::open(&root, "flow apply").unwrap();
    let trees = store.trees().unwrap();
    let mark = crate::mark::Mark {
        url: "s3://team/wf.json".into(),
        etag: Some("\"1\"".into()),
        pushed_serial: 0,
    };
    crate::mark::write(&root, trees, &mark).unwrap();
    let err = ReadOnlyStore::open_or_read_live(&root, "flow output").unwrap_err();
    assert!(
        err.to_string().contains("is the copy of s3://team/wf.json"),
        "{err}"
    );
    let ro = ReadOnlyStore::read_from_holder(&root, "flow output", None).unwrap();
    assert!(ro.unwrap().live().is_some());
}

/// Between taking the lock and answering (while it opens the state), and
/// between its last answer and letting the lock go, a holder that answers
/// reads does not answer: a reader waits for it instead of failing.
#[test]
fn a_reader_waits_for_a_holder_that_answers_reads_to_answer_or_let_go() {
    let (_tmp, root) = root();
    let store = Store::open(&root, "flow apply").unwrap();
    store
        .committer()
        .commit_blocking(vec![Mutation::Put(record(1, 1))])
        .unwrap();
    drop(store);
    let layout = StateLayout::new(&root);
    let opening = crate::lock::StateLock::acquire_answering_reads(&layout, "flow apply").unwrap();
    // Taken before the lock can go: it cannot be free 300 ms after this.
    let started = std::time::Instant::now();
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(opening);
    });
    let ro = ReadOnlyStore::open_or_read_live(&root, "flow output")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert!(ro.live().is_none(), "read under the lock once it was free");
    assert_eq!(ro.steps().len(), 1);
    letting_go.join().unwrap();
}

/// A holder's lock file is empty for an instant while the lock is held:
/// when the holder has taken the lock and not yet written who it is, and
/// when it has cleared the file and not yet let go (`StateLock`'s drop). A
/// reader refused in that instant names nobody; it waits for the lock to
/// change hands instead of failing. Here the instant is held for as long as
/// the reader may wait; a lock file that cannot be read still refuses at
/// once.
#[test]
fn a_reader_that_meets_a_lock_changing_hands_waits_for_it() {
    use std::time::{Duration, Instant};
    let (_tmp, root) = root();
    let store = Store::open(&root, "flow apply").unwrap();
    store
        .committer()
        .commit_blocking(vec![Mutation::Put(record(1, 1))])
        .unwrap();
    drop(store);
    let layout = StateLayout::new(&root);
    let leaving = crate::lock::StateLock::acquire_answering_reads(&layout, "flow apply").unwrap();
    // What the drop does first, before it lets go.
    std::fs::File::options()
        .write(true)
        .open(layout.lock_file())
        .unwrap()
        .set_len(0)
        .unwrap();
    let wait = Duration::from_millis(500);
    let started = Instant::now();
    match ReadOnlyStore::open_or_read_live_waiting(&root, "flow output", wait) {
        Err(StateError::Locked { info: None, .. }) => {}
        other => panic!("expected Locked naming nobody, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(waited >= wait, "refused after {waited:?}, without waiting");

    // Let go while the reader waits: it reads under the lock.
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(leaving);
    });
    let ro = ReadOnlyStore::open_or_read_live(&root, "flow output")
        .unwrap()
        .unwrap();
    assert!(ro.live().is_none(), "read under the lock once it was free");
    assert_eq!(ro.steps().len(), 1);
    drop(ro);
    letting_go.join().unwrap();

    // A lock file that names nobody because it is not one is no holder
    // changing hands: refused at once, as before.
    let held = crate::lock::StateLock::acquire(&layout, "flow plan").unwrap();
    std::fs::write(layout.lock_file(), b"{garbage").unwrap();
    let started = Instant::now();
    match ReadOnlyStore::open_or_read_live(&root, "flow output") {
        Err(StateError::Locked { info: None, .. }) => {}
        other => panic!("expected Locked naming nobody, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "waited for it");
    drop(held);
}

/// A holder killed while it answered leaves a cut-off answer: the reader
/// takes it as the holder gone (the lock is about to be free), as an empty
/// answer, not as a damaged state; a whole answer that is not a state is
/// still refused.
#[test]
fn a_cut_off_answer_is_a_holder_gone_not_a_damaged_state() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let layout = StateLayout::new(dir.path());
    std::fs::create_dir_all(&layout.root).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(layout.live_socket()).unwrap();
    let serve = |answer: &'static [u8]| {
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(answer).unwrap();
    };
    let reader = {
        let layout = StateLayout::new(dir.path());
        std::thread::spawn(move || super::fetch(&layout).map(|s| s.is_some()))
    };
    serve(br#"{"serial": 3, "schema_version": 2, "salt": "00", "steps": [{"na"#);
    assert!(matches!(reader.join().unwrap(), Ok(false)));
    let reader = {
        let layout = StateLayout::new(dir.path());
        std::thread::spawn(move || super::fetch(&layout).map(|s| s.is_some()))
    };
    serve(b"[1, 2, 3]");
    assert!(matches!(
        reader.join().unwrap(),
        Err(StateError::Corrupt { .. })
    ));
}
