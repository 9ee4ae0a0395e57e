//! The S3 backend: the state is a snapshot object and the deltas written
//! after it (`KEY.log/<seq>.json`, each created with `If-None-Match: *`, so
//! two writers can never both take one place in the sequence; the snapshot
//! rewritten with `If-Match`), next to a lock object with a lease. The local sled database stays as cache and journal: every
//! batch is made durable locally (the write-ahead log), then written to
//! S3, and only then is anyone
//! told it is durable (see `docs/state.md`, "Shared state in S3").
//!
//! Modules, lowest first: `location`, `client` (the S3 calls and how their
//! failures are sorted), `lease` (the lock), `log` (the deltas after the
//! snapshot: their names, content and chain), `publish` (the writer's S3
//! side), `sync` (the local copy and S3 on opening), `replace` (what push
//! and restore share when they replace the object whole), `restore`, `runs`
//! (the run history's objects); this
//! file puts them together with `push` and `pull`.

mod client;
mod lease;
mod location;
mod log;
mod publish;
mod replace;
mod restore;
mod runs;
mod sync;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;

pub use aws_sdk_s3::Client as S3Client;
pub use client::RemoteBackup;
use client::{Failure, Remote};
use lease::Lease;
pub use lease::{LockOptions, RemoteLockInfo};
pub use location::S3Location;
pub use publish::PublishStats;
use publish::{S3Publisher, Shared, document};
pub use restore::{BackupSource, RestoredRemote, restore};
use sync::{RemoteState, decode, local_records, reconcile, salt_hex};

use crate::backend::StateBackend;
use crate::backup::{parse_name, replace_contents};
use crate::commit::Committer;
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::mark;
use crate::meta;
use crate::records::{SCHEMA_VERSION, StepRecord, now_secs};
use crate::retention::{self, Aged, Retention};
use crate::store::{NoDatabase, Store};

/// How to open an S3 state.
#[derive(Debug, Clone)]
pub struct S3Options {
    /// What is opening it, e.g. `flow apply` (for the local lock file).
    pub command: String,
    /// The lock to take; `None` (`--lock=false`) reads without a lock and
    /// refuses to write.
    pub lock: Option<LockOptions>,
    /// How long S3 may stay unreachable mid-run before the run stops.
    pub retry_for: Duration,
    /// The workflow file as the user named it, for commands in messages.
    pub workflow: String,
    /// How the local copy's backups, and the `KEY.backups/` objects, are kept.
    pub retention: Retention,
}

/// A state kept in S3, with its local copy open and its lock held.
pub struct S3Backend {
    store: Store,
    remote: Remote,
    versioned: bool,
    notes: Vec<String>,
    stats: Arc<PublishStats>,
    /// The writer's S3 side (`None` without the lock).
    publisher: Option<Shared>,
    // Released after the local store is closed.
    _lease: Option<Lease>,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Backend")
            .field("location", &self.remote.location.to_string())
            .finish_non_exhaustive()
    }
}

/// Maps a failure that ends the operation.
pub(crate) fn remote_error(location: &S3Location, failure: Failure) -> StateError {
    match failure {
        Failure::Fatal { message, help } => StateError::Remote {
            message,
            help: Some(help),
        },
        Failure::Transient(why) => StateError::Remote {
            message: format!("{why} (state {location})"),
            help: Some(
                "check the network and AWS_ENDPOINT_URL, then run the command again".to_string(),
            ),
        },
        Failure::Precondition => StateError::Remote {
            message: format!("state {location} changed while flow was writing it"),
            help: Some("run the command again".to_string()),
        },
        Failure::NotFound => StateError::Remote {
            message: format!("state {location} does not exist"),
            help: None,
        },
    }
}

/// Reads the state, if there is one: the snapshot object and the deltas
/// after it, checked to form one chain and applied in order. Deltas left
/// without their snapshot are refused as damage (`workflow` names the file
/// in the command that restores one).
async fn fetch(remote: &Remote, workflow: &str) -> Result<Option<RemoteState>, StateError> {
    match remote.get(&remote.location.key, None).await {
        Ok(got) => {
            let (mut state, log_etag) = decode(remote, &got.body, got.etag)?;
            let deltas = log::read(remote, &state.base(log_etag), workflow).await?;
            state.apply(deltas);
            Ok(Some(state))
        }
        Err(Failure::NotFound) => {
            let left = remote
                .list_after(&log::prefix(&remote.location), "")
                .await
                .map_err(|f| remote_error(&remote.location, f))?;
            match left.first() {
                None => Ok(None),
                Some(first) => Err(log::ChainError::SnapshotGone {
                    left: left.len(),
                    first: first.key.clone(),
                }
                .into_error(&remote.location, workflow)),
            }
        }
        Err(other) => Err(remote_error(&remote.location, other)),
    }
}

impl S3Backend {
    /// Opens the S3 state at `location` with its local copy in `root`:
    /// checks the bucket, takes the lock, reads the object, brings the local
    /// copy up to date (writing its unacknowledged journal to S3 first).
    pub async fn open(
        root: &Path,
        client: aws_sdk_s3::Client,
        location: S3Location,
        opts: &S3Options,
    ) -> Result<S3Backend, StateError> {
        let remote = Remote::new(client, location, Handle::current());
        remote
            .check_bucket()
            .await
            .map_err(|f| remote_error(&remote.location, f))?;
        let mut notes = Vec::new();
        let lease = match &opts.lock {
            Some(lock) => Some(Lease::acquire(&remote, lock, &mut notes).await?),
            None => None,
        };
        let fetched = fetch(&remote, &opts.workflow).await?;
        let versioned = remote.versioned().await.unwrap_or(false);
        let stats = Arc::new(PublishStats::default());
        let shared: Mutex<Option<Shared>> = Mutex::new(None);
        let lost = lease.as_ref().map(Lease::lost_flag);
        let locked = lease.is_some();
        let store = Store::open_with(
            root,
            &opts.command,
            NoDatabase::Create,
            opts.retention,
            |layout, trees| {
                let found = reconcile(layout, trees, &remote, fetched, &opts.workflow)?;
                let mut publisher = S3Publisher {
                    remote: remote.clone(),
                    root: layout.root.clone(),
                    trees: trees.clone(),
                    records: found.records,
                    schema_version: SCHEMA_VERSION,
                    salt_hex: salt_hex(&layout.root, trees)?,
                    etag: found.etag,
                    log: found.log,
                    lost,
                    retry_for: opts.retry_for,
                    stats: stats.clone(),
                    serial: found.serial,
                    max_deltas: publish::max_deltas(),
                    folding: None,
                };
                if !locked {
                    return Ok(Some(Box::new(Unlocked(remote.location.to_string()))));
                }
                if let Some(pending) = found.pending {
                    let serial = meta::read_serial(&layout.root, &trees.meta)?;
                    publisher.write_pending(serial, pending)?;
                }
                let publisher = Shared(Arc::new(Mutex::new(publisher)));
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = Some(publisher.clone());
                Ok(Some(Box::new(publisher)))
            },
        )?;
        Ok(S3Backend {
            store,
            remote,
            versioned,
            notes,
            stats,
            publisher: shared.into_inner().unwrap_or_else(|e| e.into_inner()),
            _lease: lease,
        })
    }

    /// Like [`S3Backend::open`], but `None`, creating nothing locally, when
    /// S3 holds no state and there is no local copy (for read-only commands).
    pub async fn open_if_exists(
        root: &Path,
        client: aws_sdk_s3::Client,
        location: S3Location,
        opts: &S3Options,
    ) -> Result<Option<S3Backend>, StateError> {
        if !StateLayout::new(root).db().is_dir() {
            let remote = Remote::new(client.clone(), location.clone(), Handle::current());
            remote
                .check_bucket()
                .await
                .map_err(|f| remote_error(&remote.location, f))?;
            // Existence only: what the object holds is checked after the
            // lock is taken, by `open` (which refuses deltas left without
            // their snapshot: they are not "no state").
            match remote.get(&remote.location.key, None).await {
                Err(Failure::NotFound) => {
                    let left = remote
                        .list_after(&log::prefix(&remote.location), "")
                        .await
                        .map_err(|f| remote_error(&remote.location, f))?;
                    if left.is_empty() {
                        return Ok(None);
                    }
                }
                Err(other) => return Err(remote_error(&remote.location, other)),
                Ok(_) => {}
            }
        }
        S3Backend::open(root, client, location, opts)
            .await
            .map(Some)
    }

    /// What the S3 side did so far (PutObject calls, batches).
    pub fn stats(&self) -> Arc<PublishStats> {
        self.stats.clone()
    }

    /// The lock this run holds, if it took one.
    pub fn lock(&self) -> Option<&RemoteLockInfo> {
        self._lease.as_ref().map(Lease::info)
    }
}

/// A run's end waits for the snapshot being written, if one is. A
/// versioned bucket keeps the state as the snapshot's versions: a run
/// that leaves deltas after the snapshot folds them into a new one as it
/// ends (under its lock still), so that each run's end is a version. A
/// fold that fails leaves the deltas, which hold the same state; the next
/// run's backup folds them.
impl Drop for S3Backend {
    fn drop(&mut self) {
        if let Some(publisher) = &self.publisher {
            publisher.with(S3Publisher::finish);
        }
        if !self.versioned {
            return;
        }
        if let Some(publisher) = &self.publisher {
            let _ = publisher.with(|p| {
                if p.has_deltas() {
                    p.compact_now()
                } else {
                    Ok(false)
                }
            });
        }
    }
}

/// The publisher of a state opened without its lock: it refuses to write.
struct Unlocked(String);

impl crate::writer::Publish for Unlocked {
    fn publish(&mut self, _: u64, _: &[crate::commit::Change]) -> Result<(), StateError> {
        Err(StateError::Remote {
            message: format!(
                "{} was opened without its lock (--lock=false), so this command cannot change it",
                self.0
            ),
            help: Some("run it without --lock=false".to_string()),
        })
    }
}

impl StateBackend for S3Backend {
    fn location(&self) -> String {
        self.remote.location.to_string()
    }
    fn steps(&self) -> Result<Vec<StepRecord>, StateError> {
        self.store.steps()
    }
    fn get(&self, name: &str) -> Result<Option<StepRecord>, StateError> {
        self.store.get(name)
    }
    fn serial(&self) -> u64 {
        self.store.serial()
    }
    fn salt(&self) -> [u8; 32] {
        self.store.salt()
    }
    fn layout(&self) -> &StateLayout {
        self.store.layout()
    }
    fn committer(&self) -> Committer {
        self.store.committer()
    }

    /// With bucket versioning, the snapshot's versions keep the state:
    /// the deltas after it, if any (a run that did not end), are folded
    /// into a new one. Without it,
    /// a copy goes to `KEY.backups/`, kept as local backups are (see
    /// [`retention`](crate::retention)). Either way the local copy is
    /// backed up too.
    fn backup(&self) -> Result<String, StateError> {
        self.store.backup()?;
        if self.versioned {
            if let Some(publisher) = &self.publisher {
                publisher.with(|p| {
                    if p.has_deltas() {
                        p.compact_now()
                    } else {
                        Ok(false)
                    }
                })?;
            }
            return Ok(format!(
                "{} (bucket versioning keeps every version)",
                self.remote.location
            ));
        }
        let snap = self.store.snapshot()?;
        let body = serde_json::to_vec(&snap)
            .map_err(|e| StateError::Sled(format!("the backup cannot be encoded: {e}")))?;
        let prefix = self.remote.location.backups_prefix();
        let key = format!("{prefix}state-{}-{}.json", snap.serial, now_secs());
        let remote = &self.remote;
        remote.block_on(async {
            remote
                .put(&key, body, None)
                .await
                .map_err(|f| remote_error(&remote.location, f))?;
            let mut old = remote
                .list(&prefix)
                .await
                .map_err(|f| remote_error(&remote.location, f))?;
            retention::sort_newest_first(&mut old, aged);
            let rule = self.store.retention();
            for i in retention::to_prune(&old, aged, now_secs(), &rule) {
                let _ = remote.delete(&old[i].id, None).await;
            }
            Ok::<(), StateError>(())
        })?;
        Ok(format!("s3://{}/{key}", remote.location.bucket))
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// The local copy's history, each run also written to `KEY.runs/`.
    fn run_log(&self) -> crate::runs::RunLog {
        self.store.run_log().mirrored(Arc::new(runs::S3Runs {
            remote: self.remote.clone(),
        }))
    }
}

/// A backup object's serial (from its name, `state-<serial>-<secs>.json`;
/// 0 for other objects) and when S3 says it was written.
fn aged(b: &RemoteBackup) -> Aged {
    let name = b.id.rsplit('/').next().unwrap_or(&b.id);
    Aged {
        serial: parse_name(name).map_or(0, |(serial, _)| serial),
        created_at: b.written_at,
    }
}

/// The older copies of the S3 state: its versions when the bucket keeps
/// them, else the objects under `KEY.backups/`; newest first.
pub async fn list_remote_backups(
    client: aws_sdk_s3::Client,
    location: S3Location,
) -> Result<(bool, Vec<RemoteBackup>), StateError> {
    let remote = Remote::new(client, location, Handle::current());
    let fail = |f| remote_error(&remote.location, f);
    remote.check_bucket().await.map_err(fail)?;
    let mut found = remote
        .list(&remote.location.backups_prefix())
        .await
        .map_err(fail)?;
    if remote.versioned().await.unwrap_or(false) {
        // The snapshot's versions, and the copies written while deltas
        // followed it (named by URL: restore takes either).
        let mut all = remote.versions().await.map_err(fail)?;
        all.extend(found.into_iter().map(|b| RemoteBackup {
            id: format!("s3://{}/{}", remote.location.bucket, b.id),
            ..b
        }));
        // Stable: versions written in the same second keep S3's order
        // (newest first), which their random ids would not.
        all.sort_by_key(|b| std::cmp::Reverse(b.written_at));
        return Ok((true, all));
    }
    found.sort_by(|a, b| b.written_at.cmp(&a.written_at).then(b.id.cmp(&a.id)));
    Ok((false, found))
}

/// Breaks the lock of the S3 state if its id is `id`; returns who held it.
pub async fn unlock(
    client: aws_sdk_s3::Client,
    location: S3Location,
    id: &str,
) -> Result<String, StateError> {
    let remote = Remote::new(client, location, Handle::current());
    lease::unlock(&remote, id).await
}

/// What `push` or `pull` moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// How many step records.
    pub steps: usize,
    /// The serial of the state moved.
    pub serial: u64,
}

/// `flow state push`: writes the local state in `root` to S3 and makes the
/// local state its copy. Refuses to replace a state S3 already holds unless
/// `force`.
pub async fn push(
    root: &Path,
    client: aws_sdk_s3::Client,
    location: S3Location,
    opts: &S3Options,
    force: bool,
) -> Result<Moved, StateError> {
    let remote = Remote::new(client, location, Handle::current());
    remote
        .check_bucket()
        .await
        .map_err(|f| remote_error(&remote.location, f))?;
    let _lease = replace::take_lock(&remote, opts, "pushing a state").await?;
    let existing = replace::current(&remote).await?;
    let store = Store::open_with(
        root,
        &opts.command,
        NoDatabase::Refuse,
        opts.retention,
        |_, _| Ok(None),
    )?;
    let layout = store.layout().clone();
    let trees = store.trees()?;
    let records = local_records(&layout, trees)?;
    if records.is_empty() {
        return Err(StateError::Remote {
            message: format!(
                "the local state at {} holds no steps; nothing to push",
                layout.root.display()
            ),
            help: None,
        });
    }
    if let Some(got) = &existing {
        if !force {
            let steps = decode(&remote, &got.body, got.etag.clone())
                .map(|(s, _)| s.records.len().to_string())
                .unwrap_or_else(|_| "an unreadable".to_string());
            return Err(StateError::Remote {
                message: format!("{} already holds a state ({steps} steps)", remote.location),
                help: Some(format!(
                    "`flow state pull {} --force` keeps that one; `flow state push {} --force` replaces it with the local one (a backup is kept)",
                    opts.workflow, opts.workflow
                )),
            });
        }
        let versioned = remote.versioned().await.unwrap_or(false);
        replace::keep_replaced(&remote, got, versioned).await?;
    }
    let serial = store.serial();
    // The new snapshot reaches past every delta written before it.
    let (log_seq, _) = log::end(&remote).await?;
    let body = document(
        SCHEMA_VERSION,
        &salt_hex(&layout.root, trees)?,
        serial,
        log_seq,
        None,
        &records,
    );
    let etag = replace::replace_object(
        &remote,
        body,
        existing.as_ref(),
        "the state was being pushed",
    )
    .await?;
    replace::mark_copy(&layout, trees, &remote, etag, serial)?;
    Ok(Moved {
        steps: records.len(),
        serial,
    })
}

/// `flow state pull`: copies the S3 state into the local state in `root`
/// and makes the local state the state (the object in S3 is left as it is).
/// Refuses to replace local steps that are not a copy of this S3 state
/// unless `force`; a backup of what is replaced is kept either way.
pub async fn pull(
    root: &Path,
    client: aws_sdk_s3::Client,
    location: S3Location,
    opts: &S3Options,
    force: bool,
) -> Result<Moved, StateError> {
    let remote = Remote::new(client, location, Handle::current());
    let fail = |f| remote_error(&remote.location, f);
    remote.check_bucket().await.map_err(fail)?;
    let mut notes = Vec::new();
    let _lease = match &opts.lock {
        Some(lock) => Some(Lease::acquire(&remote, lock, &mut notes).await?),
        None => None,
    };
    let Some(rs) = fetch(&remote, &opts.workflow).await? else {
        return Err(StateError::Remote {
            message: format!("{} holds no state; nothing to pull", remote.location),
            help: None,
        });
    };
    let store = Store::open_with(
        root,
        &opts.command,
        NoDatabase::Create,
        opts.retention,
        |_, _| Ok(None),
    )?;
    let layout = store.layout().clone();
    let trees = store.trees()?;
    let local = local_records(&layout, trees)?;
    let local_mark = mark::read(&layout.root, trees)?;
    let url = remote.location.to_string();
    let unpushed = local_mark
        .as_ref()
        .is_some_and(|m| m.url == url && store.serial() > m.pushed_serial);
    let is_copy = local_mark.as_ref().is_some_and(|m| m.url == url);
    if !force && !local.is_empty() && (!is_copy || unpushed) {
        return Err(StateError::Remote {
            message: format!(
                "the local state at {} holds {} steps {}",
                layout.root.display(),
                local.len(),
                if unpushed {
                    "with changes S3 does not have"
                } else {
                    "that are not a copy of this S3 state"
                }
            ),
            help: Some(format!(
                "`flow state pull {} --force` replaces them with the S3 state (a backup is kept); `flow state push {}` writes them to S3 instead",
                opts.workflow, opts.workflow
            )),
        });
    }
    if !local.is_empty() {
        store.backup()?;
    }
    let steps = rs.records.len();
    let serial = rs.snap.serial.max(store.serial()) + 1;
    replace_contents(
        &layout,
        trees,
        rs.snap.schema_version,
        rs.salt,
        rs.records,
        serial,
    )?;
    Ok(Moved { steps, serial })
}
