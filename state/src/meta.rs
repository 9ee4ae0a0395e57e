//! The `meta` tree: schema version, commit serial and salt.

use std::io::Read;
use std::path::Path;

use sled::transaction::{TransactionError, Transactional};

use crate::db::Trees;
use crate::error::{StateError, describe_json_error};

/// Key of the schema version (a JSON `u32`).
pub(crate) const SCHEMA_VERSION: &[u8] = b"schema_version";
/// Key of the commit serial (a JSON `u64`, one more per committed batch).
pub(crate) const SERIAL: &[u8] = b"serial";
/// Key of the per-state salt (32 raw bytes).
pub(crate) const SALT: &[u8] = b"salt";

/// Encodes a number the way the meta tree stores it.
pub(crate) fn encode_number(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// The schema version, or `None` on a database that never had one.
pub(crate) fn read_version(root: &Path, meta: &sled::Tree) -> Result<Option<u32>, StateError> {
    read_json(root, meta, SCHEMA_VERSION)
}

/// The commit serial.
pub(crate) fn read_serial(root: &Path, meta: &sled::Tree) -> Result<u64, StateError> {
    read_json(root, meta, SERIAL)?
        .ok_or_else(|| StateError::corrupt(root, "the commit serial is missing"))
}

/// The salt of a state made before fingerprints were keyed, which the
/// engine uses only to recognise the seals of that time; [`NO_SALT`] in a
/// state made since.
pub(crate) fn read_salt(root: &Path, meta: &sled::Tree) -> Result<[u8; 32], StateError> {
    let raw = meta
        .get(SALT)
        .map_err(|e| StateError::from_sled(root, e))?
        .ok_or_else(|| StateError::corrupt(root, "the salt is missing"))?;
    <[u8; 32]>::try_from(raw.as_ref()).map_err(|_| {
        StateError::corrupt(
            root,
            format!("the salt has {} bytes instead of 32", raw.len()),
        )
    })
}

/// Writes the meta of a fresh state (schema `version`, serial 0, `salt`) in
/// one transaction and flushes it.
pub(crate) fn initialize(
    root: &Path,
    trees: &Trees,
    version: u32,
    salt: [u8; 32],
) -> Result<(), StateError> {
    trees
        .meta
        .transaction(|meta| {
            meta.insert(SCHEMA_VERSION, encode_number(version.into()))?;
            meta.insert(SERIAL, encode_number(0))?;
            meta.insert(SALT, &salt[..])?;
            Ok(())
        })
        .map_err(|e: TransactionError<()>| transaction_error(root, e))?;
    trees
        .db
        .flush()
        .map_err(|e| StateError::from_sled(root, e))?;
    Ok(())
}

/// Whether neither tree holds anything (a database created just now).
pub(crate) fn is_blank(trees: &Trees) -> bool {
    trees.meta.is_empty() && trees.steps.is_empty()
}

/// The salt of a state made since fingerprints are keyed (their key lives
/// in the user's config folder, never in state): no salt at all.
pub(crate) const NO_SALT: [u8; 32] = [0; 32];

/// 32 bytes from `/dev/urandom`.
pub(crate) fn random_bytes() -> Result<[u8; 32], StateError> {
    let path = "/dev/urandom";
    let mut salt = [0u8; 32];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut salt))
        .map_err(|e| StateError::io(path, e))?;
    Ok(salt)
}

/// Maps the failure of a transaction that never aborts on purpose.
pub(crate) fn transaction_error(root: &Path, err: TransactionError<()>) -> StateError {
    match err {
        TransactionError::Storage(e) => StateError::from_sled(root, e),
        TransactionError::Abort(()) => StateError::Sled("a transaction was aborted".to_string()),
    }
}

/// Applies `steps` to the steps tree and `meta` to the meta tree in one
/// transaction: after a crash, both happened or neither did.
pub(crate) fn apply_atomically(
    root: &Path,
    trees: &Trees,
    steps: &sled::Batch,
    meta: &sled::Batch,
) -> Result<(), StateError> {
    trees.changing(crate::records::now_ms(), || {
        (&trees.steps, &trees.meta)
            .transaction(|(s, m)| {
                s.apply_batch(steps)?;
                m.apply_batch(meta)?;
                Ok(())
            })
            .map_err(|e: TransactionError<()>| transaction_error(root, e))
    })
}

/// A meta batch setting each key to its number.
pub(crate) fn number_batch(entries: &[(&[u8], u64)]) -> sled::Batch {
    let mut batch = sled::Batch::default();
    for (key, n) in entries {
        batch.insert(*key, encode_number(*n));
    }
    batch
}

fn read_json<T: serde::de::DeserializeOwned>(
    root: &Path,
    meta: &sled::Tree,
    key: &[u8],
) -> Result<Option<T>, StateError> {
    let Some(raw) = meta.get(key).map_err(|e| StateError::from_sled(root, e))? else {
        return Ok(None);
    };
    serde_json::from_slice(&raw).map(Some).map_err(|e| {
        StateError::corrupt(
            root,
            format!(
                "the `{}` entry cannot be read: {}",
                String::from_utf8_lossy(key),
                describe_json_error(&e)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StateLayout;

    #[test]
    fn initialize_then_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        let trees = crate::db::open(&layout).unwrap();
        assert!(is_blank(&trees));
        assert_eq!(read_version(&layout.root, &trees.meta).unwrap(), None);
        let salt = random_bytes().unwrap();
        initialize(&layout.root, &trees, 7, salt).unwrap();
        assert_eq!(read_version(&layout.root, &trees.meta).unwrap(), Some(7));
        assert_eq!(read_serial(&layout.root, &trees.meta).unwrap(), 0);
        assert_eq!(read_salt(&layout.root, &trees.meta).unwrap(), salt);
        assert!(!is_blank(&trees));
    }

    #[test]
    fn damaged_entries_are_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        let trees = crate::db::open(&layout).unwrap();
        trees.meta.insert(SCHEMA_VERSION, "\"one\"").unwrap();
        trees.meta.insert(SALT, &b"short"[..]).unwrap();
        assert!(matches!(
            read_version(&layout.root, &trees.meta),
            Err(StateError::Corrupt { .. })
        ));
        assert!(matches!(
            read_serial(&layout.root, &trees.meta),
            Err(StateError::Corrupt { .. })
        ));
        assert!(matches!(
            read_salt(&layout.root, &trees.meta),
            Err(StateError::Corrupt { .. })
        ));
    }

    #[test]
    fn salts_differ() {
        assert_ne!(random_bytes().unwrap(), random_bytes().unwrap());
    }
}
