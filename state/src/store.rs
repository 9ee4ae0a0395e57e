//! [`Store`]: one open, locked state.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::backup;
use crate::checks::{check_never_committed, check_schema, refuse_s3_copy};
use crate::commit::{self, Committer, Request};
use crate::db::{self, Trees};
use crate::error::{StateError, decode_record};
use crate::layout::StateLayout;
use crate::lock::StateLock;
use crate::meta;
use crate::migrate::MIGRATIONS;
use crate::records::StepRecord;
use crate::retention::Retention;
use crate::snapshot::Snapshot;
use crate::wal::{self, Wal};
use crate::watermark::{self, Watermark};
use crate::writer::{Halted, Publish};

/// What opening a state folder that has no `db/` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoDatabase {
    /// A new state, unless the folder shows it had commits (a local state:
    /// its database is the only copy).
    Refuse,
    /// A new database either way (the copy of an S3 state, rebuilt from S3).
    Create,
}

/// An open state: holds the process lock, reads records directly and
/// writes them through [`Committer`]s. Dropping it flushes, stops the
/// writer thread and then releases the lock.
pub struct Store {
    layout: StateLayout,
    trees: Trees,
    salt: [u8; 32],
    serial: Arc<AtomicU64>,
    tx: mpsc::Sender<Request>,
    writer: Option<JoinHandle<()>>,
    halted: Halted,
    warnings: Vec<String>,
    retention: Retention,
    /// Answers reads while this store holds the state (see `live`).
    reads: Option<crate::live::Server>,
    // Declared last so it is released after the database is closed.
    _lock: StateLock,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.layout.root)
            .field("serial", &self.serial())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the state at `root` for `command` (shown to anyone who finds it
    /// locked), creating it if needed: takes the lock first, then opens the
    /// database and checks (or migrates) its schema.
    /// A local state that is the copy of an S3 state is refused: the S3
    /// state is the truth, and writing the copy alone would fork it.
    pub fn open(root: &Path, command: &str) -> Result<Store, StateError> {
        Store::open_keeping(root, command, Retention::default())
    }

    /// Like [`Store::open`], keeping backups by `retention` (the workflow's
    /// `keep_backups` and `keep_backups_for`).
    pub fn open_keeping(
        root: &Path,
        command: &str,
        retention: Retention,
    ) -> Result<Store, StateError> {
        let no_db = NoDatabase::Refuse;
        Store::open_with(root, command, no_db, retention, |layout, trees| {
            refuse_s3_copy(&layout.root, trees).map(|()| None)
        })
    }

    /// Like [`Store::open_keeping`], with `no_db` saying what a state folder
    /// without a database means, and `prepare` run on the checked database
    /// before anything reads it: the S3 backend brings the local copy up to
    /// date there and returns where each batch is published next.
    pub(crate) fn open_with(
        root: &Path,
        command: &str,
        no_db: NoDatabase,
        retention: Retention,
        prepare: impl FnOnce(&StateLayout, &Trees) -> Result<Option<Box<dyn Publish>>, StateError>,
    ) -> Result<Store, StateError> {
        let layout = StateLayout::new(root);
        let refuse_lost = |layout: &StateLayout| match no_db {
            NoDatabase::Refuse if !layout.db().is_dir() => check_never_committed(layout),
            _ => Ok(()),
        };
        // Before creating anything, and again under the lock.
        refuse_lost(&layout)?;
        layout.ensure()?;
        let lock = StateLock::acquire_answering_reads(&layout, command)?;
        refuse_lost(&layout)?;
        let had_db = layout.db().is_dir();
        // A copy of an S3 state whose db/ was deleted is rebuilt from S3,
        // which is the truth: its old watermark says nothing then.
        let mark = if had_db {
            watermark::read(&layout)?
        } else {
            None
        };
        let trees = wal::open_db(&layout, mark)?;
        check_schema(&layout, &trees, mark, MIGRATIONS, &retention)?;
        let publish = prepare(&layout, &trees)?;
        // What opening wrote to sled directly (a fresh state's meta, a
        // migration, the S3 copy brought up to date) is on disk before any
        // commit builds on it: commits go to the log only.
        wal::checkpoint(root, &trees)?;
        let serial = meta::read_serial(root, &trees.meta)?;
        let salt = meta::read_salt(root, &trees.meta)?;
        let watermark = Watermark::open(&layout)?;
        watermark.record(serial)?;
        let serial = Arc::new(AtomicU64::new(serial));
        let halted = Halted::default();
        let (tx, writer) = crate::writer::spawn(
            root.to_path_buf(),
            trees.clone(),
            Wal::open(&layout)?,
            serial.clone(),
            watermark,
            publish,
            halted.clone(),
        )?;
        let reads = crate::live::serve(&layout, trees.clone(), tx.clone(), halted.clone());
        Ok(Store {
            layout,
            trees,
            salt,
            serial,
            tx,
            writer: Some(writer),
            halted,
            warnings: crate::netfs::warning(root).into_iter().collect(),
            retention,
            reads,
            _lock: lock,
        })
    }

    /// Like [`Store::open`], but returns `None`, creating nothing, when
    /// there is no database under `root` yet (for commands that have nothing
    /// to do on a new state: destroy, a refused import).
    pub fn open_if_exists(root: &Path, command: &str) -> Result<Option<Store>, StateError> {
        Store::open_if_exists_keeping(root, command, Retention::default())
    }

    /// Like [`Store::open_if_exists`], keeping backups by `retention`.
    pub fn open_if_exists_keeping(
        root: &Path,
        command: &str,
        retention: Retention,
    ) -> Result<Option<Store>, StateError> {
        let layout = StateLayout::new(root);
        if !layout.db().is_dir() {
            check_never_committed(&layout)?;
            return Ok(None);
        }
        Store::open_keeping(root, command, retention).map(Some)
    }

    /// Every recorded step, sorted by name.
    pub fn steps(&self) -> Result<Vec<StepRecord>, StateError> {
        self.catch_up()?;
        self.trees
            .steps
            .iter()
            .map(|item| {
                let (key, value) = item.map_err(|e| StateError::from_sled(&self.layout.root, e))?;
                self.decode(&key, &value)
            })
            .collect()
    }

    /// The record of step `name`, if there is one.
    pub fn get(&self, name: &str) -> Result<Option<StepRecord>, StateError> {
        self.catch_up()?;
        let value = self
            .trees
            .steps
            .get(name)
            .map_err(|e| StateError::from_sled(&self.layout.root, e))?;
        value.map(|v| self.decode(name.as_bytes(), &v)).transpose()
    }

    /// The state's run history (see [`RunLog`](crate::runs::RunLog)).
    pub fn run_log(&self) -> crate::runs::RunLog {
        crate::runs::RunLog::new(self.layout.runs())
    }

    /// Warnings from opening, to show once: a state folder on a network
    /// filesystem (see [`netfs`](crate::netfs)).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The number of batches committed since the state was created.
    pub fn serial(&self) -> u64 {
        self.serial.load(Ordering::SeqCst)
    }

    /// The salt of a state made before fingerprints were keyed (all zeros for
    /// one made since), to recognise the seals of that time.
    pub fn salt(&self) -> [u8; 32] {
        self.salt
    }

    /// Where this state's files are.
    pub fn layout(&self) -> &StateLayout {
        &self.layout
    }

    /// How this state's backups are kept.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// The open database, up to date with every commit (for the S3
    /// backend's push and pull).
    pub(crate) fn trees(&self) -> Result<&Trees, StateError> {
        self.catch_up()?;
        Ok(&self.trees)
    }

    /// Waits until sled's trees hold every committed batch (the writer
    /// applies them to the trees later than it makes them durable).
    fn catch_up(&self) -> Result<(), StateError> {
        self.halted.check()?;
        commit::call_blocking(&self.tx, |reply| Request::Fold { reply }).map(drop)
    }

    /// A handle to record changes with.
    pub fn committer(&self) -> Committer {
        Committer::new(self.tx.clone())
    }

    /// Writes a consistent copy of the whole state to
    /// `backups/state-<serial>-<unix secs>.json` (mode 0600), deletes all
    /// what [`retention`](crate::retention) lets go, and returns the new file.
    pub fn backup(&self) -> Result<PathBuf, StateError> {
        backup::write(self.layout(), &self.snapshot()?, None, &self.retention)
    }

    /// A consistent copy of everything, taken by the writer between batches.
    pub(crate) fn snapshot(&self) -> Result<Snapshot, StateError> {
        commit::call_blocking(&self.tx, |reply| Request::Snapshot { reply })
    }

    fn decode(&self, key: &[u8], value: &[u8]) -> Result<StepRecord, StateError> {
        decode_record(&self.layout.root, key, value)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.tx.send(Request::Shutdown);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        if self.halted.check().is_ok() {
            let _ = self.trees.db.flush();
        } else {
            // After a failed write, sled's flush (which its drop does too)
            // can wait forever for a write that will never come. The
            // handles are leaked instead, so the last one never drops: the
            // process ends soon after and the kernel closes the files.
            std::mem::forget(self.trees.clone());
        }
        // Reads are answered (from the trees, which no longer change)
        // until just before the lock goes.
        drop(self.reads.take());
        let _ = db::make_private(&self.layout.db());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::Mutation;
    use crate::records::{SCHEMA_VERSION, Status};

    fn root() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".flow");
        (tmp, root)
    }

    fn record(name: &str) -> StepRecord {
        StepRecord::new(name, "exec", 1_700_000_000)
    }

    #[test]
    fn fresh_state_has_schema_and_serial_and_no_salt() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.serial(), 0);
        assert!(store.steps().unwrap().is_empty());
        assert_eq!(
            meta::read_version(&root, &store.trees.meta).unwrap(),
            Some(SCHEMA_VERSION)
        );
        let salt = store.salt();
        assert_eq!(salt, [0; 32], "a new state keeps no salt");
        drop(store);
        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.salt(), salt, "the meta is kept across opens");
    }

    #[test]
    fn second_open_is_locked_not_a_sled_error() {
        let (_tmp, root) = root();
        let _first = Store::open(&root, "flow apply").unwrap();
        match Store::open(&root, "flow plan") {
            Err(StateError::Locked {
                info: Some(info), ..
            }) => {
                assert_eq!(info.pid, std::process::id());
                assert_eq!(info.command, "flow apply");
            }
            other => panic!("expected Locked, got {other:?}"),
        }
    }

    #[test]
    fn open_if_exists_creates_nothing() {
        let (_tmp, root) = root();
        assert!(Store::open_if_exists(&root, "flow plan").unwrap().is_none());
        assert!(!root.exists());
        drop(Store::open(&root, "flow apply").unwrap());
        assert!(Store::open_if_exists(&root, "flow plan").unwrap().is_some());
    }

    #[test]
    fn put_get_remove_and_sorted_steps() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        let c = store.committer();
        let mut vpc = record("vpc");
        vpc.status = Status::Applied;
        c.commit_blocking(vec![
            Mutation::Put(record("zeta")),
            Mutation::Put(vpc.clone()),
            Mutation::Put(record("alpha")),
            Mutation::Remove("zeta".into()),
        ])
        .unwrap();
        assert_eq!(store.serial(), 1);
        assert_eq!(store.get("vpc").unwrap(), Some(vpc));
        assert_eq!(store.get("zeta").unwrap(), None);
        let names: Vec<_> = store.steps().unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["alpha", "vpc"]);

        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(c.remove("alpha")).unwrap();
        assert_eq!(store.get("alpha").unwrap(), None);
        assert_eq!(store.serial(), 2);
        // An empty commit changes nothing and costs nothing.
        assert_eq!(c.commit_blocking(vec![]).unwrap(), 2);
    }

    #[test]
    fn concurrent_puts_are_grouped() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        rt.block_on(async {
            let tasks: Vec<_> = (0..500)
                .map(|i| {
                    let c = store.committer();
                    tokio::spawn(async move { c.put(record(&format!("step-{i:03}"))).await })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        });
        let batches = store.serial();
        assert!((1..500).contains(&batches), "{batches} batches");
        assert_eq!(store.steps().unwrap().len(), 500);
        drop(store);

        let store = Store::open(&root, "flow plan").unwrap();
        assert_eq!(store.serial(), batches);
        let steps = store.steps().unwrap();
        assert_eq!(steps.len(), 500);
        assert_eq!(steps[499].name, "step-499");
    }

    #[test]
    fn committer_after_store_drop_is_closed() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        let c = store.committer();
        c.commit_blocking(vec![Mutation::Put(record("a"))]).unwrap();
        drop(store);
        assert!(matches!(
            c.commit_blocking(vec![Mutation::Put(record("b"))]),
            Err(StateError::Closed)
        ));
        // The lock is free again even though a Committer is alive.
        let store = Store::open(&root, "flow apply").unwrap();
        assert!(store.get("a").unwrap().is_some());
        assert!(store.get("b").unwrap().is_none());
    }

    #[test]
    fn newer_and_unsupported_schemas_are_refused() {
        let (_tmp, root) = root();
        let set_version = |v: u32| {
            let store = Store::open(&root, "test").unwrap();
            store
                .trees
                .meta
                .insert(meta::SCHEMA_VERSION, meta::encode_number(v.into()))
                .unwrap();
        };
        set_version(SCHEMA_VERSION + 1);
        let err = Store::open(&root, "flow apply").unwrap_err();
        assert!(
            matches!(err, StateError::NewerSchema { found, supported } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
            "{err:?}"
        );
        // A refused open leaves the lock free.
        let layout = StateLayout::new(&root);
        drop(StateLock::acquire(&layout, "probe").unwrap());

        let trees = db::open(&layout).unwrap();
        trees.meta.insert(meta::SCHEMA_VERSION, "0").unwrap();
        trees.db.flush().unwrap();
        drop(trees);
        let err = Store::open(&root, "flow apply").unwrap_err();
        assert!(
            matches!(
                err,
                StateError::UnsupportedSchema {
                    found: 0,
                    oldest: 1
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn undecodable_record_is_corrupt() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        store
            .trees
            .steps
            .insert("vpc", r#"{"name":"vpc","secret":"#)
            .unwrap();
        match store.get("vpc") {
            Err(StateError::Corrupt { detail, .. }) => {
                assert!(detail.contains("`vpc`"), "{detail}");
                assert!(!detail.contains("secret"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(matches!(store.steps(), Err(StateError::Corrupt { .. })));
    }

    #[test]
    fn damaged_log_never_loses_changes_silently() {
        for damage in 0..4 {
            let (_tmp, root) = root();
            let store = Store::open(&root, "flow apply").unwrap();
            let c = store.committer();
            for i in 0..50 {
                c.commit_blocking(vec![Mutation::Put(record(&format!("s{i:02}")))])
                    .unwrap();
            }
            drop(store);
            // Opened once more, which replays and empties the write-ahead
            // log the close left: only sled's own files hold the batches.
            drop(Store::open(&root, "flow apply").unwrap());
            assert_eq!(
                std::fs::metadata(root.join("db/flow-wal")).unwrap().len(),
                0
            );
            let log = root.join("db/db");
            let mut bytes = std::fs::read(&log).unwrap();
            let n = bytes.len();
            match damage {
                0 => bytes.truncate(n / 2),
                1 => bytes[n / 4..n / 2].iter_mut().for_each(|b| *b ^= 0x55),
                2 => bytes[..64].iter_mut().for_each(|b| *b ^= 0x55),
                _ => bytes.truncate(10),
            }
            std::fs::write(&log, bytes).unwrap();
            match Store::open(&root, "flow apply") {
                Err(StateError::Corrupt { .. }) => {}
                Ok(store) => {
                    assert_eq!(store.serial(), 50, "damage {damage}");
                    assert_eq!(store.steps().unwrap().len(), 50, "damage {damage}");
                }
                Err(other) => panic!("damage {damage}: expected Corrupt, got {other:?}"),
            }
        }
    }

    #[test]
    fn v1_state_is_migrated_on_open() {
        let (_tmp, root) = root();
        let layout = StateLayout::new(&root);
        layout.ensure().unwrap();
        let trees = db::open(&layout).unwrap();
        meta::initialize(&root, &trees, 1, [1; 32]).unwrap();
        let old = format!("sha256:{}", "ab".repeat(32));
        let content = format!("sha256:{}", "cd".repeat(32));
        let mut rec = record("svc");
        rec.status = Status::Applied;
        rec.applied = true;
        rec.inputs = serde_json::from_value(serde_json::json!({
            "run": "true",
            "env": {"REGION": "x", "TOKEN": old},
            "(content)": content,
        }))
        .unwrap();
        trees
            .steps
            .insert("svc", serde_json::to_vec(&rec).unwrap())
            .unwrap();
        trees.db.flush().unwrap();
        drop(trees);

        let store = Store::open(&root, "flow plan").unwrap();
        let got = store.get("svc").unwrap().unwrap();
        assert_eq!(got.inputs["env"]["TOKEN"], format!("sealed:{old}"));
        assert_eq!(got.inputs["env"]["REGION"], "x");
        assert_eq!(got.inputs["(content)"], content.as_str());
        // One serial per migration step: 1 → 2 → 3 → 4.
        assert_eq!(store.serial(), 3);
        assert_eq!(
            meta::read_version(&root, &store.trees.meta).unwrap(),
            Some(SCHEMA_VERSION)
        );
        drop(store);
        // The state as it was before is in a backup.
        let backups = crate::backup::list_backups(&root).unwrap();
        assert_eq!(backups.len(), 1);
        let text = std::fs::read_to_string(&backups[0].path).unwrap();
        assert!(text.contains(&format!("\"{old}\"")), "{text}");
        assert!(!text.contains("sealed:"), "{text}");
    }

    #[test]
    fn store_is_send_sync() {
        fn ok<T: Send + Sync>() {}
        ok::<Store>();
    }
}
