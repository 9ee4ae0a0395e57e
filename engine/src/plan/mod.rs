//! Plans: what apply would do, computed from the workflow and state alone.

pub mod access;
pub mod compute;
pub mod costs;
pub mod model;
pub mod moves;
pub mod outputs;
pub mod refine;
pub mod refresh;
pub mod render;
pub mod replacing;
pub mod saved;

pub use compute::{PlanRequest, compute_plan};
pub use model::{Action, Plan, StepChange};
