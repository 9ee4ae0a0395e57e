//! The S3 side of every commit: once the batch is durable locally (its
//! frame in the write-ahead log, synced), the writer thread
//! writes the whole state as one object with `If-Match` on the ETag it last
//! wrote, so a writer that was not the last to write fails instead of
//! overwriting. Nobody hears a change is durable before S3 has it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::client::{Expect, Failure, Remote, backoff};
use crate::commit::Change;
use crate::db::Trees;
use crate::error::StateError;
use crate::mark::{self, Mark};
use crate::records::now_secs;
use crate::snapshot::FORMAT;
use crate::writer::Publish;

/// Counts of what the publisher did, shared with whoever wants to know.
#[derive(Debug, Default)]
pub struct PublishStats {
    /// PutObject calls made for the state object.
    pub puts: AtomicU64,
    /// Batches published.
    pub batches: AtomicU64,
}

/// The state object's content: the backup format, `records` as stored.
pub(crate) fn document(
    schema_version: u32,
    salt_hex: &str,
    serial: u64,
    records: &BTreeMap<String, Vec<u8>>,
) -> Vec<u8> {
    let size: usize = records.values().map(|v| v.len() + 1).sum();
    let mut body = Vec::with_capacity(size + 256);
    body.extend_from_slice(
        format!(
            "{{\"format\":\"{FORMAT}\",\"schema_version\":{schema_version},\"serial\":{serial},\"salt\":\"{salt_hex}\",\"created_at\":{},\"steps\":[",
            now_secs()
        )
        .as_bytes(),
    );
    for (i, value) in records.values().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(value);
    }
    body.extend_from_slice(b"]}");
    body
}

/// Writes each committed batch to S3.
pub(crate) struct S3Publisher {
    pub remote: Remote,
    pub root: PathBuf,
    pub trees: Trees,
    /// Every record as stored, by name.
    pub records: BTreeMap<String, Vec<u8>>,
    pub schema_version: u32,
    pub salt_hex: String,
    /// The ETag S3 must still have; `None`: the object must not exist.
    pub etag: Option<String>,
    /// Set when the lock was broken or taken over.
    pub lost: Option<Arc<AtomicBool>>,
    /// How long S3 may stay unreachable before the run stops.
    pub retry_for: Duration,
    pub stats: Arc<PublishStats>,
}

impl S3Publisher {
    /// The state object's content at `serial`.
    pub(crate) fn document(&self, serial: u64) -> Vec<u8> {
        document(self.schema_version, &self.salt_hex, serial, &self.records)
    }

    /// Writes the whole state at `serial` and remembers the new ETag.
    pub(crate) fn write_all(&mut self, serial: u64) -> Result<(), StateError> {
        if self.lost.as_ref().is_some_and(|l| l.load(Ordering::SeqCst)) {
            return Err(StateError::Remote {
                message: format!(
                    "the lock of {} was broken while this run held it (by `flow state unlock`, or taken over after its lease ran out); this run stops, and its changes that S3 does not have stay in the local journal at {}",
                    self.remote.location,
                    self.root.display()
                ),
                help: Some(
                    "find out who else runs flow on this state, then run the command again"
                        .to_string(),
                ),
            });
        }
        let body = self.document(serial);
        let key = self.remote.location.key.clone();
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let expect = match &self.etag {
                Some(etag) => Expect::Etag(etag.clone()),
                None => Expect::Absent,
            };
            self.stats.puts.fetch_add(1, Ordering::Relaxed);
            let result = self
                .remote
                .block_on(self.remote.put(&key, body.clone(), Some(&expect)));
            let failure = match result {
                Ok(etag) => return self.written(serial, etag),
                Err(f) => f,
            };
            match failure {
                Failure::Precondition => {
                    // An earlier attempt (ours, or the SDK's own retry) may
                    // have landed with its answer lost: then the object is
                    // exactly this body, serial included.
                    if let Ok(now) = self.remote.block_on(self.remote.get(&key, None))
                        && now.body == body
                    {
                        return self.written(serial, now.etag);
                    }
                    return Err(self.conflict());
                }
                Failure::Transient(why) => {
                    if started.elapsed() >= self.retry_for {
                        return Err(StateError::Remote {
                            message: format!(
                                "{why}; after {} s of retries this run stops starting steps. The changes S3 does not have (serial {serial}) are kept in the local journal at {}",
                                started.elapsed().as_secs(),
                                self.root.display()
                            ),
                            help: Some(format!(
                                "when {} can be reached again, run the command again: the journal is written to S3 first",
                                self.remote.location
                            )),
                        });
                    }
                    std::thread::sleep(backoff(attempt));
                    attempt += 1;
                }
                other => return Err(super::remote_error(&self.remote.location, other)),
            }
        }
    }

    fn written(&mut self, serial: u64, etag: String) -> Result<(), StateError> {
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.etag = Some(etag.clone());
        mark::write(
            &self.root,
            &self.trees,
            &Mark {
                url: self.remote.location.to_string(),
                etag: Some(etag),
                pushed_serial: serial,
            },
        )?;
        // Durable before anyone hears of it: a copy that forgot S3 has its
        // last batch would take that batch for one S3 never saw.
        self.trees
            .db
            .flush()
            .map_err(|e| StateError::from_sled(&self.root, e))?;
        Ok(())
    }

    fn conflict(&self) -> StateError {
        StateError::Remote {
            message: format!(
                "state {} was changed by another writer since this run last read or wrote it; this run stops and leaves the object as it is. Its changes that S3 does not have stay in the local journal at {}",
                self.remote.location,
                self.root.display()
            ),
            help: Some(
                "make sure no one else runs flow on this state (was the lock broken?), then run the command again: flow writes the journal to S3 if no step differs, or names the steps that do"
                    .to_string(),
            ),
        }
    }
}

impl Publish for S3Publisher {
    fn publish(&mut self, serial: u64, changes: &[Change]) -> Result<(), StateError> {
        for change in changes {
            match &change.value {
                Some(value) => {
                    self.records.insert(change.key.clone(), value.clone());
                }
                None => {
                    self.records.remove(&change.key);
                }
            }
        }
        self.write_all(serial)
    }
}
