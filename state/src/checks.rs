//! What opening a local state checks before anything reads it: that a
//! folder without a database never had one, that the database holds every
//! committed change, that its schema can be read (migrating an old one after
//! a backup), and that it is not the copy of an S3 state.

use std::path::Path;

use crate::backup;
use crate::db::Trees;
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::meta;
use crate::migrate::{self, Migration};
use crate::records::SCHEMA_VERSION;
use crate::retention::Retention;
use crate::snapshot;
use crate::watermark;

/// Refuses the local state at `root` when it is the copy of an S3 state
/// (whose database is `trees`): the workflow keeps its state locally now.
pub(crate) fn refuse_s3_copy(root: &Path, trees: &Trees) -> Result<(), StateError> {
    match crate::mark::read(root, trees)?.map(|m| m.url) {
        Some(url) => Err(s3_copy_refusal(root, &url)),
        None => Ok(()),
    }
}

/// The refusal of the local state at `root`, the copy of the S3 state `url`.
pub(crate) fn s3_copy_refusal(root: &Path, url: &str) -> StateError {
    StateError::Remote {
        message: format!(
            "the local state at {} is the copy of {url}, but the workflow now keeps its state locally",
            root.display()
        ),
        help: Some(format!(
            "to make the local copy the state, bring it up to date with `flow state pull FILE --state {url}`; or set the backend back under [workflow.state]"
        )),
    }
}

/// Refuses to create a database in a state folder that shows it had one:
/// a watermark above 0 or a backup. Starting afresh there would forget every
/// resource the state recorded (and create them all again).
pub(crate) fn check_never_committed(layout: &StateLayout) -> Result<(), StateError> {
    let mut evidence = Vec::new();
    if let Some(mark) = watermark::read(layout)?.filter(|&m| m > 0) {
        evidence.push(format!(
            "{} says changes up to serial {mark} were committed",
            layout.watermark().display()
        ));
    }
    let backups = backup::list_backups(&layout.root)?;
    if let Some(newest) = backups.first() {
        evidence.push(format!(
            "{} holds {} backup{} (the newest at serial {})",
            layout.backups().display(),
            backups.len(),
            if backups.len() == 1 { "" } else { "s" },
            newest.serial
        ));
    }
    if evidence.is_empty() {
        return Ok(());
    }
    Err(StateError::MissingDatabase {
        path: layout.root.clone(),
        evidence: evidence.join(" and "),
    })
}

/// The schema version of the database in `trees`, checked against the
/// commit watermark `mark`: `None` for a blank database no commit was ever
/// recorded for; an error for a database with no version, an emptied one
/// whose watermark says commits existed, or one that lost its newest
/// commits.
pub(crate) fn version_against_mark(
    root: &Path,
    trees: &Trees,
    mark: Option<u64>,
) -> Result<Option<u32>, StateError> {
    let Some(found) = meta::read_version(root, &trees.meta)? else {
        if !meta::is_blank(trees) {
            return Err(StateError::corrupt(root, "the schema version is missing"));
        }
        return match mark.filter(|&m| m > 0) {
            Some(mark) => Err(StateError::corrupt(
                root,
                format!("the database is empty, but changes up to serial {mark} were committed"),
            )),
            None => Ok(None),
        };
    };
    let serial = meta::read_serial(root, &trees.meta)?;
    if let Some(mark) = mark.filter(|&m| serial < m) {
        return Err(StateError::corrupt(
            root,
            format!(
                "the database holds changes up to serial {serial}, but changes up to serial {mark} were committed, so the newest ones are lost"
            ),
        ));
    }
    Ok(Some(found))
}

/// Initializes a blank database, refuses unknown versions and migrates old
/// ones with `registry` (after taking a backup, pruned by `retention`). `mark` is the commit
/// watermark of an existing database.
pub(crate) fn check_schema(
    layout: &StateLayout,
    trees: &Trees,
    mark: Option<u64>,
    registry: &[Migration],
    retention: &Retention,
) -> Result<(), StateError> {
    let root = &layout.root;
    match version_against_mark(root, trees, mark)? {
        None => meta::initialize(root, trees, SCHEMA_VERSION, meta::NO_SALT),
        Some(found) => {
            if found == SCHEMA_VERSION {
                return Ok(());
            }
            migrate::check(found, SCHEMA_VERSION, registry)?;
            backup::write(layout, &snapshot::read(root, trees)?, None, retention)?;
            migrate::upgrade(root, trees, found, SCHEMA_VERSION, registry)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::Mutation;
    use crate::db;
    use crate::records::StepRecord;
    use crate::store::Store;
    use crate::watermark::Watermark;

    fn root() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".flow");
        (tmp, root)
    }

    fn record(name: &str) -> StepRecord {
        StepRecord::new(name, "exec", 1_700_000_000)
    }

    #[test]
    fn missing_version_on_used_database_is_corrupt() {
        let (_tmp, root) = root();
        let layout = StateLayout::new(&root);
        layout.ensure().unwrap();
        let trees = db::open(&layout).unwrap();
        trees.steps.insert("vpc", "{}").unwrap();
        trees.db.flush().unwrap();
        drop(trees);
        assert!(matches!(
            Store::open(&root, "flow apply"),
            Err(StateError::Corrupt { .. })
        ));
    }

    #[test]
    fn lost_changes_are_detected() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        store
            .committer()
            .commit_blocking(vec![Mutation::Put(record("vpc"))])
            .unwrap();
        let layout = store.layout().clone();
        drop(store);
        assert_eq!(watermark::read(&layout).unwrap(), Some(1));

        // As if sled had kept only the part of its log before some damage.
        Watermark::open(&layout).unwrap().record(5).unwrap();
        match Store::open(&root, "flow apply") {
            Err(StateError::Corrupt { detail, .. }) => {
                assert!(detail.contains("serial 5"), "{detail}")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }

        // An emptied database is not mistaken for a new one.
        std::fs::remove_dir_all(layout.db()).unwrap();
        std::fs::create_dir(layout.db()).unwrap();
        assert!(matches!(
            Store::open(&root, "flow apply"),
            Err(StateError::Corrupt { .. })
        ));

        // A deleted one is refused too, naming the restore and the way to
        // start afresh, and nothing is created.
        std::fs::remove_dir_all(layout.db()).unwrap();
        let err = Store::open(&root, "flow apply").unwrap_err();
        assert!(
            matches!(&err, StateError::MissingDatabase { evidence, .. } if evidence.contains("serial 5")),
            "{err:?}"
        );
        assert!(err.help().unwrap().contains("flow state restore"));
        assert!(
            err.help()
                .unwrap()
                .contains("delete the whole state folder")
        );
        assert!(!layout.db().exists());
        assert_eq!(watermark::read(&layout).unwrap(), Some(5));
        // Not even the folders `ensure` makes, nor the lock file.
        std::fs::remove_dir_all(layout.logs()).unwrap();
        std::fs::remove_file(layout.lock_file()).unwrap();
        assert!(Store::open(&root, "flow apply").is_err());
        assert!(!layout.logs().exists() && !layout.lock_file().exists());

        // Deleting the whole folder is the way to start afresh.
        std::fs::remove_dir_all(&root).unwrap();
        let store = Store::open(&root, "flow apply").unwrap();
        assert_eq!(store.serial(), 0);
    }

    #[test]
    fn a_missing_database_with_backups_is_refused() {
        let (_tmp, root) = root();
        let store = Store::open(&root, "flow apply").unwrap();
        store.backup().unwrap();
        let layout = store.layout().clone();
        drop(store);
        // Serial 0 in the watermark says nothing; the backup does.
        std::fs::remove_file(layout.watermark()).unwrap();
        std::fs::remove_dir_all(layout.db()).unwrap();
        let err = Store::open(&root, "flow apply").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("1 backup (the newest at serial 0)"), "{text}");
        assert!(!layout.db().exists());
    }

    #[test]
    fn old_schema_is_backed_up_then_migrated() {
        fn v0_to_v1(steps: &sled::Tree) -> Result<sled::Batch, crate::migrate::MigrationError> {
            let mut batch = sled::Batch::default();
            for key in steps.iter().keys() {
                let key = key?;
                let name = String::from_utf8_lossy(&key).into_owned();
                let rec = StepRecord::new(&name, "exec", 1);
                batch.insert(key, serde_json::to_vec(&rec).unwrap());
            }
            Ok(batch)
        }
        let registry = [Migration {
            from: SCHEMA_VERSION - 1,
            run: v0_to_v1,
        }];
        let (_tmp, root) = root();
        let layout = StateLayout::new(&root);
        layout.ensure().unwrap();
        let trees = db::open(&layout).unwrap();
        meta::initialize(&root, &trees, SCHEMA_VERSION - 1, [1; 32]).unwrap();
        trees
            .steps
            .insert("vpc", r#"{"name":"vpc","old":true}"#)
            .unwrap();

        check_schema(&layout, &trees, Some(0), &registry, &Retention::default()).unwrap();
        assert_eq!(
            meta::read_version(&root, &trees.meta).unwrap(),
            Some(SCHEMA_VERSION)
        );
        let rec: StepRecord =
            serde_json::from_slice(&trees.steps.get("vpc").unwrap().unwrap()).unwrap();
        assert_eq!(rec.name, "vpc");
        let backups = crate::backup::list_backups(&root).unwrap();
        assert_eq!(backups.len(), 1);
        assert_eq!(backups[0].serial, 0);
    }
}
