//! Providers for flow: the contract every provider kind implements, and the
//! built-in kinds.

pub mod aws;
pub mod capture;
pub mod contract;
pub mod efa;
pub mod eks;
pub mod eks_access;
pub mod error_chain;
pub mod exec;
pub(crate) mod file_input;
pub mod fingerprint;
pub mod fleet;
pub(crate) mod inputs;
pub mod kube;
pub mod local_digest;
pub mod metrics;
pub mod null;
pub mod ownership;
pub mod parallelcluster;
pub mod registry;
pub mod sensitive;
pub mod slurm;
pub mod substitute;

pub mod suggest;
#[cfg(test)]
mod testing;
pub mod yaml_fill;
pub(crate) mod yaml_path;

pub use contract::*;
pub use file_input::Workdir;
pub use registry::Registry;
