//! Where the files of one workflow's state live.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::error::StateError;

/// The directories and files under a state root (`.flow/` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateLayout {
    /// The state directory itself.
    pub root: PathBuf,
}

impl StateLayout {
    /// The layout under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateLayout { root: root.into() }
    }

    /// The sled database directory: `root/db`.
    pub fn db(&self) -> PathBuf {
        self.root.join("db")
    }

    /// The process lock file: `root/lock`.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// Where the process holding the state answers reads while it holds
    /// it: `root/live.sock` (see the `live` module).
    pub fn live_socket(&self) -> PathBuf {
        self.root.join("live.sock")
    }

    /// The commit watermark: `root/serial` (see the `watermark` module).
    pub fn watermark(&self) -> PathBuf {
        self.root.join("serial")
    }

    /// The directory of step logs: `root/logs`.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// The log of one step: `root/logs/<step>.log`. Characters other than
    /// ASCII letters, digits, `_` and `-` are percent-encoded, so that any
    /// step name maps to its own file inside `logs/`; a name whose file
    /// name would pass [`MAX_FILE_STEM`] bytes is cut there and ends in a
    /// digest of the whole name, so it still maps to a file of its own.
    pub fn log_file(&self, step: &str) -> PathBuf {
        self.logs().join(format!("{}.log", file_name_for(step)))
    }

    /// When each step of the last apply or destroy ran: `root/last-run.json`.
    pub fn last_run(&self) -> PathBuf {
        self.root.join("last-run.json")
    }

    /// The run history: `root/runs.jsonl`.
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs.jsonl")
    }

    /// The directory of JSON backups: `root/backups`.
    pub fn backups(&self) -> PathBuf {
        self.root.join("backups")
    }

    /// Creates `root`, `logs/` and `backups/` (mode 0700) where missing.
    /// Directories that already exist keep their mode.
    pub fn ensure(&self) -> Result<(), StateError> {
        for dir in [self.root.clone(), self.logs(), self.backups()] {
            create_private_dir(&dir)?;
        }
        Ok(())
    }
}

/// Creates `dir` and its missing parents; the ones created get mode 0700.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), StateError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StateError::io(dir, e))
}

/// The longest file name (without `.log`) a step's log gets: file systems
/// take 255 bytes per name, and a 255-byte step name, or an instance key of
/// non-ASCII text (three bytes each, nine once percent-encoded), passes it.
pub const MAX_FILE_STEM: usize = 200;

fn file_name_for(step: &str) -> String {
    let mut out = String::with_capacity(step.len());
    let mut cut = None;
    for b in step.bytes() {
        let before = out.len();
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
        if out.len() > MAX_FILE_STEM - 33 && cut.is_none() {
            cut = Some(before);
        }
    }
    if out.len() <= MAX_FILE_STEM {
        return out;
    }
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(step.as_bytes()));
    out.truncate(cut.unwrap_or(0));
    format!("{out}~{}", &digest[..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn paths() {
        let l = StateLayout::new(".flow");
        assert_eq!(l.db(), Path::new(".flow/db"));
        assert_eq!(l.lock_file(), Path::new(".flow/lock"));
        assert_eq!(l.watermark(), Path::new(".flow/serial"));
        assert_eq!(l.logs(), Path::new(".flow/logs"));
        assert_eq!(l.backups(), Path::new(".flow/backups"));
        assert_eq!(
            l.log_file("nccl_test-2"),
            Path::new(".flow/logs/nccl_test-2.log")
        );
    }

    #[test]
    fn odd_step_names_stay_inside_logs() {
        let l = StateLayout::new(".flow");
        assert_eq!(l.log_file("../x"), Path::new(".flow/logs/%2E%2E%2Fx.log"));
        assert_eq!(l.log_file("a.b"), Path::new(".flow/logs/a%2Eb.log"));
        let long = "s".repeat(255);
        let unicode = format!("each[\"{}\"]", "語".repeat(85));
        let name = |step: &str| {
            l.log_file(step)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        for step in [long.as_str(), &unicode] {
            assert!(name(step).len() <= MAX_FILE_STEM + 4, "{}", name(step));
            assert_eq!(name(step), name(step), "stable");
        }
        assert_ne!(name(&long), name(&format!("{}t", &long[..254])));
        assert!(name(&long).starts_with("sss"));
        assert_eq!(
            name(&"s".repeat(MAX_FILE_STEM)),
            format!("{}.log", "s".repeat(MAX_FILE_STEM))
        );
    }

    #[test]
    fn ensure_creates_private_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let l = StateLayout::new(tmp.path().join("nested/.flow"));
        l.ensure().unwrap();
        l.ensure().unwrap();
        for dir in [l.root.clone(), l.logs(), l.backups()] {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
    }
}
