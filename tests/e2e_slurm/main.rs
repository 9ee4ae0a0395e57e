//! End-to-end: the `flow` binary's `slurm.job` against a real Slurm
//! (Debian's munged, slurmctld and slurmd on loopback, started per test by
//! tests/support/slurm.rs) and, for the SSH path, a throwaway sshd.
//!
//! One test binary, a module per subject: `jobs` (the reference NCCL
//! sbatch, failures, arrays, bad input), `failures` (OUT_OF_MEMORY, TIMEOUT
//! and NODE_FAIL made for real), `resume` (kill -9 inside each call,
//! Ctrl-C, cancel on destroy, submissions counted by `sacct`),
//! `accounting` (a job the controller forgot, found through `sacct`),
//! `ssh` (submitting on a "head node" over SSH), `node_check`
//! (slurm.node_check on 16 nodes, one slurmd each: planted faults named,
//! drained, resumed), `per_node` (a step per healthy node, its `for_each`
//! known after apply), `restarts` (training that survives a node).

#[path = "../support/mod.rs"]
mod support;

mod accounting;
mod failures;
mod jobs;
mod node_check;
mod node_health;
mod per_node;
mod restarts;
mod resume;
mod ssh;

use std::path::PathBuf;

use support::slurm::Slurm;
use support::{Project, Run};

/// tests/fixtures/slurm/NAME.
pub(crate) fn fixture(name: &str) -> PathBuf {
    support::workspace_root()
        .join("tests/fixtures/slurm")
        .join(name)
}

/// The folder of the stand-in programs (`mpirun`, `all_reduce_perf`).
pub(crate) fn emulators() -> PathBuf {
    fixture("bin")
}

/// A project holding `workflow` as wf.toml and the reference NCCL script
/// at slurm/nccl-tests.sbatch (as workflows/ has it).
pub(crate) fn project(workflow: &str) -> Project {
    let p = Project::new();
    p.write("wf.toml", workflow);
    let nccl = support::workspace_root().join("workflows/slurm/nccl-tests.sbatch");
    p.write(
        "slurm/nccl-tests.sbatch",
        &std::fs::read_to_string(nccl).expect("workflows/slurm/nccl-tests.sbatch"),
    );
    p
}

/// The environment `flow` runs with against `slurm`: its slurm.conf, and
/// the stand-in programs first on PATH (jobs started here inherit it).
pub(crate) fn env_for(
    slurm: &Slurm,
    extra_path: Option<&std::path::Path>,
) -> Vec<(String, String)> {
    let mut path = String::new();
    if let Some(extra) = extra_path {
        path.push_str(&format!("{}:", extra.display()));
    }
    path.push_str(&format!(
        "{}:{}",
        emulators().display(),
        std::env::var("PATH").unwrap_or_default()
    ));
    let mut env = slurm.env();
    env.push(("PATH".into(), path));
    env
}

/// A Slurm of `nodes` nodes, gpu-1 … gpu-N (one slurmd each on this host),
/// each a ParallelCluster static p4d.24xlarge by its features.
pub(crate) fn p4d_fleet(nodes: usize, features: support::slurm::Features) -> Slurm {
    Slurm::start_with(support::slurm::Features {
        nodes: Some(support::slurm::Fleet {
            names: (1..=nodes).map(|i| format!("gpu-{i}")).collect(),
            features: "static,p4d.24xlarge,p4d".into(),
        }),
        ..features
    })
}

/// Writes the shipped workflows/slurm/NAME into `p` at slurm/NAME.
pub(crate) fn write_shipped(p: &Project, name: &str) {
    let path = support::workspace_root().join("workflows/slurm").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    p.write(&format!("slurm/{name}"), &text);
}

/// The environment `flow` runs with against a fleet: [`env_for`] with the
/// fleet's stand-ins (tests/fixtures/slurm/fleet) first on PATH, the fault
/// table they read (`FLOW_TEST_FAULTS`), and wide columns.
pub(crate) fn fleet_env(slurm: &Slurm, faults: &std::path::Path) -> Vec<(String, String)> {
    let mut env = env_for(slurm, Some(&fixture("fleet")));
    env.push(("FLOW_TEST_FAULTS".into(), faults.display().to_string()));
    env.push(("COLUMNS".into(), "400".into()));
    env
}

/// `flow ARGS` in `p` against `slurm`.
pub(crate) fn flow(p: &Project, slurm: &Slurm, args: &[&str]) -> Run {
    let env = env_for(slurm, None);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    p.run_env(args, &env)
}

/// A step's log.
pub(crate) fn log(p: &Project, step: &str) -> String {
    p.run(&["logs", "wf.toml", step]).expect(0).stdout
}

/// The step's record as `flow state show` prints it.
pub(crate) fn record(p: &Project, step: &str) -> serde_json::Value {
    let show = p.run(&["state", "show", "wf.toml", step]).expect(0);
    serde_json::from_str(&show.stdout).expect("state show prints JSON")
}
