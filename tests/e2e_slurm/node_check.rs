//! slurm.node_check on a real Slurm of 16 nodes (Debian's slurmctld and
//! one slurmd per node, all on this host: Debian builds Slurm with
//! multiple-slurmd), each node's features those of a ParallelCluster static
//! p4d.24xlarge node. Faults are planted as the Slurm stand-ins plant
//! them: tests/fixtures/slurm/fleet/{nvidia-smi,all_reduce_perf}, first on
//! PATH, print the published forms, choosing what from the node they run
//! on ($SLURMD_NODENAME, the job's $SLURM_JOB_NODELIST) and a fault table
//! the test writes ($FLOW_TEST_FAULTS). What flow did to the nodes is
//! read from Slurm (`sinfo`, `scontrol show node`), not from flow.

use serde_json::{Value, json};

use crate::support::slurm::{Features, Slurm};
use crate::support::{Project, Run};
use crate::{fleet_env, log, p4d_fleet, project, write_shipped};

/// The nodes: gpu-1 … gpu-16 (issue 40: fleets of at least 16).
const NODES: usize = 16;

fn node(i: usize) -> String {
    format!("gpu-{i}")
}

/// The workflow: every node of gpu-[1-16], the check against the instance
/// type's GPUs, the reference NCCL sbatch in pairs (one task per node: a
/// test node has one CPU); `policy` and `extra` lines as given.
fn workflow(policy: &str, extra: &str) -> String {
    format!(
        r#"[workflow]
name = "slurm-fleet"

[steps.fleet]
provider = "slurm.node_check"
[steps.fleet.inputs]
nodes = "gpu-[1-{NODES}]"
policy = "{policy}"
{extra}

[steps.fleet.inputs.check]
script = "slurm/nvidia-smi.sbatch"
gpus = "instance-type"
success_pattern = "NVIDIA-SMI"
capture = {{ driver_version = "Driver Version:\\s*([0-9.]+)" }}

[steps.fleet.inputs.pairs]
script = "slurm/nccl-tests.sbatch"
sbatch_args = ["--ntasks-per-node=1"]
args = ["all_reduce_perf"]
floor = 10
"#
    )
}

/// An 8-node cluster, a project with the workflow, and the fault table.
struct Test {
    slurm: Slurm,
    p: Project,
    faults: tempfile::NamedTempFile,
}

impl Test {
    fn new(policy: &str, extra: &str) -> Test {
        let slurm = p4d_fleet(NODES, Features::default());
        let p = project(&workflow(policy, extra));
        write_shipped(&p, "nvidia-smi.sbatch");
        Test {
            slurm,
            p,
            faults: tempfile::NamedTempFile::new().unwrap(),
        }
    }

    /// Plants `NODE KEY VALUE` in the fault table.
    fn plant(&self, i: usize, key: &str, value: &str) {
        use std::io::Write;
        writeln!(self.faults.as_file(), "{} {key} {value}", node(i)).unwrap();
    }

    /// `flow ARGS` with the fleet's stand-ins first on PATH.
    fn flow(&self, args: &[&str]) -> Run {
        let env = fleet_env(&self.slurm, self.faults.path());
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.p.run_env(args, &env)
    }

    fn output(&self, key: &str) -> Value {
        let out = self
            .p
            .run(&["output", "wf.toml", &format!("fleet.{key}"), "--json"])
            .expect(0);
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!(out.stdout.trim()))
    }

    /// Each node's state and reason, as `sinfo` says.
    fn states(&self) -> Vec<(String, String, String)> {
        let out = self.slurm.output("sinfo", &["-h", "-N", "-o", "%N|%T|%E"]);
        let mut rows: Vec<(String, String, String)> = out
            .lines()
            .filter_map(|l| {
                let mut p = l.splitn(3, '|');
                Some((p.next()?.into(), p.next()?.into(), p.next()?.trim().into()))
            })
            .collect();
        rows.sort();
        rows.dedup();
        rows
    }

    /// Asserts that exactly the nodes `drained` are drained with flow's
    /// reason, and every other node is idle with none.
    fn drained_exactly(&self, drained: &[usize]) {
        let states = self.states();
        assert_eq!(states.len(), NODES, "{states:?}\n{}", self.slurm.logs());
        for (name, state, reason) in &states {
            let i: usize = name.trim_start_matches("gpu-").parse().unwrap();
            if drained.contains(&i) {
                assert!(state.starts_with("drain"), "{name} is {state}: {states:?}");
                assert!(reason.starts_with("flow: "), "{name}: {reason}");
            } else {
                assert_eq!(
                    (state.as_str(), reason.as_str()),
                    ("idle", "none"),
                    "{name}: {states:?}"
                );
            }
        }
    }
}

/// Sixteen healthy nodes: the plan says what will be checked before the
/// nodes are known; apply runs 16 check jobs (one per node, each on its
/// node) and one round of 8 pairs, and touches no node.
#[test]
fn a_healthy_fleet_passes_touching_no_node() {
    let t = Test::new("drain", "");
    let plan = t.flow(&["plan", "wf.toml"]).expect(0).all();
    for line in [
        "checks each node of `gpu-[1-16]` (the nodes are known after apply)",
        "each node alone: `slurm/nvidia-smi.sbatch` with --nodelist=NODE --nodes=1, nvidia-smi listing its instance type's GPUs",
        "a bad node is drained: scontrol update State=DRAIN Reason=\"flow: <its verdict>\" (destroy resumes it)",
    ] {
        assert!(plan.contains(line), "{line}\n{plan}");
    }
    let run = t.flow(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), t.slurm.logs());
    // In the order of their names (gpu-10 before gpu-2), as state keeps them.
    let mut nodes: Vec<String> = (1..=NODES).map(node).collect();
    nodes.sort();
    assert_eq!(t.output("healthy"), json!(nodes));
    assert_eq!(t.output("bad"), json!([]));
    assert_eq!(t.output("drained"), json!([]));
    assert_eq!(t.output("rounds"), json!(1));
    let v = t.output("verdicts");
    assert_eq!(v["gpu-4"]["value"], json!(17.9053), "{v}");
    assert_eq!(
        v["gpu-4"]["check"]["values"]["driver_version"],
        "550.127.05"
    );
    // Each check job ran on its own node, each pair's on its two.
    let jobs = t
        .slurm
        .output("squeue", &["-h", "--states=all", "-o", "%j|%N|%T"]);
    for i in 1..=NODES {
        assert!(
            jobs.contains(&format!("fleet-gpu-{i}|gpu-{i}|COMPLETED")),
            "{jobs}"
        );
    }
    // Pairs of neighbours in name order (gpu-1, gpu-10, gpu-11, …).
    assert!(
        jobs.contains("fleet-r1-gpu-1-gpu-10|gpu-[1,10]|COMPLETED"),
        "{jobs}"
    );
    assert_eq!(jobs.lines().count(), NODES + NODES / 2, "{jobs}");
    let l = log(&t.p, "fleet");
    assert!(l.contains("NCCL round 1: gpu-1+gpu-10 17.9053"), "{l}");
    assert!(l.contains("[gpu-5] nvidia-smi on gpu-5 (gpu-5)"), "{l}");
    t.drained_exactly(&[]);
}

/// A node with 7 GPUs (its check) and a slow node (its pairs at a quarter
/// of the bandwidth): policy `fail` names both with their evidence and
/// touches none; policy `drain` drains exactly those two with flow's
/// reason; destroy resumes the one whose reason is still flow's and leaves
/// the one an administrator drained since for a reason of their own.
#[test]
fn a_seven_gpu_node_and_a_slow_node_are_named_drained_and_resumed() {
    let t = Test::new("fail", "");
    t.plant(3, "gpus", "7");
    t.plant(6, "busbw", "0.25");
    let all = t
        .flow(&["apply", "wf.toml", "--auto-approve"])
        .expect(1)
        .all();
    assert!(all.contains("bad node(s) gpu-3, gpu-6"), "{all}");
    assert!(
        all.contains("gpu-3: nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8 (line: `|   6  NVIDIA A100-SXM4-40GB"),
        "{all}"
    );
    let slow = all.split("gpu-6: ").nth(1).unwrap_or_default();
    assert!(
        slow.starts_with("busbw 4.4763 GB/s < 14.3242 (median) with healthy node gpu-"),
        "{all}"
    );
    assert!(
        slow.contains("(line: `# Avg bus bandwidth    : 4.4763`)"),
        "{all}"
    );
    t.drained_exactly(&[]);
    let l = log(&t.p, "fleet");
    assert!(l.contains("NCCL round 2: "), "{l}");
    assert!(
        !l.contains("gpu-3+") && !l.contains("+gpu-3 "),
        "the 7-GPU node is kept out of the pairs: {l}"
    );

    t.p.write("wf.toml", &workflow("drain", ""));
    let run = t.flow(&["apply", "wf.toml", "--auto-approve"]);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), t.slurm.logs());
    t.drained_exactly(&[3, 6]);
    let shown = t.slurm.output("scontrol", &["show", "node", "gpu-6"]);
    assert!(
        shown.contains("Reason=flow: busbw 4.4763 GB/s < 14.3242 (median) with healthy node gpu-"),
        "{shown}"
    );
    let shown = t.slurm.output("scontrol", &["show", "node", "gpu-3"]);
    assert!(
        shown.contains("Reason=flow: nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8"),
        "{shown}"
    );
    assert_eq!(t.output("bad"), json!(["gpu-3", "gpu-6"]));
    assert_eq!(t.output("drained"), json!(["gpu-3", "gpu-6"]));
    let v = t.output("verdicts");
    let slow = &v["gpu-6"];
    assert_eq!(
        (slow["status"].clone(), slow["by"].clone()),
        (json!("bad"), json!("pairs"))
    );
    assert_eq!(slow["value"], json!(4.4763));
    assert_eq!(slow["threshold"], json!(14.3242));
    assert_eq!(slow["against"], "median");
    let partner = slow["partner"].as_str().unwrap();
    assert_eq!(v[partner]["status"], "healthy", "{v}");
    assert_eq!(slow["line"], "# Avg bus bandwidth    : 4.4763");
    let seven = &v["gpu-3"];
    assert_eq!(
        (seven["value"].clone(), seven["threshold"].clone()),
        (json!(7), json!(8))
    );
    assert!(
        seven["line"]
            .as_str()
            .unwrap()
            .starts_with("|   6  NVIDIA A100"),
        "{v}"
    );

    fleet_heatmap_shows_both_runs(&t);

    // An administrator drains gpu-6 again for a reason of their own.
    let admin = t
        .slurm
        .command("scontrol")
        .args([
            "update",
            "NodeName=gpu-6",
            "State=DRAIN",
            "Reason=admin: reseat NIC",
        ])
        .status()
        .unwrap();
    assert!(admin.success());
    let run = t.flow(&["destroy", "wf.toml", "--auto-approve"]);
    assert_eq!(run.code, 0, "{}", run.all());
    // Slurm marks a node it just resumed not responding (`idle*`) until
    // its next ping.
    let started = std::time::Instant::now();
    let states = loop {
        let states = t.states();
        if !states.iter().any(|s| s.1.ends_with('*')) || started.elapsed().as_secs() > 30 {
            break states;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(
        states.contains(&("gpu-3".into(), "idle".into(), "none".into())),
        "{states:?}"
    );
    assert!(
        states.contains(&("gpu-6".into(), "drained".into(), "admin: reseat NIC".into())),
        "{states:?}"
    );
    assert!(
        run.all().contains("node gpu-6 left as it is"),
        "{}",
        run.all()
    );
}

/// Five nodes with 7 GPUs of 16 is more than max_bad_fraction 0.25 allows
/// (4): the step fails naming them, and drains none.
#[test]
fn too_many_bad_nodes_fail_without_draining_any() {
    let t = Test::new("drain", "max_bad_fraction = 0.25");
    for i in [1, 4, 7, 11, 16] {
        t.plant(i, "gpus", "7");
    }
    let all = t
        .flow(&["apply", "wf.toml", "--auto-approve"])
        .expect(1)
        .all();
    assert!(
        all.contains("5 of 16 nodes are bad, more than max_bad_fraction 0.25 allows (4): no node was taken out"),
        "{all}"
    );
    assert!(all.contains("gpu-7: nvidia-smi lists 7 GPUs"), "{all}");
    t.drained_exactly(&[]);
}

/// An unknown input, a misspelt policy, EKS's policy and a hostlist that
/// is not one are refused at validate at their entries' line:column, with
/// did-you-mean, before anything runs.
#[test]
fn validate_refuses_bad_input_at_its_entry() {
    let validate = |p: &Project| {
        p.run_env(&["validate", "wf.toml"], &[("COLUMNS", "400")])
            .expect(1)
            .all()
    };
    let p = project(&workflow("drain", "partiton = \"gpu\""));
    write_shipped(&p, "nvidia-smi.sbatch");
    let v = validate(&p);
    assert!(
        v.contains("wf.toml:9:1"),
        "the unknown input's line:column: {v}"
    );
    assert!(v.contains("did you mean `partition`?"), "{v}");
    p.write("wf.toml", &workflow("drian", ""));
    let v = validate(&p);
    assert!(v.contains("wf.toml:8:10"), "policy's line:column: {v}");
    assert!(v.contains("`drian` is not a policy"), "{v}");
    assert!(v.contains("did you mean `drain`?"), "{v}");
    p.write(
        "wf.toml",
        &workflow("cordon", "").replace("gpu-[1-16]", "gpu-[1-16"),
    );
    let v = validate(&p);
    assert!(
        v.contains(
            "policy `cordon` is EKS's (kube.node_check): on slurm.node_check a bad node is drained"
        ),
        "{v}"
    );
    assert!(
        v.contains("wf.toml:7:9") && v.contains("is not a Slurm hostlist"),
        "{v}"
    );
    assert!(!p.path().join(".flow").exists());
}

/// `flow report` of the two runs above (policy `fail`, then `drain`): the
/// fleet's heatmap has a row per node, the two bad ones first, a column
/// per run, each cell the node's verdict in that run as the run history
/// holds it, with its reason; the newest run's bad nodes listed under it.
fn fleet_heatmap_shows_both_runs(t: &Test) {
    t.flow(&["report", "wf.toml", "-o", "report.html"])
        .expect(0);
    let page = std::fs::read_to_string(t.p.path().join("report.html")).unwrap();
    let from = page
        .find("<h2 id=\"fleet-fleet\">Fleet health: fleet</h2>")
        .unwrap_or_else(|| panic!("no fleet section: {page}"));
    let section = &page[from..];
    let svg = &section[..section.find("</svg>").unwrap()];
    // (node, status) of each cell, in drawing order: rows, then runs.
    let cells: Vec<(String, String)> = svg
        .split("<rect class=\"cell\" ")
        .skip(1)
        .map(|c| {
            let attr = |name: &str| {
                let from = c.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                c[from..from + c[from..].find('"').unwrap()].to_string()
            };
            (attr("data-node"), attr("data-status"))
        })
        .collect();
    let mut want = Vec::new();
    let order = [3, 6]
        .into_iter()
        .chain((1..=NODES).filter(|i| *i != 3 && *i != 6));
    for i in order {
        let status = if i == 3 || i == 6 { "bad" } else { "healthy" };
        want.push((node(i), status.to_string()));
        want.push((node(i), status.to_string()));
    }
    assert_eq!(cells, want, "{svg}");
    assert!(
        svg.contains(": bad: nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8</title>"),
        "{svg}"
    );
    let listed = &section[section.find("</svg>").unwrap()..];
    assert!(
        listed.contains("<li class=\"failed\">gpu-3: bad: nvidia-smi lists 7 GPUs"),
        "{listed}"
    );
}
