//! Test harness for end-to-end tests: a scratch folder with workflow files,
//! and the real `flow` binary run in it as a user would.
#![allow(dead_code)]

pub mod aws;
pub mod clock;
pub mod disk;
pub mod fault_answers;
pub mod fault_proxy;
pub mod kube;
pub mod moto;
pub mod pcluster;
pub mod proc_sampler;
pub mod secret_scan;
pub mod slurm;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("engine/ has a parent")
        .to_path_buf()
}

/// The `flow` binary under test. `FLOW_E2E_BIN` names another one: the
/// compatibility fixtures were written by running a test with an earlier
/// release's binary.
pub fn flow_bin() -> PathBuf {
    std::env::var_os("FLOW_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_flow")))
}

/// A scratch project folder.
pub struct Project {
    dir: tempfile::TempDir,
}

/// What a finished `flow` run printed.
#[derive(Debug)]
pub struct Run {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Fails the test unless the exit code is `code`, showing the output.
    pub fn expect(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "expected exit {code}, got {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// Standard output and error together.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl Project {
    /// An empty project.
    pub fn new() -> Self {
        Project {
            dir: tempfile::Builder::new()
                .prefix("flow-e2e")
                .tempdir()
                .expect("tempdir"),
        }
    }

    /// The project folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file (creating folders) and return its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    /// Read a file of the project ("" when missing).
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Number of lines in a file (0 when missing).
    pub fn lines(&self, name: &str) -> usize {
        self.read(name).lines().count()
    }

    /// A `flow` command run in the project folder, with colour off.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(flow_bin());
        c.args(args)
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .env("COLUMNS", "100")
            // Each project has its own fingerprint key, as each user does.
            .env("FLOW_CONFIG_DIR", self.config_dir())
            .stdin(Stdio::null());
        c
    }

    /// The folder of this project's user config (its fingerprint key).
    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join(".user-config")
    }

    /// Run `flow ARGS` to the end.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd(args).output().expect("run flow"))
    }

    /// Run `flow ARGS` with extra environment variables.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Run::from(c.output().expect("run flow"))
    }

    /// Start `flow ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn flow")
    }

    /// The newest backup `flow state backups` lists for `workflow`.
    pub fn newest_backup(&self, workflow: &str) -> String {
        let listed = self.run(&["state", "backups", workflow]).expect(0);
        listed
            .stdout
            .lines()
            .nth(1)
            .and_then(|l| l.split_whitespace().last())
            .expect("a backup")
            .to_string()
    }

    /// Every file under the state folder, recursively.
    pub fn state_files(&self) -> Vec<PathBuf> {
        files_under(&self.dir.path().join(".flow"))
    }
}

/// Every file under `dir`, recursively (none when it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, &mut out);
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Wait until `cond` holds, polling; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collect a finished child's output.
pub fn finish(child: Child) -> Run {
    Run::from(child.wait_with_output().expect("wait flow"))
}

/// Send a signal to a process.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a pid we own; no memory is touched.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill failed");
}

/// Copy the folder `from`, with everything under it, to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixtures") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        // A link stays a link (the diagnostics corpus has links that lead out).
        if let Ok(link) = std::fs::read_link(entry.path()) {
            std::os::unix::fs::symlink(link, &target).expect("copy link");
        } else if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy fixture");
        }
    }
}
