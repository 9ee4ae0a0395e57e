//! The write-ahead log in front of sled: what makes a commit durable.
//!
//! Each batch the writer commits is appended to `db/flow-wal` as one frame
//! and the file is fdatasynced; that is when the batch counts as on disk.
//! The changes reach sled's trees later, when the writer is idle or someone
//! reads (see `writer`), and sled's own files are made durable only at a
//! checkpoint: when the store opens (after what opening wrote itself), when
//! the writer is idle and the log has grown past [`IDLE_CHECKPOINT_BYTES`],
//! when it has grown past [`CHECKPOINT_BYTES`] however busy the writer is,
//! and when the store closes with more than [`KEPT_AT_CLOSE_BYTES`] in the
//! log. After the checkpoint the log is emptied. A store that closes with
//! a shorter log leaves it for the next open to replay (as after a crash):
//! the log already makes it durable, and that open checkpoints anyway.
//!
//! A sled transaction with a flush per batch cost three writes through
//! sled's thread pool (whose `notify_all` wakes all its threads each time);
//! one append and one fdatasync of a file of our own cost a write and a
//! sync, on the writer's thread.
//!
//! Opening a database ([`open_db`]) first replays the log, all of it, in
//! order, into the trees, then checkpoints. Replaying all of it is right
//! whatever part of those changes sled had kept: each change sets or
//! removes a whole key, so the last change to a key decides it, and keys no
//! frame touches are as the last checkpoint flushed them.
//!
//! A frame: a 16-byte header, the magic `FWL2`, the payload's length, the
//! CRC-32 of those 8 bytes and the CRC-32 of the payload (`u32`s,
//! little-endian); then the payload: the batch's serial (`u64`), the number
//! of changes (`u32`), and each change as a tag (1 put, 0 remove), the
//! key's length (`u32`) and bytes, and for a put the value's length (`u32`)
//! and bytes. A header cut short, a payload cut short, or a payload failing
//! its CRC that ends exactly at the end of the file is a write a crash
//! interrupted: never acknowledged, it is dropped. Anything else that does
//! not read as a frame (a header failing its own CRC, a damaged payload
//! with more after it) is damage, and opening the state stops there before
//! changing anything.
//!
//! Before replaying, opening also checks the serials: the frames must
//! follow one another, the first must follow what sled kept (`serial` in
//! its meta, at most one behind), and the last must reach the watermark.
//! Otherwise commits were lost, and the state is refused as damaged with
//! the log left in place.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::commit::Change;
use crate::db::{self, Trees};
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::meta;

/// The log's file name inside `db/` (copied with the database by readers).
pub(crate) const FILE: &str = "flow-wal";

/// How large the log may grow before the writer checkpoints, idle or not.
pub(crate) const CHECKPOINT_BYTES: u64 = 16 << 20;

/// How large the log may grow before the writer checkpoints once idle:
/// sled's files then hold what ran so far, written while nothing waits on
/// the writer, and what is left for later is small.
pub(crate) const IDLE_CHECKPOINT_BYTES: u64 = 256 << 10;

/// Up to how large a log a closing store leaves for the next open to
/// replay instead of checkpointing it on the way out.
pub(crate) const KEPT_AT_CLOSE_BYTES: u64 = 1 << 20;

const MAGIC: &[u8; 4] = b"FWL2";
const HEADER: usize = 16;
const PUT: u8 = 1;
const REMOVE: u8 = 0;

/// The log's path for the database at `layout`.
pub(crate) fn path(layout: &StateLayout) -> PathBuf {
    layout.db().join(FILE)
}

/// The open log, appended to by the writer alone.
pub(crate) struct Wal {
    path: PathBuf,
    file: File,
    len: u64,
    buf: Vec<u8>,
}

impl Wal {
    /// Opens (creating, mode 0600) the log of the database at `layout`,
    /// which [`open_db`] has replayed and emptied. A log made now has its
    /// name made durable too: losing it in a power cut would lose every
    /// batch in it.
    pub(crate) fn open(layout: &StateLayout) -> Result<Wal, StateError> {
        let path = path(layout);
        let existed = path.exists();
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| StateError::io(&path, e))?;
        let len = file.metadata().map_err(|e| StateError::io(&path, e))?.len();
        if !existed {
            crate::durable::sync_dir(&layout.db()).map_err(|e| StateError::io(layout.db(), e))?;
        }
        Ok(Wal {
            path,
            file,
            len,
            buf: Vec::new(),
        })
    }

    /// Appends the batch `serial` of `changes` and fdatasyncs: it is on
    /// disk when this returns `Ok`.
    pub(crate) fn append(&mut self, serial: u64, changes: &[Change]) -> Result<(), StateError> {
        encode_frame(&mut self.buf, serial, changes);
        self.file
            .write_all(&self.buf)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| StateError::io(&self.path, e))?;
        self.len += self.buf.len() as u64;
        Ok(())
    }

    /// The log's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Empties the log (after a checkpoint flushed everything in it into
    /// sled's files) and fdatasyncs it.
    pub(crate) fn clear(&mut self) -> Result<(), StateError> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| StateError::io(&self.path, e))?;
        self.len = 0;
        Ok(())
    }
}

/// Opens the database at `layout` and brings it up to date with its log:
/// checks the frames against what sled kept and against the watermark
/// `mark`, replays every frame, checkpoints, and empties the log. Every way
/// in to a database (the store, a read-only copy, a restore) goes through
/// here.
pub(crate) fn open_db(layout: &StateLayout, mark: Option<u64>) -> Result<Trees, StateError> {
    let trees = db::open(layout)?;
    recover(layout, &trees, mark)?;
    Ok(trees)
}

fn recover(layout: &StateLayout, trees: &Trees, mark: Option<u64>) -> Result<(), StateError> {
    let path = path(layout);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StateError::io(&path, e)),
    };
    if bytes.is_empty() {
        return Ok(());
    }
    let root = &layout.root;
    let frames = frames(&bytes).map_err(|detail| StateError::corrupt(root, detail))?;
    if !frames.is_empty() {
        let kept = meta::read_serial(root, &trees.meta)?;
        check_serials(&frames, kept, mark).map_err(|detail| StateError::corrupt(root, detail))?;
    }
    for frame in &frames {
        apply(root, trees, frame.serial, frame.changes.iter().copied())?;
    }
    checkpoint(root, trees)?;
    // Synced: sled may be written past these frames before anything else
    // syncs the log (a restore, a pull, or a session that commits nothing
    // and leaves no log of its own), and frames that came back after a
    // power cut would then be older than the database, or replayed over
    // what replaced them.
    OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(0).and_then(|()| f.sync_data()))
        .map_err(|e| StateError::io(&path, e))
}

/// Why the frames of a log cannot be replayed over a database that kept
/// the batches up to serial `kept`, with the watermark at `mark`.
fn check_serials(frames: &[Frame<'_>], kept: u64, mark: Option<u64>) -> Result<(), String> {
    let (first, last) = match (frames.first(), frames.last()) {
        (Some(first), Some(last)) => (first.serial, last.serial),
        _ => return Ok(()),
    };
    let lost = |what: String| format!("{what}, so committed changes are lost");
    if first > kept + 1 {
        return Err(lost(format!(
            "the database holds changes up to serial {kept}, but its write-ahead log starts at serial {first}"
        )));
    }
    if kept > last {
        return Err(format!(
            "its write-ahead log (serials {first} to {last}) is older than the database (serial {kept})"
        ));
    }
    if let Some(pair) = frames.windows(2).find(|w| w[1].serial != w[0].serial + 1) {
        return Err(lost(format!(
            "in its write-ahead log serial {} is followed by serial {}",
            pair[0].serial, pair[1].serial
        )));
    }
    match mark {
        Some(mark) if last < mark => Err(lost(format!(
            "its write-ahead log ends at serial {last}, but changes up to serial {mark} were committed"
        ))),
        _ => Ok(()),
    }
}

/// Sets or removes each key of `changes` in the steps tree, then the serial
/// to `serial`: in memory, for the next checkpoint to flush.
pub(crate) fn apply<'a>(
    root: &Path,
    trees: &Trees,
    serial: u64,
    changes: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Result<(), StateError> {
    let sled_error = |e| StateError::from_sled(root, e);
    for (key, value) in changes {
        match value {
            Some(value) => trees.steps.insert(key, value).map(drop),
            None => trees.steps.remove(key).map(drop),
        }
        .map_err(sled_error)?;
    }
    trees
        .meta
        .insert(meta::SERIAL, meta::encode_number(serial))
        .map(drop)
        .map_err(sled_error)
}

/// Flushes sled's files: everything applied so far is in them. sled's
/// flush writes its log with `sync_file_range`, which neither flushes the
/// drive's cache nor the file's size, and writes large values to files of
/// their own in `db/blobs` without syncing them; so the log file, every
/// blob and both folders are fdatasynced here.
pub(crate) fn checkpoint(root: &Path, trees: &Trees) -> Result<(), StateError> {
    trees
        .db
        .flush()
        .map_err(|e| StateError::from_sled(root, e))?;
    let db = StateLayout::new(root).db();
    let blobs = db.join("blobs");
    let mut files = vec![db.join("db")];
    if let Ok(entries) = std::fs::read_dir(&blobs) {
        for entry in entries {
            let entry = entry.map_err(|e| StateError::io(&blobs, e))?;
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                files.push(entry.path());
            }
        }
        files.push(blobs.clone());
    }
    files.push(db);
    files.iter().try_for_each(|path| match File::open(path) {
        Ok(f) => f.sync_data().map_err(|e| StateError::io(path, e)),
        // sled removes blob files it no longer needs from its own threads:
        // one gone since the folder was listed has nothing left to sync.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && path.parent() == Some(blobs.as_path()) =>
        {
            Ok(())
        }
        Err(e) => Err(StateError::io(path, e)),
    })
}

fn encode_frame(buf: &mut Vec<u8>, serial: u64, changes: &[Change]) {
    buf.clear();
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&[0; 12]);
    buf.extend_from_slice(&serial.to_le_bytes());
    buf.extend_from_slice(&(changes.len() as u32).to_le_bytes());
    for change in changes {
        let key = change.key.as_bytes();
        buf.push(if change.value.is_some() { PUT } else { REMOVE });
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        if let Some(value) = &change.value {
            buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
            buf.extend_from_slice(value);
        }
    }
    let payload_len = (buf.len() - HEADER) as u32;
    buf[4..8].copy_from_slice(&payload_len.to_le_bytes());
    let header_crc = crc32fast::hash(&buf[..8]);
    buf[8..12].copy_from_slice(&header_crc.to_le_bytes());
    let payload_crc = crc32fast::hash(&buf[HEADER..]);
    buf[12..16].copy_from_slice(&payload_crc.to_le_bytes());
}

/// One decoded frame: its serial and changes (key, value or removal).
struct Frame<'a> {
    serial: u64,
    changes: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// The frames of a whole log, in order; a torn last frame is left out.
fn frames(bytes: &[u8]) -> Result<Vec<Frame<'_>>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let damaged = |what: &str| {
            format!(
                "its write-ahead log ({}) is damaged at byte {pos}: {what}",
                FILE
            )
        };
        if rest.len() < HEADER {
            break; // a header cut short by a crash
        }
        if &rest[..4] != MAGIC {
            return Err(damaged("no frame starts there"));
        }
        let word = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        if crc32fast::hash(&rest[..8]) != word(8) {
            return Err(damaged("a frame's header fails its checksum"));
        }
        let (len, crc) = (word(4) as usize, word(12));
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            break; // a frame cut short by a crash
        };
        if crc32fast::hash(payload) != crc {
            if HEADER + len == rest.len() {
                break; // the last write, not finished when the crash came
            }
            return Err(damaged("a frame fails its checksum"));
        }
        out.push(decode_payload(payload).ok_or_else(|| damaged("a frame cannot be read"))?);
        pos += HEADER + len;
    }
    Ok(out)
}

fn decode_payload(payload: &[u8]) -> Option<Frame<'_>> {
    let mut reader = Reader(payload);
    let serial = u64::from_le_bytes(reader.take(8)?.try_into().ok()?);
    let count = reader.u32()?;
    let mut changes = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let tag = reader.take(1)?[0];
        let key_len = reader.u32()? as usize;
        let key = reader.take(key_len)?;
        let value = match tag {
            PUT => {
                let value_len = reader.u32()? as usize;
                Some(reader.take(value_len)?)
            }
            REMOVE => None,
            _ => return None,
        };
        changes.push((key, value));
    }
    reader.0.is_empty().then_some(Frame { serial, changes })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = tail;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Change {
        Change {
            key: key.to_string(),
            value: Some(value.as_bytes().to_vec()),
        }
    }

    fn remove(key: &str) -> Change {
        Change {
            key: key.to_string(),
            value: None,
        }
    }

    fn log_of(batches: &[(u64, Vec<Change>)]) -> Vec<u8> {
        let mut all = Vec::new();
        let mut buf = Vec::new();
        for (serial, changes) in batches {
            encode_frame(&mut buf, *serial, changes);
            all.extend_from_slice(&buf);
        }
        all
    }

    fn fresh() -> (tempfile::TempDir, StateLayout) {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        (tmp, layout)
    }

    fn value(trees: &Trees, key: &str) -> Option<String> {
        trees
            .steps
            .get(key)
            .unwrap()
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    }

    #[test]
    fn frames_read_back_as_written() {
        let log = log_of(&[
            (1, vec![put("a", "1"), put("b", "2")]),
            (2, vec![remove("a"), put("ü", "")]),
        ]);
        let frames = frames(&log).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].serial, 1);
        assert_eq!(
            frames[0].changes,
            vec![(&b"a"[..], Some(&b"1"[..])), (&b"b"[..], Some(&b"2"[..]))]
        );
        assert_eq!(frames[1].serial, 2);
        assert_eq!(
            frames[1].changes,
            vec![(&b"a"[..], None), ("ü".as_bytes(), Some(&b""[..]))]
        );
    }

    #[test]
    fn a_last_frame_cut_anywhere_is_dropped_and_the_rest_kept() {
        let whole = log_of(&[(1, vec![put("a", "1")]), (2, vec![put("b", "2")])]);
        let first_len = log_of(&[(1, vec![put("a", "1")])]).len();
        for cut in first_len..whole.len() {
            let frames = frames(&whole[..cut]).unwrap();
            assert_eq!(frames.len(), 1, "cut at {cut}");
            assert_eq!(frames[0].serial, 1);
        }
        assert_eq!(frames(&whole).unwrap().len(), 2);
    }

    #[test]
    fn a_damaged_frame_before_others_is_refused_not_skipped() {
        let mut log = log_of(&[(1, vec![put("a", "1")]), (2, vec![put("b", "2")])]);
        log[HEADER + 3] ^= 0xff; // inside the first payload
        let err = frames(&log).err().expect("damage is refused");
        assert!(err.contains("damaged at byte 0"), "{err}");
        assert!(err.contains("checksum"), "{err}");

        let mut log = log_of(&[(1, vec![put("a", "1")])]);
        log.extend_from_slice(b"garbage that is no frame");
        let err = frames(&log).err().expect("damage is refused");
        assert!(err.contains("no frame starts there"), "{err}");
    }

    #[test]
    fn a_damaged_length_is_refused_not_taken_for_a_torn_tail() {
        let mut log = log_of(&[(1, vec![put("a", "1")]), (2, vec![put("b", "2")])]);
        // The first frame's length now points past the end of the file.
        log[7] = 0x7f;
        let err = frames(&log).err().expect("damage is refused");
        assert!(err.contains("damaged at byte 0"), "{err}");
        assert!(err.contains("header fails its checksum"), "{err}");
    }

    #[test]
    fn serials_must_follow_the_database_each_other_and_the_watermark() {
        let log = log_of(&[(4, vec![put("a", "1")]), (5, vec![put("a", "2")])]);
        let frames = frames(&log).unwrap();
        // sled kept 3, or 4, or all of it: replayable.
        for kept in [3, 4, 5] {
            assert_eq!(check_serials(&frames, kept, Some(5)), Ok(()), "kept {kept}");
        }
        let gap = check_serials(&frames, 2, None).unwrap_err();
        assert!(
            gap.contains("up to serial 2") && gap.contains("starts at serial 4"),
            "{gap}"
        );
        let stale = check_serials(&frames, 6, None).unwrap_err();
        assert!(stale.contains("older than the database"), "{stale}");
        let short = check_serials(&frames, 4, Some(7)).unwrap_err();
        assert!(
            short.contains("ends at serial 5") && short.contains("up to serial 7"),
            "{short}"
        );

        let holed = log_of(&[(4, vec![put("a", "1")]), (6, vec![put("a", "2")])]);
        let err = check_serials(&self::frames(&holed).unwrap(), 3, None).unwrap_err();
        assert!(err.contains("serial 4 is followed by serial 6"), "{err}");
    }

    #[test]
    fn a_log_that_cannot_be_replayed_is_left_in_place() {
        let (_tmp, layout) = fresh();
        {
            let trees = db::open(&layout).unwrap();
            meta::initialize(&layout.root, &trees, 4, meta::NO_SALT).unwrap();
        }
        // Serial 1 is missing: sled kept 0, the log starts at 2.
        let log = log_of(&[(2, vec![put("a", "1")])]);
        std::fs::write(path(&layout), &log).unwrap();
        let err = open_db(&layout, None).err().expect("refused");
        assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string().contains("committed changes are lost"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(path(&layout)).unwrap(),
            log,
            "the evidence was touched"
        );
        let trees = db::open(&layout).unwrap();
        assert_eq!(value(&trees, "a"), None, "a frame was applied anyway");

        // And one that ends before the watermark.
        let log = log_of(&[(1, vec![put("a", "1")])]);
        std::fs::write(path(&layout), &log).unwrap();
        drop(trees);
        let err = open_db(&layout, Some(3)).err().expect("refused");
        assert!(err.to_string().contains("up to serial 3"), "{err}");
        assert_eq!(std::fs::read(path(&layout)).unwrap(), log);
    }

    #[test]
    fn a_torn_last_frame_whose_checksum_fails_is_dropped() {
        let mut log = log_of(&[(1, vec![put("a", "1")]), (2, vec![put("b", "22")])]);
        let last = log.len() - 1;
        log[last] = 0; // the tail's bytes never reached the disk
        let frames = frames(&log).unwrap();
        assert_eq!(frames.len(), 1);
    }

    #[test]
    fn opening_replays_the_log_over_what_sled_kept_then_empties_it() {
        let (_tmp, layout) = fresh();
        {
            let trees = db::open(&layout).unwrap();
            meta::initialize(&layout.root, &trees, 4, meta::NO_SALT).unwrap();
            // What the last checkpoint flushed.
            trees.steps.insert("kept", "old").unwrap();
            trees.steps.insert("changed", "old").unwrap();
            trees.steps.insert("gone", "old").unwrap();
            trees.db.flush().unwrap();
        }
        // Batches on disk only in the log (sled never saw them).
        let log = log_of(&[
            (1, vec![put("changed", "new"), put("added", "1")]),
            (2, vec![remove("gone"), put("added", "2")]),
        ]);
        std::fs::write(path(&layout), &log).unwrap();

        let trees = open_db(&layout, None).unwrap();
        assert_eq!(value(&trees, "kept").as_deref(), Some("old"));
        assert_eq!(value(&trees, "changed").as_deref(), Some("new"));
        assert_eq!(value(&trees, "added").as_deref(), Some("2"));
        assert_eq!(value(&trees, "gone"), None);
        assert_eq!(meta::read_serial(&layout.root, &trees.meta).unwrap(), 2);
        assert_eq!(std::fs::metadata(path(&layout)).unwrap().len(), 0);
        drop(trees);

        // The replay was flushed: a second open finds it without the log.
        let trees = open_db(&layout, None).unwrap();
        assert_eq!(value(&trees, "added").as_deref(), Some("2"));
        assert_eq!(meta::read_serial(&layout.root, &trees.meta).unwrap(), 2);
    }

    #[test]
    fn replaying_a_log_sled_already_holds_in_part_changes_nothing_more() {
        let (_tmp, layout) = fresh();
        let log = log_of(&[
            (1, vec![put("a", "1")]),
            (2, vec![put("a", "2"), put("b", "1")]),
        ]);
        {
            let trees = db::open(&layout).unwrap();
            meta::initialize(&layout.root, &trees, 4, meta::NO_SALT).unwrap();
            // sled kept the first batch and half of the second.
            trees.steps.insert("a", "2").unwrap();
            trees.db.flush().unwrap();
        }
        std::fs::write(path(&layout), &log).unwrap();
        let trees = open_db(&layout, None).unwrap();
        assert_eq!(value(&trees, "a").as_deref(), Some("2"));
        assert_eq!(value(&trees, "b").as_deref(), Some("1"));
    }

    #[test]
    fn a_damaged_log_stops_the_open_with_the_state_named() {
        let (_tmp, layout) = fresh();
        drop(db::open(&layout).unwrap());
        std::fs::write(path(&layout), b"not a log at all").unwrap();
        let err = open_db(&layout, None).err().expect("refused");
        assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("write-ahead log"), "{err}");
    }
}
