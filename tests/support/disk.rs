//! A small real filesystem: a tmpfs mounted on a temporary folder (the
//! tests run as root, on developers' machines and in CI).

use std::path::Path;
use std::process::Command;

/// A mounted tmpfs, unmounted when dropped.
pub struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `"8m"`); `None`,
    /// after saying so loudly on stderr, where mounting is not permitted.
    pub fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::Builder::new()
            .prefix("flow-e2e-disk")
            .tempdir()
            .expect("tempdir");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk { dir }),
            Ok(o) => {
                eprintln!(
                    "\n!!! SKIPPED: `mount -t tmpfs` is not permitted here ({}); this test needs root\n",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("\n!!! SKIPPED: `mount` cannot run here ({e})\n");
                None
            }
        }
    }

    /// The mounted folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes still free.
    pub fn free(&self) -> u64 {
        let c = std::ffi::CString::new(self.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a zeroed statvfs is valid, and `c` is NUL-terminated.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
        s.f_bavail * s.f_frsize
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily, in case a process still has a file open there.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
