//! `flow logs FILE STEP [-f]`: a step's full log (command output, provider
//! events, engine notes), optionally followed while a run is writing it.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flow_state::StateLayout;

use super::args::StateArgs;
use super::common::{CliError, CliResult, state_dir};

/// Print the log of `step`; with `follow`, keep printing what is appended
/// until no flow process holds the state any more (or Ctrl-C). A step that
/// ran and had nothing to say has no log file (flow makes one only when
/// there is a line to write): that is said, not taken for an error. A step
/// with no log and no run that could write one is an error, followed or
/// not.
pub fn logs(file: &Path, step: &str, state: &StateArgs, follow: bool) -> CliResult<i32> {
    let dir: Option<&PathBuf> = state.state_dir.as_ref();
    let root = state_dir(file, dir);
    let layout = StateLayout::new(&root);
    let path = layout.log_file(step);
    // Followed, a log that is not there yet may come while an apply runs.
    let may_come = follow && state_in_use(&layout);
    if !path.exists() && !may_come {
        return no_log(file, step, state, &root, &layout);
    }
    let mut offset = 0u64;
    let mut seen = false;
    let mut stdout = std::io::stdout().lock();
    loop {
        if let Ok(mut f) = std::fs::File::open(&path) {
            seen = true;
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < offset {
                offset = 0; // replaced: start again
            }
            if len > offset {
                f.seek(SeekFrom::Start(offset))
                    .map_err(|e| CliError::msg(format!("cannot read {}: {e}", path.display())))?;
                let mut buf = Vec::new();
                f.read_to_end(&mut buf)
                    .map_err(|e| CliError::msg(format!("cannot read {}: {e}", path.display())))?;
                offset += buf.len() as u64;
                let _ = stdout.write_all(&buf);
                let _ = stdout.flush();
            }
        }
        if !follow || !state_in_use(&layout) {
            if !seen {
                // The run that held the state ended without writing one.
                drop(stdout);
                return no_log(file, step, state, &root, &layout);
            }
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What there is to say of a step without a log file: that it ran and had
/// nothing to write (exit 0), or that there is no log (an error, with where
/// `[[moved]]` says the step went when state holds that).
fn no_log(
    file: &Path,
    step: &str,
    state: &StateArgs,
    root: &Path,
    layout: &StateLayout,
) -> CliResult<i32> {
    let records = super::inspect::open_records(file, state, "flow logs").unwrap_or_default();
    if let Some(rec) = records.iter().find(|r| r.name == step && r.applied) {
        println!(
            "step `{step}` ran ({}) and wrote nothing to its log: it printed no output and had no event or note to record",
            rec.status
        );
        return Ok(0);
    }
    let moved = super::module_outputs::load_quietly(file).and_then(|l| {
        super::module_outputs::moved_hint(&l, step, |to| {
            records.iter().any(|r| r.name == to) || layout.log_file(to).exists()
        })
    });
    Err(CliError::help(
        format!("there is no log for step `{step}` in {}", root.display()),
        moved.unwrap_or_else(|| {
            "a step has a log once it has run; `flow state list FILE` shows the steps state holds"
                .into()
        }),
    ))
}

/// Whether some flow process holds the state right now: the lock file names
/// a live process. (Probing the flock itself could make an apply starting at
/// that instant fail, so it is not touched.)
fn state_in_use(layout: &StateLayout) -> bool {
    let Ok(text) = std::fs::read_to_string(layout.lock_file()) else {
        return false;
    };
    let Ok(info) = serde_json::from_str::<flow_state::LockInfo>(&text) else {
        return false;
    };
    // SAFETY: kill(pid, 0) sends nothing; it only asks whether the pid exists.
    info.pid != 0 && unsafe { libc::kill(info.pid as i32, 0) } == 0
}
