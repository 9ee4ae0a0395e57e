//! The corpus of broken workflows: one `Case` per file under
//! `tests/fixtures/bad/`, each a `#[test]` (see `main.rs`), in two parts:
//! `workflow` (files, variables, steps, providers, the command line) and
//! `language` (expressions, `for_each`, `[[moved]]`, modules).

mod language;
mod workflow;

use super::Case;

/// Every case of the corpus.
pub fn corpus() -> impl Iterator<Item = &'static Case> {
    workflow::CASES.iter().chain(language::CASES)
}
