//! The flow state store.
//!
//! A state is kept locally (the default) or in S3 ([`S3Backend`]); the
//! engine sees either through [`StateBackend`]. Locally, it lives in a directory (`.flow/` by default): a sled
//! database of [`StepRecord`]s, a process lock, step logs and JSON backups.
//! [`Store::open`] takes the lock and checks the schema; writes go through a
//! [`Committer`], which groups concurrent changes into one frame of a
//! write-ahead log and one sync; the database's trees are brought up to date
//! from it when idle and before any read.
//!
//! Modules, lowest first; each uses only those above it in this list:
//! - `timefmt`, `records`, `holder` (who holds a lock), `error`, `runs`
//!   (the run history's records and log);
//! - `durable` (renames that fsync their folder), `netfs` (network
//!   filesystems, where flock cannot be trusted);
//! - `layout` (where the files are), `lock`, `db`, `meta`, `mark` (what a
//!   local copy of an S3 state remembers of it), `watermark`;
//! - `snapshot` (a consistent copy of a whole state), `migrate`,
//!   `retention` (which backups are kept);
//! - `checks` (what opening a local state checks: a lost database, lost
//!   changes, the schema, an S3 copy);
//! - `commit` (the handle that queues changes), `wal` (the write-ahead log
//!   in front of the database: what makes a commit durable, replayed when a
//!   database is opened), `writer` (the thread that logs changes, one sync
//!   per group, and applies them to the database), `backup` (write, list, restore);
//! - `live` (the reads a process holding a state answers while it runs);
//! - `store`: the one way in to a local state, which opens, locks,
//!   migrates, reads, hands out [`Committer`]s and backups, and answers
//!   reads while it holds the state;
//! - `readonly`: [`ReadOnlyStore`], a state read (through a private copy of
//!   its database, migrated there if old, or from the process holding it)
//!   without writing to it;
//! - `remote` (the S3 backend: the local store as cache and journal, each
//!   batch written to S3 by the writer before it counts as durable, a leased
//!   lock object), then `backend`: the [`StateBackend`] trait, the one way
//!   the engine talks to either.
//!
//! `scripts/check-module-cycles` fails the build's checks if an arrow goes
//! the other way.

#![warn(missing_docs)]

pub mod backend;
pub mod backup;
mod checks;
mod commit;
mod db;
mod deposed;
pub mod durable;
pub mod error;
mod holder;
pub mod layout;
mod live;
pub mod lock;
mod mark;
mod meta;
mod migrate;
pub mod netfs;
mod readonly;
pub mod records;
pub mod remote;
pub mod retention;
pub mod runs;
mod snapshot;
mod store;
pub mod timefmt;
mod torn;
mod wal;
mod watermark;
mod writer;

pub use backend::StateBackend;
pub use backup::{BackupInfo, Restored, list_backups, restore, restore_keeping};
pub use commit::{Committer, Durable, Mutation, Pending};
pub use deposed::{Deposed, Retiring};
pub use error::StateError;
pub use layout::StateLayout;
pub use lock::{LockInfo, StateLock};
pub use readonly::{LiveRead, ReadOnlyStore};
pub use records::*;
pub use remote::{S3Backend, S3Location, S3Options};
pub use retention::{KEEP_BACKUPS, KEEP_BACKUPS_FOR, KEEP_NEWEST, Retention};
pub use runs::{GateVerdict, RunLog, RunOutcome, RunRecord};
pub use store::Store;
