//! The commit watermark: `root/serial`, the last serial known to be on disk.
//!
//! sled recovers a damaged log by keeping the part before the damage and
//! says nothing, so a state could come back having silently forgotten its
//! newest records (and then create the same resources again). After every
//! durable batch the writer also writes the serial here (one `pwrite`, no
//! extra fsync: it is written after the batch's fsync, so it can only lag
//! behind the database, never run ahead of it). On open, a database whose
//! serial is below the watermark has lost changes and is reported damaged.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::error::StateError;
use crate::layout::StateLayout;

/// Width of the zero-padded number, so every write covers the whole file.
const WIDTH: usize = 20;

/// The watermark file, held open by the writer.
pub(crate) struct Watermark {
    file: File,
    path: PathBuf,
}

impl Watermark {
    /// Opens (creating, mode 0600) the watermark of `layout`.
    pub(crate) fn open(layout: &StateLayout) -> Result<Watermark, StateError> {
        let path = layout.watermark();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| StateError::io(&path, e))?;
        Ok(Watermark { file, path })
    }

    /// Records that everything up to `serial` is on disk.
    pub(crate) fn record(&self, serial: u64) -> Result<(), StateError> {
        let text = format!("{serial:0WIDTH$}\n");
        self.file
            .write_all_at(text.as_bytes(), 0)
            .map_err(|e| StateError::io(&self.path, e))
    }
}

/// The recorded watermark, if there is a readable one (it is only a check:
/// a missing or garbled file disables it rather than failing).
pub(crate) fn read(layout: &StateLayout) -> Result<Option<u64>, StateError> {
    let path = layout.watermark();
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StateError::io(&path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_and_read() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path());
        assert_eq!(read(&layout).unwrap(), None);
        let mark = Watermark::open(&layout).unwrap();
        mark.record(123_456).unwrap();
        assert_eq!(read(&layout).unwrap(), Some(123_456));
        mark.record(7).unwrap();
        assert_eq!(read(&layout).unwrap(), Some(7));
        std::fs::write(layout.watermark(), "garbage").unwrap();
        assert_eq!(read(&layout).unwrap(), None);
    }
}
