//! The writer thread: group commit.
//!
//! It blocks for one request, then takes every request already queued,
//! applies all their changes as one sled batch together with the serial bump
//! (one transaction), flushes once, and answers everyone. However many steps
//! finish at the same instant, they share one flush.
//!
//! The order within a batch: apply it in memory (one sled transaction that
//! also sets the serial), flush sled's log, fdatasync it, and only then
//! advance the in-memory serial and the watermark. A batch whose flush fails
//! never gets its serial: the store is marked [`Halted`], every later read
//! and commit through it fails with the first error, and what is on disk is
//! the state up to the last serial anyone was told is durable.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crate::commit::{Change, Reply, Request};
use crate::db::Trees;
use crate::error::StateError;
use crate::meta;
use crate::snapshot;
use crate::watermark::Watermark;

/// Where a committed batch goes next, before anyone hears it is durable:
/// the S3 backend's copy of the state. The writer calls it after the local
/// flush; if it fails, the batch stays in the local journal and everyone
/// waiting on it gets the error.
pub(crate) trait Publish: Send {
    /// Makes the batch with serial `serial` and these changes durable there.
    fn publish(&mut self, serial: u64, changes: &[Change]) -> Result<(), StateError>;
}

/// Set once, when a batch was applied in memory but could not be made
/// durable: from then on the open store answers every read and commit with
/// that failure instead of showing records that are not on disk.
#[derive(Clone, Default)]
pub(crate) struct Halted(Arc<OnceLock<StateError>>);

impl Halted {
    /// `Err` (the first failure again) once the store has halted.
    pub(crate) fn check(&self) -> Result<(), StateError> {
        match self.0.get() {
            Some(err) => Err(err.duplicate()),
            None => Ok(()),
        }
    }

    fn halt(&self, err: &StateError) {
        let _ = self.0.set(err.duplicate());
    }
}

/// Starts the writer for `trees`; it stops on [`Request::Shutdown`] or when
/// every sender is gone.
pub(crate) fn spawn(
    root: PathBuf,
    trees: Trees,
    serial: Arc<AtomicU64>,
    watermark: Watermark,
    publish: Option<Box<dyn Publish>>,
    halted: Halted,
) -> Result<(mpsc::Sender<Request>, JoinHandle<()>), StateError> {
    // sled's flush() writes the log with sync_file_range on Linux, which
    // neither flushes the drive's cache nor the file's size; an fdatasync on
    // the log file does both, so a commit also survives a power cut.
    let log_path = root.join("db").join("db");
    let log = File::open(&log_path).map_err(|e| StateError::io(&log_path, e))?;
    let (tx, rx) = mpsc::channel();
    let writer = Writer {
        root,
        trees,
        serial,
        log,
        watermark,
        rx,
        publish,
        halted,
    };
    let handle = std::thread::Builder::new()
        .name("flow-state-writer".to_string())
        .spawn(move || writer.run())
        .map_err(|e| StateError::Sled(format!("the state writer thread cannot start: {e}")))?;
    Ok((tx, handle))
}

struct Writer {
    root: PathBuf,
    trees: Trees,
    serial: Arc<AtomicU64>,
    log: File,
    watermark: Watermark,
    rx: mpsc::Receiver<Request>,
    publish: Option<Box<dyn Publish>>,
    halted: Halted,
}

impl Writer {
    fn run(mut self) {
        while let Ok(first) = self.rx.recv() {
            let mut group = vec![first];
            group.extend(self.rx.try_iter());
            if self.serve(group) {
                break;
            }
        }
        // After a failed write sled's flush can wait forever (see the
        // store's drop, which keeps sled from flushing on drop then).
        if self.halted.check().is_ok() {
            let _ = self.trees.db.flush();
        }
    }

    /// Serves one group; true when asked to stop.
    fn serve(&mut self, group: Vec<Request>) -> bool {
        let mut changes = Vec::new();
        let mut waiters = Vec::new();
        let mut snapshots = Vec::new();
        let mut stop = false;
        for request in group {
            match request {
                Request::Commit { changes: c, reply } => {
                    changes.extend(c);
                    waiters.push(reply);
                }
                Request::Snapshot { reply } => snapshots.push(reply),
                Request::Shutdown => stop = true,
            }
        }
        if !waiters.is_empty() {
            let outcome = if let Err(err) = self.halted.check() {
                Err(err)
            } else if changes.is_empty() {
                Ok(self.serial.load(Ordering::SeqCst))
            } else {
                self.commit(&changes)
                    .and_then(|serial| match &mut self.publish {
                        Some(publish) => publish.publish(serial, &changes).map(|()| serial),
                        None => Ok(serial),
                    })
            };
            answer(waiters, outcome);
        }
        for reply in snapshots {
            reply.send(
                self.halted
                    .check()
                    .and_then(|()| snapshot::read(&self.root, &self.trees)),
            );
        }
        stop
    }

    /// Applies `changes` with the next serial in one transaction, makes
    /// them durable, and only then moves the serial on.
    fn commit(&self, changes: &[Change]) -> Result<u64, StateError> {
        let mut batch = sled::Batch::default();
        for change in changes {
            match &change.value {
                Some(value) => batch.insert(change.key.as_bytes(), value.as_slice()),
                None => batch.remove(change.key.as_bytes()),
            }
        }
        let next = self.serial.load(Ordering::SeqCst) + 1;
        let written = meta::apply_atomically(
            &self.root,
            &self.trees,
            &batch,
            &meta::number_batch(&[(meta::SERIAL, next)]),
        )
        .and_then(|()| self.make_durable());
        if let Err(err) = written {
            // The batch may be in sled's memory (in part, if the transaction
            // itself failed while writing) but not on disk: nobody may read
            // it or build on it.
            self.halted.halt(&err);
            return Err(err);
        }
        self.serial.store(next, Ordering::SeqCst);
        // Only a check; failing to write it does not undo the commit.
        let _ = self.watermark.record(next);
        Ok(next)
    }

    /// Flushes sled's log and fdatasyncs it.
    fn make_durable(&self) -> Result<(), StateError> {
        self.trees
            .db
            .flush()
            .map_err(|e| StateError::from_sled(&self.root, e))?;
        self.log
            .sync_data()
            .map_err(|e| StateError::io(self.root.join("db"), e))
    }
}

/// Gives every waiter of a group the group's outcome.
fn answer(waiters: Vec<Reply<u64>>, outcome: Result<u64, StateError>) {
    match outcome {
        Ok(serial) => waiters.into_iter().for_each(|w| w.send(Ok(serial))),
        Err(err) => waiters
            .into_iter()
            .for_each(|w| w.send(Err(err.duplicate()))),
    }
}

#[cfg(test)]
mod tests {
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
        fn mount() -> Option<SmallDisk> {
            let dir = tempfile::tempdir().unwrap();
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs here (needs root); the full-disk commit is not tested"
                );
                return None;
            }
            Some(SmallDisk { dir })
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

    fn big(name: &str) -> StepRecord {
        let mut rec = StepRecord::new(name, "exec", 1);
        rec.outputs =
            serde_json::from_value(serde_json::json!({"blob": "x".repeat(256 * 1024)})).unwrap();
        rec
    }

    #[test]
    fn a_failed_flush_moves_no_serial_and_shows_nothing_unwritten() {
        let Some(disk) = SmallDisk::mount() else {
            return;
        };
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
}
