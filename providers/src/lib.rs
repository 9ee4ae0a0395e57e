//! Providers for flow: the contract every provider kind implements, and the
//! built-in kinds.

pub mod contract;

pub use contract::*;
