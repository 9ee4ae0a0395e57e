//! Renames that survive a power cut.
//!
//! `rename(2)` changes a directory; until that directory is fsynced, a crash
//! may bring back the old name (or neither). Every rename the state makes
//! goes through [`rename_durably`], which fsyncs the folder afterwards.

use std::fs::File;
use std::path::Path;

/// Renames `from` to `to`, then fsyncs the folder holding `to` (and the one
/// holding `from`, when it is another), so the new name is on disk when this
/// returns.
pub fn rename_durably(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    let to_dir = parent(to);
    sync_dir(to_dir)?;
    let from_dir = parent(from);
    if from_dir != to_dir {
        sync_dir(from_dir)?;
    }
    Ok(())
}

/// Fsyncs the folder `dir`, so the names in it (new, removed or renamed
/// entries) are on disk.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The folder holding `path` (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_files_and_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a.tmp");
        std::fs::write(&a, "x").unwrap();
        let b = tmp.path().join("b");
        rename_durably(&a, &b).unwrap();
        assert!(!a.exists());
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "x");

        let sub = tmp.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let moved = sub.join("b");
        rename_durably(&b, &moved).unwrap();
        assert!(moved.exists());
    }

    #[test]
    fn a_missing_source_is_an_error_and_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let err = rename_durably(&tmp.path().join("nope"), &tmp.path().join("x")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert!(!tmp.path().join("x").exists());
    }

    #[test]
    fn bare_names_sync_the_current_folder() {
        assert_eq!(parent(Path::new("x")), Path::new("."));
        assert_eq!(parent(Path::new("/a/x")), Path::new("/a"));
    }
}
