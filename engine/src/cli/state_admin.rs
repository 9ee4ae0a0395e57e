//! `flow state backups/restore/push/pull/unlock`: keeping a state safe and
//! moving it between the local folder and S3.

use std::path::Path;

use flow_state::remote::{self, Moved};
use flow_state::timefmt::format_rfc3339;

use super::args::StateArgs;
use super::common::{CliError, CliResult};
use super::state_open::{Access, StateTarget, s3_client, s3_options, target};

/// `flow state backups FILE`: newest first, local or S3.
pub fn state_backups(file: &Path, state: &StateArgs) -> CliResult<i32> {
    let target = target(file, state)?;
    let Some(loc) = target.s3.clone() else {
        return local_backups(&target);
    };
    let (versioned, found) = super::block_on(async {
        let client = s3_client(&loc).await?;
        Ok::<_, CliError>(remote::list_remote_backups(client, loc.clone()).await?)
    })?;
    if found.is_empty() {
        println!("No backups of {loc} yet.");
        return Ok(0);
    }
    if versioned {
        println!(
            "{loc} is versioned: the state as each run ended is kept. Its versions, newest first:"
        );
        println!("{:<20}  {:>10}  VERSION", "WRITTEN", "BYTES");
    } else {
        println!("Backups of {loc}, newest first:");
        println!("{:<20}  {:>10}  OBJECT", "WRITTEN", "BYTES");
    }
    for b in found {
        println!(
            "{:<20}  {:>10}  {}",
            format_rfc3339(b.written_at),
            b.size,
            if versioned {
                b.id
            } else {
                format!("s3://{}/{}", loc.bucket, b.id)
            }
        );
    }
    Ok(0)
}

fn local_backups(target: &StateTarget) -> CliResult<i32> {
    let root = &target.dir;
    let backups = flow_state::list_backups(root)?;
    if backups.is_empty() {
        println!("No backups in {}.", root.join("backups").display());
        return Ok(0);
    }
    println!("{:<20}  {:>8}  FILE", "TAKEN", "SERIAL");
    for b in backups {
        println!(
            "{:<20}  {:>8}  {}",
            format_rfc3339(b.created_at),
            b.serial,
            b.path.display()
        );
    }
    Ok(0)
}

/// `flow state restore FILE BACKUP`: a local backup file, or for an S3
/// state a version id, an `s3://` backup object or a local backup file.
pub fn state_restore(file: &Path, backup: &Path, state: &StateArgs) -> CliResult<i32> {
    let target = target(file, state)?;
    if let Some(loc) = target.s3.clone() {
        let source = remote::BackupSource::parse(&backup.to_string_lossy(), &loc)?;
        let opts = s3_options(&target, state, "flow state restore", Access::Write);
        let restored = super::block_on(async {
            let client = s3_client(&loc).await?;
            Ok::<_, CliError>(
                remote::restore(&target.dir, client, loc.clone(), &opts, &source).await?,
            )
        })?;
        println!(
            "Restored {} step{} into {loc} from {} (state serial is now {}).",
            restored.steps,
            if restored.steps == 1 { "" } else { "s" },
            backup.display(),
            restored.serial
        );
        if let Some(prev) = &restored.replaced {
            println!("The state it replaced is kept: {prev}.");
        }
        return Ok(0);
    }
    let restored = flow_state::restore_keeping(&target.dir, backup, &target.backups)?;
    println!(
        "Restored {} step{} from {} (state serial is now {}).",
        restored.steps,
        if restored.steps == 1 { "" } else { "s" },
        backup.display(),
        restored.serial
    );
    if let Some(prev) = &restored.previous {
        println!("The state it replaced was backed up to {}.", prev.display());
    }
    if let Some(damaged) = &restored.damaged {
        println!("The damaged database was moved to {}.", damaged.display());
    }
    Ok(0)
}

/// The S3 state a push, pull or unlock works on.
fn s3_target(file: &Path, state: &StateArgs, what: &str) -> CliResult<StateTarget> {
    let target = target(file, state)?;
    if target.s3.is_none() {
        return Err(CliError::help(
            format!(
                "{} keeps its state locally, so there is no S3 state to {what}",
                file.display()
            ),
            "name one under [workflow.state] (backend = \"s3\", bucket, key, region) or with --state s3://BUCKET/KEY",
        ));
    }
    Ok(target)
}

fn moved_line(verb: &str, moved: &Moved) -> String {
    format!(
        "{verb} {} step{} (serial {})",
        moved.steps,
        if moved.steps == 1 { "" } else { "s" },
        moved.serial
    )
}

/// `flow state push FILE [--force]`.
pub fn state_push(file: &Path, state: &StateArgs, force: bool) -> CliResult<i32> {
    let target = s3_target(file, state, "push to")?;
    let loc = target.s3.clone().expect("checked");
    let opts = s3_options(&target, state, "flow state push", Access::Write);
    let moved = super::block_on(async {
        let client = s3_client(&loc).await?;
        Ok::<_, CliError>(remote::push(&target.dir, client, loc.clone(), &opts, force).await?)
    })?;
    println!(
        "{} from {} to {loc}; the local folder is now its copy.",
        moved_line("Pushed", &moved),
        target.dir.display()
    );
    Ok(0)
}

/// `flow state pull FILE [--force]`.
pub fn state_pull(file: &Path, state: &StateArgs, force: bool) -> CliResult<i32> {
    let target = s3_target(file, state, "pull from")?;
    let loc = target.s3.clone().expect("checked");
    let opts = s3_options(&target, state, "flow state pull", Access::Write);
    let moved = super::block_on(async {
        let client = s3_client(&loc).await?;
        Ok::<_, CliError>(remote::pull(&target.dir, client, loc.clone(), &opts, force).await?)
    })?;
    println!(
        "{} from {loc} into {}, which is now the state.",
        moved_line("Pulled", &moved),
        target.dir.display()
    );
    println!(
        "The object in S3 is left as it is. Keep the state locally by setting backend = \"local\" under [workflow.state] (or removing the table) in {}.",
        file.display()
    );
    Ok(0)
}

/// `flow state unlock FILE LOCK_ID`.
pub fn state_unlock(file: &Path, state: &StateArgs, lock_id: &str) -> CliResult<i32> {
    let target = s3_target(file, state, "unlock").map_err(|_| {
        CliError::help(
            format!(
                "{} keeps its state locally; a local state has no lock to break",
                file.display()
            ),
            "the local lock is an flock, released by the kernel when its holder exits",
        )
    })?;
    let loc = target.s3.clone().expect("checked");
    let who = super::block_on(async {
        let client = s3_client(&loc).await?;
        Ok::<_, CliError>(remote::unlock(client, loc.clone(), lock_id).await?)
    })?;
    println!("Broke the lock of {loc}, held by {who}.");
    Ok(0)
}
