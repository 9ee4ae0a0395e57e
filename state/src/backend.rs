//! The boundary between the engine and wherever a state is kept: the engine
//! reads and writes through [`StateBackend`] and never knows whether the
//! state is the local sled database ([`Store`]) or an S3 object with the
//! local database as its cache and journal ([`S3Backend`](crate::S3Backend)).

use crate::commit::Committer;
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::readonly::ReadOnlyStore;
use crate::records::StepRecord;
use crate::runs::RunLog;
use crate::store::Store;

/// An open, locked state.
pub trait StateBackend: Send + Sync + std::fmt::Debug {
    /// Where the state is kept, for messages (`.flow/x` or `s3://b/k`).
    fn location(&self) -> String;
    /// Every recorded step, sorted by name.
    fn steps(&self) -> Result<Vec<StepRecord>, StateError>;
    /// Every recorded step, sorted by name, the state let go: a state read
    /// whole into memory hands its records over instead of copying them.
    fn into_steps(self: Box<Self>) -> Result<Vec<StepRecord>, StateError> {
        self.steps()
    }
    /// The record of step `name`, if there is one.
    fn get(&self, name: &str) -> Result<Option<StepRecord>, StateError>;
    /// The number of batches committed since the state was created.
    fn serial(&self) -> u64;
    /// The salt of a state made before fingerprints were keyed (all zeros for
    /// one made since), to recognise the seals of that time.
    fn salt(&self) -> [u8; 32];
    /// The local folder: step logs, local backups, the cache.
    fn layout(&self) -> &StateLayout;
    /// A handle to record changes with; a change is durable where the state
    /// is kept when its future resolves.
    fn committer(&self) -> Committer;
    /// Keeps a copy of the state as it is now; says where.
    fn backup(&self) -> Result<String, StateError>;
    /// The run history, kept where the state is kept.
    fn run_log(&self) -> RunLog;
    /// Warnings from opening (a lock taken over, a local state on a network
    /// filesystem), to show once.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

impl StateBackend for Store {
    fn location(&self) -> String {
        self.layout().root.display().to_string()
    }
    fn steps(&self) -> Result<Vec<StepRecord>, StateError> {
        Store::steps(self)
    }
    fn get(&self, name: &str) -> Result<Option<StepRecord>, StateError> {
        Store::get(self, name)
    }
    fn serial(&self) -> u64 {
        Store::serial(self)
    }
    fn salt(&self) -> [u8; 32] {
        Store::salt(self)
    }
    fn layout(&self) -> &StateLayout {
        Store::layout(self)
    }
    fn committer(&self) -> Committer {
        Store::committer(self)
    }
    fn backup(&self) -> Result<String, StateError> {
        Store::backup(self).map(|p| p.display().to_string())
    }
    fn run_log(&self) -> RunLog {
        Store::run_log(self)
    }
    fn notes(&self) -> Vec<String> {
        self.warnings().to_vec()
    }
}

impl StateBackend for ReadOnlyStore {
    fn location(&self) -> String {
        self.layout().root.display().to_string()
    }
    fn steps(&self) -> Result<Vec<StepRecord>, StateError> {
        Ok(ReadOnlyStore::steps(self))
    }
    fn into_steps(self: Box<Self>) -> Result<Vec<StepRecord>, StateError> {
        Ok(ReadOnlyStore::into_steps(*self))
    }
    fn get(&self, name: &str) -> Result<Option<StepRecord>, StateError> {
        Ok(ReadOnlyStore::get(self, name))
    }
    fn serial(&self) -> u64 {
        ReadOnlyStore::serial(self)
    }
    fn salt(&self) -> [u8; 32] {
        ReadOnlyStore::salt(self)
    }
    fn layout(&self) -> &StateLayout {
        ReadOnlyStore::layout(self)
    }
    fn committer(&self) -> Committer {
        ReadOnlyStore::committer(self)
    }
    fn backup(&self) -> Result<String, StateError> {
        Err(self.refuse())
    }
    fn run_log(&self) -> RunLog {
        ReadOnlyStore::run_log(self)
    }
    fn notes(&self) -> Vec<String> {
        self.warnings().to_vec()
    }
}
