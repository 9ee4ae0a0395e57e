//! slurm.node_check with the shipped per-node health check
//! (workflows/slurm/node-health.sbatch: nvidia-smi, fi_info, dcgmi diag)
//! and its built-in rules (`gpus`, `efa`, `dcgm`) on a real Slurm of 6
//! nodes (one slurmd each, on this host), each a ParallelCluster static
//! p4d.24xlarge. The stand-ins of tests/fixtures/slurm/fleet print the
//! published forms and plant a fault by the node they run on: gpu-2's
//! `dcgmi diag` fails its GPU Memory test, gpu-5's `fi_info` lists 3 of
//! the 4 EFA devices of a p4d. Both are named with their evidence and
//! drained, as Slurm then says; the other four pass every rule.

use serde_json::{Value, json};

use crate::support::slurm::Features;
use crate::{fleet_env, p4d_fleet, project, write_shipped};

const WORKFLOW: &str = r#"[workflow]
name = "slurm-node-health"

[steps.fleet]
provider = "slurm.node_check"
[steps.fleet.inputs]
nodes = "gpu-[1-6]"
policy = "drain"
max_bad_fraction = 0.34

[steps.fleet.inputs.check]
script = "slurm/node-health.sbatch"
args = ["2"]
gpus = "instance-type"
efa = "instance-type"
dcgm = true
"#;

#[test]
fn a_failing_dcgm_test_and_a_missing_efa_device_are_named_and_drained() {
    let slurm = p4d_fleet(6, Features::default());
    let p = project(WORKFLOW);
    write_shipped(&p, "node-health.sbatch");
    let faults = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(faults.path(), "gpu-2 dcgm GPU_Memory\ngpu-5 efa 3\n").unwrap();
    let env = fleet_env(&slurm, faults.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let output = |key: &str| -> Value {
        let out = p
            .run_env(
                &["output", "wf.toml", &format!("fleet.{key}"), "--json"],
                &env,
            )
            .expect(0);
        serde_json::from_str(out.stdout.trim()).unwrap()
    };

    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0).stdout;
    assert!(
        plan.contains("each node alone: `slurm/node-health.sbatch` with --nodelist=NODE --nodes=1, nvidia-smi listing its instance type's GPUs, fi_info listing its instance type's EFA devices, no dcgmi diag test failing"),
        "{plan}"
    );
    let run = p.run_env(&["apply", "--auto-approve", "wf.toml"], &env);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), slurm.logs());
    assert_eq!(output("bad"), json!(["gpu-2", "gpu-5"]));
    assert_eq!(output("drained"), json!(["gpu-2", "gpu-5"]));
    assert_eq!(
        output("healthy"),
        json!(["gpu-1", "gpu-3", "gpu-4", "gpu-6"])
    );
    let v = output("verdicts");
    assert_eq!(
        v["gpu-2"]["reason"],
        "dcgmi diag: GPU Memory Fail - GPU: 5: GPU 5 failed the test on this node (planted by the test fleet)"
    );
    assert_eq!(v["gpu-2"]["short"], "dcgm-gpu-memory");
    assert_eq!(
        v["gpu-5"]["reason"],
        "fi_info lists 3 EFA devices, the EFA interfaces of a p4d.24xlarge is 4"
    );
    assert_eq!(v["gpu-5"]["line"], "domain: efa_2-rdm");
    // What Slurm says of the nodes, with flow's reasons.
    let shown = slurm.output("sinfo", &["-h", "-N", "-o", "%N|%T|%E"]);
    for (node, reason) in [
        ("gpu-2", "flow: dcgmi diag: GPU Memory Fail - GPU: 5"),
        ("gpu-5", "flow: fi_info lists 3 EFA devices"),
    ] {
        let row = shown
            .lines()
            .find(|l| l.starts_with(&format!("{node}|")))
            .unwrap_or_else(|| panic!("{node}: {shown}"));
        assert!(row.contains("|drain"), "{row}");
        assert!(row.contains(reason), "{row}");
    }
    for node in ["gpu-1", "gpu-3", "gpu-4", "gpu-6"] {
        assert!(
            shown.lines().any(|l| l == format!("{node}|idle|none")),
            "{shown}"
        );
    }
}
