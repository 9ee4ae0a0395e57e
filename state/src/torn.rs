//! Files that sled leaves half-written when its process is killed, and then
//! takes for damage on every later open: removed before sled opens (the
//! caller holds the state lock, or opens a private copy, so no other
//! process is writing them).
//!
//! - `snap.<lsn>.generating`: sled writes each snapshot under this name
//!   and renames it once complete; it writes one when it opens a database
//!   whose log has moved on since the last. Killed before the rename, it
//!   leaves the partial file, and its next open takes that for the newest
//!   snapshot (it lists every `snap.*` file: sled issue 1527), fails on its
//!   checksum, and keeps failing. The snapshot it was to replace is still there, and so
//!   is the log both summarise: removing the partial one loses nothing.
//! - `conf`: written once, when the database is created, as text and then
//!   a checksum, in two writes. Killed between them, it leaves the text
//!   alone, which sled cannot parse. It holds only the settings flow
//!   always opens sled with, and sled writes it again when it is absent.

use std::io::ErrorKind;
use std::path::Path;

/// Removes the half-written files of a killed sled from `db_dir`; returns
/// their names.
pub(crate) fn clear_torn_files(db_dir: &Path) -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(db_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let torn = match name.as_str() {
            "conf" => conf_is_torn(&std::fs::read(entry.path())?),
            _ => name.starts_with("snap.") && name.ends_with(".generating"),
        };
        if torn {
            match std::fs::remove_file(entry.path()) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => removed.push(name),
            }
        }
    }
    removed.sort();
    Ok(removed)
}

/// sled's settings text (`key: value` lines) without the checksum that
/// follows it in a complete `conf`.
fn conf_is_torn(bytes: &[u8]) -> bool {
    let checksummed = bytes.len() > 4 && {
        let (text, sum) = bytes.split_at(bytes.len() - 4);
        crc32fast::hash(text).to_le_bytes() == sum
    };
    let settings_text = std::str::from_utf8(bytes)
        .is_ok_and(|text| text.ends_with('\n') && text.lines().all(|line| line.contains(": ")));
    !checksummed && settings_text
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: &[u8] = b"segment_size: 524288\nuse_compression: false\nversion: 0.34\n";

    fn with_checksum(text: &[u8]) -> Vec<u8> {
        let mut out = text.to_vec();
        out.extend(crc32fast::hash(text).to_le_bytes());
        out
    }

    #[test]
    fn a_conf_without_its_checksum_is_torn_and_others_are_not() {
        assert!(conf_is_torn(SETTINGS));
        assert!(!conf_is_torn(&with_checksum(SETTINGS)));
        // Damage of another kind is left for sled to report.
        assert!(!conf_is_torn(b"\xff\xfe not a sled config"));
        assert!(!conf_is_torn(b"segment_size 524288\n"));
        assert!(!conf_is_torn(b""));
    }

    #[test]
    fn only_partial_snapshots_and_a_torn_conf_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let write =
            |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
        write("conf", SETTINGS);
        write("snap.000000000000015D", b"complete");
        write("snap.000000000000015D.generating", b"part");
        write("snap.00000000000001A0.generating", b"");
        write("db", b"data");
        let removed = clear_torn_files(dir.path()).unwrap();
        assert_eq!(
            removed,
            [
                "conf",
                "snap.000000000000015D.generating",
                "snap.00000000000001A0.generating"
            ]
        );
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["db", "snap.000000000000015D"]);
        // A complete conf stays.
        write("conf", &with_checksum(SETTINGS));
        assert!(clear_torn_files(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_database_not_created_yet_has_nothing_to_clear() {
        let dir = tempfile::tempdir().unwrap();
        assert!(clear_torn_files(&dir.path().join("db")).unwrap().is_empty());
    }
}
