//! `flow state restore` for a state kept in S3: a backup (a version of the
//! object, a copy under `KEY.backups/`, or a local backup file) checked
//! whole, then written as the new state object under the lock, with a
//! serial above every one seen before, so saved plans made before it are
//! refused as stale. What it replaces is kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio::runtime::Handle;

use super::client::{Failure, Fetched, Remote};
use super::log;
use super::publish::document;
use super::replace;
use super::sync::decode;
use super::{S3Location, S3Options, remote_error};
use crate::backup::replace_contents;
use crate::error::StateError;
use crate::snapshot::to_hex;
use crate::store::{NoDatabase, Store};

/// Where a backup of an S3 state is, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupSource {
    /// A version of the state object (the VERSION column of `flow state backups`).
    Version(String),
    /// An object in the state's bucket (`s3://BUCKET/KEY.backups/…`).
    Object(String),
    /// A backup file on this machine (one of the local copy's backups).
    File(PathBuf),
}

impl BackupSource {
    /// Reads `text`: an `s3://` URL in the state's bucket, an existing
    /// file, or else a version id.
    pub fn parse(text: &str, location: &S3Location) -> Result<BackupSource, StateError> {
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket != location.bucket || key.is_empty() {
                return Err(StateError::Remote {
                    message: format!(
                        "backup {text} is not an object in the state's bucket `{}`",
                        location.bucket
                    ),
                    help: Some("pick one from `flow state backups FILE`".to_string()),
                });
            }
            return Ok(BackupSource::Object(key.to_string()));
        }
        let path = Path::new(text);
        if path.is_file() {
            return Ok(BackupSource::File(path.to_path_buf()));
        }
        if text.is_empty() || text.contains('/') {
            return Err(StateError::Remote {
                message: format!("backup {text} is neither a file nor a version id"),
                help: Some("pick one from `flow state backups FILE`".to_string()),
            });
        }
        Ok(BackupSource::Version(text.to_string()))
    }
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredRemote {
    /// Steps in the restored state.
    pub steps: usize,
    /// The state's serial now.
    pub serial: u64,
    /// Where the state it replaced is kept, if there was one.
    pub replaced: Option<String>,
}

/// Restores the S3 state at `location` from `source`, with the local copy
/// in `root` following it.
pub async fn restore(
    root: &Path,
    client: aws_sdk_s3::Client,
    location: S3Location,
    opts: &S3Options,
    source: &BackupSource,
) -> Result<RestoredRemote, StateError> {
    let remote = Remote::new(client, location, Handle::current());
    let fail = |f| remote_error(&remote.location, f);
    remote.check_bucket().await.map_err(fail)?;
    let _lease = replace::take_lock(&remote, opts, "restoring a state").await?;

    let body = match source {
        BackupSource::Version(id) => remote.get(&remote.location.key, Some(id)).await,
        BackupSource::Object(key) => remote.get(key, None).await,
        BackupSource::File(path) => std::fs::read(path)
            .map(|body| Fetched {
                body,
                etag: String::new(),
            })
            .map_err(|e| Failure::Fatal {
                message: format!("cannot read backup {}: {e}", path.display()),
                help: "pick one from `flow state backups FILE`".to_string(),
            }),
    };
    let backup = match body {
        Ok(got) => decode(&remote, &got.body, String::new())?.0,
        Err(Failure::NotFound) => {
            return Err(StateError::Remote {
                message: format!("backup {} does not exist", describe(source, &remote)),
                help: Some("pick one from `flow state backups FILE`".to_string()),
            });
        }
        Err(other) => return Err(fail(other)),
    };
    // The object it replaces may be unreadable (that may be why it is
    // restored): it is kept as it is, whatever it holds.
    let current = replace::current(&remote).await?;
    let current_serial = current
        .as_ref()
        .and_then(|c| decode(&remote, &c.body, c.etag.clone()).ok())
        .map_or(0, |(c, _)| c.snap.serial);
    // The deltas after it may be damaged too (another reason to restore):
    // the restored snapshot reaches past the last of them, whatever they hold.
    let (log_seq, log_serial) = log::end(&remote).await?;
    let current_serial = current_serial.max(log_serial.unwrap_or(0));

    let store = Store::open_with(
        root,
        &opts.command,
        NoDatabase::Create,
        opts.retention,
        |_, _| Ok(None),
    )?;
    let layout = store.layout().clone();
    let trees = store.trees()?;
    let serial = backup.snap.serial.max(store.serial()).max(current_serial) + 1;
    let replaced = match &current {
        Some(old) => {
            let versioned = remote.versioned().await.unwrap_or(false);
            Some(replace::keep_replaced(&remote, old, versioned).await?)
        }
        None => None,
    };
    let records: BTreeMap<String, Vec<u8>> = backup.records.iter().cloned().collect();
    let body = document(
        backup.snap.schema_version,
        &to_hex(&backup.salt),
        serial,
        log_seq,
        None,
        &records,
    );
    let etag = replace::replace_object(
        &remote,
        body,
        current.as_ref(),
        "the backup was being restored",
    )
    .await?;
    if !store.steps()?.is_empty() {
        store.backup()?;
    }
    let steps = backup.records.len();
    replace_contents(
        &layout,
        trees,
        backup.snap.schema_version,
        backup.salt,
        backup.records,
        serial,
    )?;
    replace::mark_copy(&layout, trees, &remote, etag, serial)?;
    Ok(RestoredRemote {
        steps,
        serial,
        replaced,
    })
}

fn describe(source: &BackupSource, remote: &Remote) -> String {
    match source {
        BackupSource::Version(id) => format!("version {id} of {}", remote.location),
        BackupSource::Object(key) => format!("s3://{}/{key}", remote.location.bucket),
        BackupSource::File(path) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> S3Location {
        S3Location::parse("s3://team/a/state.json").unwrap()
    }

    #[test]
    fn a_backup_is_named_by_url_file_or_version() {
        assert_eq!(
            BackupSource::parse("s3://team/a/state.json.backups/state-3-9.json", &loc()).unwrap(),
            BackupSource::Object("a/state.json.backups/state-3-9.json".into())
        );
        assert!(BackupSource::parse("s3://other/a/state.json.backups/x.json", &loc()).is_err());
        assert_eq!(
            BackupSource::parse("3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", &loc()).unwrap(),
            BackupSource::Version("3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY".into())
        );
        assert!(BackupSource::parse("no/such/file.json", &loc()).is_err());
        let file = tempfile::NamedTempFile::new().unwrap();
        let text = file.path().to_str().unwrap();
        assert_eq!(
            BackupSource::parse(text, &loc()).unwrap(),
            BackupSource::File(file.path().to_path_buf())
        );
    }
}
