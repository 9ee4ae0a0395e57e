//! What refresh compares for a sync: each object flow uploaded, by the
//! ETag S3 gave it then and the one it has now.

use std::collections::BTreeMap;

use serde_json::json;

use super::plan::{Manifest, Remote};
use crate::contract::Drift;

/// How many objects are named one by one; past that, one line counts them.
const NAMED: usize = 10;

/// The objects of `manifest` that are missing or changed in `remote`.
pub(super) fn drift(manifest: &Manifest, remote: &BTreeMap<String, Remote>) -> Vec<Drift> {
    let changed: Vec<Drift> = manifest
        .iter()
        .filter_map(|(key, uploaded)| {
            let real = remote.get(key).map(|r| r.etag.as_str());
            (real != Some(uploaded.etag.as_str())).then(|| {
                Drift::of_attribute(
                    format!("object {key}"),
                    json!(format!("etag {}", uploaded.etag)),
                    real.map_or(json!(null), |e| json!(format!("etag {e}"))),
                )
            })
        })
        .collect();
    if changed.len() <= NAMED {
        return changed;
    }
    let missing = changed.iter().filter(|d| d.real.is_null()).count();
    vec![Drift::of_attribute(
        "objects",
        json!(format!("{} uploaded", manifest.len())),
        json!(format!(
            "{} changed, {missing} missing",
            changed.len() - missing
        )),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::s3::sync::plan::Uploaded;

    fn uploaded(etag: &str) -> Uploaded {
        Uploaded {
            sha256: "x".into(),
            etag: etag.into(),
        }
    }

    #[test]
    fn missing_and_changed_objects_drift_and_many_are_counted() {
        let manifest: Manifest = [
            ("a".to_string(), uploaded("1")),
            ("b".to_string(), uploaded("2")),
        ]
        .into_iter()
        .collect();
        let mut remote = BTreeMap::new();
        remote.insert("a".to_string(), Remote { etag: "1".into() });
        assert!(drift(&manifest, &remote).len() == 1);
        remote.insert("b".to_string(), Remote { etag: "9".into() });
        let d = drift(&manifest, &remote);
        assert_eq!(d[0].attribute, "object b");
        assert_eq!(d[0].real, json!("etag 9"));
        remote.insert("b".to_string(), Remote { etag: "2".into() });
        assert!(drift(&manifest, &remote).is_empty());
        let many: Manifest = (0..20).map(|i| (format!("k{i}"), uploaded("e"))).collect();
        let d = drift(&many, &BTreeMap::new());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].real, json!("0 changed, 20 missing"));
    }
}
