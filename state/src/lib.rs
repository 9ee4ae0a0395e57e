//! The flow state store.
//!
//! One workflow's state lives in a directory (`.flow/` by default): a sled
//! database of [`StepRecord`]s, a process lock, step logs and JSON backups.
//! [`Store::open`] takes the lock and checks the schema; reads go straight to
//! the database, writes go through a [`Committer`], which groups concurrent
//! changes into one transaction and one flush.
//!
//! Modules, lowest first; each uses only those above it in this list:
//! - `timefmt`, `records`, `holder` (who holds a lock), `error`;
//! - `layout` (where the files are), `lock`, `db`, `meta`, `watermark`;
//! - `snapshot` (a consistent copy of a whole state), `migrate`;
//! - `commit` (the handle that queues changes), `writer` (the thread that
//!   applies them, one flush per group), `backup` (write, list, restore);
//! - `store`: the one way in, which opens, locks, migrates, reads, and hands
//!   out [`Committer`]s and backups.
//!
//! `scripts/check-module-cycles` fails the build's checks if an arrow goes
//! the other way.

#![warn(missing_docs)]

pub mod backup;
mod commit;
mod db;
pub mod error;
mod holder;
pub mod layout;
pub mod lock;
mod meta;
mod migrate;
pub mod records;
mod snapshot;
mod store;
pub mod timefmt;
mod watermark;
mod writer;

pub use backup::{BackupInfo, KEEP_BACKUPS, Restored, list_backups, restore};
pub use commit::{Committer, Mutation, Pending};
pub use error::StateError;
pub use layout::StateLayout;
pub use lock::{LockInfo, StateLock};
pub use records::*;
pub use store::Store;
