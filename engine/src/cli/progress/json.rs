//! A JSON event stream for programs: one object per line on stdout.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Value, json};

use crate::apply::events::{Event, EventSink, Failure, Outcome};
use crate::apply::schedule::Report;
use crate::plan::Action;

/// Writes every event as one line of JSON.
pub struct JsonProgress {
    start: Instant,
    out: Mutex<()>,
    /// What each step started doing: a failed step's `finished` names it.
    started: Mutex<HashMap<String, Action>>,
}

impl JsonProgress {
    /// A stream starting now.
    pub fn new() -> Self {
        JsonProgress {
            start: Instant::now(),
            out: Mutex::new(()),
            started: Mutex::new(HashMap::new()),
        }
    }
}

impl Default for JsonProgress {
    fn default() -> Self {
        Self::new()
    }
}

/// Write one JSON object as a line.
pub fn write_line(value: &Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{value}");
    let _ = stdout.flush();
}

fn outcome_fields(outcome: &Outcome) -> (&'static str, Option<&str>, Option<&str>) {
    match outcome {
        Outcome::Done(a) => ("done", Some(a.word()), None),
        Outcome::Unchanged => ("unchanged", None, None),
        Outcome::Failed(f) => ("failed", None, Some(f.message.as_str())),
        Outcome::Skipped(why) => ("skipped", None, Some(why.as_str())),
        Outcome::NotStarted => ("not_started", None, None),
    }
}

impl EventSink for JsonProgress {
    fn emit(&self, event: Event) {
        let elapsed_ms = self.start.elapsed().as_millis() as u64;
        let value = match event {
            Event::Started { step, action } => {
                self.started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(step.clone(), action);
                json!({
                    "type": "started", "step": step, "action": action.word(), "elapsed_ms": elapsed_ms,
                })
            }
            Event::Progress { step, message } => json!({
                "type": "progress", "step": step, "message": message, "elapsed_ms": elapsed_ms,
            }),
            Event::Retrying {
                step,
                attempt,
                delay,
                error,
            } => json!({
                "type": "retrying", "step": step, "attempt": attempt,
                "delay_ms": delay.as_millis() as u64, "error": error, "elapsed_ms": elapsed_ms,
            }),
            Event::Finished {
                step,
                outcome,
                elapsed,
            } => {
                let (status, mut action, message) = outcome_fields(&outcome);
                // A failed step failed at what it started: the same word.
                let started = self
                    .started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&step)
                    .copied();
                if let (Outcome::Failed(_), Some(a)) = (&outcome, started) {
                    action = Some(a.word());
                }
                let mut v = json!({
                    "type": "finished", "step": step, "status": status, "action": action,
                    "message": message, "duration_ms": elapsed.as_millis() as u64,
                    "elapsed_ms": elapsed_ms,
                });
                if let Outcome::Failed(Failure { help: Some(h), .. }) = &outcome {
                    v["help"] = json!(h);
                }
                v
            }
            Event::Interrupted { running } => json!({
                "type": "interrupted", "running": running, "elapsed_ms": elapsed_ms,
            }),
        };
        let _guard = self.out.lock();
        write_line(&value);
    }
}

/// The closing `summary` event.
pub fn print_json_summary(report: &Report) {
    let count = |status: &str| {
        report
            .steps
            .iter()
            .filter(|(_, o, _)| outcome_fields(o).0 == status)
            .count()
    };
    let failed: Vec<Value> = report
        .steps
        .iter()
        .filter_map(|(n, o, _)| match o {
            Outcome::Failed(f) => {
                Some(json!({"step": n, "message": f.message, "help": f.help, "at": f.at}))
            }
            _ => None,
        })
        .collect();
    write_line(&json!({
        "type": "summary",
        "done": count("done"),
        "unchanged": count("unchanged"),
        "failed": count("failed"),
        "skipped": count("skipped"),
        "not_started": count("not_started"),
        "retries": report.retries,
        "interrupted": report.interrupted,
        "duration_ms": report.elapsed.as_millis() as u64,
        "failures": failed,
    }));
}
