//! What a sync has to do: compare the local files with the objects under
//! the prefix and with what the last sync uploaded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::local::LocalFile;

/// An object under the prefix, as S3 lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remote {
    /// Its ETag, without quotes.
    pub etag: String,
}

/// What flow uploaded for one key, kept in state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Uploaded {
    /// SHA-256 of the content, hex.
    pub sha256: String,
    /// The ETag S3 gave it, without quotes.
    pub etag: String,
}

/// Keys and what was uploaded under them.
pub(crate) type Manifest = BTreeMap<String, Uploaded>;

/// The work of one sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SyncPlan<'a> {
    /// Files S3 does not have.
    pub add: Vec<&'a LocalFile>,
    /// Files whose content differs from the object's.
    pub change: Vec<&'a LocalFile>,
    /// Keys flow uploaded earlier whose files are gone.
    pub delete: Vec<String>,
    /// Files already there with the same content.
    pub same: Vec<&'a LocalFile>,
}

impl SyncPlan<'_> {
    /// Whether there is nothing to send or delete.
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.change.is_empty() && self.delete.is_empty()
    }
}

/// Whether an ETag is a plain MD5 (not a multipart or KMS-encrypted upload's).
fn plain_md5(etag: &str) -> bool {
    etag.len() == 32 && etag.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether the object at `key` holds `file`'s content: its ETag is the file's
/// MD5, or it is exactly what flow uploaded for this content.
fn same(file: &LocalFile, remote: &Remote, uploaded: Option<&Uploaded>) -> bool {
    if plain_md5(&remote.etag) && remote.etag.eq_ignore_ascii_case(&file.md5) {
        return true;
    }
    uploaded.is_some_and(|u| u.sha256 == file.sha256 && u.etag == remote.etag)
}

/// Plans a sync of `local` to keys made by `key` from relative paths.
pub(crate) fn plan<'a>(
    local: &'a [LocalFile],
    remote: &BTreeMap<String, Remote>,
    manifest: &Manifest,
    key: impl Fn(&str) -> String,
) -> SyncPlan<'a> {
    let mut plan = SyncPlan::default();
    let mut wanted = std::collections::BTreeSet::new();
    for file in local {
        let k = key(&file.rel);
        match remote.get(&k) {
            None => plan.add.push(file),
            Some(r) if same(file, r, manifest.get(&k)) => plan.same.push(file),
            Some(_) => plan.change.push(file),
        }
        wanted.insert(k);
    }
    plan.delete = manifest
        .keys()
        .filter(|k| !wanted.contains(*k) && remote.contains_key(*k))
        .cloned()
        .collect();
    plan
}

/// The first 12 hex digits of a hash, for display.
pub(crate) fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// The plan as lines for `flow plan`: a summary, then one line per file (at
/// most `limit`).
pub(crate) fn lines(
    plan: &SyncPlan<'_>,
    manifest: &Manifest,
    key: impl Fn(&str) -> String,
    limit: usize,
) -> Vec<String> {
    let mut lines = vec![format!(
        "files: {} to add, {} to change, {} to delete, {} unchanged",
        plan.add.len(),
        plan.change.len(),
        plan.delete.len(),
        plan.same.len()
    )];
    let mut each = Vec::new();
    for f in &plan.add {
        each.push(format!("+ {} (sha256 {})", f.rel, short(&f.sha256)));
    }
    for f in &plan.change {
        let before = manifest.get(&key(&f.rel)).map_or_else(
            || "other content".to_string(),
            |u| format!("sha256 {}", short(&u.sha256)),
        );
        each.push(format!(
            "~ {} ({before} → sha256 {})",
            f.rel,
            short(&f.sha256)
        ));
    }
    for k in &plan.delete {
        each.push(format!("- {k}"));
    }
    let more = each.len().saturating_sub(limit);
    lines.extend(each.into_iter().take(limit));
    if more > 0 {
        lines.push(format!("… and {more} more"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rel: &str, content: &str) -> LocalFile {
        use md5::{Digest as _, Md5};
        use sha2::Sha256;
        LocalFile {
            rel: rel.into(),
            path: rel.into(),
            size: content.len() as u64,
            sha256: hex::encode(Sha256::digest(content)),
            md5: hex::encode(Md5::digest(content)),
        }
    }

    fn key(rel: &str) -> String {
        format!("p/{rel}")
    }

    #[test]
    fn adds_changes_deletes_and_keeps() {
        let local = vec![file("a", "1"), file("b", "2"), file("c", "3")];
        let mut remote = BTreeMap::new();
        remote.insert(
            "p/a".into(),
            Remote {
                etag: local[0].md5.clone(),
            },
        );
        remote.insert(
            "p/b".into(),
            Remote {
                etag: file("b", "old").md5,
            },
        );
        remote.insert("p/gone".into(), Remote { etag: "x".into() });
        remote.insert("p/foreign".into(), Remote { etag: "y".into() });
        let mut manifest = Manifest::new();
        manifest.insert(
            "p/gone".into(),
            Uploaded {
                sha256: "s".into(),
                etag: "x".into(),
            },
        );
        manifest.insert(
            "p/b".into(),
            Uploaded {
                sha256: file("b", "old").sha256,
                etag: file("b", "old").md5,
            },
        );
        let p = plan(&local, &remote, &manifest, key);
        assert_eq!(
            p.add.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
        assert_eq!(
            p.change.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(
            p.same.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        // Only keys flow uploaded are deleted, never others under the prefix.
        assert_eq!(p.delete, ["p/gone"]);
        let l = lines(&p, &manifest, key, 10);
        assert_eq!(
            l[0],
            "files: 1 to add, 1 to change, 1 to delete, 1 unchanged"
        );
        assert!(l[1].starts_with("+ c (sha256 "), "{l:?}");
        assert!(l[2].starts_with("~ b (sha256 "), "{l:?}");
        assert_eq!(l[3], "- p/gone");
        assert_eq!(lines(&p, &manifest, key, 1).last().unwrap(), "… and 2 more");
    }

    #[test]
    fn multipart_etags_fall_back_to_what_flow_uploaded() {
        let local = vec![file("big", "data")];
        let mut remote = BTreeMap::new();
        remote.insert(
            "p/big".into(),
            Remote {
                etag: "abc-3".into(),
            },
        );
        let mut manifest = Manifest::new();
        assert_eq!(plan(&local, &remote, &manifest, key).change.len(), 1);
        manifest.insert(
            "p/big".into(),
            Uploaded {
                sha256: local[0].sha256.clone(),
                etag: "abc-3".into(),
            },
        );
        let p = plan(&local, &remote, &manifest, key);
        assert!(p.is_empty());
        assert_eq!(p.same.len(), 1);
    }
}
