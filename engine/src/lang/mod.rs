//! The workflow language: TOML with `${...}` references, parsed with spans
//! and checked before anything runs.

pub mod ast;
pub mod check;
pub mod load;
pub mod parse;
pub mod resolve;
pub mod template;
pub mod toml_nodes;
pub mod vars;
