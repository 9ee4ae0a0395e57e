//! The pieces shared by the commands that replace the S3 state object as a
//! whole (`flow state push --force`, `flow state restore`): the lock they
//! need, keeping what they replace, the conditional write, and the local
//! copy's mark of what S3 now holds.

use super::client::{Expect, Failure, Fetched, Remote};
use super::lease::Lease;
use super::{S3Options, remote_error};
use crate::db::Trees;
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::mark::{self, Mark};
use crate::records::now_secs;

/// Takes the lock for `doing` (e.g. "pushing a state"), which cannot be
/// done without it.
pub(crate) async fn take_lock(
    remote: &Remote,
    opts: &S3Options,
    doing: &str,
) -> Result<Lease, StateError> {
    let lock = opts.lock.as_ref().ok_or_else(|| StateError::Remote {
        message: format!("{doing} needs its lock"),
        help: Some("run it without --lock=false".to_string()),
    })?;
    let mut notes = Vec::new();
    Lease::acquire(remote, lock, &mut notes).await
}

/// The state object as it is now, if there is one.
pub(crate) async fn current(remote: &Remote) -> Result<Option<Fetched>, StateError> {
    match remote.get(&remote.location.key, None).await {
        Ok(got) => Ok(Some(got)),
        Err(Failure::NotFound) => Ok(None),
        Err(other) => Err(remote_error(&remote.location, other)),
    }
}

/// Keeps `old`, the object about to be replaced: a versioned bucket keeps
/// it already; otherwise it is copied to `KEY.backups/state-replaced-*.json`.
/// Returns where it is kept.
pub(crate) async fn keep_replaced(
    remote: &Remote,
    old: &Fetched,
    versioned: bool,
) -> Result<String, StateError> {
    if versioned {
        return Ok(format!(
            "{} (the bucket keeps every version)",
            remote.location
        ));
    }
    let key = format!(
        "{}state-replaced-{}.json",
        remote.location.backups_prefix(),
        now_secs()
    );
    remote
        .put(&key, old.body.clone(), None)
        .await
        .map_err(|f| remote_error(&remote.location, f))?;
    Ok(format!("s3://{}/{key}", remote.location.bucket))
}

/// Writes `body` as the state object if it is still `old` (or still absent);
/// returns the new ETag. `doing` names the command in the refusal.
pub(crate) async fn replace_object(
    remote: &Remote,
    body: Vec<u8>,
    old: Option<&Fetched>,
    doing: &str,
) -> Result<String, StateError> {
    let expect = match old {
        Some(got) => Expect::Etag(got.etag.clone()),
        None => Expect::Absent,
    };
    remote
        .put(&remote.location.key, body, Some(&expect))
        .await
        .map_err(|f| match f {
            Failure::Precondition => StateError::Remote {
                message: format!(
                    "{} changed while {doing}; nothing was replaced",
                    remote.location
                ),
                help: Some("run the command again".to_string()),
            },
            other => remote_error(&remote.location, other),
        })
}

/// Marks the local copy as holding what S3 holds at `etag` and `serial`,
/// durably (a checkpoint: the mark does not go through the write-ahead
/// log).
pub(crate) fn mark_copy(
    layout: &StateLayout,
    trees: &Trees,
    remote: &Remote,
    etag: String,
    serial: u64,
) -> Result<(), StateError> {
    mark::write(
        &layout.root,
        trees,
        &Mark {
            url: remote.location.to_string(),
            etag: Some(etag),
            pushed_serial: serial,
        },
    )?;
    crate::wal::checkpoint(&layout.root, trees)
}
