//! What a local state that is the copy of an S3 state remembers of it: the
//! object's URL, the ETag of the version it last wrote or read, and the
//! serial that version holds. A local serial above that serial means the
//! local journal holds changes S3 does not have yet.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::db::Trees;
use crate::error::StateError;

/// Key of the mark in the meta tree (JSON).
const REMOTE: &[u8] = b"remote";

/// The S3 state a local state is the copy of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Mark {
    /// `s3://bucket/key`.
    pub url: String,
    /// The ETag of the version last written or read; `None` before the
    /// first write.
    pub etag: Option<String>,
    /// The serial that version holds.
    pub pushed_serial: u64,
}

/// The mark, if this state is the copy of an S3 state.
pub(crate) fn read(root: &Path, trees: &Trees) -> Result<Option<Mark>, StateError> {
    let Some(raw) = trees
        .meta
        .get(REMOTE)
        .map_err(|e| StateError::from_sled(root, e))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&raw)
        .map(Some)
        .map_err(|_| StateError::corrupt(root, "the `remote` entry cannot be read"))
}

/// Records `mark` (made durable by the next flush).
pub(crate) fn write(root: &Path, trees: &Trees, mark: &Mark) -> Result<(), StateError> {
    let raw = serde_json::to_vec(mark).expect("a mark encodes");
    trees
        .meta
        .insert(REMOTE, raw)
        .map_err(|e| StateError::from_sled(root, e))?;
    Ok(())
}
