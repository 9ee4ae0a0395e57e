//! Printing apply and destroy events as plain lines.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::apply::events::{Event, EventSink, Outcome};
use crate::apply::schedule::Report;
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

fn verb(action: Action) -> &'static str {
    match action {
        Action::Create => "creating",
        Action::Update => "updating",
        Action::Replace => "replacing",
        Action::Delete => "deleting",
        Action::NoOp => "checking",
    }
}

fn past(action: Action) -> &'static str {
    match action {
        Action::Create => "created",
        Action::Update => "updated",
        Action::Replace => "replaced",
        Action::Delete => "deleted",
        Action::NoOp => "unchanged",
    }
}

/// A duration for people: 850ms, 12.3s, 4m05s.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

impl EventSink for PlainProgress {
    fn emit(&self, event: Event) {
        if self.quiet {
            return;
        }
        match event {
            Event::Started { step, action } => self.line(&step, &format!("{}…", verb(action))),
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
                let text = match outcome {
                    Outcome::Done(a) => {
                        self.style
                            .ok(&format!("✓ {} in {}", past(a), human(elapsed)))
                    }
                    Outcome::Unchanged => "unchanged".into(),
                    Outcome::Failed(m) => self.style.err(&format!(
                        "✗ failed after {}: {}",
                        human(elapsed),
                        first_line(&m)
                    )),
                    Outcome::Skipped(why) => self.style.warn(&format!("↷ skipped: {why}")),
                    Outcome::NotStarted => "not started".into(),
                };
                self.line(&step, &text);
            }
            Event::Interrupted { running } => {
                let _guard = self.out.lock();
                println!(
                    "{}",
                    self.style.warn(&format!(
                        "Interrupted: starting nothing new; waiting for {running} running step{} to finish (interrupt again to abandon them; they will be reconciled on the next run)",
                        if running == 1 { "" } else { "s" }
                    ))
                );
            }
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The closing summary and every failure in full.
pub fn print_summary(report: &Report, style: &Style, what: &str) {
    let count = |a: Action| report.count(|o| *o == Outcome::Done(a));
    let failed: Vec<_> = report
        .steps
        .iter()
        .filter_map(|(n, o, _)| match o {
            Outcome::Failed(m) => Some((n, m)),
            _ => None,
        })
        .collect();
    let skipped = report.count(|o| matches!(o, Outcome::Skipped(_)));
    let not_started = report.count(|o| matches!(o, Outcome::NotStarted));
    let unchanged = report.count(|o| matches!(o, Outcome::Unchanged));
    for (name, message) in &failed {
        println!("\n{} {name}:", style.err("✗ failed:"));
        for line in message.lines() {
            println!("    {line}");
        }
    }
    if !report.steps.is_empty() {
        println!();
    }
    let head = if report.interrupted {
        style.warn(&format!("{what} interrupted"))
    } else if failed.is_empty() {
        style.ok(&format!("{what} complete"))
    } else {
        style.err(&format!("{what} finished with failures"))
    };
    let mut parts = vec![];
    for (a, word) in [
        (Action::Create, "created"),
        (Action::Update, "updated"),
        (Action::Replace, "replaced"),
        (Action::Delete, "deleted"),
    ] {
        let n = count(a);
        if n > 0 {
            parts.push(format!("{n} {word}"));
        }
    }
    parts.push(format!("{unchanged} unchanged"));
    parts.push(format!("{} failed", failed.len()));
    parts.push(format!("{skipped} skipped"));
    if not_started > 0 {
        parts.push(format!("{not_started} not started"));
    }
    if report.retries > 0 {
        parts.push(format!("{} retries", report.retries));
    }
    println!(
        "\n{head}: {} in {}.",
        parts.join(", "),
        human(report.elapsed)
    );
}
