//! Opening the sled database of a state, and keeping its files private.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use crate::error::StateError;
use crate::layout::StateLayout;

/// The sled trees a state is made of.
#[derive(Clone)]
pub(crate) struct Trees {
    /// The whole database (for `flush`).
    pub db: sled::Db,
    /// Step name → JSON [`crate::StepRecord`].
    pub steps: sled::Tree,
    /// `schema_version`, `serial`, `salt`.
    pub meta: sled::Tree,
    /// Whether a read that does not go through the writer saw one state.
    pub changes: Arc<Changes>,
}

/// A sequence lock over the trees, for reads made beside the writer (the
/// reads a running apply serves, see `live`): the count is odd while a
/// batch is being applied to them, and moves on once per batch. A read
/// that found the same even count before and after saw no batch half
/// applied. Also when the batch the trees are at was committed.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    count: AtomicU64,
    committed_ms: AtomicU64,
}

impl Trees {
    /// Runs `change` (which changes the trees) so that a concurrent
    /// [`Trees::read_whole`] retries instead of seeing part of it; the
    /// trees are then at a batch committed at `committed_ms` (ms since the
    /// Unix epoch).
    pub(crate) fn changing<T>(&self, committed_ms: u64, change: impl FnOnce() -> T) -> T {
        let c = &self.changes;
        c.count.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        let out = change();
        c.committed_ms.store(committed_ms, Ordering::Relaxed);
        c.count.fetch_add(1, Ordering::Release);
        out
    }

    /// When the batch the trees are at was committed (ms since the Unix
    /// epoch; 0: before this process opened them). Exact on the writer's
    /// thread, where no batch is applied meanwhile.
    pub(crate) fn committed_ms(&self) -> u64 {
        self.changes.committed_ms.load(Ordering::Acquire)
    }

    /// Runs `read` until it ran while no change was applied (at most
    /// `tries` times); `None` if it never did. Its answer comes with when
    /// the batch it saw was committed (0: before this process opened it).
    pub(crate) fn read_whole<T>(
        &self,
        tries: u32,
        mut read: impl FnMut() -> T,
    ) -> Option<(T, u64)> {
        let c = &self.changes;
        for _ in 0..tries {
            let before = c.count.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let out = read();
            let committed_ms = c.committed_ms.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if c.count.load(Ordering::Relaxed) == before {
                return Some((out, committed_ms));
            }
        }
        None
    }
}

/// How long to wait for sled's own file lock, which a store that was just
/// closed in this process may hold for a moment while its last I/O
/// threads finish. The caller holds the state lock, so nobody else can.
const SLED_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Opens (creating if needed) the database of `layout`; the caller holds the
/// state lock. What a killed sled left half-written is removed first (see
/// [`crate::torn`]). Files under `db/` are made private.
pub(crate) fn open(layout: &StateLayout) -> Result<Trees, StateError> {
    let path = layout.db();
    crate::torn::clear_torn_files(&path).map_err(|e| StateError::io(&path, e))?;
    let started = Instant::now();
    let db = loop {
        match open_once(&path) {
            Ok(db) => break db,
            Err(OpenError::SledLockBusy) if started.elapsed() < SLED_LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(OpenError::SledLockBusy) => {
                return Err(StateError::Sled(format!(
                    "the database files in {} are held by another program",
                    path.display()
                )));
            }
            Err(OpenError::Io(e)) => return Err(StateError::io(&path, e)),
            Err(OpenError::Damaged(detail)) => {
                return Err(StateError::corrupt(&layout.root, detail));
            }
        }
    };
    let tree = |name: &str| {
        db.open_tree(name)
            .map_err(|e| StateError::from_sled(&layout.root, e))
    };
    let trees = Trees {
        steps: tree("steps")?,
        meta: tree("meta")?,
        db,
        changes: Arc::default(),
    };
    make_private(&path)?;
    Ok(trees)
}

enum OpenError {
    SledLockBusy,
    Io(std::io::Error),
    Damaged(String),
}

fn open_once(path: &Path) -> Result<sled::Db, OpenError> {
    let config = sled::Config::new()
        .path(path)
        .mode(sled::Mode::HighThroughput);
    // sled asserts on some kinds of damage instead of returning an error.
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(sled::Error::Io(e))) => Err(classify_io(e)),
        Ok(Err(e)) => Err(OpenError::Damaged(format!(
            "the database cannot be opened ({e})"
        ))),
        Err(_) => Err(OpenError::Damaged(
            "the database cannot be opened (sled stopped on an inconsistency)".to_string(),
        )),
    }
}

fn classify_io(e: std::io::Error) -> OpenError {
    match e.kind() {
        // Truncated or garbled files surface as these.
        ErrorKind::UnexpectedEof | ErrorKind::InvalidData => {
            OpenError::Damaged(format!("the database cannot be opened ({e})"))
        }
        // sled's own flock on db/db, reported as a formatted `Other` error.
        ErrorKind::Other if e.to_string().contains("could not acquire lock") => {
            OpenError::SledLockBusy
        }
        _ => OpenError::Io(e),
    }
}

/// Sets mode 0700 on `dir` and every directory under it, and 0600 on every
/// file under it.
pub(crate) fn make_private(dir: &Path) -> Result<(), StateError> {
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| StateError::io(p, e))
    };
    set(dir, 0o700)?;
    let entries = std::fs::read_dir(dir).map_err(|e| StateError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StateError::io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| StateError::io(&path, e))?;
        if kind.is_dir() {
            make_private(&path)?;
        } else if kind.is_file() {
            match set(&path, 0o600) {
                // sled may remove a file (an old snapshot) meanwhile.
                Err(StateError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {}
                other => other?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_files_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        let trees = open(&layout).unwrap();
        trees.steps.insert("a", "b").unwrap();
        trees.db.flush().unwrap();
        drop(trees);
        make_private(&layout.db()).unwrap();
        let mut seen = 0;
        let mut stack = vec![layout.db()];
        while let Some(dir) = stack.pop() {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else {
                    seen += 1;
                    let mode = entry.metadata().unwrap().permissions().mode();
                    assert_eq!(mode & 0o777, 0o600, "{}", entry.path().display());
                }
            }
        }
        assert!(seen >= 2, "sled wrote {seen} files");
    }

    /// What a kill -9 inside sled's snapshot write leaves (sled writes one
    /// when it opens a database whose log has moved on): the snapshot's
    /// first bytes under its `.generating` name. sled alone then refuses
    /// the database on every open; `open` removes the partial file and
    /// loses nothing.
    #[test]
    fn a_snapshot_left_half_written_by_a_kill_does_not_damage_the_state() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        for round in 0..2 {
            let trees = open(&layout).unwrap();
            trees
                .steps
                .insert(format!("step-{round}"), "record")
                .unwrap();
            trees.db.flush().unwrap();
        }
        let snapshot = std::fs::read_dir(layout.db())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("snap.")
            })
            .expect("sled wrote a snapshot when it opened the existing database");
        let bytes = std::fs::read(&snapshot).unwrap();
        let partial = snapshot.with_extension(format!(
            "{}.generating",
            snapshot.extension().unwrap().to_string_lossy()
        ));
        std::fs::write(&partial, &bytes[..bytes.len() / 2]).unwrap();
        let sled_alone = open_once(&layout.db());
        assert!(
            matches!(sled_alone, Err(OpenError::Damaged(_))),
            "sled opened the database despite the partial snapshot"
        );
        let trees = open(&layout).unwrap();
        for round in 0..2 {
            let key = format!("step-{round}");
            assert_eq!(
                trees.steps.get(&key).unwrap().as_deref(),
                Some(&b"record"[..])
            );
        }
        assert!(!partial.exists());
    }

    /// The first open writes sled's `conf` as text and then a checksum; a
    /// kill between the two leaves the text alone.
    #[test]
    fn a_conf_left_without_its_checksum_by_a_kill_does_not_damage_the_state() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        drop(open(&layout).unwrap());
        let conf = layout.db().join("conf");
        let whole = std::fs::read(&conf).unwrap();
        std::fs::write(&conf, &whole[..whole.len() - 4]).unwrap();
        assert!(
            matches!(open_once(&layout.db()), Err(OpenError::Damaged(_))),
            "sled opened the database despite the torn conf"
        );
        let trees = open(&layout).unwrap();
        trees.steps.insert("a", "b").unwrap();
        assert_eq!(std::fs::read(&conf).unwrap(), whole);
    }

    #[test]
    fn garbage_database_is_reported_damaged() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        std::fs::create_dir(layout.db()).unwrap();
        std::fs::write(layout.db().join("conf"), b"\xff\xfe not a sled config").unwrap();
        std::fs::write(layout.db().join("db"), vec![0xAB; 4096]).unwrap();
        match open(&layout) {
            Err(StateError::Corrupt { path, .. }) => assert_eq!(path, layout.root),
            Err(other) => panic!("expected Corrupt, got {other:?}"),
            Ok(_) => panic!("expected Corrupt, got an open database"),
        }
    }
}
