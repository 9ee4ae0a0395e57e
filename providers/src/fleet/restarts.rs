//! What every job kind that survives a node (`slurm.job`, `kube.job` with
//! `restarts`) reads the same way: how many restarts, and when a running
//! job is hung (`hang_after`: no new line; `hang_without_loss`: no new
//! loss as the step's `parse` reads losses, watched by
//! [`super::loss_watch`]).

use std::time::Duration;

use crate::metrics::Program;

/// The most restarts a step may ask for.
pub(crate) const MAX_RESTARTS: i64 = 100;

/// `hang_after` (or `hang_without_loss`, `key`) read: a duration of at
/// least a second.
pub(crate) fn hang_of(key: &str, text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        Ok(_) => Err(format!("`{key}` {text:?} is under a second")),
        Err(e) => Err(format!("`{key}` {text:?} is not a duration: {e}")),
    }
}

/// The programs whose reader gives `losses`, for `hang_without_loss`.
pub(crate) fn loss_program(parse: Option<&str>) -> Result<Program, String> {
    let program = parse.and_then(Program::from_name);
    match program {
        Some(p) if p.outputs().iter().any(|o| o.name == "losses") => Ok(p),
        _ => Err(format!(
            "`hang_without_loss` needs a `parse` that reads losses ({}){}",
            Program::ALL
                .iter()
                .filter(|p| p.outputs().iter().any(|o| o.name == "losses"))
                .map(|p| format!("\"{}\"", p.name()))
                .collect::<Vec<_>>()
                .join(", "),
            match parse {
                Some(p) => format!(", and `parse = \"{p}\"` reads none"),
                None => ": the step has no `parse`".into(),
            }
        )),
    }
}

/// A reporter that keeps what a job's `capture`/`parse` measured, to tell
/// it with the attempts once the step ends (the run history keeps one
/// measurement per step run: the last told).
pub(crate) struct Keep {
    inner: std::sync::Arc<dyn crate::contract::Reporter>,
    measured: std::sync::Mutex<Option<crate::contract::Measured>>,
}

impl Keep {
    /// Keeps what passes through to `inner`.
    pub fn new(inner: std::sync::Arc<dyn crate::contract::Reporter>) -> Keep {
        Keep {
            inner,
            measured: std::sync::Mutex::new(None),
        }
    }

    /// Tells `to` what was kept, with `attempts = N` and `attempt_N = line`
    /// for each attempt's line.
    pub fn tell(&self, to: &dyn crate::contract::Reporter, lines: &[(u32, String)]) {
        let mut m = self
            .measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        m.values
            .insert("attempts".into(), serde_json::json!(lines.len()));
        for (n, line) in lines {
            m.values
                .insert(format!("attempt_{n}"), serde_json::json!(line));
        }
        to.measured(&m);
    }
}

impl crate::contract::Reporter for Keep {
    fn event(&self, message: &str) {
        self.inner.event(message);
    }

    fn log(&self, line: &str) {
        self.inner.log(line);
    }

    fn measured(&self, m: &crate::contract::Measured) {
        *self.measured.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
    }
}
