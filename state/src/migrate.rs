//! Schema migrations: one function per step from version n to n + 1.
//!
//! To move to schema n + 1: set [`crate::SCHEMA_VERSION`] to n + 1, write
//! `fn vn_to_vn1(steps: &sled::Tree) -> Result<sled::Batch, MigrationError>` that
//! returns the rewritten records, and add `Migration { from: n, run: … }`
//! to [`MIGRATIONS`]. Each step is applied in one transaction together with
//! the new version number, so a crash leaves the state at n or at n + 1.
//!
//! A migration writes the literal forms of the version it produces, not
//! constants shared with the engine: what schema 2 means does not change
//! when a later schema does.
//!
//! - 1 → 2 (`v1_to_v2`): sealed inputs, `sha256:<hex>` in schema 1,
//!   become `sealed:sha256:<hex>`.
//! - 2 → 3 (`v2_to_v3`): nothing is rewritten; records may now carry
//!   `deposed` and `name_suffix` (a create-before-destroy replacement's old
//!   object and the live one's name). The bump keeps a flow that knows only
//!   schema 2 from opening the state: it would rewrite records without the
//!   object a replacement put aside, and lose track of it.
//! - 3 → 4 (`v3_to_v4`): nothing is rewritten; the latest batches may now
//!   be on disk only in the write-ahead log (`db/flow-wal`) until a
//!   checkpoint (after a crash, and after a close that left a short log).
//!   The bump keeps a flow that knows only schema 3 from opening such a
//!   state: it would not see those batches, and
//!   its own later commits would be overwritten when this flow replays the
//!   log.

use std::collections::HashSet;
use std::path::Path;

use serde_json::{Map, Value};

use crate::db::Trees;
use crate::error::{StateError, describe_json_error};
use crate::meta;

/// One migration step.
#[derive(Clone, Copy)]
pub(crate) struct Migration {
    /// The version it migrates from (to `from + 1`).
    pub from: u32,
    /// Reads the `steps` tree at version `from` and returns the writes that
    /// bring it to `from + 1`; an `Err` says why the data cannot be migrated.
    pub run: fn(steps: &sled::Tree) -> Result<sled::Batch, MigrationError>,
}

/// Why a migration step could not rewrite the records.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MigrationError {
    /// The database could not be read.
    #[error("the database could not be read: {0}")]
    Read(#[from] sled::Error),
    /// A record is not JSON (said without quoting its contents).
    #[error("the record of step `{step}` is not JSON: {why}")]
    NotJson {
        /// The step whose record it is.
        step: String,
        /// Where it broke, from [`describe_json_error`].
        why: String,
    },
    /// A rewritten record could not be encoded.
    #[error("a rewritten record could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Every migration this build knows (schema 1 is the first).
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        from: 1,
        run: v1_to_v2,
    },
    Migration {
        from: 2,
        run: v2_to_v3,
    },
    Migration {
        from: 3,
        run: v3_to_v4,
    },
];

/// Schema 2 → 3: no record changes (see the module's list).
fn v2_to_v3(_steps: &sled::Tree) -> Result<sled::Batch, MigrationError> {
    Ok(sled::Batch::default())
}

/// Schema 3 → 4: no record changes (see the module's list).
fn v3_to_v4(_steps: &sled::Tree) -> Result<sled::Batch, MigrationError> {
    Ok(sled::Batch::default())
}

/// The recorded-input key of the content digest (`flow_providers::CONTENT_KEY`).
const CONTENT_KEY: &str = "(content)";

/// Whether `s` has the schema-1 shape of a seal: `sha256:` and 64 hex digits.
fn is_v1_seal(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Schema 1 → 2: seals get a form of their own.
///
/// Schema 1 kept a sensitive input (whole, or each sensitive leaf of a table)
/// as `sha256:<64 hex>`, and providers and displays took every string of that
/// shape for a seal, so a plain digest (an image digest output by a step and
/// passed on, the content digest) was hidden as `(sensitive)` and treated as
/// a secret. Schema 2 writes seals as `sealed:sha256:<64 hex>` and leaves
/// `sha256:` values plain. Here every string of the old shape, at any depth,
/// in a record's `inputs` and `in_flight.inputs` becomes `sealed:` + itself,
/// with two exceptions:
///
/// - the value of the top-level key `(content)`: the engine's only own
///   unsealed digest in recorded inputs, a provider's digest of local files
///   (plain SHA-256 of file content, no secret);
/// - a string equal to a string in some step's `outputs` (leaving out the
///   `{"sensitive": "sha256:…"}` markers of sensitive outputs): a seal is
///   the SHA-256 of the state's secret salt and a value, which no step ever
///   outputs, so such an input was an output passed on (`"${steps.build.
///   outputs.digest}"`), not a seal.
///
/// Why this is right: the engine (`engine/src/inputs.rs`) records an input as
/// its resolved value, or as a seal when it carries a secret, or as the
/// unknown placeholder; and adds the content digest. Apart from that digest,
/// flow wrote no `sha256:` string of its own into inputs, so each one is a
/// seal or came from the user: a literal, a variable or another step's
/// output with exactly that shape. The outputs are recognised above; a
/// literal or variable `sha256:<64 hex>` (rare: image references carry a
/// name before the digest) is taken for a seal. That is harmless to data and
/// secrets: the next plan compares it with the plain value the workflow
/// gives, shows `(sensitive) → value` and the apply records the plain value;
/// the cost is that one change (an update in place, or a rerun for a task).
///
/// A true seal migrated this way equals the seal the engine now computes for
/// the same secret (same salt, same digest), so no secret shows as changed.
fn v1_to_v2(steps: &sled::Tree) -> Result<sled::Batch, MigrationError> {
    let mut records = Vec::new();
    for item in steps.iter() {
        let (key, bytes) = item?;
        let record: Value =
            serde_json::from_slice(&bytes).map_err(|e| MigrationError::NotJson {
                step: String::from_utf8_lossy(&key).into_owned(),
                why: describe_json_error(&e),
            })?;
        records.push((key, record));
    }
    let mut outputs = HashSet::new();
    for (_, record) in &records {
        if let Some(v) = record.get("outputs") {
            collect_v1_shaped(v, &mut outputs);
        }
    }
    let mut batch = sled::Batch::default();
    for (key, mut record) in records {
        let mut changed = false;
        if let Some(Value::Object(inputs)) = record.get_mut("inputs") {
            changed |= reseal_inputs(inputs, &outputs);
        }
        if let Some(Value::Object(inputs)) = record.pointer_mut("/in_flight/inputs") {
            changed |= reseal_inputs(inputs, &outputs);
        }
        if changed {
            let bytes = serde_json::to_vec(&record)?;
            batch.insert(key, bytes);
        }
    }
    Ok(batch)
}

/// Every string of the schema-1 seal shape in `value`, sensitive markers
/// (`{"sensitive": "sha256:…"}`) left out.
fn collect_v1_shaped(value: &Value, into: &mut HashSet<String>) {
    match value {
        Value::String(s) if is_v1_seal(s) => {
            into.insert(s.clone());
        }
        Value::Object(m) if m.len() == 1 && m.get("sensitive").is_some_and(Value::is_string) => {}
        Value::Object(m) => m.values().for_each(|v| collect_v1_shaped(v, into)),
        Value::Array(items) => items.iter().for_each(|v| collect_v1_shaped(v, into)),
        _ => {}
    }
}

/// Reseals a record's inputs (all but `(content)`); whether any changed.
fn reseal_inputs(inputs: &mut Map<String, Value>, outputs: &HashSet<String>) -> bool {
    inputs
        .iter_mut()
        .filter(|(k, _)| k.as_str() != CONTENT_KEY)
        .fold(false, |changed, (_, v)| reseal(v, outputs) | changed)
}

/// Rewrites every schema-1 seal in `value`; whether any was.
fn reseal(value: &mut Value, outputs: &HashSet<String>) -> bool {
    match value {
        Value::String(s) if is_v1_seal(s) && !outputs.contains(s.as_str()) => {
            *s = format!("sealed:{s}");
            true
        }
        Value::Object(m) => m
            .values_mut()
            .fold(false, |changed, v| reseal(v, outputs) | changed),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| reseal(v, outputs) | changed),
        _ => false,
    }
}

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

    fn mark_migrated(steps: &sled::Tree) -> Result<sled::Batch, MigrationError> {
        let mut batch = sled::Batch::default();
        for item in steps.iter() {
            let (key, value) = item?;
            let mut v: serde_json::Value = serde_json::from_slice(&value)?;
            v["migrated"] = serde_json::Value::Bool(true);
            batch.insert(key, serde_json::to_vec(&v).unwrap());
        }
        Ok(batch)
    }

    fn v2_to_v3(_: &sled::Tree) -> Result<sled::Batch, MigrationError> {
        Err(MigrationError::NotJson {
            step: "no".into(),
            why: "it is cut short".into(),
        })
    }

    const TEST: &[Migration] = &[
        Migration {
            from: 1,
            run: mark_migrated,
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

    fn seal(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    /// Runs the real 1 → 2 step on `records` (name, JSON) and returns the
    /// records afterwards.
    fn migrate_v1(records: &[(&str, Value)]) -> Vec<Value> {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        let trees = crate::db::open(&layout).unwrap();
        meta::initialize(&layout.root, &trees, 1, [0; 32]).unwrap();
        for (name, rec) in records {
            trees
                .steps
                .insert(name, serde_json::to_vec(rec).unwrap())
                .unwrap();
        }
        upgrade(&layout.root, &trees, 1, 2, MIGRATIONS).unwrap();
        assert_eq!(
            meta::read_version(&layout.root, &trees.meta).unwrap(),
            Some(2)
        );
        records
            .iter()
            .map(|(name, _)| {
                serde_json::from_slice(&trees.steps.get(name).unwrap().unwrap()).unwrap()
            })
            .collect()
    }

    #[test]
    fn v1_to_v2_reseals_inputs_and_leaves_plain_digests() {
        let a = seal('a');
        let b = seal('b');
        let content = seal('c');
        let image = seal('d');
        let marker = seal('e');
        let build = serde_json::json!({
            "name": "build",
            "inputs": {"run": "make", "(content)": content},
            "outputs": {"digest": image, "token": {"sensitive": marker}},
            "in_flight": null,
        });
        let deploy = serde_json::json!({
            "name": "deploy",
            "inputs": {
                "token": a,
                "env": {"REGION": "x", "TOKEN": b, "LIST": [a, "plain"]},
                "image": image,
                "other": marker,
                "(content)": content,
                "short": "sha256:abc",
            },
            "outputs": {},
            "in_flight": {
                "operation": "update",
                "token": "t",
                "inputs": {"token": a, "(content)": content, "image": image},
                "started_at": 1,
            },
        });
        let after = migrate_v1(&[("build", build.clone()), ("deploy", deploy)]);
        // Nothing to reseal in `build`: its record is as it was.
        assert_eq!(after[0], build);
        let d = &after[1];
        let sealed = |s: &str| Value::String(format!("sealed:{s}"));
        // A sealed top-level input, and sealed leaves inside a table and a list.
        assert_eq!(d["inputs"]["token"], sealed(&a));
        assert_eq!(d["inputs"]["env"]["TOKEN"], sealed(&b));
        assert_eq!(d["inputs"]["env"]["LIST"][0], sealed(&a));
        assert_eq!(d["inputs"]["env"]["REGION"], "x");
        assert_eq!(d["inputs"]["env"]["LIST"][1], "plain");
        // The content digest, and a step's output passed on, stay plain.
        assert_eq!(d["inputs"]["(content)"], Value::String(content.clone()));
        assert_eq!(d["inputs"]["image"], Value::String(image.clone()));
        // A sensitive output's marker digest is no evidence of a plain value.
        assert_eq!(d["inputs"]["other"], sealed(&marker));
        assert_eq!(d["inputs"]["short"], "sha256:abc");
        // The in-flight operation's inputs likewise.
        assert_eq!(d["in_flight"]["inputs"]["token"], sealed(&a));
        assert_eq!(
            d["in_flight"]["inputs"]["(content)"],
            Value::String(content)
        );
        assert_eq!(d["in_flight"]["inputs"]["image"], Value::String(image));
        assert_eq!(d["outputs"], serde_json::json!({}));
    }

    #[test]
    fn v1_to_v2_refuses_a_record_that_is_not_json() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        let trees = crate::db::open(&layout).unwrap();
        meta::initialize(&layout.root, &trees, 1, [0; 32]).unwrap();
        trees.steps.insert("vpc", r#"{"name":"#).unwrap();
        let err = upgrade(&layout.root, &trees, 1, 2, MIGRATIONS).unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
        assert_eq!(
            meta::read_version(&layout.root, &trees.meta).unwrap(),
            Some(1)
        );
    }
}
