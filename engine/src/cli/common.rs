//! What the commands share: errors, state location, loading a workflow.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use flow_providers::Registry;
use flow_state::{StateBackend, StepRecord};

use crate::diag::Diagnostics;
use crate::lang::load::{Loaded, load};
use crate::lang::vars::VarInputs;
use crate::style::Style;

/// How a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Problems in the workflow or the command line, with spans.
    Diagnostics(Diagnostics),
    /// Anything else, with an optional help line.
    Message(String, Option<String>),
    /// Steps failed; already reported.
    StepsFailed,
    /// Ctrl-C; already reported.
    Interrupted,
}

impl CliError {
    /// An error without help.
    pub fn msg(m: impl Into<String>) -> Self {
        CliError::Message(m.into(), None)
    }

    /// An error with a help line.
    pub fn help(m: impl Into<String>, help: impl Into<String>) -> Self {
        CliError::Message(m.into(), Some(help.into()))
    }

    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Interrupted => 130,
            _ => 1,
        }
    }
}

impl From<flow_state::StateError> for CliError {
    fn from(e: flow_state::StateError) -> Self {
        CliError::Message(e.to_string(), e.help())
    }
}

/// A command's result.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Output settings shared by all commands.
#[derive(Debug, Clone, Copy)]
pub struct Ui {
    /// Styling for stdout.
    pub style: Style,
    /// `-q`.
    pub quiet: bool,
    /// `-v`.
    pub verbose: bool,
    /// `--json`: machine-readable output only.
    pub json: bool,
}

/// The state folder: `--state-dir`, else `.flow/NAME` beside the workflow
/// file, NAME being the file's name without `.toml`: workflows that share a
/// folder (as `workflows/` does) each keep their own state, so applying one
/// never plans the deletion of another's steps.
pub fn state_dir(file: &Path, flag: Option<&PathBuf>) -> PathBuf {
    if let Some(dir) = flag {
        return dir.clone();
    }
    let parent = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = file
        .file_stem()
        .filter(|s| !s.is_empty())
        .unwrap_or(std::ffi::OsStr::new("workflow"));
    parent.join(".flow").join(name)
}

/// The workflow file's folder.
pub fn workdir(file: &Path) -> PathBuf {
    file.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Load and check a workflow, reading variables from the real environment.
pub fn load_workflow(file: &Path, vars: &VarInputs, registry: &Registry) -> CliResult<Loaded> {
    load(file, vars, registry, &|name| std::env::var(name).ok()).map_err(CliError::Diagnostics)
}

/// The workflow with each deferred `for_each` that state's outputs now make
/// known expanded ([`crate::pipeline::settle`]); `None` when nothing was
/// deferred, and `req.loaded` stands.
pub fn settle_workflow(
    req: &crate::plan::PlanRequest<'_>,
    file: &Path,
    vars: &VarInputs,
) -> CliResult<Option<Loaded>> {
    if req.loaded.workflow.deferred.is_empty() {
        return Ok(None);
    }
    let env = |name: &str| std::env::var(name).ok();
    crate::pipeline::settle(req, &|outputs| {
        crate::lang::load::load_with(file, vars, req.registry, &env, outputs)
    })
    .map(Some)
    .map_err(CliError::Diagnostics)
}

/// Every record in `store`, by name.
pub fn records_of(store: Option<&dyn StateBackend>) -> CliResult<BTreeMap<String, StepRecord>> {
    Ok(match store {
        Some(s) => s
            .steps()?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect(),
        None => BTreeMap::new(),
    })
}

/// What state recorded with the workflow's `[[moved]]` entries carried out
/// (in memory; apply writes them with [`write_moves`]), and the moves made.
pub fn moved_records(
    loaded: &crate::lang::load::Loaded,
    store: Option<&dyn StateBackend>,
) -> CliResult<(
    BTreeMap<String, StepRecord>,
    Vec<crate::plan::moves::MovedAddress>,
)> {
    moved_records_of(loaded, records_of(store)?)
}

/// [`moved_records`] of records already read (by name).
pub fn moved_records_of(
    loaded: &crate::lang::load::Loaded,
    records: BTreeMap<String, StepRecord>,
) -> CliResult<(
    BTreeMap<String, StepRecord>,
    Vec<crate::plan::moves::MovedAddress>,
)> {
    let is_address = |a: &str| loaded.workflow.step(a).is_some();
    crate::plan::moves::apply_moves(&loaded.workflow.moved, records, &is_address)
        .map_err(CliError::Diagnostics)
}

/// Write `moves` to state in one batch, before anything else of the apply.
pub async fn write_moves(
    store: &dyn StateBackend,
    moves: &[crate::plan::moves::MovedAddress],
    records: &BTreeMap<String, StepRecord>,
) -> CliResult<()> {
    if moves.is_empty() {
        return Ok(());
    }
    let mutations = crate::plan::moves::move_mutations(moves, records);
    store.committer().commit(mutations).await?;
    Ok(())
}

/// Ask "yes" on a terminal; refuse without one.
pub fn confirm(question: &str, auto_approve: bool) -> CliResult<()> {
    if auto_approve {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::help(
            "refusing to continue without confirmation: standard input is not a terminal",
            "pass --auto-approve to run without asking",
        ));
    }
    println!("{question}\n  Only 'yes' will be accepted.");
    print!("  Enter a value: ");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| CliError::msg(format!("cannot read the answer: {e}")))?;
    if answer.trim() == "yes" {
        Ok(())
    } else {
        Err(CliError::msg("cancelled: nothing was changed"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    #[test]
    fn each_workflow_file_has_its_own_state_folder() {
        assert_eq!(
            super::state_dir(Path::new("workflows/eks-p4d.toml"), None),
            PathBuf::from("workflows/.flow/eks-p4d")
        );
        assert_eq!(
            super::state_dir(Path::new("wf.toml"), None),
            PathBuf::from("./.flow/wf")
        );
        let flag = PathBuf::from("/tmp/st");
        assert_eq!(super::state_dir(Path::new("wf.toml"), Some(&flag)), flag);
    }
}
