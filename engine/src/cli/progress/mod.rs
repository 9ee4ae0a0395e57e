//! What apply and destroy show while they run: a live display on a terminal,
//! plain lines elsewhere (CI, pipes), or a JSON event stream for programs.

mod json;
mod live;
mod plain;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

pub use json::{JsonProgress, print_json_summary, write_line as write_json_line};
pub use live::LiveProgress;
pub use plain::PlainProgress;

use crate::apply::events::{EventSink, Outcome};
use crate::apply::schedule::Report;
use crate::plan::Action;
use crate::style::Style;

use super::common::Ui;

/// Pick the display for a run of `steps` steps named at most `width` long.
pub fn sink_for(ui: Ui, json: bool, steps: usize, width: usize) -> Arc<dyn EventSink> {
    if json {
        Arc::new(JsonProgress::new())
    } else if !ui.quiet && std::io::stdout().is_terminal() {
        Arc::new(LiveProgress::new(ui.style, ui.verbose, steps, width))
    } else {
        Arc::new(PlainProgress::new(ui.style, ui.quiet, ui.verbose, width))
    }
}

/// "creating", "updating", … for a running step.
pub fn verb(action: Action) -> &'static str {
    match action {
        Action::Import => "importing",
        Action::Create => "creating",
        Action::Update => "updating",
        Action::Replace => "replacing",
        Action::Delete => "deleting",
        Action::NoOp => "checking",
    }
}

/// "created", "updated", … for a finished step.
pub fn past(action: Action) -> &'static str {
    match action {
        Action::Import => "imported",
        Action::Create => "created",
        Action::Update => "updated",
        Action::Replace => "replaced",
        Action::Delete => "deleted",
        Action::NoOp => "unchanged",
    }
}

pub use crate::duration::human;

/// The line shown when a step ends, with its mark (✓ ✗ ↷).
pub fn finished_line(style: &Style, outcome: &Outcome, elapsed: Duration) -> Option<String> {
    Some(match outcome {
        Outcome::Done(a) => style.ok(&format!("✓ {} in {}", past(*a), human(elapsed))),
        Outcome::Unchanged | Outcome::NotStarted => return None,
        Outcome::Failed(f) => style.err(&format!(
            "✗ failed after {}: {}",
            human(elapsed),
            one_line(&f.message)
        )),
        Outcome::Skipped(why) => style.warn(&format!("↷ skipped: {why}")),
    })
}

/// A failure message in one line: its first line, and when that only
/// introduces what follows ("…; last lines of its output:"), the last line too.
pub fn one_line(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    match (first.strip_suffix(':'), lines.next_back()) {
        (Some(head), Some(last)) => {
            let head = head
                .strip_suffix("; last lines of its output")
                .unwrap_or(head);
            format!("{head}: {last}")
        }
        _ => first.to_string(),
    }
}

/// The closing summary and every failure in full.
pub fn print_summary(report: &Report, style: &Style, what: &str) {
    let count = |a: Action| report.count(|o| *o == Outcome::Done(a));
    let failed: Vec<_> = report
        .steps
        .iter()
        .filter_map(|(n, o, _)| match o {
            Outcome::Failed(f) => Some((n, f)),
            _ => None,
        })
        .collect();
    let skipped = report.count(|o| matches!(o, Outcome::Skipped(_)));
    let not_started = report.count(|o| matches!(o, Outcome::NotStarted));
    let unchanged = report.count(|o| matches!(o, Outcome::Unchanged));
    for (name, failure) in &failed {
        println!("\n{} {name}:", style.err("✗ failed:"));
        for line in failure.message.lines() {
            println!("    {line}");
        }
        if let Some(at) = &failure.at {
            println!("    --> {at}");
        }
        if let Some(help) = &failure.help {
            println!("    {} {help}", style.bold("help:"));
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
        (Action::Import, "imported"),
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
    match report.retries {
        0 => {}
        1 => parts.push("1 retry".into()),
        n => parts.push(format!("{n} retries")),
    }
    println!("{head}: {} in {}.", parts.join(", "), human(report.elapsed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_fit_on_one_line() {
        assert_eq!(
            one_line("`run` exited with status 2; last lines of its output:\n  a\n  boom\n"),
            "`run` exited with status 2: boom"
        );
        assert_eq!(one_line("plain error"), "plain error");
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_secs(245)), "4m05s");
    }
}
