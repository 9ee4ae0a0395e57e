//! The S3 state's log: each batch written after the snapshot object is a
//! delta object `KEY.log/<seq>.json` (seq zero-padded to 20 digits, so that
//! S3 lists them in order), created with `If-None-Match: *` so that two
//! writers can never both write the same place in the sequence. A delta
//! holds the records its batch set or removed, its sequence number, the
//! state's serial after it, and `after`: the ETag of the version it was
//! made on (the delta before it, or the snapshot), so a reader can check
//! that the deltas form one chain.
//!
//! The snapshot `KEY` says how far into the log it reaches (`log_seq`, and
//! `log_etag`, the ETag of that delta); a reader lists the deltas after it
//! and applies them in order. Deltas out of order, missing or duplicated
//! (copied, or two writers) are named and refused, never merged (see
//! [`ChainError`]).

use serde::Deserialize;
use serde_json::Value;

use super::client::{Listed, Remote};
use super::location::S3Location;
use crate::commit::Change;
use crate::error::{StateError, describe_json_error};
use crate::records::StepRecord;

/// The `format` tag of a delta object.
pub(crate) const DELTA_FORMAT: &str = "flow-state-delta";

/// The `format` tag of a snapshot written with a log. A flow that knows no
/// log refuses it ("not a flow state"), instead of reading the snapshot
/// without its deltas, or writing over them; this flow reads it and the
/// single documents tagged with the backup format alike.
pub(crate) const SNAPSHOT_FORMAT: &str = "flow-state-snapshot";

/// How many deltas are read at once.
const READ_AT_ONCE: usize = 32;

/// The prefix the deltas go under: `KEY.log/`.
pub(crate) fn prefix(location: &S3Location) -> String {
    format!("{}.log/", location.key)
}

/// The key of delta `seq`.
pub(crate) fn delta_key(location: &S3Location, seq: u64) -> String {
    format!("{}{seq:020}.json", prefix(location))
}

/// A delta's content: `changes` are the records as stored (or removals).
pub(crate) fn encode(seq: u64, serial: u64, after: &str, changes: &[Change]) -> Vec<u8> {
    let size: usize = changes
        .iter()
        .map(|c| c.key.len() + c.value.as_ref().map_or(4, Vec::len) + 24)
        .sum();
    let mut body = Vec::with_capacity(size + 128);
    let after = serde_json::to_string(after).expect("a string encodes");
    body.extend_from_slice(
        format!(
            "{{\"format\":\"{DELTA_FORMAT}\",\"seq\":{seq},\"serial\":{serial},\"after\":{after},\"changes\":["
        )
        .as_bytes(),
    );
    for (i, change) in changes.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        let name = serde_json::to_string(&change.key).expect("a string encodes");
        body.extend_from_slice(format!("{{\"name\":{name},\"record\":").as_bytes());
        match &change.value {
            Some(value) => body.extend_from_slice(value),
            None => body.extend_from_slice(b"null"),
        }
        body.push(b'}');
    }
    body.extend_from_slice(b"]}");
    body
}

/// A delta as read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delta {
    pub seq: u64,
    pub serial: u64,
    pub after: String,
    /// Each record set (its bytes) or removed (`None`), in the batch's order.
    pub changes: Vec<(String, Option<Vec<u8>>)>,
}

#[derive(Deserialize)]
struct RawDelta {
    format: String,
    seq: u64,
    serial: u64,
    after: String,
    changes: Vec<RawChange>,
}

#[derive(Deserialize)]
struct RawChange {
    name: String,
    record: Option<Value>,
}

/// Reads a delta's bytes; `Err` says why they are not one.
pub(crate) fn decode(body: &[u8]) -> Result<Delta, String> {
    let raw: RawDelta = serde_json::from_slice(body).map_err(|e| describe_json_error(&e))?;
    if raw.format != DELTA_FORMAT {
        return Err(format!(
            "it is not a flow state delta (format `{}`)",
            raw.format
        ));
    }
    let mut changes = Vec::with_capacity(raw.changes.len());
    for change in raw.changes {
        let bytes = match change.record {
            None => None,
            Some(record) => {
                serde_json::from_value::<StepRecord>(record.clone()).map_err(|e| {
                    format!(
                        "the record of step `{}` cannot be read: {}",
                        change.name,
                        describe_json_error(&e)
                    )
                })?;
                Some(serde_json::to_vec(&record).map_err(|e| e.to_string())?)
            }
        };
        changes.push((change.name, bytes));
    }
    Ok(Delta {
        seq: raw.seq,
        serial: raw.serial,
        after: raw.after,
        changes,
    })
}

/// Why the deltas after a snapshot do not form one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChainError {
    /// An object under the log's prefix whose name is not a delta's.
    Foreign { key: String },
    /// Delta `seq` is not there, but later ones are.
    Missing { seq: u64, next: String },
    /// The snapshot is gone, and `left` deltas are, from `first`.
    SnapshotGone { left: usize, first: String },
    /// The delta named `key` holds sequence number `holds`.
    OutOfOrder { key: String, holds: u64 },
    /// Delta `key` was made on the same version as the one before it (a
    /// copy, or two writers that both appended after one version).
    Duplicated { key: String, same_as: String },
    /// Delta `key` was made on a version that is not the one before it
    /// (a writer that had not seen it).
    Forked { key: String, after: String },
    /// The delta named `key` cannot be read.
    Unreadable { key: String, why: String },
}

impl ChainError {
    /// The error that stops the command, with what to do.
    pub(crate) fn into_error(self, location: &S3Location, workflow: &str) -> StateError {
        let what = match self {
            ChainError::Foreign { key } => format!(
                "s3://{}/{key} is under the state's log but is not one of its deltas",
                location.bucket
            ),
            ChainError::Missing { seq, next } => {
                format!("delta {seq} of the state's log is missing ({next})")
            }
            ChainError::SnapshotGone { left, first } => format!(
                "the snapshot is gone, and {left} deltas are left after it, from s3://{}/{first}",
                location.bucket
            ),
            ChainError::OutOfOrder { key, holds } => format!(
                "the deltas are out of order: s3://{}/{key} holds delta {holds}",
                location.bucket
            ),
            ChainError::Duplicated { key, same_as } => format!(
                "s3://{bucket}/{key} duplicates s3://{bucket}/{same_as}: both were made on the same version (a copy, or two writers)",
                bucket = location.bucket
            ),
            ChainError::Forked { key, after } => format!(
                "s3://{}/{key} was made on a version ({after}) that is not the delta before it (two writers)",
                location.bucket
            ),
            ChainError::Unreadable { key, why } => {
                format!("s3://{}/{key} cannot be read: {why}", location.bucket)
            }
        };
        StateError::Remote {
            message: format!(
                "state {location} is damaged: {what}; flow merges nothing and leaves every object as it is"
            ),
            help: Some(format!(
                "restore a good state with `flow state restore {workflow} BACKUP` (`flow state backups {workflow}` lists them); it writes a new snapshot past every delta"
            )),
        }
    }
}

/// The sequence number a delta's key names, if it names one.
pub(crate) fn seq_of(prefix: &str, key: &str) -> Option<u64> {
    let name = key.strip_prefix(prefix)?.strip_suffix(".json")?;
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// Where the snapshot leaves off: its sequence number and the ETags a
/// first delta after it may name as `after` (the snapshot's own, and that
/// of the delta it reaches).
#[derive(Debug, Clone)]
pub(crate) struct Base {
    pub seq: u64,
    pub etags: Vec<String>,
}

/// Checks that `deltas` (listed after the snapshot, in key order, each with
/// its ETag and content) follow `base` one by one.
pub(crate) fn check_chain(
    prefix: &str,
    base: &Base,
    deltas: &[(Listed, Delta)],
) -> Result<(), ChainError> {
    let mut previous: Option<&(Listed, Delta)> = None;
    for (expected, item @ (listed, delta)) in (base.seq + 1..).zip(deltas) {
        let named = seq_of(prefix, &listed.key).ok_or_else(|| ChainError::Foreign {
            key: listed.key.clone(),
        })?;
        if named != expected {
            return Err(ChainError::Missing {
                seq: expected,
                next: format!("the next one there is {named}"),
            });
        }
        if delta.seq != named {
            return Err(ChainError::OutOfOrder {
                key: listed.key.clone(),
                holds: delta.seq,
            });
        }
        let fits = match previous {
            None => base.etags.contains(&delta.after),
            Some((before, _)) => delta.after == before.etag,
        };
        if !fits {
            return Err(match previous {
                Some((before, made_on)) if made_on.after == delta.after => ChainError::Duplicated {
                    key: listed.key.clone(),
                    same_as: before.key.clone(),
                },
                _ => ChainError::Forked {
                    key: listed.key.clone(),
                    after: delta.after.clone(),
                },
            });
        }
        previous = Some(item);
    }
    Ok(())
}

/// Reads the deltas after `base` and checks they form one chain; answers
/// them in order with their ETags.
pub(crate) async fn read(
    remote: &Remote,
    base: &Base,
    workflow: &str,
) -> Result<Vec<(Listed, Delta)>, StateError> {
    let location = &remote.location;
    let prefix = prefix(location);
    let fail = |f| super::remote_error(location, f);
    let after = delta_key(location, base.seq);
    let listed = remote.list_after(&prefix, &after).await.map_err(fail)?;
    let mut deltas = Vec::with_capacity(listed.len());
    for chunk in listed.chunks(READ_AT_ONCE) {
        let mut reads = tokio::task::JoinSet::new();
        for (i, item) in chunk.iter().enumerate() {
            let remote = remote.clone();
            let key = item.key.clone();
            reads.spawn(async move { (i, remote.get(&key, None).await) });
        }
        let mut got: Vec<Option<Vec<u8>>> = vec![None; chunk.len()];
        while let Some(done) = reads.join_next().await {
            let (i, answer) = done.map_err(|e| StateError::Remote {
                message: format!("reading the log of {location} failed: {e}"),
                help: None,
            })?;
            got[i] = Some(answer.map_err(fail)?.body);
        }
        for (item, body) in chunk.iter().zip(got) {
            let body = body.unwrap_or_default();
            let delta = decode(&body).map_err(|why| {
                ChainError::Unreadable {
                    key: item.key.clone(),
                    why,
                }
                .into_error(location, workflow)
            })?;
            deltas.push((item.clone(), delta));
        }
    }
    check_chain(&prefix, base, &deltas).map_err(|e| e.into_error(location, workflow))?;
    Ok(deltas)
}

/// Where the log ends, whatever the chain: the highest sequence number
/// under the prefix (0 when none) and the state serial that delta holds,
/// if it can be read. A state written whole (push, restore) reaches this
/// far, so that no delta written before it is read after it.
pub(crate) async fn end(remote: &Remote) -> Result<(u64, Option<u64>), StateError> {
    let location = &remote.location;
    let prefix = prefix(location);
    let listed = remote
        .list_after(&prefix, "")
        .await
        .map_err(|f| super::remote_error(location, f))?;
    let Some((seq, key)) = listed
        .iter()
        .filter_map(|l| seq_of(&prefix, &l.key).map(|seq| (seq, &l.key)))
        .max()
    else {
        return Ok((0, None));
    };
    let serial = match remote.get(key, None).await {
        Ok(got) => decode(&got.body).ok().map(|d| d.serial),
        Err(_) => None,
    };
    Ok((seq, serial))
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
