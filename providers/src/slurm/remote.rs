//! Where Slurm's commands run: on the machine flow runs on, or over SSH on
//! a login or head node. Either way a command is an argument list (never a
//! local shell line), its script arrives on standard input, and a failure
//! to start it is one line naming what to install or fix.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::contract::{ProviderError, Values};
use crate::inputs;

/// Environment variables flow's own AWS credentials live in: a job started
/// on this machine does not inherit them.
const WITHHELD: [&str; 3] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// How long an SSH connection may take to open.
const SSH_CONNECT_SECS: u32 = 10;

/// How long the shared SSH connection outlives its last command, should
/// flow die without closing it.
const SSH_PERSIST_SECS: u32 = 30;

/// The longest path a Unix socket may have (108 bytes on Linux, 104 on
/// macOS), less room for ssh's temporary suffix.
const SOCKET_PATH_MAX: usize = 80;

/// The finished command: exit code and what it printed.
#[derive(Debug)]
pub(crate) struct Ran {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    /// Whether it exited with 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The last non-empty line of standard error, for messages.
    pub fn complaint(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
    }
}

/// An SSH destination and what `ssh` needs to reach it.
#[derive(Debug)]
pub(crate) struct Ssh {
    host: String,
    user: Option<String>,
    port: Option<u16>,
    /// The private key, in a 0600 file only this process knows, if one was given.
    key: Option<tempfile::NamedTempFile>,
    /// The host's public key, when pinned, as a known_hosts file.
    known_hosts: Option<tempfile::NamedTempFile>,
    /// A private (0700) folder for the control socket that lets every
    /// command of this operation share one SSH connection; `None` when
    /// its path would be too long for a socket.
    control: Option<tempfile::TempDir>,
}

/// Where commands run.
#[derive(Debug)]
pub(crate) enum Remote {
    /// This machine, in `cwd`.
    Local {
        /// The folder commands start in (the workflow's).
        cwd: PathBuf,
    },
    /// A login or head node over SSH.
    Ssh(Ssh),
}

impl Remote {
    /// The place the step's inputs name: `host` (with `ssh_user`,
    /// `ssh_port`, `ssh_private_key`, `ssh_host_key`) for SSH, else this
    /// machine in `workdir`.
    pub fn from_inputs(
        values: &Values,
        workdir: &std::path::Path,
    ) -> Result<Remote, ProviderError> {
        let Some(host) = inputs::opt_str(values, "host")?.filter(|h| !h.is_empty()) else {
            return Ok(Remote::Local {
                cwd: workdir.to_path_buf(),
            });
        };
        let port = inputs::opt_int(values, "ssh_port")?
            .map(|p| {
                u16::try_from(p)
                    .map_err(|_| ProviderError::bad_input(format!("`ssh_port` {p} is not a port")))
            })
            .transpose()?;
        let key = inputs::opt_str(values, "ssh_private_key")?.filter(|k| !k.is_empty());
        if values
            .get("ssh_private_key")
            .is_some_and(crate::contract::is_sealed)
        {
            return Err(ProviderError::invalid(format!(
                "the SSH private key for {host} is only a seal in state, and the workflow does not give it now"
            ))
            .with_help("give the workflow's variables (the key's) to this command, so that flow can use the key again"));
        }
        let key = key.map(|k| secret_file(&k, "private key")).transpose()?;
        let known_hosts = inputs::opt_str(values, "ssh_host_key")?
            .filter(|k| !k.is_empty())
            .map(|k| {
                let line = match port {
                    Some(p) if p != 22 => format!("[{host}]:{p} {k}"),
                    _ => format!("{host} {k}"),
                };
                secret_file(&line, "host key")
            })
            .transpose()?;
        let control = tempfile::Builder::new()
            .prefix("flow-ssh-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .ok()
            .filter(|d| d.path().join("cm").as_os_str().len() <= SOCKET_PATH_MAX);
        Ok(Remote::Ssh(Ssh {
            host,
            user: inputs::opt_str(values, "ssh_user")?.filter(|u| !u.is_empty()),
            port,
            key,
            known_hosts,
            control,
        }))
    }

    /// Whether `values` name an SSH key that state holds only sealed (a
    /// plan's refresh has no workflow values to unseal it with).
    pub fn key_is_sealed(values: &Values) -> bool {
        values
            .get("ssh_private_key")
            .is_some_and(crate::contract::is_sealed)
    }

    /// Where this is, for messages: `this machine` or `user@host:port`.
    pub fn describe(&self) -> String {
        match self {
            Remote::Local { .. } => "this machine".into(),
            Remote::Ssh(ssh) => ssh.destination(),
        }
    }

    /// Whether commands run over SSH.
    pub fn is_ssh(&self) -> bool {
        matches!(self, Remote::Ssh(_))
    }

    /// Runs `argv` there, with `stdin` on its standard input, and waits.
    pub async fn run(&self, argv: &[&str], stdin: Option<&[u8]>) -> Result<Ran, ProviderError> {
        let mut cmd = match self {
            Remote::Local { cwd } => {
                let mut cmd = Command::new(argv[0]);
                cmd.args(&argv[1..]).current_dir(cwd);
                for name in WITHHELD {
                    cmd.env_remove(name);
                }
                cmd
            }
            Remote::Ssh(ssh) => ssh.command(argv),
        };
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        let program = if self.is_ssh() { "ssh" } else { argv[0] };
        let mut child = cmd
            .spawn()
            .map_err(|e| self.not_started(program, argv[0], &e))?;
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(bytes).await.map_err(|e| {
                ProviderError::retryable(format!("could not hand `{}` its input: {e}", argv[0]))
            })?;
            drop(pipe);
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| ProviderError::retryable(format!("`{}` did not finish: {e}", argv[0])))?;
        let ran = Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        match self {
            Remote::Ssh(ssh) if ran.code == Some(255) => Err(ssh.unreachable(&ran)),
            _ if ran.code == Some(127) => Err(self.missing(argv[0])),
            _ => Ok(ran),
        }
    }

    /// The error for a program that could not be started.
    fn not_started(&self, program: &str, wanted: &str, e: &std::io::Error) -> ProviderError {
        if e.kind() != std::io::ErrorKind::NotFound {
            return ProviderError::fatal(format!("could not start `{program}`: {e}"));
        }
        if program == "ssh" {
            return ProviderError::not_created(
                "`ssh` is not installed on this machine (not found on PATH)",
            )
            .with_help("install OpenSSH's client (Debian: apt-get install openssh-client) to reach the cluster's login or head node");
        }
        self.missing(wanted)
    }

    /// The error for a Slurm command that is not installed where it runs.
    fn missing(&self, program: &str) -> ProviderError {
        match self {
            Remote::Local { .. } => ProviderError::not_created(format!(
                "`{program}` is not installed on this machine (not found on PATH)"
            ))
            .with_help(
                "install Slurm's client commands (Debian: apt-get install slurm-client) with a slurm.conf for the cluster, or set `host` to submit on a login or head node over SSH",
            ),
            Remote::Ssh(ssh) => ProviderError::not_created(format!(
                "`{program}` is not installed on {} (the shell there did not find it)",
                ssh.destination()
            ))
            .with_help(
                "point `host` at a login or head node of the Slurm cluster, where Slurm's commands are on the login shell's PATH",
            ),
        }
    }
}

impl Ssh {
    /// `user@host:port`, as much of it as was given.
    fn destination(&self) -> String {
        let mut d = String::new();
        if let Some(u) = &self.user {
            d.push_str(u);
            d.push('@');
        }
        d.push_str(&self.host);
        if let Some(p) = self.port {
            d.push_str(&format!(":{p}"));
        }
        d
    }

    /// `ssh` with the options flow always sets, then `argv` quoted for the
    /// remote shell.
    fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(self.options());
        cmd.arg(&self.host).arg("--");
        cmd.arg(argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "));
        cmd
    }

    /// The options of every `ssh` to this node: no prompts, time limits,
    /// the pinned host key or trust on first use, the key, port and user,
    /// and the shared connection (the first command opens it, the others
    /// reuse it: one connection's set-up instead of one per poll).
    fn options(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "-o",
            "BatchMode=yes",
            "-o",
            &format!("ConnectTimeout={SSH_CONNECT_SECS}"),
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "LogLevel=ERROR",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut option = |o: String| {
            args.push("-o".into());
            args.push(o);
        };
        match &self.known_hosts {
            Some(file) => {
                option("StrictHostKeyChecking=yes".into());
                option(format!("UserKnownHostsFile={}", file.path().display()));
            }
            None => option("StrictHostKeyChecking=accept-new".into()),
        }
        if let Some(dir) = &self.control {
            option("ControlMaster=auto".into());
            option(format!("ControlPath={}", dir.path().join("cm").display()));
            option(format!("ControlPersist={SSH_PERSIST_SECS}"));
        }
        if let Some(key) = &self.key {
            option("IdentitiesOnly=yes".into());
            args.push("-i".into());
            args.push(key.path().display().to_string());
        }
        if let Some(port) = self.port {
            args.push("-p".into());
            args.push(port.to_string());
        }
        if let Some(user) = &self.user {
            args.push("-l".into());
            args.push(user.clone());
        }
        args
    }

    /// The error for an SSH connection that failed (ssh's exit code 255).
    fn unreachable(&self, ran: &Ran) -> ProviderError {
        let why = ran.complaint();
        let help = if why.contains("Permission denied") {
            "check `ssh_user` and `ssh_private_key`: the node refused the key"
        } else if why.contains("Host key verification failed")
            || why.contains("REMOTE HOST IDENTIFICATION")
        {
            "the node's host key is not the one expected: check `ssh_host_key`, or the known_hosts entry for it"
        } else {
            "check that `host` is the login or head node's address, that it is up, and that this machine may reach it on the SSH port"
        };
        ProviderError::retryable(format!(
            "could not reach {} over SSH: {}",
            self.destination(),
            if why.is_empty() {
                "ssh exited with 255"
            } else {
                why
            }
        ))
        .with_help(help)
    }
}

impl Drop for Ssh {
    /// Closes the shared connection, if one was opened (`ssh -O exit`).
    fn drop(&mut self) {
        let Some(dir) = &self.control else { return };
        if !dir.path().join("cm").exists() {
            return;
        }
        let _ = std::process::Command::new("ssh")
            .args(self.options())
            .args(["-O", "exit"])
            .arg(&self.host)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `text` in a file only this process may read (mode 0600), ending in a newline.
fn secret_file(text: &str, what: &str) -> Result<tempfile::NamedTempFile, ProviderError> {
    let mut file = tempfile::Builder::new()
        .prefix("flow-ssh-")
        .tempfile()
        .map_err(|e| ProviderError::fatal(format!("could not write the SSH {what}: {e}")))?;
    let mut body = text.trim_end().to_string();
    body.push('\n');
    file.write_all(body.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|e| ProviderError::fatal(format!("could not write the SSH {what}: {e}")))?;
    Ok(file)
}

/// `arg` quoted for a POSIX shell (the remote login shell ssh hands the
/// command to).
pub(crate) fn quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,%@+".contains(&b))
    {
        return arg.to_string();
    }
    format!("'{}'", arg.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn arguments_are_quoted_for_the_remote_shell() {
        assert_eq!(quote("--nodes=2"), "--nodes=2");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$(reboot)"), "'$(reboot)'");
        assert_eq!(quote(""), "''");
    }

    #[tokio::test]
    async fn a_missing_program_is_one_line_naming_what_to_install() {
        let local = Remote::from_inputs(&values(json!({})), std::path::Path::new(".")).unwrap();
        let err = local
            .run(&["flow-no-such-sbatch", "--parsable"], None)
            .await
            .unwrap_err();
        assert_eq!(err.kind, crate::contract::ErrorKind::NotCreated);
        assert!(
            err.message.contains("not installed on this machine"),
            "{}",
            err.message
        );
        assert!(err.help.unwrap().contains("slurm-client"));
    }

    #[test]
    fn the_key_is_in_a_private_file_and_never_on_the_command_line() {
        let remote = Remote::from_inputs(
            &values(json!({"host": "10.0.0.5", "ssh_user": "ubuntu", "ssh_port": 2222,
                "ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"})),
            std::path::Path::new("."),
        )
        .unwrap();
        let Remote::Ssh(ssh) = &remote else { panic!() };
        assert_eq!(remote.describe(), "ubuntu@10.0.0.5:2222");
        let key = ssh.key.as_ref().unwrap().path();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let cmd = ssh.command(&["sbatch", "--parsable"]);
        let argv: Vec<String> = cmd
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            !argv
                .iter()
                .any(|a| a.contains("PRIVATE KEY") || a.contains("AAAA"))
        );
        assert_eq!(argv.last().unwrap(), "sbatch --parsable");
        // Every command shares one connection through a socket in a
        // folder only this user may enter.
        let control = ssh.control.as_ref().unwrap().path();
        assert_eq!(
            std::fs::metadata(control).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let path = format!("ControlPath={}", control.join("cm").display());
        assert!(argv.contains(&path), "{argv:?}");
        assert!(argv.contains(&"ControlMaster=auto".to_string()), "{argv:?}");
    }

    #[test]
    fn a_sealed_key_is_refused_not_used() {
        let sealed = crate::contract::seal_hex(&"ab".repeat(32));
        let inputs = values(json!({"host": "10.0.0.5", "ssh_private_key": sealed}));
        assert!(Remote::key_is_sealed(&inputs));
        let err = Remote::from_inputs(&inputs, std::path::Path::new(".")).unwrap_err();
        assert!(
            err.message.contains("only a seal in state"),
            "{}",
            err.message
        );
    }
}
