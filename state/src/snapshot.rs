//! A consistent copy of a whole state (meta and every record as stored): what
//! a backup file holds, taken by the writer between batches.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::db::Trees;
use crate::error::{StateError, decode_record};
use crate::meta;
use crate::records::now_secs;

/// The `format` tag of a backup file.
pub(crate) const FORMAT: &str = "flow-state-backup";

/// The content of a backup file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    /// Always [`FORMAT`].
    pub format: String,
    /// The schema the records are written in.
    pub schema_version: u32,
    /// The commit serial they were read at.
    pub serial: u64,
    /// The salt, in hex.
    pub salt: String,
    /// When the copy was taken (seconds since the Unix epoch).
    pub created_at: u64,
    /// Every record, in name order, as stored.
    pub steps: Vec<Value>,
}

/// Reads everything in `trees`; run where no batch can be half applied
/// (on the writer thread, or while opening).
pub(crate) fn read(root: &Path, trees: &Trees) -> Result<Snapshot, StateError> {
    let schema_version = meta::read_version(root, &trees.meta)?
        .ok_or_else(|| StateError::corrupt(root, "the schema version is missing"))?;
    let serial = meta::read_serial(root, &trees.meta)?;
    let salt = meta::read_salt(root, &trees.meta)?;
    let mut steps = Vec::new();
    for item in trees.steps.iter() {
        let (key, value) = item.map_err(|e| StateError::from_sled(root, e))?;
        steps.push(decode_record(root, &key, &value)?);
    }
    Ok(Snapshot {
        format: FORMAT.to_string(),
        schema_version,
        serial,
        salt: to_hex(&salt),
        created_at: now_secs(),
        steps,
    })
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 0xab, 0xff])),
            Some(vec![0, 1, 0xab, 0xff])
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
