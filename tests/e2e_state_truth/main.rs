//! End-to-end: state that tells the truth. An intent survives any failure
//! after which the provider may have acted, and the next apply reads what
//! the recorded token did before creating anything; plans read the real
//! objects and show what changed outside flow. Against moto, with the
//! tests' fault proxy where moto cannot show a behaviour (an answer lost on
//! the way back).
//!
//! One test binary, a module per subject: `intents` (failures keep the
//! intent), `drift` (refresh and what changed outside flow), `import`
//! (adopting objects made by hand), `kill` (kill -9 inside every create
//! call, and `kill_aim`: where each kill landed), `faults` (answers lost
//! after the request reached the server), `unread` (plans that could not
//! read a step say so).

#[path = "../support/mod.rs"]
mod support;

mod drift;
mod faults;
mod import;
mod intents;
mod kill;
mod kill_aim;
mod unread;

use support::aws::Aws;

/// The step's record as `flow state show` prints it.
fn record(a: &Aws, step: &str) -> serde_json::Value {
    let show = a.run(&["state", "show", "wf.toml", step]).expect(0);
    serde_json::from_str(&show.stdout).expect("state show prints JSON")
}
