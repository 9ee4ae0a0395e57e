//! The live display on a terminal: a spinner line per running step with its
//! elapsed time and latest event, finished steps scrolling above with ✓ / ✗
//! and their duration, and a bottom line of counts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::plain::interrupted_text;
use super::{finished_line, human, verb};
use crate::apply::events::{Event, EventSink, Outcome};
use crate::plan::Action;
use crate::style::Style;

/// Counts for the bottom line.
#[derive(Default)]
struct Counts {
    started: usize,
    done: usize,
    failed: usize,
    skipped: usize,
}

/// The live terminal display.
pub struct LiveProgress {
    style: Style,
    verbose: bool,
    width: usize,
    total: usize,
    multi: MultiProgress,
    status: ProgressBar,
    bars: Mutex<HashMap<String, ProgressBar>>,
    counts: Mutex<Counts>,
}

impl LiveProgress {
    /// A display for `total` steps whose names are at most `width` long.
    pub fn new(style: Style, verbose: bool, total: usize, width: usize) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(10));
        let status = multi.add(ProgressBar::new_spinner());
        status.set_style(ProgressStyle::with_template("{msg}").expect("template"));
        let live = LiveProgress {
            style,
            verbose,
            width,
            total,
            multi,
            status,
            bars: Mutex::new(HashMap::new()),
            counts: Mutex::new(Counts::default()),
        };
        live.refresh_status();
        live
    }

    fn refresh_status(&self) {
        let c = self.counts.lock().expect("counts");
        let running = c.started - c.done - c.failed;
        let waiting = self.total.saturating_sub(c.started + c.skipped);
        let mut text = format!(
            "{} done · {} running · {} waiting",
            c.done, running, waiting
        );
        if c.failed > 0 {
            text.push_str(&format!(
                " · {}",
                self.style.err(&format!("{} failed", c.failed))
            ));
        }
        if c.skipped > 0 {
            text.push_str(&format!(" · {} skipped", c.skipped));
        }
        self.status.set_message(self.style.dim(&text));
    }

    fn print_above(&self, step: &str, text: &str) {
        let _ = self
            .multi
            .println(format!("{:<w$}  {text}", step, w = self.width));
    }

    fn start_bar(&self, step: &str, action: Action) {
        let bar = self
            .multi
            .insert_before(&self.status, ProgressBar::new_spinner());
        let template = format!(
            "{{spinner}} {{prefix:<{}}} {{elapsed:>4}}  {{wide_msg}}",
            self.width
        );
        bar.set_style(
            ProgressStyle::with_template(&template)
                .expect("template")
                .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ "),
        );
        bar.set_prefix(step.to_string());
        bar.set_message(format!("{}…", verb(action)));
        bar.enable_steady_tick(Duration::from_millis(100));
        self.bars
            .lock()
            .expect("bars")
            .insert(step.to_string(), bar);
    }
}

impl EventSink for LiveProgress {
    fn emit(&self, event: Event) {
        match event {
            Event::Started { step, action } => {
                self.counts.lock().expect("counts").started += 1;
                if action != Action::NoOp {
                    self.start_bar(&step, action);
                }
            }
            Event::Progress { step, message } => {
                if let Some(bar) = self.bars.lock().expect("bars").get(&step) {
                    bar.set_message(message.clone());
                }
                if self.verbose {
                    self.print_above(&step, &self.style.dim(&message));
                }
            }
            Event::Retrying {
                step,
                attempt,
                delay,
                error,
            } => {
                let text = format!(
                    "attempt {attempt} failed ({error}); retrying in {}",
                    human(delay)
                );
                if let Some(bar) = self.bars.lock().expect("bars").get(&step) {
                    bar.set_message(text.clone());
                }
                self.print_above(&step, &self.style.warn(&text));
            }
            Event::Finished {
                step,
                outcome,
                elapsed,
            } => {
                if let Some(bar) = self.bars.lock().expect("bars").remove(&step) {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
                {
                    let mut c = self.counts.lock().expect("counts");
                    match outcome {
                        Outcome::Done(_) | Outcome::Unchanged => c.done += 1,
                        Outcome::Failed(_) => c.failed += 1,
                        Outcome::Skipped(_) | Outcome::NotStarted => c.skipped += 1,
                    }
                }
                if let Some(text) = finished_line(&self.style, &outcome, elapsed) {
                    self.print_above(&step, &text);
                }
            }
            Event::Interrupted { running } => {
                let _ = self
                    .multi
                    .println(self.style.warn(&interrupted_text(running)));
            }
        }
        self.refresh_status();
    }
}

impl Drop for LiveProgress {
    fn drop(&mut self) {
        for (_, bar) in self.bars.lock().expect("bars").drain() {
            bar.finish_and_clear();
        }
        self.status.finish_and_clear();
        let _ = self.multi.clear();
    }
}
