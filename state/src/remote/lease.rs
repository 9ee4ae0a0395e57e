//! The lock of an S3 state: an object `KEY.lock` created with
//! `If-None-Match: *`, holding who holds it and a lease its holder renews.
//!
//! Whoever creates the object holds the lock. The holder rewrites it every
//! third of the lease (with `If-Match`, so it notices when the lock was
//! broken or taken over) and deletes it when done. A lock whose lease ran out
//! (its holder died, or lost its network) can be taken over, again with
//! `If-Match`, so two takers cannot both win.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::client::{Expect, Failure, Remote};
use crate::error::StateError;
use crate::records::now_secs;
use crate::timefmt::format_rfc3339;

/// What the lock object holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLockInfo {
    /// The lock's id, for `flow state unlock`.
    pub id: String,
    /// `user@host` of the holder.
    pub who: String,
    /// The holder's process id.
    pub pid: u32,
    /// What it is doing, e.g. `flow apply`.
    pub operation: String,
    /// When it took the lock (seconds since the Unix epoch).
    pub started_at: u64,
    /// When it last renewed the lease.
    pub renewed_at: u64,
    /// How long a lease lasts after a renewal, in seconds.
    pub lease_secs: u64,
}

impl RemoteLockInfo {
    /// Seconds since the lease was renewed, by this machine's clock.
    pub fn age(&self) -> u64 {
        now_secs().saturating_sub(self.renewed_at)
    }

    /// Whether the lease ran out.
    pub fn expired(&self) -> bool {
        self.age() > self.lease_secs
    }

    /// The holder, in one line.
    pub fn describe(&self) -> String {
        format!(
            "`{}` ({}, pid {}, since {}; lease renewed {} s ago, lasts {} s)",
            self.operation,
            self.who,
            self.pid,
            format_rfc3339(self.started_at),
            self.age(),
            self.lease_secs
        )
    }
}

/// How to take the lock.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// What the holder is doing, e.g. `flow apply`.
    pub operation: String,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// How long to wait for a held lock before giving up (zero: not at all).
    pub wait: Duration,
    /// The command that breaks a lock, without the id
    /// (`flow state unlock workflows/x.toml`), for messages.
    pub unlock_command: String,
}

/// A held lock. Dropping it stops the renewals and deletes the lock object
/// (unless it was broken meanwhile).
pub(crate) struct Lease {
    info: RemoteLockInfo,
    lost: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.info.id)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Takes the lock, waiting up to `opts.wait` for a holder to let go, and
    /// taking over an expired lease (a warning is added to `notes`).
    pub(crate) async fn acquire(
        remote: &Remote,
        opts: &LockOptions,
        notes: &mut Vec<String>,
    ) -> Result<Lease, StateError> {
        let key = remote.location.lock_key();
        let deadline = Instant::now() + opts.wait;
        let mut info = RemoteLockInfo {
            id: random_id()?,
            who: format!("{}@{}", user(), crate::lock::hostname()),
            pid: std::process::id(),
            operation: opts.operation.clone(),
            started_at: now_secs(),
            renewed_at: now_secs(),
            lease_secs: opts.lease.as_secs().max(1),
        };
        let mut transient = 0;
        loop {
            info.renewed_at = now_secs();
            let body = serde_json::to_vec_pretty(&info).expect("lock info encodes");
            let failure = match remote.put(&key, body.clone(), Some(&Expect::Absent)).await {
                Ok(etag) => return Ok(Lease::start(remote.clone(), info, etag, opts.lease)),
                Err(f) => f,
            };
            match failure {
                Failure::Precondition => {}
                Failure::Transient(t) if transient < 3 => {
                    transient += 1;
                    tokio::time::sleep(super::client::backoff(transient)).await;
                    let _ = t;
                    continue;
                }
                other => return Err(super::remote_error(&remote.location, other)),
            }
            let held = match remote.get(&key, None).await {
                Ok(held) => held,
                Err(Failure::NotFound) => continue, // let go just now
                Err(other) => return Err(super::remote_error(&remote.location, other)),
            };
            let holder = match serde_json::from_slice::<RemoteLockInfo>(&held.body) {
                Ok(holder) => holder,
                Err(_) => {
                    return Err(StateError::Remote {
                        message: format!(
                            "the lock object s3://{}/{key} is not a flow lock; it holds:\n{}",
                            remote.location.bucket,
                            shown_raw(&held.body)
                        ),
                        help: Some(format!(
                            "if no flow is running on this state, break it with: {} {}",
                            opts.unlock_command,
                            etag_id(&held.etag)
                        )),
                    });
                }
            };
            if holder.id == info.id {
                // Ours: an earlier attempt (the SDK retries on its own) took
                // the lock and its answer was lost.
                return Ok(Lease::start(remote.clone(), info, held.etag, opts.lease));
            }
            if holder.expired() {
                if let Ok(etag) = remote
                    .put(&key, body, Some(&Expect::Etag(held.etag.clone())))
                    .await
                {
                    notes.push(format!(
                        "took over the lock of {}: its lease ran out {} s ago",
                        holder.describe(),
                        holder.age().saturating_sub(holder.lease_secs)
                    ));
                    return Ok(Lease::start(remote.clone(), info, etag, opts.lease));
                }
                continue; // someone else took it first, or it changed
            }
            if Instant::now() >= deadline {
                return Err(StateError::Remote {
                    message: format!(
                        "state {} is locked by {}",
                        remote.location,
                        holder.describe()
                    ),
                    help: Some(format!(
                        "wait for it to finish (`--lock-timeout 5m` waits for the lock), or, if that run is dead, break the lock with: {} {}",
                        opts.unlock_command, holder.id
                    )),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn start(remote: Remote, info: RemoteLockInfo, etag: String, lease: Duration) -> Lease {
        let lost = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel();
        let renewer = {
            let lost = lost.clone();
            let info = info.clone();
            std::thread::Builder::new()
                .name("flow-state-lease".to_string())
                .spawn(move || renew(remote, info, etag, lease, lost, stopped))
                .ok()
        };
        Lease {
            info,
            lost,
            stop: Some(stop),
            renewer,
        }
    }

    /// The holder's details as written.
    pub(crate) fn info(&self) -> &RemoteLockInfo {
        &self.info
    }

    /// A flag that turns true when the lock was broken or taken over.
    pub(crate) fn lost_flag(&self) -> Arc<AtomicBool> {
        self.lost.clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
    }
}

/// The renewal thread: rewrites the lock every third of the lease until told
/// to stop, then deletes it.
fn renew(
    remote: Remote,
    mut info: RemoteLockInfo,
    mut etag: String,
    lease: Duration,
    lost: Arc<AtomicBool>,
    stopped: mpsc::Receiver<()>,
) {
    let key = remote.location.lock_key();
    let every = (lease / 3).max(Duration::from_millis(200));
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
        if lost.load(Ordering::SeqCst) {
            continue;
        }
        info.renewed_at = now_secs();
        let body = serde_json::to_vec_pretty(&info).expect("lock info encodes");
        match remote.block_on(remote.put(&key, body.clone(), Some(&Expect::Etag(etag.clone())))) {
            Ok(next) => etag = next,
            Err(Failure::Precondition) => match remote.block_on(remote.get(&key, None)) {
                // A retry of a renewal that landed with its answer lost.
                Ok(now) if now.body == body => etag = now.etag,
                _ => lost.store(true, Ordering::SeqCst),
            },
            Err(Failure::NotFound) => lost.store(true, Ordering::SeqCst),
            // Unreachable for now: the next renewal tries again; the lease
            // covers three missed renewals.
            Err(_) => {}
        }
    }
    if !lost.load(Ordering::SeqCst) {
        let _ = remote.block_on(remote.delete(&key, Some(&etag)));
    }
}

/// Breaks the lock of the state at `remote` if its id is `id` (or, for a
/// lock object that is not a flow lock, its ETag is). Returns who held it.
pub(crate) async fn unlock(remote: &Remote, id: &str) -> Result<String, StateError> {
    let key = remote.location.lock_key();
    let held = match remote.get(&key, None).await {
        Ok(held) => held,
        Err(Failure::NotFound) => {
            return Err(StateError::Remote {
                message: format!("state {} is not locked", remote.location),
                help: None,
            });
        }
        Err(other) => return Err(super::remote_error(&remote.location, other)),
    };
    let (holder_id, who) = match serde_json::from_slice::<RemoteLockInfo>(&held.body) {
        Ok(info) => (info.id.clone(), info.describe()),
        Err(_) => (
            etag_id(&held.etag),
            "a lock object that is not a flow lock".to_string(),
        ),
    };
    if holder_id != id {
        return Err(StateError::Remote {
            message: format!(
                "the lock of {} has id {holder_id}, not {id}; it is held by {who}",
                remote.location
            ),
            help: Some(
                "check the id in the message that refused you; nothing was changed".to_string(),
            ),
        });
    }
    match remote.delete(&key, Some(&held.etag)).await {
        Ok(()) | Err(Failure::NotFound) => Ok(who),
        Err(Failure::Precondition) => Err(StateError::Remote {
            message: format!(
                "the lock of {} changed while it was being broken",
                remote.location
            ),
            help: Some("run the command again".to_string()),
        }),
        Err(other) => Err(super::remote_error(&remote.location, other)),
    }
}

/// The id by which a lock object that is not a flow lock is broken: its
/// ETag without quotes.
fn etag_id(etag: &str) -> String {
    etag.trim_matches('"').to_string()
}

/// The raw content of an object, as text, cut at 2 KiB, control characters
/// escaped.
fn shown_raw(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(2048)]);
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    if body.len() > 2048 {
        out.push_str(&format!("… ({} bytes in all)", body.len()));
    }
    out
}

/// The user running flow.
fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid{}", unsafe { libc::getuid() }))
}

/// 16 hex digits from `/dev/urandom`.
fn random_id() -> Result<String, StateError> {
    let bytes = crate::meta::random_bytes()?;
    Ok(crate::snapshot::to_hex(&bytes[..8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_after_its_length() {
        let mut info = RemoteLockInfo {
            id: "ab".into(),
            who: "alice@laptop".into(),
            pid: 4242,
            operation: "flow apply".into(),
            started_at: now_secs() - 100,
            renewed_at: now_secs() - 5,
            lease_secs: 60,
        };
        assert!(!info.expired());
        assert!(
            info.describe().contains("alice@laptop, pid 4242"),
            "{}",
            info.describe()
        );
        info.renewed_at = now_secs() - 61;
        assert!(info.expired());
    }

    #[test]
    fn raw_lock_content_is_shown_escaped_and_cut() {
        assert_eq!(shown_raw(b"not json\x1b[31m"), "not json\\u{1b}[31m");
        let long = vec![b'x'; 5000];
        assert!(shown_raw(&long).ends_with("(5000 bytes in all)"));
        assert_eq!(etag_id("\"abc\""), "abc");
    }
}
