//! The local side of a sync: every file under the source folder, with the
//! hashes that tell whether S3 already holds the same content.

use std::io::Read;
use std::path::{Path, PathBuf};

use md5::Md5;
use sha2::{Digest, Sha256};

/// One local file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalFile {
    /// Its path under the folder, `/`-separated.
    pub rel: String,
    /// Where it is.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// SHA-256 of its content, hex.
    pub sha256: String,
    /// MD5 of its content, hex: what S3 reports as the ETag of a plain upload.
    pub md5: String,
}

/// What a scan of the source folder found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The files to send, sorted by relative path.
    pub files: Vec<LocalFile>,
    /// The symbolic links left out, by relative path, sorted: every link
    /// unless links are followed, and links to folders always (they could
    /// loop).
    pub skipped: Vec<String>,
}

/// Why a scan stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScanError {
    /// A file or folder could not be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A followed link leads out of the source folder.
    #[error(
        "`{rel}` is a symbolic link to {}, outside the source folder; remove the link, or copy what it points to into the folder (the folder is {})",
        target.display(),
        root.display()
    )]
    LinkOutside {
        /// The link, relative to the source folder.
        rel: String,
        /// Where it leads.
        target: PathBuf,
        /// The source folder, as named.
        root: PathBuf,
    },
}

/// Every file under `dir`, sorted by relative path. Symbolic links are
/// skipped unless `follow_links`; then a link to a file inside `dir` is sent
/// as that file, a link that leads out of `dir` is refused, and a link to a
/// folder is still skipped.
pub(crate) fn scan(dir: &Path, follow_links: bool) -> Result<Scan, ScanError> {
    scan_with(dir, follow_links, true)
}

/// The links [`scan`] would refuse, found without reading any file: for
/// offline checks of large folders.
pub(crate) fn check_links(dir: &Path) -> Result<(), ScanError> {
    scan_with(dir, true, false).map(|_| ())
}

/// [`scan`], hashing each file only if `hash`.
fn scan_with(dir: &Path, follow_links: bool, hash: bool) -> Result<Scan, ScanError> {
    let root = dir.canonicalize()?;
    let mut found = Scan::default();
    let w = Walk {
        dir,
        root: &root,
        follow_links,
        hash,
    };
    walk(&w, dir, &mut found)?;
    found.files.sort_by(|a, b| a.rel.cmp(&b.rel));
    found.skipped.sort();
    Ok(found)
}

/// What every level of a scan needs.
struct Walk<'a> {
    /// The source folder as named.
    dir: &'a Path,
    /// The source folder, resolved.
    root: &'a Path,
    follow_links: bool,
    /// Whether to read and hash the files.
    hash: bool,
}

fn walk(w: &Walk, dir: &Path, out: &mut Scan) -> Result<(), ScanError> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        let rel = path
            .strip_prefix(w.dir)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if kind.is_dir() {
            walk(w, &path, out)?;
            continue;
        }
        if kind.is_symlink() {
            if !w.follow_links {
                out.skipped.push(rel);
                continue;
            }
            let target = path.canonicalize().map_err(|e| {
                std::io::Error::new(e.kind(), format!("the link `{rel}` leads nowhere: {e}"))
            })?;
            if !target.starts_with(w.root) {
                return Err(ScanError::LinkOutside {
                    rel,
                    target,
                    root: w.dir.to_path_buf(),
                });
            }
            if target.is_dir() {
                out.skipped.push(rel);
                continue;
            }
        }
        let meta = std::fs::metadata(&path)?;
        if !meta.is_file() {
            continue;
        }
        let (sha256, md5) = if w.hash {
            hashes(&path)?
        } else {
            Default::default()
        };
        out.files.push(LocalFile {
            rel,
            path,
            size: meta.len(),
            sha256,
            md5,
        });
    }
    Ok(())
}

/// SHA-256 and MD5 of a file's content, reading it once.
fn hashes(path: &Path) -> std::io::Result<(String, String)> {
    let mut file = std::fs::File::open(path)?;
    let mut sha = Sha256::new();
    let mut md5 = Md5::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        md5.update(&buf[..n]);
    }
    Ok((hex::encode(sha.finalize()), hex::encode(md5.finalize())))
}

/// One digest of the whole folder: its files' paths and contents.
pub(crate) fn digest(files: &[LocalFile]) -> String {
    let mut sha = Sha256::new();
    for f in files {
        sha.update(f.rel.as_bytes());
        sha.update([0]);
        sha.update(f.sha256.as_bytes());
        sha.update(b"\n");
    }
    hex::encode(sha.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_nested_files_with_their_hashes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deep")).unwrap();
        std::fs::write(dir.path().join("b.txt"), "hello").unwrap();
        std::fs::write(dir.path().join("sub/deep/a.txt"), "").unwrap();
        let files = scan(dir.path(), false).unwrap().files;
        let rels: Vec<_> = files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["b.txt", "sub/deep/a.txt"]);
        assert_eq!(files[0].md5, "5d41402abc4b2a76b9719d911017c592");
        assert_eq!(
            files[0].sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(files[0].size, 5);
        let before = digest(&files);
        std::fs::write(dir.path().join("b.txt"), "hellO").unwrap();
        assert_ne!(digest(&scan(dir.path(), false).unwrap().files), before);
    }

    /// A source folder `src` with `a.txt`, a link to it, a link to a
    /// subfolder, and a link to a file outside `src`.
    fn with_links() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("a.txt"), "a").unwrap();
        std::fs::write(src.join("sub/b.txt"), "b").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink("a.txt", src.join("alias.txt")).unwrap();
        std::os::unix::fs::symlink("sub", src.join("sub-link")).unwrap();
        dir
    }

    #[test]
    fn links_are_skipped_and_listed_by_default() {
        let dir = with_links();
        std::os::unix::fs::symlink(
            dir.path().join("secret.txt"),
            dir.path().join("src/out.txt"),
        )
        .unwrap();
        let found = scan(&dir.path().join("src"), false).unwrap();
        let rels: Vec<_> = found.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["a.txt", "sub/b.txt"]);
        assert_eq!(found.skipped, ["alias.txt", "out.txt", "sub-link"]);
    }

    #[test]
    fn followed_links_inside_are_sent_and_links_out_refused() {
        let dir = with_links();
        let found = scan(&dir.path().join("src"), true).unwrap();
        let rels: Vec<_> = found.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["a.txt", "alias.txt", "sub/b.txt"]);
        assert_eq!(found.files[1].sha256, found.files[0].sha256);
        assert_eq!(found.skipped, ["sub-link"]);
        // A link out, even through `..` and a link to a folder outside.
        std::os::unix::fs::symlink("../../secret.txt", dir.path().join("src/sub/up.txt")).unwrap();
        let err = scan(&dir.path().join("src"), true).unwrap_err().to_string();
        assert!(
            err.starts_with("`sub/up.txt` is a symbolic link to "),
            "{err}"
        );
        assert!(
            err.contains("secret.txt, outside the source folder"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("src/sub/up.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("src/parent")).unwrap();
        assert!(check_links(&dir.path().join("src")).is_err());
        let err = scan(&dir.path().join("src"), true).unwrap_err().to_string();
        assert!(err.starts_with("`parent` is a symbolic link to "), "{err}");
    }
}
