//! Slurm: `slurm.job`, a batch script submitted with `sbatch` (on this
//! machine or over SSH on a login or head node) and followed to its end;
//! `slurm.node_check`, every node of a fleet checked with such scripts,
//! the bad ones named and drained. A `slurm.job` with `restarts` survives
//! a node: a failed or hung attempt's suspect nodes are checked and
//! drained, and the job resubmitted from its newest checkpoint.
//! Slurm's own commands are driven as a user runs them; nothing here speaks
//! Slurm's RPC protocol.

mod control;
mod job;
mod node_check;
mod nodes;
mod output;
mod output_path;
mod remote;
mod replacement;
mod restart;
mod run;
mod script;
mod submission;

use std::sync::Arc;

use crate::contract::Provider;

pub use job::SlurmJob;
pub use node_check::SlurmNodeCheck;

/// The Slurm provider kinds.
pub fn providers() -> Vec<Arc<dyn Provider>> {
    vec![Arc::new(SlurmJob::new()), Arc::new(SlurmNodeCheck::new())]
}
