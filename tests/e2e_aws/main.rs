//! End-to-end: the `flow` binary and the AWS providers against the moto
//! server, which speaks the real AWS wire protocols; where moto cannot show
//! a behaviour of the real service (an operation still in progress, a
//! throttled or failing call), a fault-injecting proxy of our own sits
//! between `flow` and moto.
//!
//! Each test starts its own moto server (installed into `.venv` on first use).
//!
//! One test binary, a module per subject: `stacks` (CloudFormation: exports,
//! change sets, replacement, parameter checks, rollback), `batch` (the Batch
//! chain and an interrupted job), `batch_restarts` (a training that
//! survives a node), `fsx` (fsx.lustre), `s3_sync` (s3.sync),
//! `resume` (kill -9 mid-chain, then resume), `faults` (throttling and
//! server errors injected), `secrets` (a secret made outside flow),
//! `retried_job` (a job that failed its gate, applied again).

#[path = "../support/mod.rs"]
mod support;

mod batch;
mod batch_node_check;
mod batch_restarts;
mod faults;
mod fsx;
mod protected;
mod resume;
mod retried_job;
mod s3_sync;
mod secrets;
mod stacks;

/// Where `needle` first appears in `hay` (panics if it does not).
pub(crate) fn at(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in:\n{hay}"))
}
