//! What every step of one run shares: the settings it runs with, the journal
//! of records ([`Journal`]), the outputs produced so far, and the hub that
//! carries events, retries and the interrupt. Fields are private; steps use
//! the methods.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use flow_providers::{Cancel, Registry, Values};
use flow_state::{Committer, StateLayout, StepRecord};

use super::error::StepError;
use super::events::{EventSink, Failure};
use super::journal::Journal;
use super::retry::Backoff;
use crate::lang::load::Loaded;
use crate::lang::resolve::Lookup;
use crate::secrets::Redactor;

/// What a run is started with.
pub struct RunSettings {
    /// Provider kinds, for steps that only state still holds.
    pub registry: Registry,
    /// The workflow file as the user named it, for the commands a failure's
    /// help suggests (`flow logs FILE STEP`).
    pub workflow_file: PathBuf,
    /// Where logs go.
    pub layout: StateLayout,
    /// The workflow file's folder, and the folders its `allow_paths` opens.
    pub workdir: flow_providers::Workdir,
    /// The salt of a state written before fingerprints were keyed (see
    /// [`crate::secrets::seal`]); zeros for none.
    pub legacy_salt: [u8; 32],
    /// Masks secrets in everything written or shown.
    pub redactor: Arc<Redactor>,
    /// Where events go.
    pub sink: Arc<dyn EventSink>,
    /// Retry pacing.
    pub backoff: Backoff,
    /// The AWS profile the workflow names, if any.
    pub profile: Option<String>,
    /// The workflow, for resolving inputs (None for destroy).
    pub loaded: Option<Arc<Loaded>>,
    /// Where each job step's run is recorded (the state's run history).
    pub history: Option<flow_state::RunLog>,
    /// `flow destroy --clean-leftovers` (see
    /// [`flow_providers::OpContext::clean_leftovers`]).
    pub clean_leftovers: bool,
}

/// What every step of one run shares.
pub struct RunContext {
    settings: RunSettings,
    journal: Journal,
    /// Outputs produced in this run, with secrets in clear (memory only).
    outputs: Mutex<BTreeMap<String, Values>>,
    /// Fires on the first interrupt (tasks stop, resources finish).
    cancel: Cancel,
    /// Sends the interrupt to `cancel`.
    interrupt: tokio::sync::watch::Sender<bool>,
    /// Retries made so far in this run.
    retries: AtomicU32,
    /// When each step ran in this run, for `flow report`'s Gantt chart.
    timeline: Mutex<Vec<StepSpan>>,
}

/// When one step ran, and how it ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepSpan {
    /// The step.
    pub step: String,
    /// Start, in milliseconds since the Unix epoch.
    pub start_ms: u64,
    /// End, in milliseconds since the Unix epoch.
    pub end_ms: u64,
    /// `created`, `updated`, `failed`, … (the outcome's word).
    pub outcome: String,
}

impl RunContext {
    /// A run with `settings`, starting from `records` (what state holds) and
    /// writing through `committer`.
    pub fn new(
        settings: RunSettings,
        committer: Committer,
        records: BTreeMap<String, StepRecord>,
    ) -> Self {
        let (interrupt, cancel) = Cancel::pair();
        RunContext {
            settings,
            journal: Journal::new(committer, records),
            outputs: Mutex::new(BTreeMap::new()),
            cancel,
            interrupt,
            retries: AtomicU32::new(0),
            timeline: Mutex::new(Vec::new()),
        }
    }

    /// Notes when a step ran.
    pub fn note_span(&self, span: StepSpan) {
        self.timeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(span);
    }

    /// When each step of this run ran, in the order they ended.
    pub fn timeline(&self) -> Vec<StepSpan> {
        self.timeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The settings the run was started with.
    pub fn settings(&self) -> &RunSettings {
        &self.settings
    }

    /// The step records and their durable writes.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Leaves the run's records, outputs and spans to the process's exit
    /// instead of freeing them one allocation at a time (4.5 ms for 2,000
    /// steps with glibc's allocator, at the end of every apply): for the
    /// command line, when its process ends right after this run (not
    /// between two rounds of one apply). They are memory only: no file, lock
    /// or thread is held by them. Call it once the run's writes have settled.
    pub fn leave_to_exit(&self) {
        std::mem::forget(std::mem::take(
            &mut *self.outputs.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        std::mem::forget(std::mem::take(
            &mut *self.timeline.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        self.journal.leave_to_exit();
    }

    /// Where events go.
    pub fn sink(&self) -> &Arc<dyn EventSink> {
        &self.settings.sink
    }

    /// The signal steps watch for an interrupt.
    pub fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Interrupt the run: tasks stop their work, resources finish what they started.
    pub fn interrupt(&self) {
        let _ = self.interrupt.send(true);
    }

    /// Count one retry.
    pub fn count_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Retries made so far.
    pub fn retries(&self) -> u32 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Keep `outputs` of `step`, produced in this run.
    pub fn put_outputs(&self, step: &str, outputs: Values) {
        self.outputs
            .lock()
            .expect("outputs")
            .insert(step.to_string(), outputs);
    }

    /// Keep `outputs` of `step` unless this run already has them.
    pub fn keep_outputs_if_absent(&self, step: &str, outputs: Values) {
        self.outputs
            .lock()
            .expect("outputs")
            .entry(step.to_string())
            .or_insert(outputs);
    }

    /// Output `key` of `step`: this run's value first, else the recorded one.
    pub fn lookup(&self, step: &str, key: &str) -> Lookup {
        if let Some(outs) = self.outputs.lock().expect("outputs").get(step) {
            return match outs.get(key) {
                // State keeps such an output only as a marker; in this
                // apply its value is at hand, and stays a secret.
                Some(v) if self.settings.redactor.touches(v) => Lookup::Secret(v.clone()),
                Some(v) => Lookup::Known(v.clone()),
                None => Lookup::Missing(outs.keys().cloned().collect()),
            };
        }
        self.journal
            .with_record(step, |rec| match rec.outputs.get(key) {
                Some(v) => Lookup::Known(v.clone()),
                None => Lookup::Missing(rec.outputs.keys().cloned().collect()),
            })
            .unwrap_or(Lookup::Unknown)
    }

    /// `err` of `step` as the user sees it: message and help, secrets
    /// masked, and the commands the help suggests written out for this
    /// workflow file and step (`flow logs FILE STEP` → `flow logs wf.toml nccl`).
    pub fn failure(&self, step: &str, err: &StepError) -> Failure {
        let mut failure = err.to_failure(&self.settings.redactor);
        failure.at = self.input_location(step, err);
        if let Some(help) = &mut failure.help {
            let file = self.settings.workflow_file.display().to_string();
            *help = help
                .replace("FILE STEP", &format!("{file} {step}"))
                .replace("--replace STEP", &format!("--replace {step}"))
                .replace("flow validate FILE", &format!("flow validate {file}"))
                .replace("flow output FILE", &format!("flow output {file}"));
        }
        failure
    }

    /// `file:line:col` of the input a provider's error names, in the
    /// workflow file (or the module's) that declares the step.
    fn input_location(&self, step: &str, err: &StepError) -> Option<String> {
        let StepError::Provider(e) = err else {
            return None;
        };
        if e.input.is_empty() {
            return None;
        }
        let wf = &self.settings.loaded.as_ref()?.workflow;
        let decl = wf.step(step)?;
        let span = crate::lang::load::span_of_path(decl, &e.input, false);
        let source = wf.source_of(decl);
        let (line, col) = source.line_col(span.start);
        Some(format!("{}:{line}:{col}", source.name))
    }

    /// Wait for every queued record; the steps whose record could not be written.
    pub async fn settle(&self) -> Vec<(String, Failure)> {
        self.journal
            .settle()
            .await
            .into_iter()
            .map(|(step, e)| {
                let failure = self.failure(&step, &e);
                (step, failure)
            })
            .collect()
    }
}
