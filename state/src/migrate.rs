//! Schema migrations: one function per step from version n to n + 1.
//!
//! To move to schema 2: set [`crate::SCHEMA_VERSION`] to 2, write
//! `fn v1_to_v2(steps: &sled::Tree) -> Result<sled::Batch, String>` that
//! returns the rewritten records, and add `Migration { from: 1, run: v1_to_v2 }`
//! to [`MIGRATIONS`]. Each step is applied in one transaction together with
//! the new version number, so a crash leaves the state at n or at n + 1.

use std::path::Path;

use crate::db::Trees;
use crate::error::StateError;
use crate::meta;

/// One migration step.
#[derive(Clone, Copy)]
pub(crate) struct Migration {
    /// The version it migrates from (to `from + 1`).
    pub from: u32,
    /// Reads the `steps` tree at version `from` and returns the writes that
    /// bring it to `from + 1`; an `Err` says why the data cannot be migrated.
    pub run: fn(steps: &sled::Tree) -> Result<sled::Batch, String>,
}

/// Every migration this build knows; today none (schema 1 is the first).
pub(crate) const MIGRATIONS: &[Migration] = &[];

/// The oldest version from which `registry` reaches `target` step by step.
pub(crate) fn oldest_supported(target: u32, registry: &[Migration]) -> u32 {
    let mut oldest = target;
    while oldest > 0 && registry.iter().any(|m| m.from == oldest - 1) {
        oldest -= 1;
    }
    oldest
}

/// Refuses versions `registry` cannot bring to `target`.
pub(crate) fn check(found: u32, target: u32, registry: &[Migration]) -> Result<(), StateError> {
    if found > target {
        return Err(StateError::NewerSchema {
            found,
            supported: target,
        });
    }
    let oldest = oldest_supported(target, registry);
    if found < oldest {
        return Err(StateError::UnsupportedSchema { found, oldest });
    }
    Ok(())
}

/// Migrates the state from `found` to `target`, one transaction per step
/// (each also bumps the serial), then flushes.
pub(crate) fn upgrade(
    root: &Path,
    trees: &Trees,
    found: u32,
    target: u32,
    registry: &[Migration],
) -> Result<(), StateError> {
    check(found, target, registry)?;
    for version in found..target {
        let step = registry
            .iter()
            .find(|m| m.from == version)
            .expect("check() saw the whole chain");
        let batch = (step.run)(&trees.steps).map_err(|why| {
            StateError::corrupt(
                root,
                format!(
                    "it cannot be migrated from schema {version} to {}: {why}",
                    version + 1
                ),
            )
        })?;
        let serial = meta::read_serial(root, &trees.meta)?;
        meta::apply_atomically(
            root,
            trees,
            &batch,
            &meta::number_batch(&[
                (meta::SCHEMA_VERSION, u64::from(version) + 1),
                (meta::SERIAL, serial + 1),
            ]),
        )?;
    }
    trees
        .db
        .flush()
        .map_err(|e| StateError::from_sled(root, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StateLayout;

    fn v1_to_v2(steps: &sled::Tree) -> Result<sled::Batch, String> {
        let mut batch = sled::Batch::default();
        for item in steps.iter() {
            let (key, value) = item.map_err(|e| e.to_string())?;
            let mut v: serde_json::Value =
                serde_json::from_slice(&value).map_err(|e| e.to_string())?;
            v["migrated"] = serde_json::Value::Bool(true);
            batch.insert(key, serde_json::to_vec(&v).unwrap());
        }
        Ok(batch)
    }

    fn v2_to_v3(_: &sled::Tree) -> Result<sled::Batch, String> {
        Err("no".into())
    }

    const TEST: &[Migration] = &[
        Migration {
            from: 1,
            run: v1_to_v2,
        },
        Migration {
            from: 2,
            run: v2_to_v3,
        },
    ];

    #[test]
    fn the_real_registry_starts_at_one() {
        assert_eq!(oldest_supported(crate::SCHEMA_VERSION, MIGRATIONS), 1);
        assert!(matches!(
            check(0, crate::SCHEMA_VERSION, MIGRATIONS),
            Err(StateError::UnsupportedSchema {
                found: 0,
                oldest: 1
            })
        ));
        assert!(matches!(
            check(crate::SCHEMA_VERSION + 1, crate::SCHEMA_VERSION, MIGRATIONS),
            Err(StateError::NewerSchema { .. })
        ));
        check(crate::SCHEMA_VERSION, crate::SCHEMA_VERSION, MIGRATIONS).unwrap();
    }

    #[test]
    fn oldest_follows_the_chain() {
        assert_eq!(oldest_supported(2, TEST), 1);
        assert_eq!(oldest_supported(3, TEST), 1);
        assert_eq!(oldest_supported(4, TEST), 4);
    }

    #[test]
    fn upgrade_runs_each_step_and_bumps_version_and_serial() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        let trees = crate::db::open(&layout).unwrap();
        meta::initialize(&layout.root, &trees, 1, [0; 32]).unwrap();
        trees.steps.insert("vpc", r#"{"name":"vpc"}"#).unwrap();

        upgrade(&layout.root, &trees, 1, 2, TEST).unwrap();
        assert_eq!(
            meta::read_version(&layout.root, &trees.meta).unwrap(),
            Some(2)
        );
        assert_eq!(meta::read_serial(&layout.root, &trees.meta).unwrap(), 1);
        let v: serde_json::Value =
            serde_json::from_slice(&trees.steps.get("vpc").unwrap().unwrap()).unwrap();
        assert_eq!(v["migrated"], true);

        // A failing step leaves the state at the last good version.
        let err = upgrade(&layout.root, &trees, 2, 3, TEST).unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
        assert_eq!(
            meta::read_version(&layout.root, &trees.meta).unwrap(),
            Some(2)
        );
    }
}
