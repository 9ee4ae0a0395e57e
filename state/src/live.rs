//! Reads while a state is held: the process that holds a state (an apply,
//! a destroy) answers on a Unix socket in the state folder
//! ([`StateLayout::live_socket`]) with the state as of its last committed
//! batch, so that the commands that only show things work while it runs,
//! without its lock and without writing a byte of the state.
//!
//! Why not the private copy [`ReadOnlyStore`](crate::ReadOnlyStore) reads
//! under the lock: while the writer runs, sled rewrites its files in place
//! (its own flusher, every checkpoint) and a checkpoint empties the
//! write-ahead log, so a copy of `db/` taken across those writes is no
//! state that ever was. Copied in a loop beside a writer committing 50
//! records a batch, about one read in four was refused as damaged (the log
//! ended before the watermark) and about one in a hundred opened fine with
//! records of different batches in it.
//!
//! The holder's server thread, for each connection: asks the writer to
//! apply every committed batch to the trees (the work it does anyway once
//! idle; waiting at most [`FOLD_WAIT`]), then reads the trees beside the
//! writer under their sequence lock ([`Trees::read_whole`]), again if a
//! batch was applied meanwhile, and writes the records out as stored. The
//! writer never waits on a reader, and nothing is decoded on its side.
//!
//! On the wire the holder writes one JSON document and closes:
//! `{"serial", "schema_version", "salt", "committed_ms", "s3_copy",
//! "steps": [record, …]}`, or `{"error": "…"}`.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Deserialize;

use crate::commit::{Reply, Request};
use crate::db::Trees;
use crate::error::StateError;
use crate::layout::StateLayout;
use crate::meta;
use crate::records::StepRecord;
use crate::writer::Halted;

/// How long a read waits for the writer to apply what it committed before
/// reading the trees as they are (the writer may be waiting on S3).
const FOLD_WAIT: Duration = Duration::from_secs(2);

/// How many times a read of the trees beside the writer is tried, each
/// time a batch was applied while it read, before it is read on the
/// writer's thread instead.
const TRIES: u32 = 20;

/// How long a reader waits for the holder's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// The longest socket path `sockaddr_un` takes (108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The holder's side: a thread answering reads until dropped.
pub(crate) struct Server {
    listener: Arc<UnixListener>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

/// Starts answering reads of the state at `layout` (held by this process,
/// its writer reached through `tx`). `None` where the socket cannot be
/// made: reads then wait for the lock as before, and the holder goes on.
pub(crate) fn serve(
    layout: &StateLayout,
    trees: Trees,
    tx: mpsc::Sender<Request>,
    halted: Halted,
) -> Option<Server> {
    let path = layout.live_socket();
    // Left by a holder that was killed: this process holds the lock now.
    let _ = std::fs::remove_file(&path);
    let listener = at_short_path(&layout.root, |p| {
        let listener = UnixListener::bind(p)?;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))?;
        Ok(listener)
    })
    .ok()?;
    let listener = Arc::new(listener);
    let stop = Arc::new(AtomicBool::new(false));
    let root = layout.root.clone();
    let (l, s) = (listener.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("flow-state-reads".to_string())
        .spawn(move || accept_loop(&l, &s, &root, &trees, &tx, &halted))
        .ok()?;
    Some(Server {
        listener,
        stop,
        thread: Some(thread),
        path,
    })
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept (Linux answers it EINVAL once shut down).
        // SAFETY: the descriptor is the listener's, open until it drops.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: &UnixListener,
    stop: &AtomicBool,
    root: &Path,
    trees: &Trees,
    tx: &mpsc::Sender<Request>,
    halted: &Halted,
) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((mut stream, _)) => {
                let _ = stream.set_write_timeout(Some(ANSWER_WAIT));
                let body = answer(root, trees, tx, halted).unwrap_or_else(|e| {
                    serde_json::to_vec(&serde_json::json!({ "error": e.to_string() }))
                        .expect("a string encodes")
                });
                let _ = stream.write_all(&body);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // Out of descriptors, say: the holder's work comes first.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The state as of the last committed batch, as the wire carries it.
fn answer(
    root: &Path,
    trees: &Trees,
    tx: &mpsc::Sender<Request>,
    halted: &Halted,
) -> Result<Vec<u8>, StateError> {
    halted.check()?;
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    if tx
        .send(Request::Fold {
            reply: Reply::Blocking(reply_tx),
        })
        .is_ok()
        && let Ok(Err(err)) = reply_rx.recv_timeout(FOLD_WAIT)
    {
        return Err(err);
    }
    let read = || -> Result<_, StateError> {
        let serial = meta::read_serial(root, &trees.meta)?;
        let version = meta::read_version(root, &trees.meta)?;
        let salt = meta::read_salt(root, &trees.meta)?;
        let s3_copy = crate::mark::read(root, trees)?.map(|m| m.url);
        let steps = trees
            .steps
            .iter()
            .values()
            .collect::<Result<Vec<sled::IVec>, _>>()
            .map_err(|e| StateError::from_sled(root, e))?;
        Ok((serial, version, salt, s3_copy, steps))
    };
    let (head, steps) = match trees.read_whole(TRIES, read) {
        Some((read, committed_ms)) => {
            // A batch that failed half-applied halts the store before its
            // change counts as done: a read that saw it done sees the halt.
            halted.check()?;
            let (serial, version, salt, s3_copy, steps) = read?;
            let head = serde_json::json!({
                "serial": serial,
                "schema_version": version,
                "salt": crate::snapshot::to_hex(&salt),
                "committed_ms": committed_ms,
                "s3_copy": s3_copy,
            });
            (head, steps)
        }
        None => on_the_writer(root, trees, tx)?,
    };
    let head = head.to_string();
    let mut out = Vec::with_capacity(head.len() + steps.iter().map(|s| s.len() + 1).sum::<usize>());
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"steps\":[");
    for (i, step) in steps.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(step);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// The state read on the writer's thread, between two batches: for when
/// batches are applied to the trees faster than a read beside them takes
/// (readers in a loop), so that it is read at all. The writer waits for
/// it, as for a backup.
fn on_the_writer(
    root: &Path,
    trees: &Trees,
    tx: &mpsc::Sender<Request>,
) -> Result<(serde_json::Value, Vec<sled::IVec>), StateError> {
    let snap = crate::commit::call_blocking(tx, |reply| Request::Snapshot { reply })?;
    let s3_copy = crate::mark::read(root, trees)?.map(|m| m.url);
    let head = serde_json::json!({
        "serial": snap.serial,
        "schema_version": snap.schema_version,
        "salt": snap.salt,
        "committed_ms": trees.committed_ms(),
        "s3_copy": s3_copy,
    });
    let steps = snap
        .steps
        .iter()
        .map(|step| serde_json::to_vec(step).expect("a record encodes").into())
        .collect();
    Ok((head, steps))
}

/// What the holder of a state answered: the state, or why it could not.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Served {
    /// Why the holder could not read it (a write failed before).
    error: Option<String>,
    /// The serial of the batch the records are at.
    pub serial: u64,
    /// Their schema (the holder migrated the state when it opened it).
    pub schema_version: Option<u32>,
    /// The salt, in hex.
    pub salt: String,
    /// When that batch was committed (ms since the Unix epoch); 0 when the
    /// holder has committed nothing since it opened the state.
    pub committed_ms: u64,
    /// The S3 state this folder is the copy of, if it is one.
    pub s3_copy: Option<String>,
    /// Every record, in name order.
    pub steps: Vec<StepRecord>,
}

/// Asks the process holding the state at `layout` for it: `Ok(None)` when
/// nothing answers there (the holder only reads, or is a flow from before
/// reads were served, or is gone).
pub(crate) fn fetch(layout: &StateLayout) -> Result<Option<Served>, StateError> {
    let stream = match at_short_path(&layout.root, |p| UnixStream::connect(p)) {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::NotFound | ErrorKind::ConnectionRefused | ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(StateError::io(layout.live_socket(), e)),
    };
    let mut body = Vec::new();
    stream
        .set_read_timeout(Some(ANSWER_WAIT))
        .and_then(|()| (&stream).read_to_end(&mut body))
        .map_err(|e| StateError::io(layout.live_socket(), e))?;
    if body.is_empty() {
        // The holder closed between accepting and answering: it is done,
        // and the lock is (or is about to be) free.
        return Ok(None);
    }
    let served: Served = match serde_json::from_slice(&body) {
        Ok(served) => served,
        // Cut off: the holder stopped (was killed) while answering; the lock
        // is, or is about to be, free, as for an empty answer.
        Err(e) if e.is_eof() => return Ok(None),
        Err(e) => {
            return Err(StateError::corrupt(
                &layout.root,
                format!(
                    "the flow process holding it answered a read with what is not a state ({e})"
                ),
            ));
        }
    };
    match served.error {
        Some(error) => Err(StateError::Sled(format!(
            "the flow process holding the state could not read it: {error}"
        ))),
        None => Ok(Some(served)),
    }
}

/// Runs `op` on the socket's path, or where that is too long for a socket
/// address, on the same file reached through this process's descriptor of
/// the state folder (`/proc/self/fd/N/…`).
fn at_short_path<T>(
    root: &Path,
    op: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let path = StateLayout::new(root).live_socket();
    if path.as_os_str().len() <= MAX_SOCKET_PATH {
        return op(&path);
    }
    let dir = File::open(root)?;
    let name = path.file_name().expect("a file name");
    op(&Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(name))
}

#[cfg(test)]
mod tests;
