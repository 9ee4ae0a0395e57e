//! The S3 side of every commit. Once the batch is durable locally (its
//! frame in the write-ahead log, synced), the writer thread writes it to S3
//! as one delta object, `KEY.log/<seq>.json`, with `If-None-Match: *`, so a
//! writer that was not the last to write finds the place taken and fails
//! instead of writing beside it. Nobody hears a change is durable before S3
//! has it. Each write carries what the batch changed, not the whole state;
//! once the deltas after the snapshot weigh as much as it (or number
//! [`MAX_DELTAS`]), the snapshot `KEY` is written again with them folded in
//! (`If-Match` on its ETag), and deltas a snapshot covers are deleted an
//! hour later ([`KEEP_COVERED`]; see `docs/state.md`, "Writes: deltas and
//! snapshots").

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{Expect, Failure, Remote, backoff};
use super::log::{self, SNAPSHOT_FORMAT};
use super::sync::LogState;
use crate::commit::Change;
use crate::db::Trees;
use crate::error::StateError;
use crate::mark::{self, Mark};
use crate::records::now_secs;
use crate::writer::Publish;

/// Deltas after the snapshot that make the next write fold them in, at most.
pub(crate) const MAX_DELTAS: u64 = 500;
/// The deltas' bytes that make a compaction, at least (below this the
/// snapshot is written again only after [`MAX_DELTAS`]).
const MIN_COMPACT_BYTES: u64 = 256 * 1024;
/// How long a delta the snapshot covers is kept: a writer whose lock was
/// taken from it finds its next place in the log taken for this long.
pub(crate) const KEEP_COVERED: Duration = Duration::from_secs(3600);

/// Counts of what the publisher did, shared with whoever wants to know.
#[derive(Debug, Default)]
pub struct PublishStats {
    /// PutObject calls made for the state (deltas and snapshots).
    pub puts: AtomicU64,
    /// Batches published.
    pub batches: AtomicU64,
    /// Bytes sent in those calls.
    pub bytes: AtomicU64,
    /// Snapshots written with the deltas folded in.
    pub compactions: AtomicU64,
}

/// The snapshot object's content: the backup format, `records` as stored,
/// and how far into the log it reaches (`log_seq`, and the ETag of that
/// delta when one was written).
pub(crate) fn document(
    schema_version: u32,
    salt_hex: &str,
    serial: u64,
    log_seq: u64,
    log_etag: Option<&str>,
    records: &BTreeMap<String, Vec<u8>>,
) -> Vec<u8> {
    let size: usize = records.values().map(|v| v.len() + 1).sum();
    let mut body = Vec::with_capacity(size + 320);
    let log_etag = match log_etag {
        Some(etag) => format!(
            ",\"log_etag\":{}",
            serde_json::to_string(etag).expect("a string encodes")
        ),
        None => String::new(),
    };
    body.extend_from_slice(
        format!(
            "{{\"format\":\"{SNAPSHOT_FORMAT}\",\"schema_version\":{schema_version},\"serial\":{serial},\"salt\":\"{salt_hex}\",\"created_at\":{},\"log_seq\":{log_seq}{log_etag},\"steps\":[",
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
    /// Every record as S3 holds it, by name.
    pub records: BTreeMap<String, Vec<u8>>,
    pub schema_version: u32,
    pub salt_hex: String,
    /// The ETag of S3's newest object (the next delta is made on it).
    pub etag: Option<String>,
    /// Where the log stands; `None`: S3 holds no state yet.
    pub log: Option<LogState>,
    /// Set when the lock was broken or taken over.
    pub lost: Option<Arc<AtomicBool>>,
    /// How long S3 may stay unreachable before the run stops.
    pub retry_for: Duration,
    pub stats: Arc<PublishStats>,
    /// The serial S3 holds (the last batch written).
    pub serial: u64,
    /// Deltas after which the snapshot is written again, at most
    /// ([`max_deltas`]).
    pub max_deltas: u64,
    /// The snapshot being written, if one is.
    pub folding: Option<Folding>,
}

/// [`MAX_DELTAS`], or `FLOW_STATE_MAX_DELTAS` when it holds a number of at
/// least 1 (fewer deltas between snapshots: smaller reads, more bytes
/// written).
pub(crate) fn max_deltas() -> u64 {
    std::env::var("FLOW_STATE_MAX_DELTAS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(MAX_DELTAS)
}

impl S3Publisher {
    /// Writes `pending`, the local records S3 does not have, before
    /// anything else: the first snapshot when S3 holds no state, else one
    /// delta of what differs.
    pub(crate) fn write_pending(
        &mut self,
        serial: u64,
        pending: BTreeMap<String, Vec<u8>>,
    ) -> Result<(), StateError> {
        let mut changes: Vec<Change> = pending
            .iter()
            .filter(|(k, v)| self.records.get(*k) != Some(*v))
            .map(|(k, v)| Change {
                key: k.clone(),
                value: Some(v.clone()),
            })
            .collect();
        changes.extend(
            self.records
                .keys()
                .filter(|k| !pending.contains_key(*k))
                .map(|k| Change {
                    key: k.clone(),
                    value: None,
                }),
        );
        if changes.is_empty() {
            let etag = self.etag.clone().unwrap_or_default();
            return self.written(serial, etag);
        }
        self.publish(serial, &changes)
    }

    fn check_lock(&self) -> Result<(), StateError> {
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
        Ok(())
    }

    /// Writes `body` to `key` if `expect` holds, retrying while S3 cannot
    /// be reached (for `retry_for`); answers the new ETag.
    fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        expect: Expect,
        serial: u64,
    ) -> Result<String, StateError> {
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            self.stats.puts.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
            let result = self
                .remote
                .block_on(self.remote.put(key, body.clone(), Some(&expect)));
            let failure = match result {
                Ok(etag) => return Ok(etag),
                Err(f) => f,
            };
            match failure {
                Failure::Precondition => {
                    // An earlier attempt (ours, or the SDK's own retry) may
                    // have landed with its answer lost: then the object is
                    // exactly this body.
                    if let Ok(now) = self.remote.block_on(self.remote.get(key, None))
                        && now.body == body
                    {
                        return Ok(now.etag);
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

    /// The first write of a state: the whole of it as the snapshot, which
    /// must not exist yet.
    fn write_first(&mut self, serial: u64) -> Result<(), StateError> {
        let body = document(
            self.schema_version,
            &self.salt_hex,
            serial,
            0,
            None,
            &self.records,
        );
        let size = body.len() as u64;
        let key = self.remote.location.key.clone();
        let etag = self.put(&key, body, Expect::Absent, serial)?;
        self.log = Some(LogState {
            snapshot_etag: etag.clone(),
            snapshot_bytes: size,
            ..LogState::default()
        });
        self.written(serial, etag)
    }

    /// Writes `changes` as the next delta.
    fn append(&mut self, serial: u64, changes: &[Change]) -> Result<(), StateError> {
        let log = self.log.clone().expect("a state S3 holds");
        let seq = log.seq + 1;
        let after = self.etag.clone().unwrap_or_default();
        let body = log::encode(seq, serial, &after, changes);
        let size = body.len() as u64;
        let key = log::delta_key(&self.remote.location, seq);
        let etag = self.put(&key, body, Expect::Absent, serial)?;
        let log = self.log.as_mut().expect("a state S3 holds");
        log.seq = seq;
        log.log_bytes += size;
        self.written(serial, etag)
    }

    /// Whether deltas follow the snapshot (once the snapshot being
    /// written, if any, is in).
    pub(crate) fn has_deltas(&mut self) -> bool {
        let _ = self.settle(true);
        self.log.as_ref().is_some_and(|l| l.seq > l.snapshot_seq)
    }

    /// Folds the deltas into a new snapshot now (a version of `KEY` that
    /// holds the whole state, for a versioned bucket's backups); answers
    /// whether it was written. Errors only when S3 holds another snapshot.
    pub(crate) fn compact_now(&mut self) -> Result<bool, StateError> {
        self.check_lock()?;
        self.compact(true, self.serial)
    }

    /// Folds the deltas into a new snapshot when they weigh as much as it
    /// (or are [`MAX_DELTAS`]), or at once when `now`. The snapshot is
    /// written beside the next deltas (they are other objects), one at a
    /// time; its outcome is taken at the next batch, or waited for when
    /// `now`. A snapshot S3 cannot take now is left for a later batch: the
    /// deltas hold everything meanwhile. Answers whether one was written.
    fn compact(&mut self, now: bool, serial: u64) -> Result<bool, StateError> {
        let mut written = self.settle(now)?;
        if self.folding.is_some() {
            return Ok(written);
        }
        let Some(log) = self.log.clone() else {
            return Ok(written);
        };
        let deltas = log.seq - log.snapshot_seq;
        let due = deltas >= self.max_deltas
            || (deltas > 0 && log.log_bytes >= log.snapshot_bytes.max(MIN_COMPACT_BYTES));
        if deltas == 0 || !(due || now) {
            return Ok(written);
        }
        let body = document(
            self.schema_version,
            &self.salt_hex,
            serial,
            log.seq,
            self.etag.as_deref(),
            &self.records,
        );
        let size = body.len() as u64;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes.fetch_add(size, Ordering::Relaxed);
        let remote = self.remote.clone();
        let expect = Expect::Etag(log.snapshot_etag.clone());
        let done = std::thread::Builder::new()
            .name("flow-state-snapshot".to_string())
            .spawn(move || {
                let key = remote.location.key.clone();
                remote.block_on(remote.put(&key, body, Some(&expect)))
            })
            .map_err(|e| StateError::Sled(format!("the snapshot thread cannot start: {e}")))?;
        self.folding = Some(Folding {
            seq: log.seq,
            size,
            log_bytes: log.log_bytes,
            done,
        });
        if now {
            written = self.settle(true)?;
        }
        Ok(written)
    }

    /// Waits for the snapshot being written, if one is (a run's end).
    pub(crate) fn finish(&mut self) {
        let _ = self.settle(true);
    }

    /// Takes the outcome of the snapshot being written, if it has one (or
    /// waits for it when `wait`); answers whether it was written.
    fn settle(&mut self, wait: bool) -> Result<bool, StateError> {
        let finished = self
            .folding
            .as_ref()
            .is_some_and(|f| wait || f.done.is_finished());
        if !finished {
            return Ok(false);
        }
        let folding = self.folding.take().expect("a snapshot being written");
        let outcome = folding.done.join().unwrap_or_else(|_| {
            Err(Failure::Transient(
                "the snapshot thread panicked".to_string(),
            ))
        });
        match outcome {
            Ok(etag) => {
                self.stats.compactions.fetch_add(1, Ordering::Relaxed);
                if let Some(log) = self.log.as_mut() {
                    log.snapshot_etag = etag;
                    log.snapshot_bytes = folding.size;
                    log.snapshot_seq = folding.seq;
                    log.log_bytes = log.log_bytes.saturating_sub(folding.log_bytes);
                }
                let (remote, covered) = (self.remote.clone(), folding.seq);
                let _ = std::thread::Builder::new()
                    .name("flow-state-prune".to_string())
                    .spawn(move || prune(&remote, covered));
                Ok(true)
            }
            Err(Failure::Precondition) => Err(self.conflict()),
            Err(_) => Ok(false),
        }
    }

    fn written(&mut self, serial: u64, etag: String) -> Result<(), StateError> {
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.serial = serial;
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
        self.check_lock()?;
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
        if self.log.is_none() {
            return self.write_first(serial);
        }
        self.append(serial, changes)?;
        self.compact(false, serial).map(|_| ())
    }
}

/// Deletes the deltas up to `covered` written more than [`KEEP_COVERED`]
/// ago; what cannot be deleted now is left for later.
fn prune(remote: &Remote, covered: u64) {
    let prefix = log::prefix(&remote.location);
    let Ok(old) = remote.block_on(remote.list(&prefix)) else {
        return;
    };
    let before = now_secs().saturating_sub(KEEP_COVERED.as_secs());
    for obj in old {
        let covered = log::seq_of(&prefix, &obj.id).is_some_and(|seq| seq <= covered);
        if covered && obj.written_at < before {
            let _ = remote.block_on(remote.delete(&obj.id, None));
        }
    }
}

/// A snapshot being written beside the deltas.
pub(crate) struct Folding {
    /// The log position it reaches.
    seq: u64,
    /// Its size in bytes.
    size: u64,
    /// The deltas' bytes it folds in.
    log_bytes: u64,
    done: std::thread::JoinHandle<Result<String, Failure>>,
}

/// The publisher, shared between the writer thread (each batch) and the
/// backend (a versioned bucket's backup folds the deltas in), one at a time.
#[derive(Clone)]
pub(crate) struct Shared(pub Arc<Mutex<S3Publisher>>);

impl Shared {
    /// Runs `f` on the publisher.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut S3Publisher) -> T) -> T {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}

impl Publish for Shared {
    fn publish(&mut self, serial: u64, changes: &[Change]) -> Result<(), StateError> {
        self.with(|p| p.publish(serial, changes))
    }
}
