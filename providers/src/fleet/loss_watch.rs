//! A training that still prints but no longer learns: `hang_without_loss`
//! of a `slurm.job` or `kube.job` with restarts. A job whose ranks wait on a dead peer
//! often keeps printing (NCCL's warnings, a heartbeat, a progress bar
//! redrawn) while no new loss comes: `hang_after` (no new line) never
//! fires. This watch reads the job's output as it grows, with the step's
//! `parse` reader (the loss lines it reads into `losses`), and says when
//! no new loss was logged for the set time.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::metrics::Program;

/// Follows the losses a running job logs.
#[derive(Debug)]
pub(crate) struct LossWatch {
    /// No new loss for this long is a hang.
    pub limit: Duration,
    program: Program,
    /// How much of the output was read: up to its last line's end.
    read_upto: usize,
    /// Since when no new loss came (from the job's start running).
    since: Option<Instant>,
    /// Losses read so far.
    pub losses: usize,
}

impl LossWatch {
    /// A watch of `program`'s loss lines, `limit` long.
    pub fn new(limit: Duration, program: Program) -> LossWatch {
        LossWatch {
            limit,
            program,
            read_upto: 0,
            since: None,
            losses: 0,
        }
    }

    /// Reads what `text` (the job's whole output so far) holds past the
    /// last look, up to its last whole line, at `now`: a new loss restarts
    /// the clock.
    pub fn look(&mut self, text: &str, now: Instant) {
        self.since.get_or_insert(now);
        let end = text.rfind(['\n', '\r']).map_or(0, |i| i + 1);
        if end <= self.read_upto {
            return;
        }
        let fresh = &text[self.read_upto..end];
        self.read_upto = end;
        let new = self
            .program
            .read(fresh)
            .ok()
            .and_then(|r| {
                r.values
                    .get("losses")
                    .and_then(Value::as_array)
                    .map(Vec::len)
            })
            .unwrap_or(0);
        if new > 0 {
            self.losses += new;
            self.since = Some(now);
        }
    }

    /// Whether no new loss came for `limit` by `now`.
    pub fn stalled(&self, now: Instant) -> bool {
        self.since
            .is_some_and(|since| now.duration_since(since) >= self.limit)
    }

    /// Why the job counts as hung, for its attempt's cause and the events.
    pub fn why(&self, limit_text: &str) -> String {
        match self.losses {
            0 => format!(
                "no loss logged in {limit_text} (`parse = \"{}\"` read none)",
                self.program.name()
            ),
            n => format!("no new loss for {limit_text} (after {n} logged)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOSS: &str = "[RANK 0] Epoch 3 | Batchsize: 32 | Steps: 10 | Loss: 0.5\n";

    #[test]
    fn a_new_loss_restarts_the_clock_and_chatter_does_not() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut w = LossWatch::new(Duration::from_secs(10), Program::Torchrun);
        let mut text = String::from("starting\n");
        w.look(&text, at(0));
        assert!(!w.stalled(at(9)));
        assert!(w.stalled(at(10)), "no loss since the job ran");
        text.push_str(LOSS);
        w.look(&text, at(8));
        assert_eq!(w.losses, 1);
        assert!(!w.stalled(at(17)));
        // Lines, but no loss: the clock runs on.
        for i in 0..5 {
            text.push_str(&format!("NCCL WARN waiting for peer {i}\n"));
            w.look(&text, at(9 + i));
        }
        assert!(w.stalled(at(18)));
        assert_eq!(w.why("10s"), "no new loss for 10s (after 1 logged)");
    }

    #[test]
    fn a_loss_line_read_only_once_it_is_whole_and_only_once() {
        let t0 = Instant::now();
        let mut w = LossWatch::new(Duration::from_secs(5), Program::Torchrun);
        let half = &LOSS[..20];
        w.look(half, t0);
        assert_eq!(w.losses, 0, "half a line is not read yet");
        w.look(LOSS, t0);
        w.look(LOSS, t0);
        assert_eq!(w.losses, 1, "the same line is not counted twice");
        assert_eq!(
            LossWatch::new(Duration::from_secs(5), Program::Torchrun).why("5s"),
            "no loss logged in 5s (`parse = \"torchrun\"` read none)"
        );
    }
}
