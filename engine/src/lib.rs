//! The flow engine: workflow language, DAG, planner, executor and CLI.

pub mod apply;
pub mod cli;
pub mod cost;
pub mod dag;
pub mod diag;
pub mod duration;
pub mod lang;
pub mod pipeline;
pub mod plan;
pub mod report;
pub mod secrets;
pub mod style;
