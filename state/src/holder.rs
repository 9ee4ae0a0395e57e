//! Who holds a state lock: what the holder writes into the lock file and what
//! a refused process reads back to name it.

use serde::{Deserialize, Serialize};

/// Who holds a state lock, as written into the lock file by the holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The holder's process id.
    pub pid: u32,
    /// The host it runs on.
    pub host: String,
    /// When it took the lock (seconds since the Unix epoch).
    pub since: u64,
    /// What it is doing, e.g. `flow apply`.
    pub command: String,
    /// Whether it answers reads of the state while it holds it (see
    /// [`ReadOnlyStore::open_or_read_live`](crate::ReadOnlyStore::open_or_read_live));
    /// absent from the lock files of holders that do not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answers_reads: bool,
}
