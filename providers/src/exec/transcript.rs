//! Where a command's output lines go: the step log, a live progress line at
//! a bounded rate, and the last lines kept for an error message.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::Reporter;

/// How many of the last lines an error message quotes.
pub(super) const TAIL_LINES: usize = 20;

/// The most a transcript keeps of everything printed, when asked to: what
/// `parse` reads. A program's report is far less; past this, the first
/// bytes are kept (nccl-tests and torchrun print their figures as they go).
pub(super) const KEPT_BYTES: usize = 16 << 20;

/// The shortest time between two progress events.
const EVENT_INTERVAL: Duration = Duration::from_millis(250);

/// The longest progress event, in characters.
const EVENT_WIDTH: usize = 120;

/// Receives a command's output lines, stdout and stderr interleaved as read.
pub(super) struct Transcript<'a> {
    /// Where lines and events go.
    reporter: &'a dyn Reporter,
    /// The last lines, oldest first.
    tail: VecDeque<String>,
    /// The latest line not yet shown as an event, if any.
    pending: Option<String>,
    /// When the last event was shown.
    last_event: Option<Instant>,
    /// Every line, when kept ([`Transcript::keep_all`]).
    kept: Option<String>,
}

impl<'a> Transcript<'a> {
    /// An empty transcript reporting to `reporter`.
    pub fn new(reporter: &'a dyn Reporter) -> Self {
        Transcript {
            reporter,
            tail: VecDeque::with_capacity(TAIL_LINES),
            pending: None,
            last_event: None,
            kept: None,
        }
    }

    /// Keeps every line from now on (up to [`KEPT_BYTES`]).
    pub fn keep_all(&mut self) {
        self.kept = Some(String::new());
    }

    /// Everything kept (nothing unless [`Transcript::keep_all`]).
    pub fn into_text(self) -> String {
        self.kept.unwrap_or_default()
    }

    /// Logs `line`, keeps it for the tail and shows it as progress now, or
    /// later if an event was shown less than a quarter second ago.
    pub fn line(&mut self, line: String) {
        self.reporter.log(&line);
        if let Some(kept) = &mut self.kept
            && kept.len() + line.len() < KEPT_BYTES
        {
            kept.push_str(&line);
            kept.push('\n');
        }
        if let Some(shown) = progress_text(&line) {
            self.pending = Some(shown);
            if self.flush_at().is_some_and(|at| at <= Instant::now()) {
                self.flush();
            }
        }
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    /// When the pending progress line may be shown, if there is one.
    pub fn flush_at(&self) -> Option<Instant> {
        self.pending.as_ref()?;
        Some(match self.last_event {
            Some(last) => last + EVENT_INTERVAL,
            None => Instant::now(),
        })
    }

    /// Shows the pending progress line, if any, now.
    pub fn flush(&mut self) {
        if let Some(text) = self.pending.take() {
            self.reporter.event(&text);
            self.last_event = Some(Instant::now());
        }
    }

    /// The last [`TAIL_LINES`] lines, oldest first.
    pub fn tail(&self) -> impl Iterator<Item = &str> {
        self.tail.iter().map(String::as_str)
    }
}

/// What a line shows as progress: for a line redrawn with carriage returns
/// its last non-blank part, trimmed and cut to [`EVENT_WIDTH`] characters;
/// nothing for a blank line.
fn progress_text(line: &str) -> Option<String> {
    let text = line.rsplit('\r').map(str::trim).find(|s| !s.is_empty())?;
    Some(if text.chars().count() > EVENT_WIDTH {
        let mut cut: String = text.chars().take(EVENT_WIDTH - 1).collect();
        cut.push('…');
        cut
    } else {
        text.to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RecordingReporter;

    #[test]
    fn progress_text_is_short_and_last_redrawn() {
        assert_eq!(progress_text("  ").as_deref(), None);
        assert_eq!(progress_text("10%\r50%\r").as_deref(), Some("50%"));
        let long = "x".repeat(300);
        let shown = progress_text(&long).unwrap();
        assert_eq!(shown.chars().count(), EVENT_WIDTH);
        assert!(shown.ends_with('…'));
        let exact = "é".repeat(EVENT_WIDTH);
        assert_eq!(progress_text(&exact).unwrap(), exact);
    }

    #[tokio::test]
    async fn logs_every_line_keeps_the_tail_and_throttles_events() {
        let reporter = RecordingReporter::default();
        let mut transcript = Transcript::new(&reporter);
        for i in 1..=100 {
            transcript.line(format!("line {i}"));
        }
        assert_eq!(reporter.logs().len(), 100);
        let tail: Vec<&str> = transcript.tail().collect();
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail[0], "line 81");
        assert_eq!(tail[TAIL_LINES - 1], "line 100");
        // The first line shows at once; the rest wait for the interval.
        let events = reporter.events();
        assert!(!events.is_empty() && events.len() < 100, "{events:?}");
        assert_eq!(events[0], "line 1");
        assert!(transcript.flush_at().is_some() || events.last().unwrap() == "line 100");
        transcript.flush();
        assert_eq!(reporter.events().last().unwrap(), "line 100");
        assert_eq!(transcript.flush_at(), None);
    }
}
