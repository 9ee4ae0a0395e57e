//! A small real filesystem: a tmpfs mounted on a temporary folder inside a
//! user and mount namespace of the test's own (`unshare --user
//! --map-root-user --mount`), so mounting needs no privilege: the same way
//! runs as root (CI) and as any user whose kernel allows unprivileged user
//! namespaces. The mount is seen only inside that namespace, so `flow` and
//! whatever the test does on the disk run there (`nsenter`); the namespace,
//! and the tmpfs with it, ends when the holder process is killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::{Project, Run};

/// A mounted tmpfs, seen by the commands run through [`SmallDisk::run`].
pub struct SmallDisk {
    dir: tempfile::TempDir,
    /// `cat` holding the namespace open; its stdin is never written.
    holder: Child,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `"6m"`); panics
    /// naming what is missing when this machine cannot.
    pub fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::Builder::new()
            .prefix("flow-e2e-disk")
            .tempdir()
            .expect("tempdir");
        let script = format!(
            "mount -t tmpfs -o size={size},mode=0700 tmpfs \"$0\" && echo mounted && exec cat"
        );
        let mut holder = Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
            .arg(&script)
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run util-linux's `unshare` ({e}): install it with `apt-get install util-linux`")
            });
        let mut first = String::new();
        let _ = BufReader::new(holder.stdout.take().expect("piped stdout")).read_line(&mut first);
        if first.trim() != "mounted" {
            let _ = holder.kill();
            let out = holder.wait_with_output().expect("wait for unshare");
            panic!(
                "cannot mount a {size} tmpfs in a user and mount namespace of the test's own: `unshare --user --map-root-user --mount` said {:?}. \
                 This test needs unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone = 1 where the kernel has it)",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        SmallDisk { dir, holder }
    }

    /// The mounted folder (as the namespace sees it).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `cmd` run inside the namespace that sees the disk, with the same
    /// program, arguments, environment and working folder.
    pub fn inside(&self, cmd: &Command) -> Command {
        let mut n = Command::new("nsenter");
        n.arg(format!("--target={}", self.holder.id())).args([
            "--user",
            "--mount",
            "--preserve-credentials",
        ]);
        if let Some(dir) = cmd.get_current_dir() {
            n.arg(format!("--wd={}", dir.display()));
        }
        n.arg("--").arg(cmd.get_program()).args(cmd.get_args());
        for (key, value) in cmd.get_envs() {
            match value {
                Some(value) => n.env(key, value),
                None => n.env_remove(key),
            };
        }
        n.stdin(Stdio::null());
        n
    }

    /// `flow ARGS` of project `p`, run to the end inside the namespace.
    pub fn run(&self, p: &Project, args: &[&str]) -> Run {
        Run::from(
            self.inside(&p.cmd(args))
                .output()
                .expect("run flow through nsenter"),
        )
    }

    /// A shell command run to the end inside the namespace; panics if it fails.
    pub fn sh(&self, script: &str) -> String {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        let out = self.inside(&c).output().expect("run sh through nsenter");
        assert!(
            out.status.success(),
            "`{script}` on the small disk failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Bytes still free.
    pub fn free(&self) -> u64 {
        let said = self.sh(&format!("stat -f -c '%a %S' '{}'", self.path().display()));
        let mut parts = said
            .split_whitespace()
            .map(|n| n.parse::<u64>().expect("a number"));
        let (blocks, size) = (parts.next().unwrap(), parts.next().unwrap());
        blocks * size
    }

    /// Removes a file on the disk.
    pub fn remove(&self, file: &Path) {
        self.sh(&format!("rm '{}'", file.display()));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // The namespace and its mount end with the last process in it.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
