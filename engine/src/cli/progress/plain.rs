//! Plain progress lines, for CI logs and pipes: no escape codes unless
//! colour is forced, one line per event, each with the time since the start.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use super::{finished_line, human, verb};
use crate::apply::events::{Event, EventSink};
use crate::plan::Action;
use crate::style::Style;

/// Prints one line per event, prefixed with the time since the run began.
pub struct PlainProgress {
    style: Style,
    quiet: bool,
    verbose: bool,
    start: Instant,
    width: usize,
    out: Mutex<()>,
}

impl PlainProgress {
    /// A printer for steps whose names are at most `width` long.
    pub fn new(style: Style, quiet: bool, verbose: bool, width: usize) -> Self {
        PlainProgress {
            style,
            quiet,
            verbose,
            start: Instant::now(),
            width,
            out: Mutex::new(()),
        }
    }

    fn line(&self, step: &str, text: &str) {
        let _guard = self.out.lock();
        let t = self.start.elapsed().as_secs_f64();
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "{} {:<w$}  {text}",
            self.style.dim(&format!("[{t:>7.1}s]")),
            step,
            w = self.width
        );
    }
}

impl EventSink for PlainProgress {
    fn emit(&self, event: Event) {
        if self.quiet {
            return;
        }
        match event {
            Event::Started { step, action } if action != Action::NoOp => {
                self.line(&step, &format!("{}…", verb(action)))
            }
            Event::Started { .. } => {}
            Event::Progress { step, message } => {
                if self.verbose || !message.is_empty() {
                    self.line(&step, &self.style.dim(&message));
                }
            }
            Event::Retrying {
                step,
                attempt,
                delay,
                error,
            } => self.line(
                &step,
                &self.style.warn(&format!(
                    "attempt {attempt} failed ({error}); retrying in {}",
                    human(delay)
                )),
            ),
            Event::Finished {
                step,
                outcome,
                elapsed,
            } => {
                if let Some(text) = finished_line(&self.style, &outcome, elapsed) {
                    self.line(&step, &text);
                }
            }
            Event::Interrupted { running } => {
                let _guard = self.out.lock();
                println!("{}", self.style.warn(&interrupted_text(running)));
            }
        }
    }
}

/// What an interrupt means, in one line.
pub fn interrupted_text(running: usize) -> String {
    format!(
        "Interrupted: starting nothing new; waiting for {running} running step{} to finish (interrupt again to abandon them; they will be reconciled on the next run)",
        if running == 1 { "" } else { "s" }
    )
}
