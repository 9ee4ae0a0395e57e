//! The builder over SSH: waiting until its sshd lets the key in, then the
//! step's Ansible playbooks run on it, unmodified, by the real
//! `ansible-playbook`. The private key lives in a 0600 temporary file only
//! for the build: its path is on command lines, its content never is, and
//! it never reaches a log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::contract::{ProviderError, Reporter};

/// Environment variables flow's own AWS credentials live in: the playbook
/// does not inherit them.
const WITHHELD: [&str; 3] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// The most of a failing task's output an error carries.
const OUTPUT_MAX: usize = 4000;

/// Where and how to log in to the builder.
pub(crate) struct Target {
    /// The address SSH connects to.
    pub address: String,
    /// The login user.
    pub user: String,
    /// The key, named for messages (key pair and fingerprint; never its content).
    pub key_named: String,
    /// The private key's 0600 file.
    key: tempfile::NamedTempFile,
    /// The builder's host key, pinned on first contact.
    known_hosts: tempfile::NamedTempFile,
}

impl Target {
    /// A target whose key is `private_key` (OpenSSH form), written to a
    /// 0600 temporary file.
    pub(crate) fn new(
        address: String,
        user: String,
        private_key: &str,
        key_pair: &str,
    ) -> Result<Target, ProviderError> {
        let io = |e: std::io::Error| ProviderError::fatal(format!("write the builder's key: {e}"));
        let mut key = tempfile::NamedTempFile::new().map_err(io)?;
        let mut text = private_key.trim_end().to_string();
        text.push('\n');
        key.write_all(text.as_bytes()).map_err(io)?;
        key.flush().map_err(io)?;
        let known_hosts = tempfile::NamedTempFile::new().map_err(io)?;
        let fingerprint = fingerprint(key.path());
        Ok(Target {
            address,
            user,
            key_named: format!("key pair `{key_pair}` ({fingerprint})"),
            key,
            known_hosts,
        })
    }

    /// `user@address`.
    pub(crate) fn destination(&self) -> String {
        format!("{}@{}", self.user, self.address)
    }

    /// The SSH options every connection uses (ssh's and Ansible's).
    fn ssh_options(&self, first: bool) -> Vec<String> {
        let checking = if first { "accept-new" } else { "yes" };
        vec![
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            "ConnectTimeout=5".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
            "-o".into(),
            format!("StrictHostKeyChecking={checking}"),
            "-o".into(),
            format!("UserKnownHostsFile={}", self.known_hosts.path().display()),
        ]
    }

    /// Waits until `ssh USER@ADDRESS true` succeeds; a key the builder
    /// refuses fails at once, anything else once `timeout` has passed.
    /// Either failure is one error naming the address, the user and the key.
    pub(crate) async fn wait_for_ssh(
        &self,
        timeout: Duration,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError> {
        reporter.event(&format!("waiting for SSH on {}", self.destination()));
        let started = Instant::now();
        loop {
            let out = Command::new("ssh")
                .args(self.ssh_options(true))
                .arg("-i")
                .arg(self.key.path())
                .arg(self.destination())
                .arg("true")
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(|e| {
                    ProviderError::fatal(format!("could not run `ssh`: {e}")).with_help(
                        "install OpenSSH's client (Debian: apt-get install openssh-client)",
                    )
                })?;
            if out.status.success() {
                reporter.event(&format!("SSH answers on {}", self.destination()));
                return Ok(());
            }
            let why = String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("ssh exited with 255")
                .trim()
                .to_string();
            let refused = why.contains("Permission denied");
            if refused || started.elapsed() > timeout {
                let help = if refused {
                    "the builder refused the key: check that `ssh_private_key` is the private half of `key_name`, and `ssh_user` the source AMI's login user"
                } else {
                    "check that this machine can reach the builder's address on port 22 (its subnet, security groups, `ssh_interface`)"
                };
                return Err(ProviderError::fatal(format!(
                    "could not reach the builder at {} over SSH with {}{}: {why}",
                    self.destination(),
                    self.key_named,
                    if refused {
                        String::new()
                    } else {
                        format!(" within {}s", timeout.as_secs())
                    }
                ))
                .with_help(help));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Runs `playbook` (its path on this machine, `shown` as the step names
    /// it) on the builder with the real `ansible-playbook`, its output in
    /// the step's log. A failed task is an error naming the task and
    /// carrying what it printed.
    pub(crate) async fn run_playbook(
        &self,
        playbook: &Path,
        shown: &str,
        extra_vars: Option<&Path>,
        reporter: &dyn Reporter,
    ) -> Result<(), ProviderError> {
        reporter.event(&format!(
            "ansible-playbook {shown} on {}",
            self.destination()
        ));
        let mut cmd = Command::new("ansible-playbook");
        cmd.arg("-i")
            .arg(format!("{},", self.address))
            .arg("-u")
            .arg(&self.user)
            .arg("--private-key")
            .arg(self.key.path());
        if let Some(vars) = extra_vars {
            cmd.arg("-e").arg(format!("@{}", vars.display()));
        }
        cmd.arg(playbook)
            .current_dir(playbook.parent().unwrap_or(Path::new(".")))
            .env("ANSIBLE_NOCOLOR", "1")
            .env("ANSIBLE_FORCE_COLOR", "0")
            .env("ANSIBLE_RETRY_FILES_ENABLED", "0")
            .env("ANSIBLE_HOST_KEY_CHECKING", "True")
            .env("ANSIBLE_PYTHON_INTERPRETER", "auto_silent")
            .env("ANSIBLE_SSH_ARGS", self.ssh_options(false).join(" "))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for v in WITHHELD {
            cmd.env_remove(v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            ProviderError::fatal(format!("could not run `ansible-playbook`: {e}")).with_help(
                "install Ansible on the machine flow runs on (Debian: apt-get install ansible)",
            )
        })?;
        let stderr = child.stderr.take().expect("piped stderr");
        let errors = tokio::spawn(async move {
            let mut text = String::new();
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        let mut failure = Failure::default();
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            reporter.log(&line);
            failure.see(&line);
        }
        let status = child
            .wait()
            .await
            .map_err(|e| ProviderError::fatal(format!("wait for ansible-playbook: {e}")))?;
        let stderr = errors.await.unwrap_or_default();
        for line in stderr.lines() {
            reporter.log(line);
        }
        if status.success() {
            return Ok(());
        }
        Err(
            ProviderError::fatal(failure.message(shown, &stderr, status.code())).with_help(
                "fix the playbook (its whole output is in `flow logs`), then apply again",
            ),
        )
    }
}

/// `SHA256:…` of the key at `path` (ssh-keygen -l), or a plain word when
/// it cannot be read.
fn fingerprint(path: &Path) -> String {
    std::process::Command::new("ssh-keygen")
        .arg("-l")
        .arg("-f")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(1)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "fingerprint unknown".into())
}

/// The failing task in ansible-playbook's default output: the last
/// `TASK [name]` header before a `fatal:`/`failed:` line, and that line
/// with what follows it.
#[derive(Debug, Default)]
pub(crate) struct Failure {
    task: Option<String>,
    failed_task: Option<String>,
    output: String,
    taking: bool,
}

impl Failure {
    /// One line of ansible-playbook's standard output.
    pub(crate) fn see(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("TASK [") {
            self.task = rest.rsplit_once(']').map(|(name, _)| name.to_string());
            self.taking = false;
            return;
        }
        if line.starts_with("PLAY ") || line.starts_with("RUNNING HANDLER [") {
            self.taking = false;
        }
        let starts = line.starts_with("fatal: [") || line.starts_with("failed: [");
        if starts && self.failed_task.is_none() {
            self.failed_task = self.task.clone();
            self.taking = true;
        }
        if self.taking && self.output.len() < OUTPUT_MAX {
            if line.trim().is_empty() || line.starts_with("...ignoring") {
                self.taking = false;
                return;
            }
            self.output.push_str(line);
            self.output.push('\n');
        }
    }

    /// The error's message.
    pub(crate) fn message(&self, shown: &str, stderr: &str, code: Option<i32>) -> String {
        let mut output = if self.output.is_empty() {
            stderr.trim().to_string()
        } else {
            self.output.trim().to_string()
        };
        if output.len() > OUTPUT_MAX {
            let mut cut = OUTPUT_MAX;
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            output.truncate(cut);
            output.push_str(" …");
        }
        let code = code.map_or("a signal".to_string(), |c| format!("exit code {c}"));
        match &self.failed_task {
            Some(task) => format!("playbook `{shown}` failed at task `{task}` ({code}):\n{output}"),
            None => format!("playbook `{shown}` failed ({code}):\n{output}"),
        }
    }
}

/// `path` if it names a file the step may read.
pub(crate) fn playbook_path(
    workdir: &crate::file_input::Workdir,
    shown: &str,
) -> Result<PathBuf, ProviderError> {
    let path = workdir
        .resolve(shown)
        .map_err(|e| ProviderError::bad_input(e).at_input(["playbooks"]))?;
    let path = std::path::absolute(&path).unwrap_or(path);
    if !path.is_file() {
        return Err(ProviderError::bad_input(format!(
            "playbook `{shown}` does not exist ({})",
            path.display()
        ))
        .at_input(["playbooks"]));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_task_and_its_output_are_found() {
        let mut f = Failure::default();
        for line in [
            "PLAY [all] ****",
            "TASK [Gathering Facts] ****",
            "ok: [10.0.0.5]",
            "TASK [install the driver] ****",
            "fatal: [10.0.0.5]: FAILED! => {\"changed\": true, \"rc\": 3, \"stdout\": \"no driver here\"}",
            "",
            "PLAY RECAP ****",
        ] {
            f.see(line);
        }
        let m = f.message("site.yml", "", Some(2));
        assert!(m.contains("task `install the driver`"), "{m}");
        assert!(m.contains("no driver here"), "{m}");
        assert!(!m.contains("PLAY RECAP"), "{m}");
    }
}
