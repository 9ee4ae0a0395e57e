//! The run's journal: its copy of the step records and the durable writes
//! that change them. A record written with [`Journal::persist`] is on disk
//! when the call returns; one written with [`Journal::persist_queued`] is on
//! its way, and anything that depends on it waits for it first
//! ([`Journal::wait_durable`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use flow_state::{Committer, Durable, StateError, StepRecord, now_secs};

use super::error::StepError;

/// Step records as this run changes them, and the writes that make them durable.
pub struct Journal {
    committer: Committer,
    records: Mutex<BTreeMap<String, StepRecord>>,
    /// Success records queued but maybe not yet on disk, by step: dependents
    /// start at once and wait for these before their first side effect.
    durable: Mutex<BTreeMap<String, Durable>>,
}

impl Journal {
    /// A journal starting from `records` (what state holds), writing through `committer`.
    pub fn new(committer: Committer, records: BTreeMap<String, StepRecord>) -> Self {
        Journal {
            committer,
            records: Mutex::new(records),
            durable: Mutex::new(BTreeMap::new()),
        }
    }

    /// Leaves the records and durable flags to the process's exit (see
    /// [`super::context::RunContext::leave_to_exit`]).
    pub fn leave_to_exit(&self) {
        std::mem::forget(std::mem::take(&mut *self.records.lock().expect("records")));
        std::mem::forget(std::mem::take(&mut *self.durable.lock().expect("durable")));
    }

    /// The record of `name`, as this run last wrote it.
    pub fn record(&self, name: &str) -> Option<StepRecord> {
        self.records.lock().expect("records").get(name).cloned()
    }

    /// `f` applied to the record of `step`, if it has one (without a copy).
    pub(super) fn with_record<T>(&self, step: &str, f: impl FnOnce(&StepRecord) -> T) -> Option<T> {
        self.records.lock().expect("records").get(step).map(f)
    }

    /// Write `rec` and wait until it is on disk. The record is encoded
    /// from the reference and copied once, into this journal.
    pub async fn persist(&self, rec: &mut StepRecord) -> Result<(), StateError> {
        rec.updated_at = now_secs();
        let written = self.committer.put_record(rec);
        self.records
            .lock()
            .expect("records")
            .insert(rec.name.clone(), rec.clone());
        written.await
    }

    /// Record `rec` without waiting for the flush: dependents may be started
    /// at once, since each waits (before its intent) for this flag before it
    /// does anything, and the writer never writes a later change before this
    /// one. The writer itself sets the flag: no task runs per record.
    pub fn persist_queued(&self, rec: &mut StepRecord) {
        rec.updated_at = now_secs();
        let flag = self.committer.submit_record(rec);
        self.durable
            .lock()
            .expect("durable")
            .insert(rec.name.clone(), flag);
        self.records
            .lock()
            .expect("records")
            .insert(rec.name.clone(), rec.clone());
    }

    /// Wait until the queued record of `step`, if any, is on disk.
    pub async fn wait_durable(&self, step: &str) -> Result<(), StepError> {
        let flag = self.durable.lock().expect("durable").get(step).cloned();
        let Some(mut flag) = flag else { return Ok(()) };
        // A writer that stops without answering (its thread gone) is a
        // closed state, as an awaited write would have said.
        let settled = flag
            .wait_for(Option::is_some)
            .await
            .map(|settled| settled.clone().expect("settled"))
            .unwrap_or_else(|_| Err(Arc::new(StateError::Closed)));
        settled
            .map(|_serial| ())
            .map_err(|cause| StepError::DependencyState {
                step: step.to_string(),
                cause,
            })
    }

    /// Wait for every queued record; the steps whose record could not be written.
    pub async fn settle(&self) -> Vec<(String, StepError)> {
        let names: Vec<String> = self
            .durable
            .lock()
            .expect("durable")
            .keys()
            .cloned()
            .collect();
        let mut failed = Vec::new();
        for name in names {
            if let Err(e) = self.wait_durable(&name).await {
                failed.push((name, e));
            }
        }
        failed
    }

    /// Remove the record of `name` and wait until that is on disk.
    pub async fn forget(&self, name: &str) -> Result<(), StateError> {
        self.records.lock().expect("records").remove(name);
        self.committer.remove(name).await
    }
}
