//! What a running operation tells: progress events and log lines (the
//! engine redacts and shows or writes them), and what a job's output
//! measured with each gate's verdict, for the run history.

use super::Values;

/// Where a running operation reports to; the engine redacts secrets before
/// anything reaches a terminal or a file.
pub trait Reporter: Send + Sync {
    /// A progress event (stack event, lifecycle change, job status) shown live.
    fn event(&self, message: &str);
    /// A line of output for the step's log only.
    fn log(&self, line: &str);
    /// What a job's output measured and how its gates judged it, for the
    /// run history (sent before the step's result, pass or fail). The
    /// default keeps nothing.
    fn measured(&self, _measured: &Measured) {}
}

/// What a job's output measured, and each gate's verdict on it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// What `capture` took and `parse` read.
    pub values: Values,
    /// Each gate of `expect`, in order.
    pub verdicts: Vec<Verdict>,
}

/// One gate's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The value judged.
    pub name: String,
    /// The gate as written.
    pub gate: String,
    /// Why it failed; `None` when it passed.
    pub failed: Option<String>,
}

/// A reporter that drops everything: for provider calls nobody watches
/// (a plan's look at real objects, refresh, import).
pub struct Silent;

impl Reporter for Silent {
    fn event(&self, _message: &str) {}
    fn log(&self, _line: &str) {}
}
