//! What apply tells the user while it runs, and where each step's log goes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flow_providers::Reporter;

use crate::plan::Action;
use crate::secrets::Redactor;

/// How a step ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The action was carried out.
    Done(Action),
    /// Nothing needed doing.
    Unchanged,
    /// It failed.
    Failed(Failure),
    /// It did not run because something it needs failed or was skipped.
    Skipped(String),
    /// It did not start because the run was interrupted.
    NotStarted,
}

/// How a step failed, as shown and recorded: the message and the next step,
/// both already redacted.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What went wrong.
    pub message: String,
    /// What the user can do about it, when there is something to say.
    pub help: Option<String>,
    /// `file:line:col` of the step input the failure concerns, when the
    /// provider named one.
    pub at: Option<String>,
}

impl Failure {
    /// A failure with no next step to offer.
    pub fn bare(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            help: None,
            at: None,
        }
    }
}

/// Something that happened during an apply or destroy.
#[derive(Debug, Clone)]
pub enum Event {
    /// A step started.
    Started {
        /// The step.
        step: String,
        /// What it is doing.
        action: Action,
    },
    /// A progress message from the provider (already redacted).
    Progress {
        /// The step.
        step: String,
        /// The message.
        message: String,
    },
    /// A retryable error; the step will try again after `delay`.
    Retrying {
        /// The step.
        step: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// How long until the next attempt.
        delay: Duration,
        /// The error (redacted).
        error: String,
    },
    /// A step ended.
    Finished {
        /// The step.
        step: String,
        /// How.
        outcome: Outcome,
        /// How long it took.
        elapsed: Duration,
    },
    /// Ctrl-C: nothing new starts.
    Interrupted {
        /// How many steps are still running and will be allowed to finish.
        running: usize,
    },
}

/// Receives events; the CLI prints them.
pub trait EventSink: Send + Sync {
    /// Handle one event.
    fn emit(&self, event: Event);
}

/// The reporter handed to a provider for one step: writes the step's log
/// (redacted, mode 0600) and forwards progress events.
///
/// The log file is created only when the step has something to say (provider
/// output, events, or a note that matters: a retry, a reconciliation, a
/// failure). Routine remarks ("create (null)", "create done") wait in memory
/// and go into the file ahead of the first real line, or nowhere: creating
/// thousands of files that say nothing was most of the cost of large applies.
pub struct StepReporter {
    step: String,
    log: Mutex<LogFile>,
    redactor: Arc<Redactor>,
    sink: Arc<dyn EventSink>,
    /// What the step's job measured, for the run history.
    measured: Mutex<Option<flow_providers::Measured>>,
}

impl StepReporter {
    /// A reporter appending to `log_path` (created on first use).
    pub fn new(
        step: &str,
        log_path: &Path,
        redactor: Arc<Redactor>,
        sink: Arc<dyn EventSink>,
    ) -> Self {
        StepReporter {
            step: step.to_string(),
            log: Mutex::new(LogFile {
                path: log_path.to_path_buf(),
                file: None,
                pending: Vec::new(),
                last: String::new(),
                last_was_event: false,
                unwritable: false,
            }),
            redactor,
            sink,
            measured: Mutex::new(None),
        }
    }

    /// Append a line. The same text given as an event and as a log line,
    /// in either order (a command's latest output shown as progress, a
    /// stack event a provider both shows and logs), is written once; a
    /// program's own line repeated is written each time.
    fn write(&self, line: &str, event: bool) {
        let Ok(mut log) = self.log.lock() else { return };
        if line == log.last && (event || log.last_was_event) {
            return;
        }
        log.last_was_event = event;
        let stamp = flow_state::timefmt::format_rfc3339(flow_state::now_secs());
        let text = if event {
            format!("{stamp} [event] {line}")
        } else {
            format!("{stamp} {line}")
        };
        log.last = line.to_string();
        if log.file.is_none() && !log.unwritable {
            match open_log(&log.path) {
                Ok(file) => log.file = Some(file),
                // Said once, where the user looks; the step goes on.
                Err(e) => {
                    log.unwritable = true;
                    self.sink.emit(Event::Progress {
                        step: self.step.clone(),
                        message: format!(
                            "flow: cannot write this step's log {}: {e}",
                            log.path.display()
                        ),
                    });
                }
            }
        }
        let pending = std::mem::take(&mut log.pending);
        if let Some(f) = log.file.as_mut() {
            for (secs, line) in pending {
                let stamp = flow_state::timefmt::format_rfc3339(secs);
                let _ = writeln!(f, "{stamp} [flow] {}", self.redactor.redact(&line));
            }
            let _ = writeln!(f, "{text}");
        }
    }

    /// A note of the engine's own that matters (a retry, a reconciliation,
    /// a failure): always written.
    pub fn note(&self, line: &str) {
        self.write(&format!("[flow] {}", self.redactor.redact(line)), false);
    }

    /// A routine note of the engine's own (what starts, what ended well):
    /// written only if the step's log has other lines. Until then it waits
    /// as it was given, with its time: stamped and redacted only if it is
    /// written (most steps' never are).
    pub fn remark(&self, line: &str) {
        let Ok(mut log) = self.log.lock() else { return };
        if log.file.is_none() {
            log.pending.push((flow_state::now_secs(), line.to_string()));
            log.last.clear();
            return;
        }
        drop(log);
        self.write(&format!("[flow] {}", self.redactor.redact(line)), false);
    }
}

impl Reporter for StepReporter {
    fn event(&self, message: &str) {
        let message = self.redactor.redact(message);
        self.write(&message, true);
        self.sink.emit(Event::Progress {
            step: self.step.clone(),
            message,
        });
    }

    fn log(&self, line: &str) {
        self.write(&self.redactor.redact(line), false);
    }

    fn measured(&self, measured: &flow_providers::Measured) {
        *self.measured.lock().unwrap_or_else(|e| e.into_inner()) = Some(measured.clone());
    }
}

impl StepReporter {
    /// What the step's job measured, if it told (once).
    pub fn take_measured(&self) -> Option<flow_providers::Measured> {
        self.measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The redactor its lines go through.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Where the step's log goes (the file is made on first use).
    pub fn log_path(&self) -> PathBuf {
        match self.log.lock() {
            Ok(log) => log.path.clone(),
            Err(poisoned) => poisoned.into_inner().path.clone(),
        }
    }
}

struct LogFile {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Routine remarks not written yet: when (seconds) and what, unredacted.
    pending: Vec<(u64, String)>,
    last: String,
    /// Whether `last` was written as an event.
    last_was_event: bool,
    /// The file could not be opened (said once; not tried again).
    unwritable: bool,
}

fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_providers::Reporter;

    #[derive(Default)]
    struct Recorded(Mutex<Vec<String>>);

    impl EventSink for Recorded {
        fn emit(&self, event: Event) {
            if let Event::Progress { message, .. } = event {
                self.0.lock().unwrap().push(message);
            }
        }
    }

    #[test]
    fn routine_remarks_wait_and_are_written_redacted_before_the_first_real_line() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("logs/s.log");
        let redactor = Arc::new(Redactor::default());
        let reporter =
            StepReporter::new("s", &path, redactor.clone(), Arc::new(Recorded::default()));
        reporter.remark("create (null) with hunter2-secret");
        assert!(!path.exists(), "a remark alone made the log");
        assert_eq!(reporter.log_path(), path);
        redactor.add(&serde_json::Value::String("hunter2-secret".into()));
        reporter.note("failed: boom");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].ends_with(" [flow] create (null) with (sensitive)"),
            "{text}"
        );
        assert!(lines[1].ends_with(" [flow] failed: boom"), "{text}");
        reporter.remark("create done");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines()
                .last()
                .unwrap()
                .ends_with(" [flow] create done"),
            "{text}"
        );
    }

    /// A stack event a provider shows and logs is one line; a program's
    /// line printed twice stays twice.
    #[test]
    fn each_event_is_written_once_whichever_came_first() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.log");
        let reporter = StepReporter::new(
            "s",
            &path,
            Arc::new(Redactor::default()),
            Arc::new(Recorded::default()),
        );
        reporter.event("vpc (AWS::CloudFormation::Stack) CREATE_IN_PROGRESS");
        reporter.log("vpc (AWS::CloudFormation::Stack) CREATE_IN_PROGRESS");
        reporter.log("step 1 done");
        reporter.event("step 1 done");
        reporter.log("again");
        reporter.log("again");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().map(|l| l.split_once(' ').unwrap().1).collect();
        assert_eq!(
            lines,
            [
                "[event] vpc (AWS::CloudFormation::Stack) CREATE_IN_PROGRESS",
                "step 1 done",
                "again",
                "again"
            ],
            "{text}"
        );
    }

    #[test]
    fn a_log_that_cannot_be_written_is_said_once_and_the_step_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let sink = Arc::new(Recorded::default());
        let reporter = StepReporter::new(
            "s",
            &file.join("logs/s.log"),
            Arc::new(Redactor::default()),
            sink.clone(),
        );
        reporter.log("one");
        reporter.log("two");
        let said = sink.0.lock().unwrap().clone();
        let warnings: Vec<&String> = said.iter().filter(|m| m.contains("cannot write")).collect();
        assert_eq!(warnings.len(), 1, "{said:?}");
        assert!(warnings[0].contains("a-file/logs/s.log"), "{said:?}");
    }
}
