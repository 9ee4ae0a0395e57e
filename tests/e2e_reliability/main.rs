//! End-to-end reliability: kill -9 at random instants with resume after each,
//! damaged state with recovery from backups, a full disk, a wall clock that
//! jumps back, SIGTERM mid-step, and a plan that leaves an old state as it is.
//!
//! One test binary, a module per subject: `kill` (kill -9 and SIGTERM
//! mid-run), `damage` (damaged, deleted and old states, and the files a
//! killed sled leaves half-written), `disk_and_clock` (a full disk, a wall
//! clock that jumps back).

#[path = "../support/mod.rs"]
mod support;

mod damage;
mod disk_and_clock;
mod kill;
