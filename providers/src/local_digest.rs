//! Digests of local files that inputs name, for [`Provider::content_digest`]
//! (crate::contract::Provider::content_digest): a template or manifest edited
//! in place must plan as a change.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::Workdir;
use crate::contract::Values;

/// SHA-256 over the named local files (paths relative to `workdir`), in
/// order; URLs are skipped (they are not fetched while planning). `None`
/// when nothing local is named or a file cannot be read (validation reports
/// missing files).
pub fn files_digest<'a>(
    workdir: &Workdir,
    paths: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    files_digest_with(workdir, paths, str::to_string)
}

/// [`files_digest`] over each file's text as `fill` makes it (a text
/// file's placeholders filled); a file that is not UTF-8 is taken as is.
pub fn files_digest_with<'a>(
    workdir: &Workdir,
    paths: impl IntoIterator<Item = &'a str>,
    fill: impl Fn(&str) -> String,
) -> Option<String> {
    let mut hasher = Sha256::new();
    let mut any = false;
    for p in paths {
        if p.starts_with("http://") || p.starts_with("https://") {
            continue;
        }
        for (name, path) in files_under(workdir, p)? {
            let mut bytes = std::fs::read(path).ok()?;
            if let Ok(text) = std::str::from_utf8(&bytes) {
                bytes = fill(text).into_bytes();
            }
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
            any = true;
        }
    }
    any.then(|| format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// The file `p` itself, or every file under the folder `p` (a kustomize
/// folder), sorted, each with the name it is hashed under; `None` when one
/// of them is outside the folders the workflow may read.
fn files_under(workdir: &Workdir, p: &str) -> Option<Vec<(String, std::path::PathBuf)>> {
    let root = workdir.resolve(p).ok()?;
    if !root.is_dir() {
        return Some(vec![(p.to_string(), root)]);
    }
    let mut out = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            let path = entry.ok()?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let rel = path
                    .strip_prefix(&root)
                    .ok()?
                    .to_string_lossy()
                    .into_owned();
                let name = format!("{p}/{rel}");
                workdir.resolve(&name).ok()?;
                out.push((name, path));
            }
        }
    }
    out.sort();
    Some(out)
}

/// The digest of the local files named by the input `key` (one path or a
/// list of them): what most providers' `content_digest` is.
pub fn of_input(inputs: &Values, key: &str, workdir: &Workdir) -> Option<String> {
    files_digest(workdir, paths_of(inputs, key))
}

/// The paths an input holds: one string, or a list of strings.
pub fn paths_of<'a>(inputs: &'a Values, key: &str) -> Vec<&'a str> {
    match inputs.get(key) {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_hashed_file_by_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("k/base")).unwrap();
        std::fs::write(
            dir.path().join("k/kustomization.yaml"),
            "resources: [base]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("k/base/a.yaml"), "a: 1\n").unwrap();
        let one = files_digest(&Workdir::new(dir.path()), ["k"]).unwrap();
        assert_eq!(one, files_digest(&Workdir::new(dir.path()), ["k"]).unwrap());
        std::fs::write(dir.path().join("k/base/a.yaml"), "a: 2\n").unwrap();
        assert_ne!(one, files_digest(&Workdir::new(dir.path()), ["k"]).unwrap());
    }

    #[test]
    fn a_changed_file_changes_the_digest_and_urls_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "x: 1\n").unwrap();
        let one = files_digest(
            &Workdir::new(dir.path()),
            ["a.yaml", "https://example.invalid/b.yaml"],
        )
        .unwrap();
        assert_eq!(
            one,
            files_digest(&Workdir::new(dir.path()), ["a.yaml"]).unwrap()
        );
        std::fs::write(dir.path().join("a.yaml"), "x: 2\n").unwrap();
        assert_ne!(
            one,
            files_digest(&Workdir::new(dir.path()), ["a.yaml"]).unwrap()
        );
        assert_eq!(
            files_digest(
                &Workdir::new(dir.path()),
                ["https://example.invalid/b.yaml"]
            ),
            None
        );
        assert_eq!(
            files_digest(&Workdir::new(dir.path()), ["missing.yaml"]),
            None
        );
    }
}
