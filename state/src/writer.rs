//! The writer thread: group commit.
//!
//! It blocks for one request, then takes every request already queued,
//! appends all their changes as one frame of the write-ahead log (see
//! `wal`) with the next serial, fdatasyncs it once, and answers everyone.
//! However many steps finish at the same instant, they share one sync.
//!
//! The order within a batch: append and sync the frame, and only then
//! advance the in-memory serial and the watermark. A batch whose sync fails
//! never gets its serial: the store is marked [`Halted`], every later read
//! and commit through it fails with the first error, and what is on disk is
//! the state up to the last serial anyone was told is durable.
//!
//! Committed changes wait in memory until they are applied to sled's
//! trees: when no request has come for [`FOLD_AFTER`] (which also
//! checkpoints, flushing sled's files and emptying the log, once the log
//! passes [`wal::IDLE_CHECKPOINT_BYTES`]), before a snapshot, and when
//! someone reads ([`Request::Fold`]). So the instant a step's intent must
//! be on disk costs an append and a sync, and sled's work is done while the
//! steps run. A store closing with a short log leaves it to the next open
//! (see `wal`); a longer one is applied and checkpointed first.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::commit::{Change, Reply, Request};
use crate::db::Trees;
use crate::error::StateError;
use crate::snapshot;
use crate::wal::{self, Wal};
use crate::watermark::Watermark;

/// How long the writer waits without a request before it applies the
/// committed changes to sled's trees.
pub(crate) const FOLD_AFTER: Duration = Duration::from_millis(20);

#[cfg(test)]
thread_local! {
    /// What a writer spawned from this thread takes for [`FOLD_AFTER`]: a
    /// test that must not see the writer go idle makes it long.
    static TEST_FOLD_AFTER: std::cell::Cell<Duration> = const { std::cell::Cell::new(FOLD_AFTER) };
    /// A fixed hold of each batch for writers spawned from this thread
    /// (`None`: as [`GATHER_MAX`] says).
    static TEST_GATHER: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

/// The longest the writer holds a batch for more changes before writing
/// it. The steps a result lets start record their intents meanwhile, so the
/// results of a dependency level and the intents they let start go out in
/// one batch: one sync (with an S3 state, one round trip) a level instead
/// of two or three. The hold is a quarter of what the last batch took to
/// write (so it never costs more than a quarter of a write it may save:
/// about 25 ms under S3's 100 ms, well under a millisecond on a local
/// disk), at most this, and ends once no change came for a fifth of it.
const GATHER_MAX: Duration = Duration::from_millis(25);

/// How long a writer spawned now holds a batch: `None`, as
/// [`GATHER_MAX`] says; a test may fix it.
fn gather() -> Option<Duration> {
    #[cfg(test)]
    return TEST_GATHER.with(std::cell::Cell::get);
    #[cfg(not(test))]
    None
}

/// How long a writer spawned now waits before it counts as idle.
fn fold_after() -> Duration {
    #[cfg(test)]
    return TEST_FOLD_AFTER.with(std::cell::Cell::get);
    #[cfg(not(test))]
    FOLD_AFTER
}

/// Where a committed batch goes next, before anyone hears it is durable:
/// the S3 backend's copy of the state. The writer calls it after the local
/// sync; if it fails, the batch stays in the local log and everyone
/// waiting on it gets the error.
pub(crate) trait Publish: Send {
    /// Makes the batch with serial `serial` and these changes durable there.
    fn publish(&mut self, serial: u64, changes: &[Change]) -> Result<(), StateError>;
}

/// Set once, when a batch could not be made durable (or applied): from then
/// on the open store answers every read and commit with that failure
/// instead of showing records that are not on disk.
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

/// Starts the writer for `trees`, appending to `log`; it stops on
/// [`Request::Shutdown`] or when every sender is gone, after a checkpoint
/// if the log is longer than [`wal::KEPT_AT_CLOSE_BYTES`].
pub(crate) fn spawn(
    root: PathBuf,
    trees: Trees,
    log: Wal,
    serial: Arc<AtomicU64>,
    watermark: Watermark,
    publish: Option<Box<dyn Publish>>,
    halted: Halted,
) -> Result<(mpsc::Sender<Request>, JoinHandle<()>), StateError> {
    let (tx, rx) = mpsc::channel();
    let writer = Writer {
        fold_after: fold_after(),
        gather: gather(),
        last_write: Duration::ZERO,
        root,
        trees,
        log,
        unapplied: Vec::new(),
        unapplied_serial: 0,
        committed_ms: 0,
        serial,
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
    /// How long without a request counts as idle ([`FOLD_AFTER`]).
    fold_after: Duration,
    /// A fixed hold of each batch (tests), else see [`GATHER_MAX`].
    gather: Option<Duration>,
    /// How long the last batch took to sync (and publish).
    last_write: Duration,
    root: PathBuf,
    trees: Trees,
    log: Wal,
    /// Changes on disk in the log, not yet applied to the trees, in order.
    unapplied: Vec<Change>,
    /// The serial of the last batch in `unapplied`.
    unapplied_serial: u64,
    /// When that batch was committed (ms since the Unix epoch).
    committed_ms: u64,
    serial: Arc<AtomicU64>,
    watermark: Watermark,
    rx: mpsc::Receiver<Request>,
    publish: Option<Box<dyn Publish>>,
    halted: Halted,
}

impl Writer {
    fn run(mut self) {
        loop {
            // Waits without end only when idling has nothing left to do.
            let idle_work = self.halted.check().is_ok()
                && (!self.unapplied.is_empty() || self.log.len() > wal::IDLE_CHECKPOINT_BYTES);
            let first = if idle_work {
                self.rx.recv_timeout(self.fold_after)
            } else {
                self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            };
            let first = match first {
                Ok(request) => request,
                Err(RecvTimeoutError::Timeout) => {
                    self.fold_and_maybe_checkpoint(wal::IDLE_CHECKPOINT_BYTES);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut group = vec![first];
            group.extend(self.rx.try_iter());
            let (hold, quiet) = match self.gather {
                Some(fixed) => (fixed, fixed),
                None => {
                    let hold = (self.last_write / 4).min(GATHER_MAX);
                    (hold, hold / 5)
                }
            };
            let until = Instant::now() + hold;
            loop {
                let left = until.saturating_duration_since(Instant::now()).min(quiet);
                if left.is_zero() {
                    break;
                }
                let Ok(more) = self.rx.recv_timeout(left) else {
                    break;
                };
                group.push(more);
                group.extend(self.rx.try_iter());
            }
            if self.serve(group) {
                break;
            }
            // A writer never idle for FOLD_AFTER still checkpoints.
            if self.log.len() > wal::CHECKPOINT_BYTES {
                self.fold_and_maybe_checkpoint(wal::CHECKPOINT_BYTES);
            }
        }
        // After a failed write sled's flush can wait forever (see the
        // store's drop, which keeps sled from flushing on drop then). A
        // short log stays for the next open, which replays it and
        // checkpoints anyway: closing then neither applies nor syncs.
        if self.halted.check().is_ok() && self.log.len() > wal::KEPT_AT_CLOSE_BYTES {
            let _ = self.fold().and_then(|()| self.checkpoint());
        }
    }

    /// Serves one group; true when asked to stop.
    fn serve(&mut self, group: Vec<Request>) -> bool {
        let mut changes = Vec::new();
        let mut waiters = Vec::new();
        let mut readers = Vec::new();
        let mut stop = false;
        for request in group {
            match request {
                Request::Commit { changes: c, reply } => {
                    changes.extend(c);
                    waiters.push(reply);
                }
                Request::Snapshot { reply } => readers.push(Reader::Snapshot(reply)),
                Request::Fold { reply } => readers.push(Reader::Fold(reply)),
                Request::Shutdown => stop = true,
            }
        }
        if !waiters.is_empty() {
            let outcome = if let Err(err) = self.halted.check() {
                Err(err)
            } else if changes.is_empty() {
                Ok(self.serial.load(Ordering::SeqCst))
            } else {
                let began = Instant::now();
                let written = self
                    .commit(&changes)
                    .and_then(|serial| match &mut self.publish {
                        Some(publish) => publish.publish(serial, &changes).map(|()| serial),
                        None => Ok(serial),
                    });
                self.last_write = began.elapsed();
                written
            };
            if self.halted.check().is_ok() {
                // On disk locally, whatever the S3 copy said.
                self.unapplied.extend(changes);
            }
            answer(waiters, outcome);
        }
        if !readers.is_empty() {
            let folded = self.halted.check().and_then(|()| self.fold());
            for reader in readers {
                match reader {
                    Reader::Snapshot(reply) => reply.send(
                        folded
                            .as_ref()
                            .map_err(StateError::duplicate)
                            .and_then(|_| snapshot::read(&self.root, &self.trees)),
                    ),
                    Reader::Fold(reply) => reply.send(
                        folded
                            .as_ref()
                            .map(|_| self.serial.load(Ordering::SeqCst))
                            .map_err(StateError::duplicate),
                    ),
                }
            }
        }
        stop
    }

    /// Appends `changes` with the next serial to the log and syncs it, and
    /// only then moves the serial on.
    fn commit(&mut self, changes: &[Change]) -> Result<u64, StateError> {
        let next = self.serial.load(Ordering::SeqCst) + 1;
        if let Err(err) = self.log.append(next, changes) {
            // The frame may be on disk in part, or whole but unsynced:
            // nobody may read it or build on it.
            self.halted.halt(&err);
            return Err(err);
        }
        self.unapplied_serial = next;
        self.committed_ms = crate::records::now_ms();
        self.serial.store(next, Ordering::SeqCst);
        // Only a check; failing to write it does not undo the commit.
        let _ = self.watermark.record(next);
        Ok(next)
    }

    /// Applies the committed changes to sled's trees (in memory).
    fn fold(&mut self) -> Result<(), StateError> {
        if self.unapplied.is_empty() {
            return Ok(());
        }
        let changes = std::mem::take(&mut self.unapplied);
        // Beside the reads a running apply serves (see `live`).
        self.trees.changing(self.committed_ms, || {
            let applied = wal::apply(
                &self.root,
                &self.trees,
                self.unapplied_serial,
                changes
                    .iter()
                    .map(|c| (c.key.as_bytes(), c.value.as_deref())),
            );
            if let Err(err) = &applied {
                // The log has them; the trees may have some: reading the
                // trees now would show a state that never was. Halted
                // before the change counts as done, so that a read that
                // sees it done sees the halt too (`live::answer`).
                self.halted.halt(err);
            }
            applied
        })
    }

    /// Flushes sled's files and empties the log.
    fn checkpoint(&mut self) -> Result<(), StateError> {
        let done = wal::checkpoint(&self.root, &self.trees).and_then(|()| self.log.clear());
        if let Err(err) = &done {
            self.halted.halt(err);
        }
        done
    }

    /// Applies what is committed, and checkpoints once the log has grown
    /// past `limit` bytes.
    fn fold_and_maybe_checkpoint(&mut self, limit: u64) {
        if self.halted.check().is_err() {
            self.unapplied.clear();
            return;
        }
        if self.fold().is_ok() && self.log.len() > limit {
            let _ = self.checkpoint();
        }
    }
}

/// A request that reads the trees: they are brought up to date first.
enum Reader {
    Snapshot(Reply<snapshot::Snapshot>),
    Fold(Reply<u64>),
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
mod tests;
