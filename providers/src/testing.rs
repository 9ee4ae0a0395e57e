//! Test helpers shared by the providers' tests: a recording reporter and an
//! operation context around it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::contract::{InputValue, OpContext, Reporter, Values};

/// A [`Reporter`] that keeps every event and log line it is given.
#[derive(Default)]
pub(crate) struct RecordingReporter {
    /// Progress events, in order.
    pub events: Mutex<Vec<String>>,
    /// Log lines, in order.
    pub logs: Mutex<Vec<String>>,
}

impl RecordingReporter {
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// A copy of the log lines so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }
}

impl Reporter for RecordingReporter {
    fn event(&self, message: &str) {
        self.events.lock().unwrap().push(message.to_string());
    }

    fn log(&self, line: &str) {
        self.logs.lock().unwrap().push(line.to_string());
    }
}

/// An operation context for step `step` with token `token`, run in `workdir`,
/// reporting to the returned recorder.
pub(crate) fn op_context(
    workdir: &Path,
    step: &str,
    token: &str,
) -> (OpContext, Arc<RecordingReporter>) {
    let reporter = Arc::new(RecordingReporter::default());
    let ctx = OpContext {
        step: step.to_string(),
        token: token.to_string(),
        workdir: workdir.into(),
        log_path: workdir.join(format!("{step}.log")),
        region: None,
        profile: None,
        reporter: reporter.clone(),
        cancel: crate::contract::Cancel::never(),
        checkpoint: Arc::new(crate::contract::NoCheckpoint),
        timeout: None,
        destroying: false,
        clean_leftovers: false,
    };
    (ctx, reporter)
}

/// The JSON object `value` as [`Values`]; panics on anything else.
pub(crate) fn values(value: Value) -> Values {
    value
        .as_object()
        .cloned()
        .expect("test values must be a JSON object")
}

/// The JSON object `value` as a step's inputs, every one known (as
/// validate sees them); panics on anything else.
pub(crate) fn known(value: Value) -> Vec<(String, InputValue)> {
    values(value)
        .into_iter()
        .map(|(k, v)| (k, InputValue::Known(v)))
        .collect()
}
