//! The workflow language: TOML with `${...}` references, parsed with spans
//! and checked before anything runs.
//!
//! The modules run in this order (`load` drives them, and returns a
//! [`load::Loaded`] workflow or every problem at once):
//! 1. `toml_nodes` reads the TOML with spans, `template` splits `${…}`
//!    strings, `parse` builds the `ast` (`state_table` reads
//!    `[workflow.state]`, also on its own for commands that need no more);
//! 2. `providers` resolves each step's provider once (one diagnostic for an
//!    unknown one);
//! 3. `check` checks references, input names and types, and cycles;
//! 4. `vars` gives every variable its value;
//! 5. `inputs` (with `resolve`, which evaluates one value) resolves each
//!    step's inputs; `load` hands the known ones to the provider's offline
//!    checks. Plan and apply call the same `inputs::resolve_inputs` later,
//!    with recorded or fresh outputs.

pub mod ast;
pub mod check;
pub mod expand;
pub mod expr;
pub mod inputs;
pub mod load;
pub mod module_call;
pub mod modules;
pub mod moved;
pub mod parse;
pub mod providers;
pub mod resolve;
pub mod state_table;
pub mod template;
pub mod toml_nodes;
mod toml_pieces;
pub mod var_values;
pub mod vars;
pub mod yaml_text;
