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

/// Every file under `dir`, sorted by relative path. Symbolic links to files
/// are followed; those to folders are not (they could loop).
pub(crate) fn scan(dir: &Path) -> std::io::Result<Vec<LocalFile>> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(files)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<LocalFile>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(root, &path, out)?;
            continue;
        }
        let meta = std::fs::metadata(&path)?;
        if !meta.is_file() {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let (sha256, md5) = hashes(&path)?;
        out.push(LocalFile {
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
        let files = scan(dir.path()).unwrap();
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
        assert_ne!(digest(&scan(dir.path()).unwrap()), before);
    }
}
