//! A reader of an S3 state whose local copy's lock is changing hands: the
//! lock file emptied by a holder letting go (as `flow apply` does the
//! instant before it unlocks) is waited for, not refused.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{checkouts, workflow};
use crate::support::moto::Moto;
use crate::support::wait_until;

/// Whether some process holds the `flock` on `lock`.
fn held(lock: &std::path::Path) -> bool {
    !Command::new("flock")
        .args(["-n", "-x"])
        .arg(lock)
        .arg("true")
        .status()
        .expect("flock(1) from util-linux")
        .success()
}

#[test]
fn a_reader_waits_while_the_local_copys_lock_changes_hands() {
    let moto = Moto::start();
    let (a, _b) = checkouts(&moto, &workflow(0, "60s"));
    a.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let lock = a.p.path().join(".flow/wf/lock");
    // A holder letting go: the lock held, its file emptied, then released.
    let mut holder = Command::new("flock")
        .arg("-x")
        .arg(&lock)
        .args(["sh", "-c", ": > \"$0\"; sleep 2", lock.to_str().unwrap()])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(10),
        "the lock held with its file empty",
        || held(&lock) && std::fs::metadata(&lock).is_ok_and(|m| m.len() == 0),
    );
    let started = Instant::now();
    let read = a.run(&["output", "wf.toml", "one"]);
    let took = started.elapsed();
    holder.wait().unwrap();
    assert_eq!(read.code, 0, "refused instead of waiting:\n{}", read.all());
    assert!(
        took >= Duration::from_millis(1000),
        "read after {took:?}: the lock was still held then"
    );
}
