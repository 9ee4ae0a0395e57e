//! Network filesystems, where the state lock cannot be trusted.
//!
//! The lock is a `flock` (see the `lock` module). On NFS, Lustre, SMB, Ceph,
//! 9p and FUSE filesystems it is emulated, local to one client, or missing,
//! depending on the server and mount options, so two machines may both
//! believe they hold it. Opening a local state there is allowed (a single
//! machine is safe), with a warning pointing to the S3 backend, whose lock
//! is an object with a lease.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The `statfs` magic numbers of the network filesystems flow warns about
/// (`linux/magic.h`; Lustre's is in Lustre's own headers), with their names.
const NETWORK: &[(u32, &str)] = &[
    (0x6969, "NFS"),
    (0x0BD0_0BD0, "Lustre"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x00C3_6400, "Ceph"),
    (0x0102_1997, "9p"),
    (0x6573_5546, "FUSE"),
];

/// The network filesystem with `statfs` type `f_type`, if it is one.
pub fn classify(f_type: i64) -> Option<&'static str> {
    // f_type is a signed long; the magic numbers are 32-bit patterns.
    let magic = f_type as u64 as u32;
    NETWORK
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// The `statfs` type of the filesystem holding `path`.
pub fn filesystem_type(path: &Path) -> std::io::Result<i64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `buf` a statfs we own.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(buf.f_type as i64)
}

/// The warning for a local state at `root`, when it is on a network
/// filesystem (nothing when it is not, or cannot be told).
pub fn warning(root: &Path) -> Option<String> {
    let name = classify(filesystem_type(root).ok()?)?;
    Some(message(root, name))
}

/// The warning for a state at `root` on the network filesystem `name`.
fn message(root: &Path, name: &str) -> String {
    format!(
        "the state folder {} is on {name}, where the lock that keeps two flow processes apart (flock) is not reliable across machines; run flow against it from one machine only, or keep the state in S3 with [workflow.state] backend = \"s3\" (see docs/state.md, \"Shared state in S3\")",
        root.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_filesystems_are_named() {
        assert_eq!(classify(0x6969), Some("NFS"));
        assert_eq!(classify(0x0BD0_0BD0), Some("Lustre"));
        assert_eq!(classify(0xFF53_4D42), Some("CIFS"));
        assert_eq!(classify(0xFE53_4D42), Some("SMB2"));
        assert_eq!(classify(0x00C3_6400), Some("Ceph"));
        assert_eq!(classify(0x0102_1997), Some("9p"));
        assert_eq!(classify(0x6573_5546), Some("FUSE"));
        // The same bits seen through a sign-extended 32-bit f_type.
        assert_eq!(classify(0xFF53_4D42_u32 as i32 as i64), Some("CIFS"));
    }

    #[test]
    fn local_filesystems_are_not() {
        for local in [
            0xEF53_i64,  // ext2/3/4
            0x5846_5342, // xfs
            0x9123_683E, // btrfs
            0x0102_1994, // tmpfs
            0x794C_7630, // overlayfs
            0x2FC1_2FC1, // zfs
        ] {
            assert_eq!(classify(local), None, "{local:#x}");
        }
    }

    #[test]
    fn the_temp_folder_is_read_and_local() {
        let tmp = tempfile::tempdir().unwrap();
        let found = filesystem_type(tmp.path()).unwrap();
        assert_ne!(found, 0);
        // CI and developers keep temp folders on local disks.
        assert_eq!(warning(tmp.path()), None, "{found:#x}");
        assert!(filesystem_type(&tmp.path().join("missing")).is_err());
    }

    #[test]
    fn the_warning_names_the_filesystem_and_the_way_out() {
        let text = message(Path::new("/shared/.flow/wf"), "NFS");
        assert!(text.starts_with("the state folder /shared/.flow/wf is on NFS"));
        assert!(text.contains("flock"), "{text}");
        assert!(text.contains("backend = \"s3\""), "{text}");
        assert!(text.contains("docs/state.md"), "{text}");
        assert!(!text.contains('\n'));
    }
}
