//! AWS ParallelCluster: `parallelcluster.cluster`, a Slurm cluster made
//! with the official `pcluster` CLI from the runbook's configuration file.
//! Its jobs run as `slurm.job` steps on the head node over SSH.

mod cli;
mod cluster;
mod config;
mod efa_online;
mod efa_rules;
mod errors;
mod ops;
mod reservations;
mod resize;
mod wait;

use std::sync::Arc;

use crate::contract::Provider;

pub use cluster::ParallelCluster;

/// The ParallelCluster provider kinds.
pub fn providers() -> Vec<Arc<dyn Provider>> {
    vec![Arc::new(ParallelCluster::new())]
}
