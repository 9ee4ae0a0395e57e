//! Expressions inside `${…}`: references, function calls, operators and
//! conditions. The way through: `interp` finds the `${…}` in a text, `lex`
//! and `parse` turn a body into an `ast::Expr`, `types` checks it before
//! anything runs (with `functions`' signatures and the `ty` lattice), and `eval` computes it.
//! The grammar is in `docs/workflow-language.md` ("Expressions").

pub mod ast;
pub mod call;
pub mod error;
pub mod eval;
pub mod functions;
pub mod interp;
pub mod lex;
pub mod ops;
pub mod parse;
pub mod parse_refs;
pub mod text;
pub mod ty;
pub mod types;
