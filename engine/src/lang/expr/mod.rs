//! Expressions inside `${…}`: references, function calls, operators and
//! conditions. The way through: `interp` finds the `${…}` in a text, `lex`
//! and `parse` (with `parse_refs` for the reference forms) turn a body into
//! an `ast::Expr`, `types` checks it before anything runs (with the `ty`
//! lattice and the signatures in `functions`), and `eval` computes it
//! (`ops` for the operators, `functions` with `call` and `text` for the
//! standard library, `error` for what goes wrong). The grammar is in
//! `docs/workflow-language.md` ("Expressions").

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
