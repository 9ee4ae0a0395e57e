//! Bringing the local copy and the S3 state together when a state is opened,
//! and moving a state between the two (`flow state push` / `pull`).
//!
//! The local copy is a cache and a journal: S3 is the truth, except for
//! changes the local journal holds that S3 never acknowledged (S3 was
//! unreachable, or the process died between the local flush and the write).
//! Those are written to S3 first, but only if S3 still holds the version
//! they were made on; otherwise flow names the steps that differ and stops.

use std::collections::BTreeMap;

use super::client::{Listed, Remote};
use super::log::{Base, Delta, SNAPSHOT_FORMAT};
use crate::backup::{Invalid, check_snapshot, replace_contents};
use crate::db::Trees;
use crate::error::{StateError, describe_json_error};
use crate::layout::StateLayout;
use crate::mark::{self, Mark};
use crate::meta;
use crate::records::SCHEMA_VERSION;
use crate::snapshot::{FORMAT, Snapshot, to_hex};

/// The S3 state as read: the snapshot document with the deltas after it
/// applied (its serial the last delta's), its records, and the ETag of its
/// newest object (the version a local copy's mark names).
pub(crate) struct RemoteState {
    pub snap: Snapshot,
    pub salt: [u8; 32],
    pub records: Vec<(String, Vec<u8>)>,
    pub etag: String,
    /// Where the log stands: the snapshot's ETag and size, the last
    /// delta's sequence number, the deltas' bytes and count.
    pub log: LogState,
}

/// Where an S3 state's log stands, as read or last written.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogState {
    /// The snapshot object's ETag (`KEY`).
    pub snapshot_etag: String,
    /// Its size in bytes.
    pub snapshot_bytes: u64,
    /// The sequence number the snapshot reaches.
    pub snapshot_seq: u64,
    /// The last delta's sequence number (the snapshot's when none follows).
    pub seq: u64,
    /// The bytes of the deltas after the snapshot.
    pub log_bytes: u64,
}

/// Where in the log a snapshot document says it reaches (absent in a
/// document written before the log: 0, nothing).
#[derive(serde::Deserialize, Default)]
struct LogPosition {
    #[serde(default)]
    log_seq: u64,
    #[serde(default)]
    log_etag: Option<String>,
}

impl RemoteState {
    /// Where the snapshot leaves off, for reading the deltas after it.
    pub(crate) fn base(&self, log_etag: Option<String>) -> Base {
        let mut etags = vec![self.log.snapshot_etag.clone()];
        etags.extend(log_etag);
        Base {
            seq: self.log.snapshot_seq,
            etags,
        }
    }

    /// Applies `deltas` (checked to follow the snapshot) in order.
    pub(crate) fn apply(&mut self, deltas: Vec<(Listed, Delta)>) {
        if deltas.is_empty() {
            return;
        }
        let mut records: BTreeMap<String, Vec<u8>> =
            std::mem::take(&mut self.records).into_iter().collect();
        for (listed, delta) in deltas {
            for (name, value) in delta.changes {
                match value {
                    Some(v) => records.insert(name, v),
                    None => records.remove(&name),
                };
            }
            self.snap.serial = delta.serial;
            self.log.seq = delta.seq;
            self.log.log_bytes += listed.size;
            self.etag = listed.etag;
        }
        self.records = records.into_iter().collect();
    }
}

/// Reads and checks the snapshot object's bytes (the deltas after it are
/// not read here); answers the state and the ETag of the delta the
/// snapshot reaches, if it names one. A document this flow cannot read is
/// refused with its version and never overwritten.
pub(crate) fn decode(
    remote: &Remote,
    body: &[u8],
    etag: String,
) -> Result<(RemoteState, Option<String>), StateError> {
    let url = remote.location.to_string();
    let snap: Snapshot = serde_json::from_slice(body).map_err(|e| StateError::Remote {
        message: format!(
            "state object {url} cannot be read: {}; flow leaves it as it is",
            describe_json_error(&e)
        ),
        help: Some(
            "restore a good version (`flow state backups` lists them), or move the object aside; flow never overwrites a state it cannot read"
                .to_string(),
        ),
    })?;
    let mut snap = snap;
    if snap.format == SNAPSHOT_FORMAT {
        // A snapshot with a log: the backup format's content, and more.
        snap.format = FORMAT.to_string();
    }
    snap.schema_version = as_current(snap.schema_version);
    if snap.schema_version != SCHEMA_VERSION {
        let who = if snap.schema_version > SCHEMA_VERSION {
            "a newer flow"
        } else {
            "an older flow"
        };
        return Err(StateError::Remote {
            message: format!(
                "state object {url} was written by {who} (schema {}); this flow reads schema {SCHEMA_VERSION}, so it leaves the object as it is",
                snap.schema_version
            ),
            help: Some("use the flow version that wrote it".to_string()),
        });
    }
    let (salt, records) = check_snapshot(&snap).map_err(|e| match e {
        Invalid::Schema(err) => err,
        Invalid::Detail(detail) => StateError::Remote {
            message: format!(
                "state object {url} cannot be used: {detail}; flow leaves it as it is"
            ),
            help: Some("restore a good version (`flow state backups` lists them)".to_string()),
        },
    })?;
    let position: LogPosition = serde_json::from_slice(body).unwrap_or_default();
    let log = LogState {
        snapshot_etag: etag.clone(),
        snapshot_bytes: body.len() as u64,
        snapshot_seq: position.log_seq,
        seq: position.log_seq,
        log_bytes: 0,
    };
    let state = RemoteState {
        snap,
        salt,
        records,
        etag,
        log,
    };
    Ok((state, position.log_etag))
}

/// What opening found: the records S3 holds (the publisher starts from
/// them), the ETag of S3's newest object and where its log stands (`None`
/// when S3 holds no state), and the local records S3 does not have yet,
/// to be written before anything else.
pub(crate) struct Reconciled {
    pub records: BTreeMap<String, Vec<u8>>,
    /// The serial S3 holds (0 when nothing).
    pub serial: u64,
    pub etag: Option<String>,
    pub log: Option<LogState>,
    pub pending: Option<BTreeMap<String, Vec<u8>>>,
}

/// Brings the local copy in `trees` and the S3 state `remote_state` together.
pub(crate) fn reconcile(
    layout: &StateLayout,
    trees: &Trees,
    remote: &Remote,
    remote_state: Option<RemoteState>,
    workflow: &str,
) -> Result<Reconciled, StateError> {
    let root = &layout.root;
    let url = remote.location.to_string();
    let local_mark = mark::read(root, trees)?;
    let local_serial = meta::read_serial(root, &trees.meta)?;
    let local = local_records(layout, trees)?;
    let refuse = |message: String, help: String| StateError::Remote {
        message,
        help: Some(help),
    };
    let ours = local_mark.as_ref().filter(|m| m.url == url);
    if let Some(other) = local_mark.as_ref().filter(|m| m.url != url)
        && !local.is_empty()
    {
        return Err(refuse(
            format!(
                "the local state at {} is the copy of {}, but the workflow keeps its state in {url}",
                root.display(),
                other.url
            ),
            format!(
                "to move it: `flow state pull {workflow} --state {}`, then `flow state push {workflow}`",
                other.url
            ),
        ));
    }
    match remote_state {
        None => match ours {
            Some(m) if m.etag.is_some() => Err(refuse(
                format!(
                    "state object {url} is gone, but the local copy at {} holds {} steps last written there",
                    root.display(),
                    local.len()
                ),
                format!(
                    "if it was deleted by mistake, put the local copy back with `flow state push {workflow}`"
                ),
            )),
            Some(_) => Ok(Reconciled {
                pending: (!local.is_empty()).then_some(local),
                serial: 0,
                records: BTreeMap::new(),
                etag: None,
                log: None,
            }),
            None if local.is_empty() => {
                mark::write(
                    root,
                    trees,
                    &Mark {
                        url,
                        etag: None,
                        pushed_serial: local_serial,
                    },
                )?;
                Ok(Reconciled {
                    records: local,
                    serial: local_serial,
                    etag: None,
                    log: None,
                    pending: None,
                })
            }
            None => Err(refuse(
                format!(
                    "the workflow keeps its state in {url}, which holds no state yet, but the local state at {} holds {} steps",
                    root.display(),
                    local.len()
                ),
                format!(
                    "move it there with `flow state push {workflow}` (flow never starts from an empty state when one exists)"
                ),
            )),
        },
        Some(rs) => {
            let unpushed = ours.is_some_and(|m| local_serial > m.pushed_serial);
            if ours.is_none() && !local.is_empty() {
                return Err(refuse(
                    format!(
                        "both {url} and the local state at {} hold a state ({} and {} steps)",
                        root.display(),
                        rs.records.len(),
                        local.len()
                    ),
                    format!(
                        "keep the S3 one with `flow state pull {workflow} --force`, or replace it with the local one with `flow state push {workflow} --force`"
                    ),
                ));
            }
            if unpushed {
                let same_version = ours.and_then(|m| m.etag.as_deref()) == Some(rs.etag.as_str());
                let remote_records: BTreeMap<String, Vec<u8>> = rs.records.into_iter().collect();
                if same_version {
                    return Ok(Reconciled {
                        records: remote_records,
                        serial: rs.snap.serial,
                        etag: Some(rs.etag),
                        log: Some(rs.log),
                        pending: Some(local),
                    });
                }
                let differ = differing_steps(&local, &remote_records);
                if differ.is_empty() {
                    adopt_mark(
                        root,
                        trees,
                        &url,
                        &rs.etag,
                        rs.snap.serial.max(local_serial),
                    )?;
                    return Ok(Reconciled {
                        records: local,
                        serial: rs.snap.serial.max(local_serial),
                        etag: Some(rs.etag),
                        log: Some(rs.log),
                        pending: None,
                    });
                }
                return Err(refuse(
                    format!(
                        "the local journal at {} holds changes that {url} does not have, and {url} was changed by another writer meanwhile; the steps that differ: {}",
                        root.display(),
                        differ.join(", ")
                    ),
                    format!(
                        "look at both (`flow state show`), then keep the local changes with `flow state push {workflow} --force` or the S3 state with `flow state pull {workflow} --force`"
                    ),
                ));
            }
            // S3 is the truth: make the local copy equal to it.
            let already = ours.is_some_and(|m| m.etag.as_deref() == Some(rs.etag.as_str()))
                && local_serial == rs.snap.serial;
            if !already {
                replace_contents(
                    layout,
                    trees,
                    rs.snap.schema_version,
                    rs.salt,
                    rs.records.clone(),
                    rs.snap.serial,
                )?;
            }
            adopt_mark(root, trees, &url, &rs.etag, rs.snap.serial)?;
            Ok(Reconciled {
                serial: rs.snap.serial,
                records: rs.records.into_iter().collect(),
                etag: Some(rs.etag),
                log: Some(rs.log),
                pending: None,
            })
        }
    }
}

fn adopt_mark(
    root: &std::path::Path,
    trees: &Trees,
    url: &str,
    etag: &str,
    serial: u64,
) -> Result<(), StateError> {
    mark::write(
        root,
        trees,
        &Mark {
            url: url.to_string(),
            etag: Some(etag.to_string()),
            pushed_serial: serial,
        },
    )?;
    trees
        .db
        .flush()
        .map_err(|e| StateError::from_sled(root, e))?;
    Ok(())
}

/// Every local record as stored, by name.
pub(crate) fn local_records(
    layout: &StateLayout,
    trees: &Trees,
) -> Result<BTreeMap<String, Vec<u8>>, StateError> {
    trees
        .steps
        .iter()
        .map(|item| {
            let (k, v) = item.map_err(|e| StateError::from_sled(&layout.root, e))?;
            Ok((String::from_utf8_lossy(&k).into_owned(), v.to_vec()))
        })
        .collect()
}

/// The names of the steps whose records differ (or exist on one side only).
fn differing_steps(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let parsed = |v: &Vec<u8>| serde_json::from_slice::<serde_json::Value>(v).ok();
    let mut names: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|n| a.get(*n).map(parsed) != b.get(*n).map(parsed))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A document's schema as this flow reads it: schema 4 changed only the
/// local database (its write-ahead log, which an S3 document never has), so
/// a schema-3 document holds the records of schema 4.
fn as_current(found: u32) -> u32 {
    if found == 3 { SCHEMA_VERSION } else { found }
}

/// The salt in hex, as the document holds it.
pub(crate) fn salt_hex(root: &std::path::Path, trees: &Trees) -> Result<String, StateError> {
    Ok(to_hex(&meta::read_salt(root, &trees.meta)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_3_document_is_read_as_current_and_others_are_not_changed() {
        assert_eq!(SCHEMA_VERSION, 4, "revisit as_current for a new schema");
        assert_eq!(as_current(3), SCHEMA_VERSION);
        assert_eq!(as_current(4), SCHEMA_VERSION);
        assert_eq!(as_current(2), 2);
        assert_eq!(as_current(9), 9);
    }

    #[test]
    fn differing_steps_compare_content_not_bytes() {
        let a: BTreeMap<String, Vec<u8>> = [
            ("vpc".to_string(), br#"{"a":1,"b":2}"#.to_vec()),
            ("fsx".to_string(), br#"{"a":1}"#.to_vec()),
        ]
        .into();
        let b: BTreeMap<String, Vec<u8>> = [
            ("vpc".to_string(), br#"{"b":2, "a":1}"#.to_vec()),
            ("eks".to_string(), br#"{}"#.to_vec()),
        ]
        .into();
        assert_eq!(differing_steps(&a, &b), vec!["eks", "fsx"]);
    }
}
