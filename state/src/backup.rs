//! JSON backups of a state: taking, listing, pruning and restoring them.
//!
//! A backup is one file `backups/state-<serial>-<unix secs>.json` holding
//! the meta (schema version, serial, salt) and every record as stored.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::db;
use crate::error::{StateError, describe_json_error};
use crate::layout::StateLayout;
use crate::lock::StateLock;
use crate::meta;
use crate::migrate::{self, MIGRATIONS};
use crate::records::{SCHEMA_VERSION, StepRecord, now_secs};
use crate::retention::{self, Aged, Retention};
use crate::snapshot::{FORMAT, Snapshot, from_hex};

/// One backup file, as listed by [`list_backups`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    /// The file.
    pub path: PathBuf,
    /// The commit serial of the state it holds.
    pub serial: u64,
    /// When it was taken (seconds since the Unix epoch).
    pub created_at: u64,
}

impl BackupInfo {
    fn aged(&self) -> Aged {
        Aged {
            serial: self.serial,
            created_at: self.created_at,
        }
    }
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// How many step records the state now holds.
    pub steps: usize,
    /// The state's serial after the restore (higher than any before it).
    pub serial: u64,
    /// The schema of the restored records (migrated on the next open if old).
    pub schema_version: u32,
    /// A backup of the state that was replaced, if it was readable.
    pub previous: Option<PathBuf>,
    /// Where a database that could not be opened was moved aside.
    pub damaged: Option<PathBuf>,
}

/// The backups of the state at `root`, newest (highest serial) first.
/// Creates nothing.
pub fn list_backups(root: &Path) -> Result<Vec<BackupInfo>, StateError> {
    let dir = StateLayout::new(root).backups();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StateError::io(&dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StateError::io(&dir, e))?;
        let name = entry.file_name();
        if let Some((serial, created_at)) = name.to_str().and_then(parse_name) {
            found.push(BackupInfo {
                path: entry.path(),
                serial,
                created_at,
            });
        }
    }
    retention::sort_newest_first(&mut found, BackupInfo::aged);
    Ok(found)
}

/// Replaces the content of the state at `root` with the backup `file`.
/// Takes the state lock (so no other flow may be using it), checks the whole
/// backup before changing anything, keeps a backup of the state it replaces,
/// and writes everything in one transaction. A database that cannot be
/// opened at all is moved aside to `db.damaged-<unix secs>` first.
pub fn restore(root: &Path, file: &Path) -> Result<Restored, StateError> {
    restore_keeping(root, file, &Retention::default())
}

/// Like [`restore`], pruning the backups by `retention`.
pub fn restore_keeping(
    root: &Path,
    file: &Path,
    retention: &Retention,
) -> Result<Restored, StateError> {
    let layout = StateLayout::new(root);
    layout.ensure()?;
    let _lock = StateLock::acquire(&layout, "flow state restore")?;

    let text = fs::read(file).map_err(|e| StateError::io(file, e))?;
    let snap: Snapshot = serde_json::from_slice(&text).map_err(|e| StateError::InvalidBackup {
        path: file.to_path_buf(),
        detail: describe_json_error(&e),
    })?;
    let (salt, records) = validate(file, &snap)?;

    let mark = crate::watermark::read(&layout)?;
    let (trees, damaged) = match crate::wal::open_db(&layout, mark) {
        Ok(trees) => (trees, None),
        Err(StateError::Corrupt { .. }) => {
            let aside = root.join(format!("db.damaged-{}", now_secs()));
            crate::durable::rename_durably(&layout.db(), &aside)
                .map_err(|e| StateError::io(layout.db(), e))?;
            (crate::wal::open_db(&layout, None)?, Some(aside))
        }
        Err(e) => return Err(e),
    };

    let mut previous = None;
    let mut old_serial = 0;
    if !meta::is_blank(&trees) {
        match crate::snapshot::read(root, &trees) {
            Ok(current) => {
                old_serial = current.serial;
                previous = Some(write(&layout, &current, Some(file), retention)?);
            }
            // Unreadable content is what a restore is for: replace it anyway.
            Err(StateError::Corrupt { .. }) => {
                old_serial = meta::read_serial(root, &trees.meta).unwrap_or(0);
            }
            Err(e) => return Err(e),
        }
    }
    // Never go back to a serial already used, so anything that remembers a
    // serial (a saved plan) sees that the state changed.
    let mark = mark.unwrap_or(0);
    let serial = old_serial.max(snap.serial).max(mark) + 1;

    let count = records.len();
    replace_contents(&layout, &trees, snap.schema_version, salt, records, serial)?;
    drop(trees);
    db::make_private(&layout.db())?;

    Ok(Restored {
        steps: count,
        serial,
        schema_version: snap.schema_version,
        previous,
        damaged,
    })
}

/// Writes `snap` into the backups of `layout` (atomically, mode 0600), then
/// prunes old backups by `retention`, never deleting `keep`.
pub(crate) fn write(
    layout: &StateLayout,
    snap: &Snapshot,
    keep: Option<&Path>,
    retention: &Retention,
) -> Result<PathBuf, StateError> {
    let dir = layout.backups();
    crate::layout::create_private_dir(&dir)?;
    let name = format!("state-{}-{}.json", snap.serial, snap.created_at);
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let text = serde_json::to_vec_pretty(snap)
        .map_err(|e| StateError::Sled(format!("the backup cannot be encoded: {e}")))?;
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(&text)?;
            f.sync_all()
        })
        .and_then(|()| crate::durable::rename_durably(&tmp, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(StateError::io(&path, e));
    }
    prune(&layout.root, keep, retention)?;
    Ok(path)
}

/// Deletes the backups retention lets go (see the `retention` module),
/// never `keep`.
fn prune(root: &Path, keep: Option<&Path>, retention: &Retention) -> Result<(), StateError> {
    let keep = keep.and_then(|k| fs::canonicalize(k).ok());
    let listed = list_backups(root)?;
    for i in retention::to_prune(&listed, BackupInfo::aged, now_secs(), retention) {
        let old = &listed[i];
        if keep.is_some() && fs::canonicalize(&old.path).ok() == keep {
            continue;
        }
        match fs::remove_file(&old.path) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Err(StateError::io(&old.path, e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a whole backup; returns its salt and the records to write.
#[allow(clippy::type_complexity)]
fn validate(
    file: &Path,
    snap: &Snapshot,
) -> Result<([u8; 32], Vec<(String, Vec<u8>)>), StateError> {
    check_snapshot(snap).map_err(|e| match e {
        Invalid::Schema(err) => err,
        Invalid::Detail(detail) => StateError::InvalidBackup {
            path: file.to_path_buf(),
            detail,
        },
    })
}

/// Why a snapshot cannot be used.
pub(crate) enum Invalid {
    /// Its schema is one this flow cannot read or migrate.
    Schema(StateError),
    /// Anything else, worded for the person at the terminal.
    Detail(String),
}

/// Checks a whole snapshot (a backup, or the S3 state object); returns its
/// salt and the records to write.
#[allow(clippy::type_complexity)]
pub(crate) fn check_snapshot(
    snap: &Snapshot,
) -> Result<([u8; 32], Vec<(String, Vec<u8>)>), Invalid> {
    let invalid = |detail: String| Invalid::Detail(detail);
    if snap.format != FORMAT {
        return Err(invalid(format!(
            "it is not a flow state (format `{}`)",
            snap.format
        )));
    }
    migrate::check(snap.schema_version, SCHEMA_VERSION, MIGRATIONS).map_err(Invalid::Schema)?;
    let salt = from_hex(&snap.salt)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| invalid("its salt is not 32 bytes of hex".to_string()))?;
    let mut records = Vec::with_capacity(snap.steps.len());
    let mut names = std::collections::BTreeSet::new();
    for (i, step) in snap.steps.iter().enumerate() {
        let Some(name) = step.get("name").and_then(Value::as_str) else {
            return Err(invalid(format!("record {} has no name", i + 1)));
        };
        if !names.insert(name.to_string()) {
            return Err(invalid(format!("step `{name}` appears twice")));
        }
        if snap.schema_version == SCHEMA_VERSION {
            serde_json::from_value::<StepRecord>(step.clone()).map_err(|e| {
                invalid(format!(
                    "the record of step `{name}` cannot be read: {}",
                    describe_json_error(&e)
                ))
            })?;
        }
        let bytes = serde_json::to_vec(step).map_err(|e| {
            invalid(format!(
                "the record of step `{name}` cannot be encoded: {e}"
            ))
        })?;
        records.push((name.to_string(), bytes));
    }
    Ok((salt, records))
}

/// Replaces everything in `trees` with `records`, `salt` and `serial` (and
/// `schema_version`), in one transaction, then checkpoints (sled's files
/// fdatasynced: nothing of this goes through the write-ahead log) and
/// records the watermark. Meta entries other than those three are dropped.
pub(crate) fn replace_contents(
    layout: &StateLayout,
    trees: &db::Trees,
    schema_version: u32,
    salt: [u8; 32],
    records: Vec<(String, Vec<u8>)>,
    serial: u64,
) -> Result<(), StateError> {
    let root = &layout.root;
    let mut steps = sled::Batch::default();
    for key in trees.steps.iter().keys() {
        steps.remove(key.map_err(|e| StateError::from_sled(root, e))?);
    }
    for (name, value) in records {
        steps.insert(name.into_bytes(), value);
    }
    let mut meta_batch = sled::Batch::default();
    for key in trees.meta.iter().keys() {
        meta_batch.remove(key.map_err(|e| StateError::from_sled(root, e))?);
    }
    meta_batch.insert(
        meta::SCHEMA_VERSION,
        meta::encode_number(schema_version.into()),
    );
    meta_batch.insert(meta::SERIAL, meta::encode_number(serial));
    meta_batch.insert(meta::SALT, &salt[..]);
    meta::apply_atomically(root, trees, &steps, &meta_batch)?;
    crate::wal::checkpoint(root, trees)?;
    crate::watermark::Watermark::open(layout)?.record(serial)
}

/// `state-<serial>-<secs>.json` → (serial, secs).
pub(crate) fn parse_name(name: &str) -> Option<(u64, u64)> {
    let middle = name.strip_prefix("state-")?.strip_suffix(".json")?;
    let (serial, secs) = middle.split_once('-')?;
    Some((serial.parse().ok()?, secs.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::Mutation;
    use crate::retention::KEEP_BACKUPS;
    use crate::store::Store;
    use std::os::unix::fs::PermissionsExt;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".flow");
        (tmp, root)
    }

    fn put(store: &Store, names: &[&str]) {
        let muts = names
            .iter()
            .map(|n| Mutation::Put(StepRecord::new(n, "exec", 1)))
            .collect();
        store.committer().commit_blocking(muts).unwrap();
    }

    #[test]
    fn names() {
        assert_eq!(
            parse_name("state-12-1700000000.json"),
            Some((12, 1_700_000_000))
        );
        assert_eq!(parse_name("state-12.json"), None);
        assert_eq!(parse_name(".state-1-2.json.tmp"), None);
    }

    #[test]
    fn backup_and_restore_round_trip() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        put(&store, &["vpc", "cluster"]);
        let before = store.steps().unwrap();
        let salt = store.salt();
        let file = store.backup().unwrap();
        let mode = fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            file.file_name()
                .unwrap()
                .to_str()
                .and_then(parse_name)
                .map(|p| p.0),
            Some(store.serial())
        );

        // Change things after the backup.
        put(&store, &["fsx"]);
        store
            .committer()
            .commit_blocking(vec![Mutation::Remove("vpc".into())])
            .unwrap();
        let serial_before_restore = store.serial();

        // A restore needs the lock.
        assert!(matches!(
            restore(&root, &file),
            Err(StateError::Locked { .. })
        ));
        drop(store);

        let restored = restore(&root, &file).unwrap();
        assert_eq!(restored.steps, 2);
        assert!(restored.serial > serial_before_restore);
        assert!(restored.previous.is_some());
        assert!(restored.damaged.is_none());

        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.steps().unwrap(), before);
        assert_eq!(store.salt(), salt);
        assert_eq!(store.serial(), restored.serial);

        // The replaced state was kept and can be restored in turn.
        drop(store);
        restore(&root, restored.previous.as_ref().unwrap()).unwrap();
        let store = Store::open(&root, "flow apply").unwrap();
        let names: Vec<_> = store.steps().unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["cluster", "fsx"]);
    }

    #[test]
    fn keeps_the_newest_twenty_by_serial() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        let mut written = Vec::new();
        for i in 0..23 {
            put(&store, &[&format!("s{i}")]);
            written.push(store.backup().unwrap());
        }
        let listed = list_backups(&root).unwrap();
        assert_eq!(listed.len(), KEEP_BACKUPS);
        assert_eq!(listed[0].path, written[22]);
        assert_eq!(listed[0].serial, store.serial());
        assert!(!written[0].exists() && !written[2].exists() && written[3].exists());
    }

    #[test]
    fn a_store_keeps_as_many_as_it_is_told() {
        let (_tmp, root) = root();
        let rule = Retention {
            keep: 4,
            max_age: retention::KEEP_BACKUPS_FOR,
        };
        let store = Store::open_keeping(&root, "flow apply", rule).unwrap();
        for i in 0..7 {
            put(&store, &[&format!("s{i}")]);
            store.backup().unwrap();
        }
        assert_eq!(serials(&root), [7, 6, 5, 4]);
    }

    /// The serials of the backups kept under `root`, newest first.
    fn serials(root: &Path) -> Vec<u64> {
        list_backups(root)
            .unwrap()
            .iter()
            .map(|b| b.serial)
            .collect()
    }

    #[test]
    fn a_clock_that_went_back_loses_no_new_backup() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        for i in 0..25 {
            put(&store, &[&format!("s{i}")]);
        }
        let dir = StateLayout::new(&root).backups();
        // Twenty backups written an hour "later" by a clock that was ahead,
        // at lower serials than the one taken now (by wall clock, the new
        // one would be the oldest of all).
        let ahead = now_secs() + 3600;
        for serial in 0..20 {
            fs::write(dir.join(format!("state-{serial}-{ahead}.json")), "{}").unwrap();
        }
        let newest = store.backup().unwrap();
        assert!(newest.exists(), "the newest backup by serial was pruned");
        let listed = list_backups(&root).unwrap();
        assert_eq!(listed.len(), KEEP_BACKUPS);
        assert_eq!(listed[0].path, newest);
        assert!(!dir.join(format!("state-0-{ahead}.json")).exists());
    }

    #[test]
    fn month_old_backups_go_but_the_newest_three_stay() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        let dir = StateLayout::new(&root).backups();
        let old = now_secs() - retention::KEEP_BACKUPS_FOR.as_secs() - 60;
        for serial in 100..105 {
            fs::write(dir.join(format!("state-{serial}-{old}.json")), "{}").unwrap();
        }
        // The new backup is at serial 0: below them all, so the three
        // highest serials stay although they are old; the new one stays
        // because it is recent.
        store.backup().unwrap();
        assert_eq!(serials(&root), [104, 103, 102, 0]);
    }

    #[test]
    fn listing_a_missing_state_creates_nothing() {
        let (_tmp, root) = root();
        assert!(list_backups(&root).unwrap().is_empty());
        assert!(!root.exists());
    }

    #[test]
    fn bad_backups_change_nothing() {
        let (tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        put(&store, &["vpc"]);
        let good = store.backup().unwrap();
        drop(store);
        let snap: Snapshot = serde_json::from_slice(&fs::read(&good).unwrap()).unwrap();

        type Damage = Box<dyn Fn(&mut Snapshot)>;
        let cases: Vec<(&str, Damage)> = vec![
            ("format", Box::new(|s| s.format = "other".into())),
            ("salt", Box::new(|s| s.salt = "00".into())),
            ("twice", Box::new(|s| s.steps.push(s.steps[0].clone()))),
            (
                "no name",
                Box::new(|s| s.steps[0] = serde_json::json!({"x": 1})),
            ),
            (
                "layout",
                Box::new(|s| s.steps[0]["status"] = "sideways".into()),
            ),
        ];
        for (what, damage) in cases {
            let mut bad = snap.clone();
            damage(&mut bad);
            let path = tmp.path().join("bad.json");
            fs::write(&path, serde_json::to_vec(&bad).unwrap()).unwrap();
            let err = restore(&root, &path).unwrap_err();
            assert!(
                matches!(err, StateError::InvalidBackup { .. }),
                "{what}: {err:?}"
            );
        }
        let mut newer = snap.clone();
        newer.schema_version = SCHEMA_VERSION + 1;
        let path = tmp.path().join("newer.json");
        fs::write(&path, serde_json::to_vec(&newer).unwrap()).unwrap();
        assert!(matches!(
            restore(&root, &path),
            Err(StateError::NewerSchema { .. })
        ));
        fs::write(&path, b"{ not json").unwrap();
        assert!(matches!(
            restore(&root, &path),
            Err(StateError::InvalidBackup { .. })
        ));

        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.steps().unwrap().len(), 1);
    }

    #[test]
    fn restore_replaces_a_database_that_cannot_open() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        put(&store, &["vpc"]);
        let good = store.backup().unwrap();
        let keep =
            std::env::temp_dir().join(format!("flow-state-test-{}.json", std::process::id()));
        fs::copy(&good, &keep).unwrap();
        drop(store);

        let layout = StateLayout::new(&root);
        fs::remove_dir_all(layout.db()).unwrap();
        fs::create_dir(layout.db()).unwrap();
        fs::write(layout.db().join("conf"), b"\xff\xfe garbage").unwrap();
        fs::write(layout.db().join("db"), vec![0xAB; 4096]).unwrap();
        assert!(matches!(
            Store::open(&root, "flow apply"),
            Err(StateError::Corrupt { .. })
        ));

        let restored = restore(&root, &keep).unwrap();
        fs::remove_file(&keep).unwrap();
        assert!(restored.damaged.as_ref().unwrap().exists());
        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.steps().unwrap().len(), 1);
    }
}
