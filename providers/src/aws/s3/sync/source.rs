//! The source side of a sync as a step names it: its inputs, the folder
//! (inside the workflow's, or one `allow_paths` opens) scanned with or
//! without following links, and what validate and the plan say about it.

use serde_json::Value;

use super::super::uri::S3Uri;
use super::PLAN_LINES;
use super::local::{self, Scan, ScanError};
use crate::Workdir;
use crate::aws::inputs;
use crate::contract::{Problem, ProviderError, Values};

/// One digest of the folder `source` (relative to `workdir`): its files'
/// paths and contents (links followed only if `follow_links`). Equal
/// digests mean nothing to send; this is what a plan can compare without
/// calling AWS. `None` when the folder cannot be scanned.
pub fn folder_digest(workdir: &Workdir, source: &str, follow_links: bool) -> Option<String> {
    let dir = workdir.resolve(source).ok()?;
    Some(local::digest(&local::scan(&dir, follow_links).ok()?.files))
}

/// A sync's inputs.
pub(super) struct Spec {
    /// The folder, as the step names it.
    pub source: String,
    /// Where to.
    pub to: S3Uri,
    /// `follow_symlinks`.
    pub follow_links: bool,
}

impl Spec {
    /// The spec of a step's inputs.
    pub fn load(values: &Values) -> Result<Spec, ProviderError> {
        let source = inputs::req_str(values, "source")?;
        let to = S3Uri::parse(&inputs::req_str(values, "destination")?)
            .map_err(|e| ProviderError::bad_input(e.to_string()))?;
        let follow_links = values
            .get("follow_symlinks")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Spec {
            source,
            to,
            follow_links,
        })
    }

    /// The local files, hashed, and the links skipped.
    pub async fn scan(&self, workdir: &Workdir) -> Result<Scan, ProviderError> {
        let dir = workdir
            .resolve(&self.source)
            .map_err(ProviderError::bad_input)?;
        let source = self.source.clone();
        let follow = self.follow_links;
        let help = "check the folder and its permissions; paths are relative to the workflow file's folder";
        tokio::task::spawn_blocking(move || local::scan(&dir, follow))
            .await
            .map_err(|e| {
                ProviderError::fatal(format!("scanning `{source}` stopped: {e}")).with_help(help)
            })?
            .map_err(|e| match e {
                ScanError::LinkOutside { .. } => {
                    ProviderError::bad_input(format!("in `source`, {e}"))
                }
                ScanError::Io(e) => {
                    ProviderError::fatal(format!("could not read folder `{source}`: {e}"))
                        .with_help(help)
                }
            })
    }
}

/// The lines that say which links a sync leaves out.
pub(super) fn skipped_lines(skipped: &[String]) -> Vec<String> {
    if skipped.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "skipped {} symbolic link{} (set follow_symlinks = true to send what links to files point to):",
        skipped.len(),
        if skipped.len() == 1 { "" } else { "s" }
    )];
    lines.extend(
        skipped
            .iter()
            .take(PLAN_LINES)
            .map(|rel| format!("  {rel}")),
    );
    if skipped.len() > PLAN_LINES {
        lines.push(format!("  … and {} more", skipped.len() - PLAN_LINES));
    }
    lines
}

/// What is wrong with `source`, if anything: outside the folders the
/// workflow may read, not a folder, or (when links are followed) holding a
/// link that leads out of it.
pub(super) fn source_problem(workdir: &Workdir, source: &str, follow: bool) -> Option<Problem> {
    let dir = match workdir.resolve(source) {
        Ok(dir) => dir,
        Err(why) => return Some(Problem::at("source", why)),
    };
    if !dir.is_dir() {
        return Some(
            Problem::at("source", format!("folder `{source}` does not exist"))
                .with_help("`source` is a folder, relative to the workflow file's folder"),
        );
    }
    match follow.then(|| local::check_links(&dir)) {
        Some(Err(e @ ScanError::LinkOutside { .. })) => {
            Some(Problem::at("follow_symlinks", format!("in `source`, {e}")))
        }
        _ => None,
    }
}
