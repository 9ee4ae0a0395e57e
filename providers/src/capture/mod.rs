//! What a job's logs (a Kubernetes, Batch or Slurm job's) must show and
//! what is taken from them:
//! - `success_pattern`: a regex some line must match;
//! - `capture`: named regexes; the first group of the last match becomes an
//!   output, or the whole match when the regex has no group (the last,
//!   because training logs print a figure again and again and the final one
//!   is what counts);
//! - `parse`: a program whose output is read into typed values (see
//!   [`crate::metrics`]: nccl-tests, torchrun, torchrec, nvidia-smi);
//! - `expect`: gates on those values (`busbw = ">= 300"`); a value that
//!   fails its gate, or is missing, fails the step.

use std::collections::BTreeMap;

use regex_lite::Regex;
use serde_json::Value;

use crate::contract::{InputSpec, InputType, Problem, Values};
use crate::metrics::gate::{self, Gate};
use crate::metrics::{Kind, Program, Unreadable};

pub use declared::job_outputs;

/// The `success_pattern`, `capture`, `parse` and `expect` inputs, for the
/// schema of a job kind.
pub fn input_specs() -> Vec<InputSpec> {
    vec![
        InputSpec::optional(
            "success_pattern",
            InputType::String,
            "A regex the logs must match for the job to count as a success",
        ),
        InputSpec::optional(
            "capture",
            InputType::Map(Box::new(InputType::String)),
            "Outputs taken from the logs: name = regex; the first group of the last match (a number when it is one)",
        ),
        InputSpec::optional(
            "parse",
            InputType::String,
            "The program whose output the logs hold, read into outputs: nccl-tests, torchrun, torchrec or nvidia-smi",
        ),
        InputSpec::optional(
            "expect",
            InputType::Map(Box::new(InputType::String)),
            "Gates on captured or parsed outputs: name = \">= 300\", \"< 2.5\", \"between 0.75 0.85\", \"decreasing\"; one that fails fails the step",
        ),
    ]
}

/// Where a value a gate judges comes from.
#[derive(Debug, Clone)]
enum Source {
    Capture(String),
    Program(Program, Kind),
}

/// The compiled `success_pattern`, `capture`, `parse` and `expect` of a step.
#[derive(Debug, Clone, Default)]
pub struct Matchers {
    success: Option<Regex>,
    captures: Vec<(String, Regex)>,
    program: Option<Program>,
    gates: Vec<(String, Gate)>,
    /// Gates on a script's own outputs (`exec`), not on a log's values.
    on_outputs: bool,
}

fn strings(values: &Values, key: &str) -> BTreeMap<String, String> {
    values
        .get(key)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl Matchers {
    /// Compiles the inputs; each error names the input it concerns.
    pub fn new(
        success: Option<&str>,
        captures: &BTreeMap<String, String>,
    ) -> Result<Matchers, Problem> {
        let success = success
            .map(|p| {
                Regex::new(p)
                    .map_err(|e| Problem::at("success_pattern", format!("not a valid regex: {e}")))
            })
            .transpose()?;
        let captures = captures
            .iter()
            .map(|(name, p)| {
                Regex::new(p).map(|r| (name.clone(), r)).map_err(|e| {
                    Problem::at_path(&["capture", name], format!("not a valid regex: {e}"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Matchers {
            success,
            captures,
            ..Matchers::default()
        })
    }

    /// Adds `parse`'s program: its outputs join the captures.
    pub fn reading(mut self, program: Option<&str>) -> Result<Matchers, Problem> {
        self.program = program
            .map(|name| {
                Program::from_name(name).ok_or_else(|| {
                    let names: Vec<&str> = Program::ALL.iter().map(|p| p.name()).collect();
                    let mut p = Problem::at(
                        "parse",
                        format!(
                            "flow reads no program called `{name}`: it reads {}",
                            names.join(", ")
                        ),
                    );
                    if let Some(c) = crate::suggest::closest(name, names.iter().copied()) {
                        p = p.with_help(format!("did you mean `{c}`?"));
                    }
                    p
                })
            })
            .transpose()?;
        Ok(self)
    }

    /// Adds `expect`'s gates, each checked against what fills its value.
    pub fn gated(self, gates: &BTreeMap<String, String>) -> Result<Matchers, Problem> {
        let (m, mut problems) = self.gated_all(gates);
        match problems.is_empty() {
            true => Ok(m),
            false => Err(problems.remove(0)),
        }
    }

    /// The gates that can be judged, and a problem for each other one.
    fn gated_all(mut self, gates: &BTreeMap<String, String>) -> (Matchers, Vec<Problem>) {
        let mut problems = Vec::new();
        for (name, text) in gates {
            match self.gate(name, text) {
                Ok(gate) => self.gates.push((name.clone(), gate)),
                Err(p) => problems.push(p),
            }
        }
        (self, problems)
    }

    /// One gate of `expect`, checked against what fills its value.
    fn gate(&self, name: &str, text: &str) -> Result<Gate, Problem> {
        let gate = Gate::parse(text).map_err(|e| {
            Problem::at_path(&["expect", name], e).with_help(format!("a gate is {}", gate::FORMS))
        })?;
        match self.source(name) {
            None => Err(self.unfilled(name)),
            Some(Source::Program(program, kind)) if kind != gate.judges() => {
                let fitting: Vec<&str> = program
                    .outputs()
                    .iter()
                    .filter(|o| o.kind == gate.judges())
                    .map(|o| o.name)
                    .collect();
                Err(Problem::at_path(
                    &["expect", name],
                    format!(
                        "`{text}` judges {}, but {name} is {}",
                        gate.judges().describe(),
                        kind.describe()
                    ),
                )
                .with_help(format!(
                    "{} of {}'s output: {}",
                    match gate.judges() {
                        Kind::Table => "the tables",
                        Kind::Text => "the text values",
                        Kind::Number => "the numbers",
                    },
                    program.name(),
                    fitting.join(", ")
                )))
            }
            _ => Ok(gate),
        }
    }

    /// The problem of a gate whose value nothing fills, with the names that are filled.
    fn unfilled(&self, name: &str) -> Problem {
        let mut known: Vec<&str> = self.captures.iter().map(|(n, _)| n.as_str()).collect();
        if let Some(p) = self.program {
            known.extend(p.outputs().iter().map(|o| o.name));
        }
        let p = Problem::at_path(
            &["expect", name],
            format!("`{name}` is neither captured nor read by `parse`, so nothing fills it"),
        );
        match crate::suggest::closest(name, known.iter().copied()) {
            Some(c) => p.with_help(format!("did you mean `{c}`?")),
            None if known.is_empty() => p.with_help(
                "add a `capture` regex of that name, or `parse` the program's output (nccl-tests, torchrun, torchrec, nvidia-smi)",
            ),
            None => p.with_help(format!("the step's values are {}", known.join(", "))),
        }
    }

    /// Every problem of a step's `success_pattern`, `capture`, `parse` and
    /// `expect` inputs, for validate (each gate on its own).
    pub fn problems(values: &Values) -> Vec<Problem> {
        let read = Matchers::new(
            values.get("success_pattern").and_then(Value::as_str),
            &strings(values, "capture"),
        )
        .and_then(|m| m.reading(values.get("parse").and_then(Value::as_str)));
        match read {
            Ok(m) => m.gated_all(&strings(values, "expect")).1,
            Err(p) => vec![p],
        }
    }

    /// What fills `name`: a capture of that name, else `parse`'s program.
    fn source(&self, name: &str) -> Option<Source> {
        if let Some((_, re)) = self.captures.iter().find(|(n, _)| n == name) {
            return Some(Source::Capture(re.as_str().to_string()));
        }
        let p = self.program?;
        let spec = p.outputs().iter().find(|o| o.name == name)?;
        Some(Source::Program(p, spec.kind))
    }

    /// The matchers a step's `success_pattern`, `capture`, `parse` and
    /// `expect` inputs ask for (absent inputs, or ones not known yet, ask
    /// for nothing).
    pub fn from_values(values: &Values) -> Result<Matchers, Problem> {
        Matchers::new(
            values.get("success_pattern").and_then(Value::as_str),
            &strings(values, "capture"),
        )?
        .reading(values.get("parse").and_then(Value::as_str))?
        .gated(&strings(values, "expect"))
    }

    /// Whether the logs are needed at all.
    pub fn is_empty(&self) -> bool {
        self.success.is_none()
            && self.captures.is_empty()
            && self.program.is_none()
            && self.gates.is_empty()
    }

    /// The captured and parsed outputs from `logs`, or why the logs do not
    /// show success (a gate that fails among them).
    pub fn check(&self, logs: &str) -> Result<Values, LogsMiss> {
        let (out, lines) = self.read(logs)?;
        match self.verdicts(&out, &lines).into_iter().find_map(|(_, e)| e) {
            Some(miss) => Err(miss),
            None => Ok(out),
        }
    }

    /// Whether `logs` hold all that is read from them (success, captures,
    /// `parse`), whatever the gates then say: more lines would not change
    /// the verdict, so nothing more need be waited for.
    pub fn satisfied(&self, logs: &str) -> bool {
        self.read(logs).is_ok()
    }

    /// As [`Matchers::check`], and tells `reporter` what was taken (live,
    /// `captured busbw = 186.4`) and every gate's verdict (for the run
    /// history), failing or not.
    pub fn judge(
        &self,
        logs: &str,
        reporter: &dyn crate::contract::Reporter,
    ) -> Result<Values, LogsMiss> {
        let (out, lines) = self.read(logs)?;
        report(reporter, &out);
        let verdicts = self.verdicts(&out, &lines);
        reporter.measured(&crate::contract::Measured {
            values: out.clone(),
            verdicts: verdicts.iter().map(|(v, _)| v.clone()).collect(),
        });
        match verdicts.into_iter().find_map(|(_, e)| e) {
            Some(miss) => Err(miss),
            None => Ok(out),
        }
    }

    /// `success_pattern` checked, `parse`'s values and the captures taken,
    /// each with the log line it came from.
    fn read(&self, logs: &str) -> Result<(Values, BTreeMap<String, String>), LogsMiss> {
        if let Some(re) = &self.success
            && !re.is_match(logs)
        {
            return Err(LogsMiss::NoSuccess {
                pattern: re.as_str().to_string(),
                head: head(logs),
            });
        }
        let mut out = Values::new();
        let mut lines = BTreeMap::new();
        if let Some(p) = self.program {
            let reading = p.read(logs).map_err(LogsMiss::Unreadable)?;
            out.extend(reading.values);
            lines.extend(reading.lines);
        }
        for (name, re) in &self.captures {
            let Some(caps) = re.captures_iter(logs).last() else {
                return Err(LogsMiss::NoCapture {
                    name: name.clone(),
                    pattern: re.as_str().to_string(),
                    head: head(logs),
                });
            };
            let whole = caps.get(0).expect("a match");
            lines.insert(name.clone(), line_at(logs, whole.start()).to_string());
            let text = caps.get(1).unwrap_or(whole).as_str().trim();
            out.insert(name.clone(), number_or_text(text));
        }
        Ok((out, lines))
    }

    /// Each gate's verdict on `out`, with the failure it makes when it fails.
    fn verdicts(
        &self,
        out: &Values,
        lines: &BTreeMap<String, String>,
    ) -> Vec<(crate::contract::Verdict, Option<LogsMiss>)> {
        self.gates
            .iter()
            .map(|(name, gate)| {
                let miss = match out.get(name) {
                    None => {
                        let from = match self.source(name) {
                            _ if self.on_outputs => "the script's $FLOW_OUTPUT".into(),
                            Some(Source::Program(p, _)) => p.source_of(name),
                            Some(Source::Capture(re)) => format!("capture /{re}/"),
                            None => "nothing".into(),
                        };
                        Some(LogsMiss::NoValue {
                            name: name.clone(),
                            gate: gate.text.clone(),
                            from,
                        })
                    }
                    Some(value) => gate
                        .judge(name, value)
                        .err()
                        .map(|why| LogsMiss::GateFailed {
                            why,
                            line: lines.get(name).cloned().unwrap_or_default(),
                        }),
                };
                let verdict = crate::contract::Verdict {
                    name: name.clone(),
                    gate: gate.text.clone(),
                    failed: miss.as_ref().map(ToString::to_string),
                };
                (verdict, miss)
            })
            .collect()
    }

    /// Gates on the outputs a script writes (`exec`'s `expect`): any name
    /// may be judged, as the outputs are known only once the script ran.
    pub fn on_outputs(gates: &BTreeMap<String, String>) -> Result<Matchers, Problem> {
        let mut m = Matchers {
            on_outputs: true,
            ..Matchers::default()
        };
        for (name, text) in gates {
            let gate = Gate::parse(text).map_err(|e| {
                Problem::at_path(&["expect", name], e)
                    .with_help(format!("a gate is {}", gate::FORMS))
            })?;
            m.gates.push((name.clone(), gate));
        }
        Ok(m)
    }

    /// Every gate of a script's `expect` that does not parse, for validate.
    pub fn output_problems(values: &Values) -> Vec<Problem> {
        strings(values, "expect")
            .iter()
            .filter_map(|(name, text)| {
                Gate::parse(text).err().map(|e| {
                    Problem::at_path(&["expect", name], e)
                        .with_help(format!("a gate is {}", gate::FORMS))
                })
            })
            .collect()
    }

    /// The line of `logs` each value `parse` reads came from (none when
    /// the logs are not the program's), for a failed gate to quote.
    pub fn lines_of(&self, logs: &str) -> BTreeMap<String, String> {
        self.read(logs).map(|(_, lines)| lines).unwrap_or_default()
    }

    /// Judges a script's `outputs` by the gates and tells `reporter` the
    /// verdicts (for the run history); the first that fails is the error.
    /// `read` are values `parse` read from the script's output (already in
    /// `outputs`): they go to the history with the judged ones; `lines` are
    /// the output lines they came from, quoted by a gate that fails.
    pub fn judge_outputs(
        &self,
        outputs: &Values,
        read: &Values,
        lines: &BTreeMap<String, String>,
        reporter: &dyn crate::contract::Reporter,
    ) -> Result<(), LogsMiss> {
        // No gate, nothing judged: the step is no run to record.
        if self.gates.is_empty() {
            return Ok(());
        }
        // A script writes text: `17.5` is judged as the number it is.
        let outputs: Values = outputs
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k.clone(), number_or_text(s.trim())),
                v => (k.clone(), v.clone()),
            })
            .collect();
        let verdicts = self.verdicts(&outputs, lines);
        let mut judged: Values = read.clone();
        judged.extend(
            self.gates
                .iter()
                .filter_map(|(n, _)| Some((n.clone(), outputs.get(n)?.clone()))),
        );
        reporter.measured(&crate::contract::Measured {
            values: judged,
            verdicts: verdicts.iter().map(|(v, _)| v.clone()).collect(),
        });
        match verdicts.into_iter().find_map(|(_, e)| e) {
            Some(miss) => Err(miss),
            None => Ok(()),
        }
    }

    /// The gates, as the plan shows them (`busbw >= 300`).
    pub fn gates(&self) -> Vec<String> {
        self.gates
            .iter()
            .map(|(name, g)| format!("{name} {}", g.text))
            .collect()
    }
}

/// The plan's line for a job step's gates: what `expect` will check.
pub fn plan_lines(inputs: &Values) -> Vec<String> {
    let Ok(m) = Matchers::from_values(inputs) else {
        return Vec::new();
    };
    let gates = m.gates();
    if gates.is_empty() {
        return Vec::new();
    }
    let read = m
        .program
        .map(|p| format!(" on its {} output", p.name()))
        .unwrap_or_default();
    vec![format!(
        "gates{read}: {}; a value that fails one fails the step",
        gates.join(", ")
    )]
}

/// The first lines of a log that say something (at most 5), for an error
/// about a log no rule could judge: they show which program ran.
fn head(logs: &str) -> Vec<String> {
    let lines = logs.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.take(5).map(str::to_string).collect()
}

/// `head` as an error shows it.
fn first_lines(head: &[String]) -> String {
    match head.is_empty() {
        true => "the logs are empty".into(),
        false => format!("first lines: {}", head.join(" | ")),
    }
}

/// The whole line of `text` that byte `at` is on.
fn line_at(text: &str, at: usize) -> &str {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    text[start..end].trim()
}

/// What a finished job's logs did not show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogsMiss {
    /// `success_pattern` matched no line.
    #[error("the job finished but its logs never matched success_pattern /{pattern}/ — {}", first_lines(.head))]
    NoSuccess {
        /// The pattern.
        pattern: String,
        /// The log's first lines, which say what program ran.
        head: Vec<String>,
    },
    /// A `capture` pattern matched no line.
    #[error("capture `{name}`: no line of the logs matches /{pattern}/ — {}", first_lines(.head))]
    NoCapture {
        /// The output it was to fill.
        name: String,
        /// The pattern.
        pattern: String,
        /// The log's first lines, which say what program ran.
        head: Vec<String>,
    },
    /// `parse` found nothing of its program's in the logs.
    #[error("parse: {0}")]
    Unreadable(Unreadable),
    /// A gate's value was not in the logs.
    #[error("expect `{name} {gate}`: no {name} was found ({from} has none)")]
    NoValue {
        /// The value's name.
        name: String,
        /// The gate as written.
        gate: String,
        /// What was to fill it.
        from: String,
    },
    /// A value failed its gate.
    #[error("expect: {why}{}", if .line.is_empty() { String::new() } else { format!(" (log line: `{}`)", .line) })]
    GateFailed {
        /// The value, the gate and why it failed.
        why: String,
        /// The log line the value came from.
        line: String,
    },
}
impl LogsMiss {
    /// Whether the log's last lines help to understand it (not for a
    /// failed gate, whose error quotes the line it judged).
    pub fn wants_tail(&self) -> bool {
        !matches!(self, LogsMiss::GateFailed { .. })
    }

    /// What to do about it, for the step's error.
    pub fn help(&self) -> &'static str {
        match self {
            LogsMiss::GateFailed { .. } => {
                "the job ran and its output was read, but a value failed its gate in `expect`: the whole log is in `flow logs FILE STEP`"
            }
            _ => {
                "the job ran but its log did not show what `success_pattern`, `capture`, `parse` and `expect` ask for: read it with `flow logs FILE STEP`"
            }
        }
    }
}

/// Shows each captured output live (`captured busbw = 186.437`).
fn report(reporter: &dyn crate::contract::Reporter, captured: &Values) {
    for (name, value) in captured {
        let shown = match value {
            Value::String(s) => s.clone(),
            Value::Array(a) => format!("a table of {} entries", a.len()),
            Value::Object(o) => format!("a table of {} entries", o.len()),
            v => v.to_string(),
        };
        reporter.event(&format!("captured {name} = {shown}"));
    }
}

/// `text` as a JSON number when it is one (`"186.4"` → 186.4), else a string.
fn number_or_text(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => {
            serde_json::Number::from_f64(f).map_or_else(|| Value::from(text), Value::Number)
        }
        _ => Value::from(text),
    }
}

mod declared;
#[cfg(test)]
mod published;
#[cfg(test)]
mod tests;
