//! Apply and destroy: carry out a plan step by step on durable state.

pub mod events;
pub mod retry;
pub mod schedule;
pub mod step;
