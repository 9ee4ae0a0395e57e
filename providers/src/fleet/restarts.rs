//! What every job kind that survives a node (`slurm.job`, `kube.job` with
//! `restarts`) reads the same way: how many restarts, and when a running
//! job is hung (`hang_after`: no new line; `hang_without_loss`: no new
//! loss as the step's `parse` reads losses, watched by
//! [`super::loss_watch`]).

use std::time::Duration;

use serde_json::Value;

use crate::contract::{InputValue, Problem, Values};
use crate::metrics::Program;

/// The most restarts a step may ask for.
pub(crate) const MAX_RESTARTS: i64 = 100;

/// The name of attempt `n`'s job (kube.job, batch.job): the step's for
/// the first, `NAME-aN` after.
pub(crate) fn attempt_name(base: &str, n: u32) -> String {
    match n {
        1 => base.to_string(),
        n => format!("{base}-a{n}"),
    }
}

/// The token attempt `n`'s job is tagged with (kube.job, batch.job): the
/// operation's for the first, `TOKEN-aN` after.
pub(crate) fn attempt_token(token: &str, n: u32) -> String {
    match n {
        1 => token.to_string(),
        n => format!("{token}-a{n}"),
    }
}

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

/// `restarts`, `hang_after` and `hang_without_loss`, as a step gives them.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    /// How many times a failed or hung attempt starts again.
    pub restarts: u32,
    /// No new line of output for this long is a hang.
    pub hang_after: Option<Duration>,
    /// The `hang_after` text, for messages.
    pub hang_text: String,
    /// No new loss, as the step's `parse` reads losses, for this long is a
    /// hang, and that reader.
    pub no_loss: Option<(Duration, Program)>,
}

impl Bounds {
    /// The three read for apply; what is wrong as validate says it.
    pub fn read(v: &Values) -> Result<Bounds, String> {
        let restarts = match v.get("restarts") {
            None | Some(Value::Null) => 0,
            Some(x) => match x.as_i64() {
                Some(n) if (0..=MAX_RESTARTS).contains(&n) => n as u32,
                _ => {
                    return Err(format!(
                        "`restarts` {x} is not a count from 0 to {MAX_RESTARTS}"
                    ));
                }
            },
        };
        let hang_text = v
            .get("hang_after")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let hang_after = match hang_text.is_empty() {
            true => None,
            false => Some(hang_of("hang_after", &hang_text)?),
        };
        let no_loss = match v.get("hang_without_loss").and_then(Value::as_str) {
            None | Some("") => None,
            Some(text) => Some((
                hang_of("hang_without_loss", text)?,
                loss_program(v.get("parse").and_then(Value::as_str))?,
            )),
        };
        Ok(Bounds {
            restarts,
            hang_after,
            hang_text,
            no_loss,
        })
    }
}

/// Validate's problems of `restarts`, `hang_after` and `hang_without_loss`
/// (`known`: the inputs known before apply), each at its entry; `again`
/// says what a restart does ("submits the job again"), `output` where a
/// hang's lines are read ("the job's output").
pub(crate) fn bound_problems(
    inputs: &[(String, InputValue)],
    known: &Values,
    again: &str,
    output: &str,
) -> Vec<Problem> {
    let mut out = Vec::new();
    if let Some(x) = known.get("restarts")
        && x.as_i64().is_none_or(|n| !(0..=MAX_RESTARTS).contains(&n))
    {
        out.push(
            Problem::at(
                "restarts",
                format!("`restarts` {x} is not a count from 0 to {MAX_RESTARTS}"),
            )
            .with_help(format!(
                "how many times flow {again} after a failed or hung attempt, e.g. 3"
            )),
        );
    }
    for key in ["hang_after", "hang_without_loss"] {
        if let Some(text) = known.get(key).and_then(Value::as_str)
            && let Err(why) = hang_of(key, text)
        {
            out.push(Problem::at(key, why).with_help(format!(
                "a duration such as \"10m\" or \"90s\": no new line in {output} (hang_after) or loss (hang_without_loss) for that long is a hang"
            )));
        }
    }
    if known.get("hang_without_loss").is_some() {
        // `parse` known only at apply is checked then.
        let parse = known.get("parse");
        let unknown = parse.is_none() && inputs.iter().any(|(k, _)| k == "parse");
        if !unknown && let Err(why) = loss_program(parse.and_then(Value::as_str)) {
            out.push(Problem::at("hang_without_loss", why).with_help(format!(
                "add `parse = \"torchrun\"`: no new loss line in {output} for that long is a hang, even while it prints other lines"
            )));
        }
    }
    out
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
