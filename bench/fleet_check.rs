//! Fleet checks at scale (issue 40, "Measured"): `kube.node_check` over N
//! emulated GPU nodes (512 by default) of a real kube-apiserver, the
//! tests' driver playing the kubelets and the training operator
//! (tests/support/kube), one node planted slow (its pairs' bus bandwidth
//! a quarter). Prints the wall time of the apply, the time of each phase
//! as flow logged it (the per-node checks, each NCCL round), the rounds
//! it took to name the node against 2 + log2 N, and the wall time against
//! rounds × one round's time.
//!
//!     cargo bench -p flow --bench fleet_check -- [--nodes N] [--flow PATH]
//!
//! `--flow` names the binary to measure (a release build, say); without it
//! the debug build the tests use (`cargo build -p flow`). Not part of CI.

// The harness's unit tests are compiled out here (no test harness), which
// leaves their imports unused.
#[allow(unused_imports)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use serde_json::json;
use support::Project;
use support::kube::KubeServer;

/// The check each node runs: the runbook's nvidia-smi Job.
const CHECK: &str = include_str!("../tests/fixtures/kube/node-check.yaml");

/// The test each pair runs: all_reduce_perf across the two nodes.
const PAIR: &str = include_str!("../tests/fixtures/kube/nccl-pair.yaml");

fn main() {
    let mut nodes = 512usize;
    let mut flow = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--nodes" => nodes = args.next().and_then(|n| n.parse().ok()).expect("--nodes N"),
            "--flow" => flow = Some(args.next().expect("--flow PATH")),
            // `cargo bench` passes this to every bench target.
            "--bench" => {}
            other => panic!("unknown argument `{other}`"),
        }
    }
    if let Some(f) = flow {
        // SAFETY: set before any thread reads the environment.
        unsafe { std::env::set_var("FLOW_E2E_BIN", f) };
    }
    let slow = nodes / 3;
    let k = KubeServer::start();
    for i in 0..nodes {
        let name = format!("gpu-node-{i}");
        let mut meta = json!({"name": name, "labels": {"eks.amazonaws.com/nodegroup": "gpu",
            "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "p4d.24xlarge"}});
        if i == slow {
            meta["annotations"] = json!({"test.flow/busbw-factor": "0.25"});
        }
        k.post(
            "/api/v1/nodes",
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": meta}),
        );
    }
    let p = Project::new();
    p.write(
        "pytorchjob-crd.yaml",
        &std::fs::read_to_string(
            support::workspace_root().join("tests/fixtures/kube/pytorchjob-crd.yaml"),
        )
        .expect("the PyTorchJob CRD fixture"),
    );
    p.write("node-check.yaml", CHECK);
    p.write("nccl-pair.yaml", PAIR);
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "fleet"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

[steps.fleet]
provider = "kube.node_check"
depends_on = ["operator"]
timeout = "2h"
[steps.fleet.inputs]
kubeconfig = "{kc}"
nodes = "eks.amazonaws.com/nodegroup=gpu"
policy = "fail"
max_bad_fraction = 0.25
[steps.fleet.inputs.check]
files = ["node-check.yaml"]
gpus = "instance-type"
success_pattern = "NVIDIA-SMI"

[steps.fleet.inputs.pairs]
files = ["nccl-pair.yaml"]
floor = 10
"#,
            kc = k.kubeconfig_path()
        ),
    );
    let children_cpu = || {
        // SAFETY: getrusage(2) fills the struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(usage.ru_utime) + secs(usage.ru_stime)
    };
    let cpu_before = children_cpu();
    let began = Instant::now();
    let run = p.run(&["apply", "wf.toml", "--auto-approve"]);
    let wall = began.elapsed().as_secs_f64();
    // The flow process, reaped by the run (the API server and etcd still
    // run: theirs is not in it).
    let flow_cpu = children_cpu() - cpu_before;
    let all = run.all();
    // When a line containing `needle` was printed, by its `[   12.3s]`.
    let at = |needle: &str| -> Option<f64> {
        all.lines().find(|l| l.contains(needle)).and_then(|l| {
            let stamp = l
                .split(']')
                .next()?
                .trim_start_matches(|c: char| !c.is_ascii_digit());
            stamp.trim_end_matches('s').trim().parse().ok()
        })
    };
    let last_at = |needle: &str| -> Option<f64> {
        all.lines()
            .rev()
            .find(|l| l.contains(needle))
            .and_then(|l| {
                let stamp = l
                    .split(']')
                    .next()?
                    .trim_start_matches(|c: char| !c.is_ascii_digit());
                stamp.trim_end_matches('s').trim().parse().ok()
            })
    };
    let start = at("fleet     checking ").unwrap_or(0.0);
    let checks_end = last_at("pod gpu-check-").unwrap_or(start);
    let rounds: Vec<f64> = (1..=64)
        .map_while(|r| at(&format!("NCCL round {r}: ")))
        .collect();
    let named = all.contains(&format!("bad node gpu-node-{slow}: "));
    let bound = 2.0 + (nodes as f64).log2();
    let mut phases = vec![("checks".to_string(), nodes, checks_end - start)];
    let mut from = checks_end;
    for (i, end) in rounds.iter().enumerate() {
        let pairs = all
            .lines()
            .find(|l| l.contains(&format!("NCCL round {}: ", i + 1)))
            .map_or(0, |l| l.matches('+').count());
        phases.push((format!("NCCL round {}", i + 1), pairs, end - from));
        from = *end;
    }
    println!(
        "fleet_check: {nodes} emulated p4d nodes (kube.node_check, check + pairs), node {slow} planted slow"
    );
    println!(
        "  apply: wall {wall:.1} s, exit {} (policy fail: a bad node fails the step), flow's own CPU {flow_cpu:.1} s",
        run.code
    );
    for (name, jobs, secs) in &phases {
        println!("  {name:<13} {jobs:>4} jobs at once  {secs:>6.1} s");
    }
    println!(
        "  rounds to name the slow node: {} (bound 2 + log2 N = {bound:.1}); named with its evidence: {named}",
        rounds.len()
    );
    // One check's time: the last phase, a handful of jobs (the suspects
    // with healthy partners).
    if let Some((_, _, one)) = phases.last().filter(|_| phases.len() > 1) {
        println!(
            "  one check (the last round's) {one:.1} s; wall ÷ ((1 + rounds) × one check) = {:.1}",
            wall / (phases.len() as f64 * one)
        );
    }
    if !named {
        eprintln!("{all}");
        std::process::exit(1);
    }
}
