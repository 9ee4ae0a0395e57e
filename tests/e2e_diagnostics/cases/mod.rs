//! The corpus of broken workflows: one `Case` per file under
//! `tests/fixtures/bad/`, each a `#[test]` (see `main.rs`), in three parts:
//! `workflow` (files, variables, steps, providers, the command line),
//! `language` (expressions, `for_each`, `[[moved]]`, modules) and `inputs`
//! (inputs that could escape: paths, links, URLs, values in YAML).

mod inputs;
mod language;
mod workflow;

use super::Case;

/// Every case of the corpus.
pub fn corpus() -> impl Iterator<Item = &'static Case> {
    workflow::CASES
        .iter()
        .chain(language::CASES)
        .chain(inputs::CASES)
}
