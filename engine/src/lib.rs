//! The flow engine: workflow language, DAG, planner, executor and CLI.

pub mod apply;
pub mod cli;
pub mod cost;
pub mod dag;
pub mod diag;
pub mod inputs;
pub mod lang;
pub mod plan;
pub mod secrets;
pub mod style;
