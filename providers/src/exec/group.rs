//! Keeping a command's processes from outliving the operation that started them.
//!
//! The command runs as the leader of its own process group. If the future
//! running it is dropped (the engine's timeout, or an abort on Ctrl-C) before
//! the command was reaped, [`GroupGuard`] kills the whole group. On Linux the
//! shell also gets `SIGKILL` if flow itself dies (even by `kill -9`), through
//! `PR_SET_PDEATHSIG`.
//!
//! Limits, by design of the operating system rather than of flow:
//! - if flow is killed with `-9`, only the shell is killed with it; the
//!   shell's own children (the grandchildren) may survive, since nothing is
//!   left to kill their group;
//! - the parent-death signal fires when the *thread* that spawned the shell
//!   exits, so commands must be spawned from a thread that lives as long as
//!   the operation: a runtime worker thread, not a short-lived blocking-pool
//!   thread.
//!
//! A command interrupted in any of these ways is re-issued on resume with
//! the same `FLOW_OPERATION_TOKEN`, which a script can use to be idempotent.

use tokio::process::Command;

/// Kills a process group with `SIGKILL` when dropped, unless disarmed first.
#[derive(Debug)]
pub(super) struct GroupGuard {
    /// The group to kill; `None` once disarmed.
    pgid: Option<libc::pid_t>,
}

impl GroupGuard {
    /// A guard for the group led by the process `pid` (started with
    /// `process_group(0)`, so its group id is its pid). `None` guards nothing.
    pub fn new(pid: Option<u32>) -> Self {
        GroupGuard {
            pgid: pid.and_then(|p| libc::pid_t::try_from(p).ok()),
        }
    }

    /// Stops guarding: call as soon as the leader has been reaped, since its
    /// id may then be reused by an unrelated process.
    pub fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) has no memory-safety preconditions. A negative
            // pid names the process group; the leader has not been reaped, so
            // the group id still belongs to the command's group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// Makes the command's process receive `SIGKILL` when the thread that spawned
/// it exits (Linux only; elsewhere nothing is done).
#[cfg(target_os = "linux")]
pub(super) fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (prctl, getppid); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Makes the command's process receive `SIGKILL` when its parent exits
/// (Linux only; elsewhere nothing is done).
#[cfg(not(target_os = "linux"))]
pub(super) fn die_with_parent(_command: &mut Command) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;
    use std::time::Duration;

    #[tokio::test]
    async fn dropping_the_guard_kills_the_group() {
        let mut command = Command::new("sh");
        command
            .args(["-c", "sleep 30"])
            .stdin(Stdio::null())
            .process_group(0);
        die_with_parent(&mut command);
        let mut child = command.spawn().unwrap();
        drop(GroupGuard::new(child.id()));
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("the killed shell exits")
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[tokio::test]
    async fn a_disarmed_guard_kills_nothing() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 0.2"])
            .process_group(0)
            .spawn()
            .unwrap();
        let mut guard = GroupGuard::new(child.id());
        guard.disarm();
        drop(guard);
        let status = child.wait().await.unwrap();
        assert!(status.success(), "{status:?}");
    }
}
