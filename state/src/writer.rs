//! The writer thread: group commit.
//!
//! It blocks for one request, then takes every request already queued,
//! applies all their changes as one sled batch together with the serial bump
//! (one transaction), flushes once, and answers everyone. However many steps
//! finish at the same instant, they share one flush.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
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

/// Starts the writer for `trees`; it stops on [`Request::Shutdown`] or when
/// every sender is gone.
pub(crate) fn spawn(
    root: PathBuf,
    trees: Trees,
    serial: Arc<AtomicU64>,
    watermark: Watermark,
    publish: Option<Box<dyn Publish>>,
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
        let _ = self.trees.db.flush();
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
            let outcome = if changes.is_empty() {
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
            reply.send(snapshot::read(&self.root, &self.trees));
        }
        stop
    }

    /// Applies `changes` with the next serial in one transaction, then
    /// makes them durable.
    fn commit(&self, changes: &[Change]) -> Result<u64, StateError> {
        let mut batch = sled::Batch::default();
        for change in changes {
            match &change.value {
                Some(value) => batch.insert(change.key.as_bytes(), value.as_slice()),
                None => batch.remove(change.key.as_bytes()),
            }
        }
        let next = self.serial.load(Ordering::SeqCst) + 1;
        meta::apply_atomically(
            &self.root,
            &self.trees,
            &batch,
            &meta::number_batch(&[(meta::SERIAL, next)]),
        )?;
        self.serial.store(next, Ordering::SeqCst);
        self.trees
            .db
            .flush()
            .map_err(|e| StateError::from_sled(&self.root, e))?;
        self.log
            .sync_data()
            .map_err(|e| StateError::io(self.root.join("db"), e))?;
        // Only a check; failing to write it does not undo the commit.
        let _ = self.watermark.record(next);
        Ok(next)
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
