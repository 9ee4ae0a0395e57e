//! The script is handed to the shell outside its command line. It goes into
//! a sealed in-memory file (Linux's memfd), which the shell reads as
//! `sh /dev/fd/3`. The text, and any secret interpolated into it, is then
//! never in argv, which any local user can read in `/proc/PID/cmdline`.
//! It is never on disk either, so a `kill -9` leaves nothing behind.
//! Only processes of the same user can open the descriptor, the same ones
//! that can read the process's environment.
//!
//! Elsewhere than on Linux the script goes to `sh -c`, as before.

use std::io;

use tokio::process::Command;

/// The descriptor the shell reads its script from.
#[cfg(target_os = "linux")]
const SCRIPT_FD: libc::c_int = 3;

/// A script ready to be given to `sh`.
pub(super) struct Script {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    #[cfg(not(target_os = "linux"))]
    text: String,
}

impl Script {
    /// The script in a sealed memfd (closed on exec in every other child).
    #[cfg(target_os = "linux")]
    pub fn new(text: &str) -> io::Result<Script> {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

        // SAFETY: the name is a NUL-terminated literal; the call returns a
        // new descriptor or -1, checked below.
        let raw = unsafe {
            libc::memfd_create(
                c"flow-exec-script".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just opened and owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = std::fs::File::from(fd);
        file.write_all(text.as_bytes())?;
        let seals =
            libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor this function owns.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(Script { fd: file.into() })
    }

    /// The script, as the `-c` argument (no memfd off Linux).
    #[cfg(not(target_os = "linux"))]
    pub fn new(text: &str) -> io::Result<Script> {
        Ok(Script {
            text: text.to_string(),
        })
    }

    /// Makes `command` (a `sh`) read the script: `/dev/fd/3` as its only
    /// argument, the memfd put at descriptor 3 in the child.
    #[cfg(target_os = "linux")]
    pub fn hand_to(&self, command: &mut Command) {
        use std::os::fd::AsRawFd;
        let raw = self.fd.as_raw_fd();
        command.arg(format!("/dev/fd/{SCRIPT_FD}"));
        // SAFETY: the closure runs in the forked child before exec and makes
        // only async-signal-safe calls (dup2, fcntl); it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                if raw == SCRIPT_FD {
                    // dup2 onto itself would keep close-on-exec: clear it.
                    if libc::fcntl(raw, libc::F_SETFD, 0) == -1 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, SCRIPT_FD) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Makes `command` (a `sh`) run the script: `-c SCRIPT`.
    #[cfg(not(target_os = "linux"))]
    pub fn hand_to(&self, command: &mut Command) {
        command.arg("-c").arg(&self.text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[tokio::test]
    async fn the_shell_runs_the_script_it_was_handed() {
        let script = Script::new("a=$((6 * 7))\necho \"$a $1\"\n").unwrap();
        let mut command = Command::new("sh");
        script.hand_to(&mut command);
        let out = command
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "42 \n");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_script_is_sealed_and_the_command_line_holds_only_its_descriptor() {
        use std::os::fd::AsRawFd;
        let script = Script::new("echo hi\n").unwrap();
        // SAFETY: fcntl on a descriptor the script owns.
        let seals = unsafe { libc::fcntl(script.fd.as_raw_fd(), libc::F_GET_SEALS) };
        assert_ne!(seals & libc::F_SEAL_WRITE, 0);
        let mut command = Command::new("sh");
        script.hand_to(&mut command);
        let args: Vec<_> = command.as_std().get_args().collect();
        assert_eq!(args, ["/dev/fd/3"]);
    }
}
