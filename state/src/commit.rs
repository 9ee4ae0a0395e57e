//! The write side of the store: [`Committer`] hands changes to the writer
//! thread and waits until they are on disk.

use std::path::Path;
use std::sync::{Arc, mpsc};

use tokio::sync::{oneshot, watch};

use crate::error::StateError;
use crate::records::StepRecord;
use crate::snapshot::Snapshot;

/// One change to the recorded steps.
// A put is by far the common case; boxing it would cost an allocation per
// change for no gain in a short-lived Vec.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Mutation {
    /// Records (or replaces) the record of `record.name`.
    Put(StepRecord),
    /// Forgets the step with this name (nothing happens if it is unknown).
    Remove(String),
}

/// A change in the form the writer applies: key and JSON bytes (or removal).
pub(crate) struct Change {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// Whether changes queued by [`Committer::submit_record`] are on disk:
/// `None` until the writer answers, then the serial of their batch or why
/// not. Any number of tasks can wait on it (clone the receiver), and no task
/// runs to deliver it: the writer sets it.
pub type Durable = watch::Receiver<Option<Result<u64, Arc<StateError>>>>;

/// How the writer answers one request.
pub(crate) enum Reply<T> {
    /// To an `async` caller.
    Async(oneshot::Sender<Result<T, StateError>>),
    /// To a thread that blocks.
    Blocking(mpsc::SyncSender<Result<T, StateError>>),
    /// To whoever watches (see [`Durable`]).
    Watch(watch::Sender<Option<Result<T, Arc<StateError>>>>),
}

impl<T> Reply<T> {
    /// Delivers `result`; a caller that stopped waiting is ignored.
    pub(crate) fn send(self, result: Result<T, StateError>) {
        match self {
            Reply::Async(tx) => {
                let _ = tx.send(result);
            }
            Reply::Blocking(tx) => {
                let _ = tx.send(result);
            }
            Reply::Watch(tx) => {
                let _ = tx.send(Some(result.map_err(Arc::new)));
            }
        }
    }
}

/// What the writer thread is asked to do.
pub(crate) enum Request {
    /// Apply `changes` atomically and answer with the serial of their batch.
    Commit {
        changes: Vec<Change>,
        reply: Reply<u64>,
    },
    /// Read a consistent copy of everything, between two batches.
    Snapshot { reply: Reply<Snapshot> },
    /// Bring sled's trees up to date with every committed batch, so that a
    /// read of them sees it; answers with the serial they are at.
    Fold { reply: Reply<u64> },
    /// Stop, after applying and checkpointing a log too long to leave for
    /// the next open (sent by the store's drop).
    Shutdown,
}

/// Sends a request and blocks until the writer answers.
pub(crate) fn call_blocking<T>(
    tx: &mpsc::Sender<Request>,
    request: impl FnOnce(Reply<T>) -> Request,
) -> Result<T, StateError> {
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    tx.send(request(Reply::Blocking(reply_tx)))
        .map_err(|_| StateError::Closed)?;
    reply_rx.recv().map_err(|_| StateError::Closed)?
}

/// A handle that records changes durably. Cheap to clone and share between
/// tasks and threads; concurrent changes are written together, with one
/// flush per group (group commit).
#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<Request>,
    /// Why every change is refused (a state opened read-only).
    refusal: Option<Arc<StateError>>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer").finish_non_exhaustive()
    }
}

impl Committer {
    pub(crate) fn new(tx: mpsc::Sender<Request>) -> Self {
        Committer { tx, refusal: None }
    }

    /// A committer that refuses every change with [`StateError::ReadOnly`]
    /// (the state at `root`, opened read-only by `command`).
    pub(crate) fn refusing(root: &Path, command: &str) -> Self {
        let (tx, _) = mpsc::channel();
        Committer {
            tx,
            refusal: Some(Arc::new(StateError::ReadOnly {
                path: root.to_path_buf(),
                command: command.to_string(),
            })),
        }
    }

    fn refused(&self) -> Result<(), StateError> {
        match &self.refusal {
            Some(err) => Err(err.duplicate()),
            None => Ok(()),
        }
    }

    /// Records `rec`; returns once it is flushed to disk.
    pub async fn put(&self, rec: StepRecord) -> Result<(), StateError> {
        self.commit(vec![Mutation::Put(rec)]).await.map(|_| ())
    }

    /// Forgets the step `name`; returns once that is flushed to disk.
    pub async fn remove(&self, name: &str) -> Result<(), StateError> {
        self.commit(vec![Mutation::Remove(name.to_string())])
            .await
            .map(|_| ())
    }

    /// Applies `muts` atomically, in order, and returns the serial of the
    /// batch that carried them once it is flushed to disk. Dropping the
    /// future does not withdraw the changes.
    pub async fn commit(&self, muts: Vec<Mutation>) -> Result<u64, StateError> {
        self.submit(muts).durable().await
    }

    /// Queues `muts` at once and returns a handle that resolves when they
    /// are on disk. Changes queued later are never written before these, so
    /// once a later change is durable, these are too (or failed).
    pub fn submit(&self, muts: Vec<Mutation>) -> Pending {
        if let Err(e) = self.refused() {
            return Pending(Err(e));
        }
        match encode(muts) {
            Ok(changes) => self.send(changes),
            Err(e) => Pending(Err(e)),
        }
    }

    /// Queues one put of `rec`, encoded from the reference (the caller keeps
    /// its record), and returns the flag the writer sets once it is on disk
    /// (or failed). As with [`Committer::submit`], changes queued later are
    /// never written before this one.
    pub fn submit_record(&self, rec: &StepRecord) -> Durable {
        let change = match self.refused().and_then(|()| encode_record(rec)) {
            Ok(change) => change,
            Err(e) => return watch::channel(Some(Err(Arc::new(e)))).1,
        };
        let (tx, rx) = watch::channel(None);
        let request = Request::Commit {
            changes: vec![change],
            reply: Reply::Watch(tx),
        };
        if self.tx.send(request).is_err() {
            return watch::channel(Some(Err(Arc::new(StateError::Closed)))).1;
        }
        rx
    }

    /// Records `rec` (encoded from the reference); returns once it is
    /// flushed to disk.
    pub async fn put_record(&self, rec: &StepRecord) -> Result<(), StateError> {
        self.refused()?;
        self.send(vec![encode_record(rec)?])
            .durable()
            .await
            .map(|_| ())
    }

    /// Hands encoded `changes` to the writer.
    fn send(&self, changes: Vec<Change>) -> Pending {
        let (reply_tx, reply_rx) = oneshot::channel();
        match self.tx.send(Request::Commit {
            changes,
            reply: Reply::Async(reply_tx),
        }) {
            Ok(()) => Pending(Ok(reply_rx)),
            Err(_) => Pending(Err(StateError::Closed)),
        }
    }

    /// Like [`Committer::commit`], blocking the calling thread instead
    /// (for code outside an async runtime).
    pub fn commit_blocking(&self, muts: Vec<Mutation>) -> Result<u64, StateError> {
        self.refused()?;
        let changes = encode(muts)?;
        call_blocking(&self.tx, |reply| Request::Commit { changes, reply })
    }
}

/// Changes queued by [`Committer::submit`], not yet known to be on disk.
pub struct Pending(Result<oneshot::Receiver<Result<u64, StateError>>, StateError>);

impl Pending {
    /// Waits until the changes are flushed; returns the serial of their batch.
    pub async fn durable(self) -> Result<u64, StateError> {
        match self.0 {
            Ok(rx) => rx.await.map_err(|_| StateError::Closed)?,
            Err(e) => Err(e),
        }
    }
}

/// Serializes on the caller's thread, so that the writer only writes.
fn encode(muts: Vec<Mutation>) -> Result<Vec<Change>, StateError> {
    muts.into_iter()
        .map(|m| match m {
            Mutation::Put(rec) => encode_record(&rec),
            Mutation::Remove(name) => Ok(Change {
                key: name,
                value: None,
            }),
        })
        .collect()
}

/// The put of `rec`: its name and its JSON bytes.
fn encode_record(rec: &StepRecord) -> Result<Change, StateError> {
    let value = serde_json::to_vec(rec).map_err(|e| {
        StateError::Sled(format!(
            "the record of step `{}` cannot be encoded: {e}",
            rec.name
        ))
    })?;
    Ok(Change {
        key: rec.name.clone(),
        value: Some(value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_keeps_order_and_keys() {
        let changes = encode(vec![
            Mutation::Put(StepRecord::new("vpc", "exec", 1)),
            Mutation::Remove("old".into()),
        ])
        .unwrap();
        assert_eq!(changes[0].key, "vpc");
        let back: StepRecord = serde_json::from_slice(changes[0].value.as_ref().unwrap()).unwrap();
        assert_eq!(back, StepRecord::new("vpc", "exec", 1));
        assert_eq!(changes[1].key, "old");
        assert!(changes[1].value.is_none());
    }

    #[test]
    fn closed_writer_reports_closed() {
        let (tx, rx) = mpsc::channel();
        drop(rx);
        let c = Committer::new(tx);
        assert!(matches!(c.commit_blocking(vec![]), Err(StateError::Closed)));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let err = rt
            .block_on(c.put(StepRecord::new("a", "exec", 0)))
            .unwrap_err();
        assert!(matches!(err, StateError::Closed));
        let mut flag = c.submit_record(&StepRecord::new("a", "exec", 0));
        let settled = rt.block_on(flag.wait_for(Option::is_some)).unwrap().clone();
        let err = settled.expect("settled").unwrap_err();
        assert!(matches!(err.as_ref(), StateError::Closed));
        let err = rt
            .block_on(c.put_record(&StepRecord::new("a", "exec", 0)))
            .unwrap_err();
        assert!(matches!(err, StateError::Closed));
    }

    #[test]
    fn a_refusing_committer_refuses_a_record_by_reference() {
        let c = Committer::refusing(Path::new("/state"), "flow plan");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let rec = StepRecord::new("a", "exec", 0);
        let flag = c.submit_record(&rec).borrow().clone();
        assert!(matches!(flag, Some(Err(e)) if matches!(e.as_ref(), StateError::ReadOnly { .. })));
        let err = rt.block_on(c.put_record(&rec)).unwrap_err();
        assert!(matches!(err, StateError::ReadOnly { .. }), "{err:?}");
    }

    #[test]
    fn committer_is_send_sync_clone() {
        fn ok<T: Send + Sync + Clone>() {}
        ok::<Committer>();
    }
}
