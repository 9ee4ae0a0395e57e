//! [`ReadOnlyStore`]: a state read without writing a byte of its database,
//! for `flow plan` and the commands that only show things.
//!
//! sled writes to its files whenever it opens them (recovery, a new
//! snapshot), so the database is never opened in place: under the state
//! lock, its files are copied to a private temporary folder and the copy is
//! opened. A state in an older schema is migrated there, in the copy, so
//! the records read are those `flow apply` will see after it migrates; the
//! state itself keeps its schema, serial, watermark and backups.
//!
//! While another process holds the lock, the copy would be taken across
//! that process's writes (see `live` for why that is no state at all), so
//! [`ReadOnlyStore::open_or_read_live`] asks that process for the state as
//! of its last committed batch instead.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checks::{check_never_committed, refuse_s3_copy, s3_copy_refusal, version_against_mark};
use crate::commit::Committer;
use crate::error::{StateError, decode_record};
use crate::layout::{StateLayout, create_private_dir};
use crate::lock::{LockInfo, StateLock};
use crate::meta;
use crate::migrate::{self, MIGRATIONS};
use crate::records::{SCHEMA_VERSION, StepRecord};
use crate::watermark;

/// A state read whole into memory, its lock held until dropped (unless it
/// was read from the process holding it). Changing it is refused with
/// [`StateError::ReadOnly`].
#[derive(Debug)]
pub struct ReadOnlyStore {
    layout: StateLayout,
    records: Vec<StepRecord>,
    serial: u64,
    salt: [u8; 32],
    command: String,
    warnings: Vec<String>,
    live: Option<LiveRead>,
    _lock: Option<StateLock>,
}

/// How a state read from the process holding it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveRead {
    /// Who holds the state, as its lock file says.
    pub holder: Option<LockInfo>,
    /// The serial of the batch read: the holder's last committed one.
    pub serial: u64,
    /// How long before the read that batch was committed; `None` when the
    /// holder has committed nothing since it opened the state.
    pub age: Option<Duration>,
}

impl ReadOnlyStore {
    /// Reads the state at `root` for `command`; `None` when it has no
    /// database yet (and nothing shows it ever had one). Creates nothing
    /// and changes nothing under `root` but the lock file.
    pub fn open_if_exists(root: &Path, command: &str) -> Result<Option<Self>, StateError> {
        let layout = StateLayout::new(root);
        if !layout.db().is_dir() {
            check_never_committed(&layout)?;
            return Ok(None);
        }
        let lock = StateLock::acquire(&layout, command)?;
        let copy = TempCopy::of(&layout)?;
        let read = read_copy(&layout, &copy.layout()).map_err(|e| copy.blame_real(e, root))?;
        drop(copy);
        Ok(read.map(|(records, serial, salt)| ReadOnlyStore {
            layout,
            records,
            serial,
            salt,
            command: command.to_string(),
            warnings: crate::netfs::warning(root).into_iter().collect(),
            live: None,
            _lock: Some(lock),
        }))
    }

    /// Like [`ReadOnlyStore::open_if_exists`], but while another process
    /// holds the lock (an apply), the state as that process last committed
    /// it, asked of it; [`ReadOnlyStore::live`] then says how old it is.
    /// Still [`StateError::Locked`] when the holder does not answer reads
    /// (a `flow plan`, a flow from before they were answered). A folder
    /// that is the copy of an S3 state is refused, as by `open_if_exists`.
    pub fn open_or_read_live(root: &Path, command: &str) -> Result<Option<Self>, StateError> {
        ReadOnlyStore::open_or_read_live_waiting(root, command, HOLDER_WAIT)
    }

    /// [`ReadOnlyStore::open_or_read_live`], waiting at most `wait` for a
    /// holder to answer or let go.
    pub(crate) fn open_or_read_live_waiting(
        root: &Path,
        command: &str,
        wait: Duration,
    ) -> Result<Option<Self>, StateError> {
        let started = Instant::now();
        loop {
            match ReadOnlyStore::open_if_exists(root, command) {
                Err(StateError::Locked { path, info }) => {
                    match ReadOnlyStore::read_live(root, command, info.clone())? {
                        Some(ro) if ro.s3_copy.is_some() => {
                            let url = ro.s3_copy.as_deref().unwrap_or_default();
                            return Err(s3_copy_refusal(root, url));
                        }
                        Some(ro) => return Ok(Some(ro.store)),
                        // Still opening the state, or letting it go.
                        None if may_answer_soon(root, info.as_ref(), started, wait)
                            || (started.elapsed() < wait
                                && changes_hands(&StateLayout::new(root), info.as_ref())) => {}
                        None => return Err(StateError::Locked { path, info }),
                    }
                }
                other => return other,
            }
            std::thread::sleep(HOLDER_POLL);
        }
    }

    /// The state at `root` (a local state, or the local copy of an S3
    /// state) as the process holding its lock last committed it: `None`
    /// when nothing answers (see [`ReadOnlyStore::open_or_read_live`]).
    /// `holder` is who the lock file says holds it.
    pub fn read_from_holder(
        root: &Path,
        command: &str,
        holder: Option<LockInfo>,
    ) -> Result<Option<Self>, StateError> {
        let started = Instant::now();
        loop {
            if let Some(ro) = ReadOnlyStore::read_live(root, command, holder.clone())? {
                return Ok(Some(ro.store));
            }
            if !may_answer_soon(root, holder.as_ref(), started, HOLDER_WAIT) {
                return Ok(None);
            }
            std::thread::sleep(HOLDER_POLL);
        }
    }

    /// Whether a reader refused the lock of the state at `root` (the local
    /// copy of an S3 state too), its file naming `holder`, should open it
    /// again: the lock is changing hands (see [`changes_hands`]) and the
    /// reader, which began at `started`, has waited less than a holder is
    /// waited for.
    pub fn lock_changing_hands(root: &Path, holder: Option<&LockInfo>, started: Instant) -> bool {
        started.elapsed() < HOLDER_WAIT && changes_hands(&StateLayout::new(root), holder)
    }

    fn read_live(
        root: &Path,
        command: &str,
        holder: Option<LockInfo>,
    ) -> Result<Option<Served>, StateError> {
        let layout = StateLayout::new(root);
        let Some(served) = crate::live::fetch(&layout)? else {
            return Ok(None);
        };
        let now = crate::records::now_ms();
        let salt = crate::snapshot::from_hex(&served.salt)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                StateError::corrupt(root, "the holder answered a salt that is not one")
            })?;
        if let Some(found) = served.schema_version.filter(|&v| v != SCHEMA_VERSION) {
            return Err(StateError::corrupt(
                root,
                format!("the process holding it reads schema {found}, this flow {SCHEMA_VERSION}"),
            ));
        }
        let live = LiveRead {
            holder,
            serial: served.serial,
            age: (served.committed_ms > 0)
                .then(|| Duration::from_millis(now.saturating_sub(served.committed_ms))),
        };
        Ok(Some(Served {
            s3_copy: served.s3_copy,
            store: ReadOnlyStore {
                layout,
                records: served.steps,
                serial: served.serial,
                salt,
                command: command.to_string(),
                warnings: crate::netfs::warning(root).into_iter().collect(),
                live: Some(live),
                _lock: None,
            },
        }))
    }

    /// How the state was read, when it was read from the process holding
    /// it rather than under the lock.
    pub fn live(&self) -> Option<&LiveRead> {
        self.live.as_ref()
    }

    /// Every recorded step, sorted by name.
    pub fn steps(&self) -> Vec<StepRecord> {
        self.records.clone()
    }

    /// Every recorded step, sorted by name, without a copy; the lock (if
    /// any) is let go.
    pub fn into_steps(self) -> Vec<StepRecord> {
        self.records
    }

    /// The record of step `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<StepRecord> {
        self.records
            .binary_search_by(|r| r.name.as_str().cmp(name))
            .ok()
            .map(|i| self.records[i].clone())
    }

    /// The serial the state has, or will have once `flow apply` migrates it.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// The salt of a state made before fingerprints were keyed (all zeros for
    /// one made since), to recognise the seals of that time.
    pub fn salt(&self) -> [u8; 32] {
        self.salt
    }

    /// Where the state's files are.
    pub fn layout(&self) -> &StateLayout {
        &self.layout
    }

    /// Warnings from opening (see [`Store::warnings`](crate::Store::warnings)).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The state's run history (read; appending is not refused, but no
    /// read-only command appends).
    pub fn run_log(&self) -> crate::runs::RunLog {
        let log = crate::runs::RunLog::new(self.layout.runs());
        match self.live {
            // Its holder may be appending a run this very moment.
            Some(_) => log.being_written(),
            None => log,
        }
    }

    /// A committer that refuses every change.
    pub fn committer(&self) -> Committer {
        Committer::refusing(&self.layout.root, &self.command)
    }

    /// The refusal of anything that would write.
    pub fn refuse(&self) -> StateError {
        StateError::ReadOnly {
            path: self.layout.root.clone(),
            command: self.command.clone(),
        }
    }
}

/// How long a reader waits for a holder that answers reads to start
/// answering (it is still opening the state) or to let the lock go.
const HOLDER_WAIT: Duration = Duration::from_secs(10);

/// How often it looks meanwhile.
const HOLDER_POLL: Duration = Duration::from_millis(10);

/// Whether `holder`, which did not answer a read, may answer soon: it says
/// it answers reads, still holds the state at `root`, and a reader that
/// began at `started` has not waited `wait` for it yet.
fn may_answer_soon(
    root: &Path,
    holder: Option<&LockInfo>,
    started: Instant,
    wait: Duration,
) -> bool {
    holder.is_some_and(|h| h.answers_reads)
        && started.elapsed() < wait
        && crate::lock::holder(&StateLayout::new(root)).as_ref() == holder
}

/// Whether the lock of `layout`, refused to a reader when its file named
/// `holder`, is changing hands: the file names someone else now, or it
/// named nobody and is empty, as it is for the instant a holder has taken
/// the lock and not yet written who it is, or has cleared it and not yet
/// let go ([`StateLock`]'s drop). A file that names nobody because it
/// cannot be read leaves the reader refused.
fn changes_hands(layout: &StateLayout, holder: Option<&LockInfo>) -> bool {
    crate::lock::holder(layout).as_ref() != holder
        || (holder.is_none() && crate::lock::names_nobody(layout))
}

/// A state read from its holder, and the S3 state it is the copy of.
struct Served {
    s3_copy: Option<String>,
    store: ReadOnlyStore,
}

/// What a read of the copy found: records, serial and salt; `None` for a
/// database that was created but never initialized (no state yet).
type Read = Option<(Vec<StepRecord>, u64, [u8; 32])>;

/// Checks and reads the copy at `copy` of the state `real`, migrating the
/// copy when its schema is older.
fn read_copy(real: &StateLayout, copy: &StateLayout) -> Result<Read, StateError> {
    let root = &copy.root;
    let mark = watermark::read(real)?;
    let trees = crate::wal::open_db(copy, mark)?;
    let Some(found) = version_against_mark(root, &trees, mark)? else {
        return Ok(None);
    };
    refuse_s3_copy(&real.root, &trees)?;
    if found != SCHEMA_VERSION {
        migrate::upgrade(root, &trees, found, SCHEMA_VERSION, MIGRATIONS)?;
    }
    let serial = meta::read_serial(root, &trees.meta)?;
    let salt = meta::read_salt(root, &trees.meta)?;
    let mut raw = Vec::new();
    for item in trees.steps.iter() {
        raw.push(item.map_err(|e| StateError::from_sled(root, e))?);
    }
    Ok(Some((decode_all(root, &raw)?, serial, salt)))
}

/// Each record of `raw` decoded, in order; a large state's on every core
/// (plan of 100,000 steps spent a tenth of its time here on one).
fn decode_all(
    root: &Path,
    raw: &[(sled::IVec, sled::IVec)],
) -> Result<Vec<StepRecord>, StateError> {
    const PER_THREAD: usize = 4096;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(raw.len().div_ceil(PER_THREAD))
        .max(1);
    let decode = |part: &[(sled::IVec, sled::IVec)]| {
        part.iter()
            .map(|(key, value)| decode_record(root, key, value))
            .collect::<Result<Vec<StepRecord>, StateError>>()
    };
    if threads == 1 {
        return decode(raw);
    }
    let parts: Vec<_> = raw.chunks(raw.len().div_ceil(threads)).collect();
    std::thread::scope(|s| {
        let others: Vec<_> = parts[1..].iter().map(|p| s.spawn(|| decode(p))).collect();
        let mut records = decode(parts[0])?;
        for t in others {
            records.extend(t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?);
        }
        Ok(records)
    })
}

/// A private copy of a state's `db/`, deleted when dropped.
struct TempCopy {
    dir: PathBuf,
}

impl TempCopy {
    /// Copies `layout.db()` to `<tmp>/flow-read-<pid>-<n>/db` (mode 0700).
    fn of(layout: &StateLayout) -> Result<TempCopy, StateError> {
        let base = std::env::temp_dir();
        let dir = (0u32..)
            .map(|n| base.join(format!("flow-read-{}-{n}", std::process::id())))
            .find(|d| !d.exists())
            .expect("some name is free");
        create_private_dir(&dir)?;
        let copy = TempCopy { dir };
        copy_tree(&layout.db(), &copy.layout().db())?;
        Ok(copy)
    }

    fn layout(&self) -> StateLayout {
        StateLayout::new(&self.dir)
    }

    /// Errors name the state, not the copy.
    fn blame_real(&self, err: StateError, real: &Path) -> StateError {
        match err {
            StateError::Corrupt { path, detail } if path == self.dir => {
                StateError::corrupt(real, detail)
            }
            other => other,
        }
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies the folder `from` to `to` (created private), files and folders.
fn copy_tree(from: &Path, to: &Path) -> Result<(), StateError> {
    create_private_dir(to)?;
    let entries = std::fs::read_dir(from).map_err(|e| StateError::io(from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StateError::io(from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(|e| StateError::io(&src, e))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| StateError::io(&src, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::Mutation;
    use crate::store::Store;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".flow");
        (tmp, root)
    }

    #[test]
    fn records_are_decoded_on_several_threads_in_their_order_and_a_bad_one_is_named() {
        let raw: Vec<(sled::IVec, sled::IVec)> = (0..10_000)
            .map(|i| {
                let name = format!("s{i:05}");
                let rec = StepRecord::new(&name, "null", 1);
                (
                    name.as_bytes().into(),
                    serde_json::to_vec(&rec).unwrap().into(),
                )
            })
            .collect();
        let records = decode_all(Path::new("/state"), &raw).unwrap();
        let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
        let expected: Vec<String> = (0..10_000).map(|i| format!("s{i:05}")).collect();
        assert_eq!(names, expected);

        let mut bad = raw;
        bad[9_000].1 = b"{not json".as_slice().into();
        let err = decode_all(Path::new("/state"), &bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`s09000`"), "{err}");
    }

    /// Every file under `dir` with its bytes, sorted.
    fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                } else if e.file_name() != "lock" {
                    out.push((e.path(), std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn reads_without_changing_a_byte() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        let c = store.committer();
        for name in ["b", "a", "c"] {
            c.commit_blocking(vec![Mutation::Put(StepRecord::new(name, "exec", 1))])
                .unwrap();
        }
        let salt = store.salt();
        drop(store);
        let before = files(&root);

        let ro = ReadOnlyStore::open_if_exists(&root, "flow plan")
            .unwrap()
            .unwrap();
        assert_eq!(ro.serial(), 3);
        assert_eq!(ro.salt(), salt);
        let names: Vec<_> = ro.steps().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(ro.get("b").unwrap().name, "b");
        assert!(ro.get("z").is_none());
        assert!(matches!(
            ro.committer()
                .commit_blocking(vec![Mutation::Remove("a".into())]),
            Err(StateError::ReadOnly { .. })
        ));
        // It holds the lock like any other open.
        assert!(matches!(
            Store::open(&root, "flow apply"),
            Err(StateError::Locked { .. })
        ));
        drop(ro);
        assert_eq!(files(&root), before);
    }

    #[test]
    fn a_missing_state_is_none_and_creates_nothing() {
        let (_tmp, root) = root();
        assert!(
            ReadOnlyStore::open_if_exists(&root, "flow plan")
                .unwrap()
                .is_none()
        );
        assert!(!root.exists());
    }

    #[test]
    fn an_old_schema_is_read_through_the_migrations_and_left_old() {
        let (_tmp, root) = root();
        let layout = StateLayout::new(&root);
        layout.ensure().unwrap();
        let trees = crate::db::open(&layout).unwrap();
        meta::initialize(&root, &trees, 1, [1; 32]).unwrap();
        let old = format!("sha256:{}", "ab".repeat(32));
        let mut rec = StepRecord::new("svc", "exec", 1);
        rec.inputs = serde_json::from_value(serde_json::json!({"env": {"TOKEN": old}})).unwrap();
        trees
            .steps
            .insert("svc", serde_json::to_vec(&rec).unwrap())
            .unwrap();
        trees.db.flush().unwrap();
        drop(trees);
        let before = files(&root);

        let ro = ReadOnlyStore::open_if_exists(&root, "flow plan")
            .unwrap()
            .unwrap();
        let got = ro.get("svc").unwrap();
        assert_eq!(got.inputs["env"]["TOKEN"], format!("sealed:{old}"));
        // The serial apply will see once it has migrated (one per step:
        // 1 → 2 → 3 → 4).
        assert_eq!(ro.serial(), 3);
        drop(ro);
        assert_eq!(files(&root), before, "the state was written");
        assert!(crate::backup::list_backups(&root).unwrap().is_empty());

        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.serial(), 3);
    }

    #[test]
    fn damage_names_the_state_not_the_copy() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        store
            .committer()
            .commit_blocking(vec![Mutation::Put(StepRecord::new("a", "exec", 1))])
            .unwrap();
        drop(store);
        crate::watermark::Watermark::open(&StateLayout::new(&root))
            .unwrap()
            .record(9)
            .unwrap();
        match ReadOnlyStore::open_if_exists(&root, "flow plan") {
            Err(StateError::Corrupt { path, detail }) => {
                assert_eq!(path, root);
                assert!(detail.contains("serial 9"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_lost_database_is_refused() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        store
            .committer()
            .commit_blocking(vec![Mutation::Put(StepRecord::new("a", "exec", 1))])
            .unwrap();
        drop(store);
        std::fs::remove_dir_all(root.join("db")).unwrap();
        assert!(matches!(
            ReadOnlyStore::open_if_exists(&root, "flow plan"),
            Err(StateError::MissingDatabase { .. })
        ));
    }
}
