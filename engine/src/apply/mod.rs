//! Apply and destroy: carry out a plan step by step on durable state.
//!
//! `schedule` runs the steps in dependency order, in parallel; `step` carries
//! out one (inputs, provider), `reconcile` decides its operations and
//! `operation` performs each one as intent → provider call → result
//! (`retire` the stages of a create-before-destroy replacement), through
//! the run's `context` (settings, outputs, events) and `journal` (records and
//! durable writes). `sealing` keeps secrets out of records; `error` types why
//! a step failed; `events` is what the user sees; `retry` paces retries.

pub mod context;
pub mod error;
pub mod events;
mod history;
pub mod job;
pub mod journal;
mod operation;
mod reconcile;
mod retire;
pub mod retry;
pub mod schedule;
pub mod sealing;
pub mod step;
