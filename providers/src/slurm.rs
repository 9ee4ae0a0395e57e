//! Slurm: `slurm.job`, a batch script submitted with `sbatch` (on this
//! machine or over SSH on a login or head node) and followed to its end.
//! Slurm's own commands are driven as a user runs them; nothing here speaks
//! Slurm's RPC protocol.

mod control;
mod job;
mod output;
mod output_path;
mod remote;
mod run;
mod script;

use std::sync::Arc;

use crate::contract::Provider;

pub use job::SlurmJob;

/// The Slurm provider kinds.
pub fn providers() -> Vec<Arc<dyn Provider>> {
    vec![Arc::new(SlurmJob::new())]
}
