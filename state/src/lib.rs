//! The flow state store.

pub mod records;

pub use records::*;
