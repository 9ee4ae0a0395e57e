//! The corpus of broken workflows: one `Case` per file under
//! `tests/fixtures/bad/`, each a `#[test]` (see `main.rs`), in parts:
//! `files` (TOML syntax, duplicates, unknown keys, several problems),
//! `variables` (declarations, `--var`, `--var-file`), `steps` (references
//! between steps, dependencies, step settings), `providers` (providers and
//! their inputs, references in inputs), `templates` (the files a step is
//! given: placeholders, kustomize, eksctl, EFA), `settings` (state backups
//! and lifecycle), `language` (expressions, `for_each`, `[[moved]]`,
//! modules) and `inputs` (inputs that could escape: paths, links, URLs,
//! values in YAML).

mod files;
mod inputs;
mod language;
mod providers;
mod settings;
mod steps;
mod templates;
mod variables;

use super::Case;

/// Every case of the corpus.
pub fn corpus() -> impl Iterator<Item = &'static Case> {
    files::CASES
        .iter()
        .chain(variables::CASES)
        .chain(steps::CASES)
        .chain(providers::CASES)
        .chain(templates::CASES)
        .chain(settings::CASES)
        .chain(language::CASES)
        .chain(inputs::CASES)
}
