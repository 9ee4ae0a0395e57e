//! Running one shell command to completion: `sh` reading the script from a
//! sealed in-memory file, never from its command line (see [`Script`]), in
//! its own process group, its output streamed line by line to a
//! [`Transcript`], its exit status turned into a result.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::time::Instant;

use super::group::{GroupGuard, die_with_parent};
use super::script::Script;
use super::transcript::Transcript;
use crate::contract::{ProviderError, Reporter};

/// How long output is still read after the shell exits, for background
/// processes it left holding stdout or stderr; then flow stops reading.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// One command to run.
pub(super) struct Shell<'a> {
    /// The input the script comes from (`run`, `destroy`), for messages.
    pub label: &'static str,
    /// The script `sh` runs.
    pub script: &'a str,
    /// The folder it runs in.
    pub dir: &'a Path,
    /// Names (or `PREFIX*`) of flow's variables passed on besides
    /// [`DEFAULT_PASS`](super::environment::DEFAULT_PASS).
    pub pass_env: &'a [String],
    /// Variables set on top of the passed ones, later ones winning.
    pub env: Vec<(String, String)>,
    /// Whether to keep everything it prints (for `parse`), up to
    /// [`KEPT_BYTES`](super::transcript::KEPT_BYTES).
    pub keep: bool,
}

impl Shell<'_> {
    /// Runs the command to completion, each output line going to `reporter`.
    /// Fails, not retryably, if it cannot start or exits other than with 0.
    ///
    /// Dropping the future kills the command's whole process group. Gives
    /// what it printed when asked to keep it (else nothing).
    pub async fn run(&self, reporter: &dyn Reporter) -> Result<String, ProviderError> {
        let script = Script::new(self.script).map_err(|e| {
            ProviderError::fatal(format!("could not hand `{}` to the shell: {e}", self.label))
        })?;
        let mut command = Command::new("sh");
        script.hand_to(&mut command);
        command
            .current_dir(self.dir)
            .env_clear()
            .envs(super::environment::inherited(
                std::env::vars_os(),
                self.pass_env,
            ))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|e| {
            ProviderError::fatal(format!(
                "could not start `{}` in {}: {e}",
                self.label,
                self.dir.display()
            ))
        })?;
        let mut guard = GroupGuard::new(child.id());
        let mut stdout = Lines::new(child.stdout.take());
        let mut stderr = Lines::new(child.stderr.take());
        let mut transcript = Transcript::new(reporter);
        if self.keep {
            transcript.keep_all();
        }
        let mut status: Option<ExitStatus> = None;
        let mut stop_reading_at: Option<Instant> = None;

        while status.is_none() || !stdout.done() || !stderr.done() {
            tokio::select! {
                // A `None` (end of pipe) must end the `select!` too, so that
                // the loop condition sees it.
                line = stdout.next(), if !stdout.done() => {
                    if let Some(line) = line {
                        transcript.line(line);
                    }
                }
                line = stderr.next(), if !stderr.done() => {
                    if let Some(line) = line {
                        transcript.line(line);
                    }
                }
                exited = child.wait(), if status.is_none() => {
                    let exited = exited.map_err(|e| ProviderError::fatal(format!(
                        "could not wait for `{}`: {e}", self.label
                    )))?;
                    guard.disarm();
                    status = Some(exited);
                    stop_reading_at = Some(Instant::now() + DRAIN_GRACE);
                }
                () = until(transcript.flush_at()) => transcript.flush(),
                () = until(stop_reading_at) => {
                    reporter.log(&format!(
                        "flow: stopped reading output: `{}` exited but processes it \
                         started in the background still hold its stdout or stderr",
                        self.label
                    ));
                    break;
                }
            }
        }
        transcript.flush();
        match status {
            Some(status) if status.success() => Ok(transcript.into_text()),
            Some(status) => Err(failure(self.label, status, &transcript)),
            None => unreachable!("the loop ends only once the shell has exited"),
        }
    }
}

/// Waits until `at`, or forever if there is no `at`.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The error for a command that exited with `status`, quoting its last lines.
fn failure(label: &str, status: ExitStatus, transcript: &Transcript<'_>) -> ProviderError {
    let mut message = match (status.code(), status.signal()) {
        (Some(code), _) => format!("`{label}` exited with status {code}"),
        (None, Some(signal)) => format!("`{label}` was killed by signal {signal}"),
        (None, None) => format!("`{label}` failed ({status})"),
    };
    let tail: Vec<&str> = transcript.tail().collect();
    if !tail.is_empty() {
        message.push_str("; last lines of its output:");
        for line in tail {
            message.push_str("\n  ");
            message.push_str(line);
        }
    }
    ProviderError::fatal(message)
        .with_help("the command's whole output is in the step's log: `flow logs FILE STEP`")
}

/// Lines read from a pipe, decoded leniently (invalid UTF-8 is replaced).
struct Lines<R> {
    /// The pipe; `None` once read to its end.
    reader: Option<BufReader<R>>,
    /// The line being read; kept across cancelled reads, which append to it.
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    /// Lines of `pipe`; no pipe reads as an empty one.
    fn new(pipe: Option<R>) -> Self {
        Lines {
            reader: pipe.map(BufReader::new),
            buf: Vec::new(),
        }
    }

    /// Whether the pipe has been read to its end.
    fn done(&self) -> bool {
        self.reader.is_none()
    }

    /// The next line without its line ending, or `None` at the end of the
    /// pipe (a read error counts as the end). Cancel-safe: a partly read line
    /// stays in the buffer for the next call.
    async fn next(&mut self) -> Option<String> {
        let reader = self.reader.as_mut()?;
        match reader.read_until(b'\n', &mut self.buf).await {
            Ok(n) if n > 0 || !self.buf.is_empty() => {
                if self.buf.last() == Some(&b'\n') {
                    self.buf.pop();
                    if self.buf.last() == Some(&b'\r') {
                        self.buf.pop();
                    }
                }
                let line = String::from_utf8_lossy(&self.buf).into_owned();
                self.buf.clear();
                Some(line)
            }
            _ => {
                self.reader = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RecordingReporter;

    fn shell<'a>(script: &'a str, dir: &'a Path) -> Shell<'a> {
        Shell {
            label: "run",
            script,
            dir,
            pass_env: &[],
            env: Vec::new(),
            keep: false,
        }
    }

    /// The names of the variables a command run with `pass_env` sees.
    async fn names_seen(pass_env: &[String]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let reporter = RecordingReporter::default();
        Shell {
            pass_env,
            env: vec![("SET_BY_STEP".into(), "1".into())],
            ..shell("env | cut -d= -f1", dir.path())
        }
        .run(&reporter)
        .await
        .unwrap();
        reporter.logs()
    }

    /// cargo sets `CARGO_PKG_NAME` in the environment of the test process:
    /// a variable of flow's own environment that is in no default list.
    #[tokio::test]
    async fn commands_get_only_the_passed_part_of_flows_environment() {
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let seen = names_seen(&[]).await;
        assert!(seen.contains(&"PATH".to_string()), "{seen:?}");
        assert!(seen.contains(&"SET_BY_STEP".to_string()), "{seen:?}");
        assert!(!seen.iter().any(|n| n.starts_with("CARGO_")), "{seen:?}");
        let passed = names_seen(&["CARGO_PKG_*".to_string()]).await;
        assert!(passed.contains(&"CARGO_PKG_NAME".to_string()), "{passed:?}");
        assert!(
            !passed.contains(&"CARGO_MANIFEST_DIR".to_string()),
            "{passed:?}"
        );
    }

    #[tokio::test]
    async fn streams_stdout_and_stderr_lines() {
        let dir = tempfile::tempdir().unwrap();
        let reporter = RecordingReporter::default();
        shell("echo out; echo err >&2; printf 'no newline'", dir.path())
            .run(&reporter)
            .await
            .unwrap();
        let mut logs = reporter.logs();
        logs.sort();
        assert_eq!(logs, vec!["err", "no newline", "out"]);
        assert!(!reporter.events().is_empty());
    }

    #[tokio::test]
    async fn invalid_utf8_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let reporter = RecordingReporter::default();
        shell(r"printf 'a\377b\r\n'", dir.path())
            .run(&reporter)
            .await
            .unwrap();
        assert_eq!(reporter.logs(), vec!["a\u{FFFD}b"]);
    }

    #[tokio::test]
    async fn a_missing_folder_fails_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = shell("true", &missing)
            .run(&RecordingReporter::default())
            .await
            .unwrap_err();
        assert!(
            err.message.starts_with("could not start `run`"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn background_processes_holding_the_pipes_do_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let reporter = RecordingReporter::default();
        // The background sleep keeps stdout open after the shell exits; it is
        // killed at the end so the test leaves nothing behind.
        let result = shell("sleep 30 & echo $! > bg.pid; echo started", dir.path())
            .run(&reporter)
            .await;
        let pid = std::fs::read_to_string(dir.path().join("bg.pid")).unwrap();
        let pid: libc::pid_t = pid.trim().parse().unwrap();
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        result.unwrap();
        let logs = reporter.logs();
        assert_eq!(logs[0], "started");
        assert!(logs[1].contains("stopped reading output"), "{logs:?}");
    }
}
