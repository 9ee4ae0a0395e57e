//! The errors the state store reports, worded for the person at the terminal.

use std::path::{Path, PathBuf};

use crate::holder::LockInfo;
use crate::timefmt::format_rfc3339;

/// Everything that can go wrong while opening, reading or writing the state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another process holds the state lock.
    #[error("{}", locked_message(path, info.as_ref()))]
    Locked {
        /// The state directory.
        path: PathBuf,
        /// Who holds it, as the holder wrote it (absent if unreadable).
        info: Option<LockInfo>,
    },

    /// The state was written by a newer flow than this one.
    #[error(
        "state was written by a newer flow (schema {found}); this flow reads up to {supported}"
    )]
    NewerSchema {
        /// The schema version found on disk.
        found: u32,
        /// The newest schema version this build reads.
        supported: u32,
    },

    /// The state is older than anything this flow can migrate from.
    #[error(
        "state has schema {found}, which this flow cannot migrate (it migrates from schema {oldest} onwards)"
    )]
    UnsupportedSchema {
        /// The schema version found on disk.
        found: u32,
        /// The oldest schema version this build can migrate.
        oldest: u32,
    },

    /// The database cannot be opened or holds a record that cannot be read.
    #[error(
        "state at {} is damaged: {detail}. List the backups kept in {} with `flow state backups` and restore one with `flow state restore <file>`",
        path.display(),
        path.join("backups").display()
    )]
    Corrupt {
        /// The state directory.
        path: PathBuf,
        /// What was found wrong (never a record's contents).
        detail: String,
    },

    /// A backup file cannot be used for a restore.
    #[error("backup {} cannot be restored: {detail}", path.display())]
    InvalidBackup {
        /// The backup file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },

    /// A file or directory of the state cannot be read or written.
    #[error("could not access {}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// The disk holding the state is full (ENOSPC, or a quota: EDQUOT).
    #[error("the disk holding {} is full (ENOSPC): {source}", path.display())]
    DiskFull {
        /// The file or directory that could not be written.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// A state folder that had commits has lost its database.
    #[error(
        "state at {} has no database (db/ is missing), but {evidence}",
        path.display()
    )]
    MissingDatabase {
        /// The state directory.
        path: PathBuf,
        /// What shows that it had one: the watermark, the backups.
        evidence: String,
    },

    /// A change to a state that was opened read-only.
    #[error("the state at {} was opened read-only by `{command}`, so it cannot be changed", path.display())]
    ReadOnly {
        /// The state directory.
        path: PathBuf,
        /// The command that opened it.
        command: String,
    },

    /// The database engine failed in a way that is not damage to the state.
    #[error("the state database failed: {0}")]
    Sled(String),

    /// The store was closed, so the change was not recorded.
    #[error("the state store is closed, so the change was not recorded")]
    Closed,

    /// The S3 state could not be read, written or locked.
    #[error("{message}")]
    Remote {
        /// What happened, naming the bucket and key.
        message: String,
        /// What to do about it.
        help: Option<String>,
    },
}

impl StateError {
    /// An [`StateError::Io`] for `path` ([`StateError::DiskFull`] when the
    /// disk is full).
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if is_disk_full(&source) {
            return StateError::DiskFull { path, source };
        }
        StateError::Io { path, source }
    }

    /// A [`StateError::Corrupt`] for the state at `root`.
    pub(crate) fn corrupt(root: &Path, detail: impl Into<String>) -> Self {
        StateError::Corrupt {
            path: root.to_path_buf(),
            detail: detail.into(),
        }
    }

    /// The same error again (for answering several waiters with one failure).
    pub(crate) fn duplicate(&self) -> StateError {
        match self {
            StateError::Locked { path, info } => StateError::Locked {
                path: path.clone(),
                info: info.clone(),
            },
            StateError::NewerSchema { found, supported } => StateError::NewerSchema {
                found: *found,
                supported: *supported,
            },
            StateError::UnsupportedSchema { found, oldest } => StateError::UnsupportedSchema {
                found: *found,
                oldest: *oldest,
            },
            StateError::Corrupt { path, detail } => StateError::Corrupt {
                path: path.clone(),
                detail: detail.clone(),
            },
            StateError::InvalidBackup { path, detail } => StateError::InvalidBackup {
                path: path.clone(),
                detail: detail.clone(),
            },
            StateError::Io { path, source } => StateError::Io {
                path: path.clone(),
                source: copy_io(source),
            },
            StateError::DiskFull { path, source } => StateError::DiskFull {
                path: path.clone(),
                source: copy_io(source),
            },
            StateError::MissingDatabase { path, evidence } => StateError::MissingDatabase {
                path: path.clone(),
                evidence: evidence.clone(),
            },
            StateError::ReadOnly { path, command } => StateError::ReadOnly {
                path: path.clone(),
                command: command.clone(),
            },
            StateError::Sled(text) => StateError::Sled(text.clone()),
            StateError::Closed => StateError::Closed,
            StateError::Remote { message, help } => StateError::Remote {
                message: message.clone(),
                help: help.clone(),
            },
        }
    }

    /// What the user can do about it, when the message does not say it
    /// already ([`StateError::Corrupt`] names the backups and the restore
    /// command itself).
    pub fn help(&self) -> Option<String> {
        let fixed = match self {
            StateError::Locked { .. } => Some(
                "wait for that command to finish, or stop it; one state is changed by one flow process at a time, and the lock goes when its holder exits",
            ),
            StateError::NewerSchema { .. } => {
                Some("use the flow version that wrote this state, or a newer one")
            }
            StateError::UnsupportedSchema { .. } => Some(
                "open it once with an older flow that migrates it, or restore a newer backup with `flow state restore`",
            ),
            StateError::InvalidBackup { .. } => Some("pick another file from `flow state backups`"),
            StateError::Io { .. } => {
                Some("check the permissions and free space of the state folder")
            }
            StateError::DiskFull { .. } => Some(
                "free space on that disk (or move the state with --state-dir), then run the command again: everything recorded before is kept, and the next apply goes on from there",
            ),
            StateError::MissingDatabase { path, .. } => {
                return Some(format!(
                    "restore the newest backup with `flow state restore FILE BACKUP` (list them with `flow state backups FILE`); to start afresh on purpose, delete the whole state folder {}",
                    path.display()
                ));
            }
            StateError::ReadOnly { .. } => Some("run `flow apply` to change the state"),
            StateError::Sled(_) | StateError::Closed => None,
            StateError::Corrupt { .. } => None,
            StateError::Remote { help, .. } => return help.clone(),
        };
        fixed.map(str::to_string)
    }

    /// Maps an error from sled while the state at `root` is in use.
    pub(crate) fn from_sled(root: &Path, err: sled::Error) -> Self {
        match err {
            sled::Error::Io(source) => StateError::io(root.join("db"), source),
            sled::Error::Corruption { .. } => {
                StateError::corrupt(root, format!("the database reports {err}"))
            }
            other => StateError::Sled(other.to_string()),
        }
    }
}

/// Whether `e` says the disk (or the user's quota on it) is full.
fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
}

/// The same I/O error again (they are not `Clone`), keeping the OS code.
fn copy_io(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

/// The stored record of step `key` (its JSON `value`) as `T`; damage names
/// the step and what is wrong with it.
pub(crate) fn decode_record<T: serde::de::DeserializeOwned>(
    root: &Path,
    key: &[u8],
    value: &[u8],
) -> Result<T, StateError> {
    serde_json::from_slice(value).map_err(|e| {
        StateError::corrupt(
            root,
            format!(
                "the record of step `{}` cannot be read: {}",
                String::from_utf8_lossy(key),
                describe_json_error(&e)
            ),
        )
    })
}

/// Says a JSON decoding error without quoting the data it choked on.
pub(crate) fn describe_json_error(err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let at = format!("line {} column {}", err.line(), err.column());
    match err.classify() {
        Category::Io => format!("it could not be read ({err})"),
        Category::Syntax => format!("it is not valid JSON ({at})"),
        Category::Eof => format!("it is cut short ({at})"),
        Category::Data => {
            let text = err.to_string();
            // serde's "missing field `x`" / "unknown field `x`" quote field
            // names only; other data errors may quote values, so they are
            // left out.
            if text.starts_with("missing field") || text.starts_with("unknown field") {
                let what = text.split(" at line").next().unwrap_or(&text);
                format!("it does not match the record layout ({what}, {at})")
            } else {
                format!("it does not match the record layout ({at})")
            }
        }
    }
}

fn locked_message(path: &Path, info: Option<&LockInfo>) -> String {
    match info {
        Some(info) => format!(
            "state at {} is locked by `{}` (pid {} on host {}, since {})",
            path.display(),
            info.command,
            info.pid,
            info.host,
            format_rfc3339(info.since)
        ),
        None => format!(
            "state at {} is locked by another flow process (which has not yet said who it is)",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_names_the_holder() {
        let err = StateError::Locked {
            path: PathBuf::from(".flow"),
            info: Some(LockInfo {
                pid: 4242,
                host: "build-1".into(),
                since: 1_795_324_320,
                command: "flow apply".into(),
                answers_reads: true,
            }),
        };
        assert_eq!(
            err.to_string(),
            "state at .flow is locked by `flow apply` (pid 4242 on host build-1, since 2026-11-22T05:12:00Z)"
        );
    }

    #[test]
    fn newer_schema_says_both_versions() {
        let err = StateError::NewerSchema {
            found: 3,
            supported: 1,
        };
        assert_eq!(
            err.to_string(),
            "state was written by a newer flow (schema 3); this flow reads up to 1"
        );
    }

    #[test]
    fn corrupt_points_at_backups() {
        let err = StateError::corrupt(Path::new(".flow"), "the record of step `vpc` is cut short");
        let text = err.to_string();
        assert!(text.contains(".flow/backups"), "{text}");
        assert!(text.contains("flow state restore"), "{text}");
    }

    #[test]
    fn a_full_disk_says_so_and_survives_duplication() {
        let err = StateError::io(".flow/db", std::io::Error::from_raw_os_error(libc::ENOSPC));
        let text = err.duplicate().to_string();
        assert!(
            text.starts_with("the disk holding .flow/db is full (ENOSPC)"),
            "{text}"
        );
        assert!(err.help().unwrap().contains("free space"));
        let other = StateError::io(".flow/db", std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(other, StateError::Io { .. }));
    }

    #[test]
    fn json_errors_do_not_quote_values() {
        let err = serde_json::from_str::<u32>("\"hunter2\"").unwrap_err();
        let text = describe_json_error(&err);
        assert!(!text.contains("hunter2"), "{text}");
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct S {
            a: u32,
        }
        let err = serde_json::from_str::<S>("{}").unwrap_err();
        assert!(describe_json_error(&err).contains("missing field `a`"));
    }
}
