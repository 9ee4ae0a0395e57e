//! The process lock on a state directory: one flow process at a time.
//!
//! The lock is an advisory `flock` on `root/lock` (through
//! [`std::fs::File::try_lock`]). The kernel drops it when the process dies,
//! however it dies, so a crash never leaves a stale lock behind. The file's
//! content only says who holds it, for the error the next process shows.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::StateError;
pub use crate::holder::LockInfo;
use crate::layout::StateLayout;
use crate::records::now_secs;

/// The held lock; dropping it clears the lock file and releases the lock.
#[derive(Debug)]
pub struct StateLock {
    file: File,
    path: PathBuf,
    info: LockInfo,
}

impl StateLock {
    /// Takes the lock of the state in `layout` for `command`, without
    /// waiting. The state root must exist. If another process (or another
    /// open state in this one) holds it, returns [`StateError::Locked`] naming
    /// the holder.
    pub fn acquire(layout: &StateLayout, command: &str) -> Result<StateLock, StateError> {
        StateLock::acquire_with(layout, command, false)
    }

    /// Like [`StateLock::acquire`], saying in the lock file that this
    /// holder answers reads while it holds the state (a [`Store`](crate::Store)),
    /// so that a reader waits for that instead of failing.
    pub(crate) fn acquire_answering_reads(
        layout: &StateLayout,
        command: &str,
    ) -> Result<StateLock, StateError> {
        StateLock::acquire_with(layout, command, true)
    }

    fn acquire_with(
        layout: &StateLayout,
        command: &str,
        answers_reads: bool,
    ) -> Result<StateLock, StateError> {
        let path = layout.lock_file();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false) // the holder's details must survive a failed attempt
            .mode(0o600)
            .open(&path)
            .map_err(|e| StateError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StateError::Locked {
                    path: layout.root.clone(),
                    info: read_info(&mut file),
                });
            }
            Err(TryLockError::Error(e)) => return Err(StateError::io(&path, e)),
        }
        let info = LockInfo {
            pid: std::process::id(),
            host: hostname(),
            since: now_secs(),
            command: command.to_string(),
            answers_reads,
        };
        write_info(&mut file, &info).map_err(|e| StateError::io(&path, e))?;
        Ok(StateLock { file, path, info })
    }

    /// What this process wrote into the lock file.
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        // Clear first, while still holding the lock, so that nobody reads a
        // holder that is gone. Failures only leave stale text behind.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

fn write_info(file: &mut File, info: &LockInfo) -> std::io::Result<()> {
    let text = serde_json::to_vec(info).map_err(std::io::Error::other)?;
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&text)?;
    file.write_all(b"\n")
}

/// Who the lock file of `layout` says holds the state now (`None` when
/// nobody does, or it cannot be read). Only reads it.
pub(crate) fn holder(layout: &StateLayout) -> Option<LockInfo> {
    read_info(&mut File::open(layout.lock_file()).ok()?)
}

/// Whether the lock file of `layout` is empty: nobody holds the state, or
/// its holder has just taken the lock and not yet written who it is, or has
/// cleared the file and not yet let go (see [`StateLock`]'s drop).
pub(crate) fn names_nobody(layout: &StateLayout) -> bool {
    std::fs::metadata(layout.lock_file()).is_ok_and(|m| m.len() == 0)
}

fn read_info(file: &mut File) -> Option<LockInfo> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(64 * 1024).read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

/// This machine's host name, or `unknown`.
pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match String::from_utf8_lossy(&buf[..len]).into_owned() {
        name if name.is_empty() => "unknown".to_string(),
        name => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> (tempfile::TempDir, StateLayout) {
        let tmp = tempfile::tempdir().unwrap();
        let layout = StateLayout::new(tmp.path().join(".flow"));
        layout.ensure().unwrap();
        (tmp, layout)
    }

    #[test]
    fn second_lock_in_the_same_process_is_refused_naming_the_holder() {
        let (_tmp, layout) = layout();
        let held = StateLock::acquire(&layout, "flow apply").unwrap();
        let err = StateLock::acquire(&layout, "flow plan").unwrap_err();
        match &err {
            StateError::Locked { path, info } => {
                assert_eq!(path, &layout.root);
                let info = info.as_ref().expect("holder details");
                assert_eq!(info.pid, std::process::id());
                assert_eq!(info.command, "flow apply");
                assert_eq!(info, held.info());
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("is locked by `flow apply`"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
    }

    #[test]
    fn drop_releases_and_clears() {
        let (_tmp, layout) = layout();
        let first = StateLock::acquire(&layout, "flow apply").unwrap();
        drop(first);
        assert_eq!(std::fs::read(layout.lock_file()).unwrap(), b"");
        let again = StateLock::acquire(&layout, "flow destroy").unwrap();
        assert_eq!(again.info().command, "flow destroy");
    }

    #[test]
    fn unreadable_holder_still_reports_locked() {
        let (_tmp, layout) = layout();
        let held = StateLock::acquire(&layout, "flow apply").unwrap();
        std::fs::write(layout.lock_file(), b"{garbage").unwrap();
        match StateLock::acquire(&layout, "flow plan") {
            Err(StateError::Locked { info: None, .. }) => {}
            other => panic!("expected Locked without info, got {other:?}"),
        }
        drop(held);
    }

    #[test]
    fn lock_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let (_tmp, layout) = layout();
        let _held = StateLock::acquire(&layout, "flow apply").unwrap();
        let mode = std::fs::metadata(layout.lock_file())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// Helper run in a child process by `kill_9_releases_the_lock`: holds the
    /// lock of the state named by the environment until killed.
    #[test]
    #[ignore = "helper for kill_9_releases_the_lock"]
    fn hold_lock_in_child() {
        let root = std::env::var_os("FLOW_STATE_TEST_HOLD_LOCK").expect(
            "not a test: the child process of kill_9_releases_the_lock, which names the state in FLOW_STATE_TEST_HOLD_LOCK",
        );
        let layout = StateLayout::new(root);
        // The parent probes the lock meanwhile, so it may be busy for a moment.
        let _held = loop {
            match StateLock::acquire(&layout, "flow apply") {
                Ok(lock) => break lock,
                Err(StateError::Locked { .. }) => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(other) => panic!("{other}"),
            }
        };
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    #[test]
    fn kill_9_releases_the_lock() {
        let (_tmp, layout) = layout();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lock::tests::hold_lock_in_child",
                "--ignored",
                "--quiet",
            ])
            .env("FLOW_STATE_TEST_HOLD_LOCK", &layout.root)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let holder = loop {
            match StateLock::acquire(&layout, "flow plan") {
                Err(StateError::Locked {
                    info: Some(info), ..
                }) => break info,
                Err(StateError::Locked { info: None, .. }) => {}
                Ok(lock) => drop(lock), // the child has not taken it yet
                Err(other) => panic!("unexpected {other:?}"),
            }
            assert!(
                started.elapsed().as_secs() < 30,
                "the child never took the lock"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(holder.pid, child.id());
        assert_eq!(holder.command, "flow apply");

        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lock = StateLock::acquire(&layout, "flow apply").unwrap();
        assert_eq!(lock.info().pid, std::process::id());
    }

    #[test]
    fn hostname_is_not_empty() {
        assert!(!hostname().is_empty());
    }
}
