//! Per-node work over nodes known only after apply: a `slurm.node_check`
//! finds the healthy nodes of a real 4-node Slurm (one slurmd each, on this
//! host), and an `exec` step with `for_each` over its `healthy` output runs
//! once per node, each instance pinning `srun` to its node. The plan shows
//! the per-node step deferred (its keys are known after apply); apply
//! expands it in a second round; a node found bad gets no instance; the
//! next plan shows every instance unchanged.

use serde_json::Value;

use crate::support::slurm::Features;
use crate::{fleet_env, p4d_fleet, project, write_shipped};

const WORKFLOW: &str = r#"[workflow]
name = "slurm-per-node"

[steps.fleet]
provider = "slurm.node_check"
[steps.fleet.inputs]
nodes = "gpu-[1-4]"
policy = "drain"
[steps.fleet.inputs.check]
script = "slurm/nvidia-smi.sbatch"
gpus = "instance-type"

[steps.on_node]
provider = "exec"
for_each = "${steps.fleet.outputs.healthy}"
[steps.on_node.inputs]
run = """
srun --nodelist="$NODE" --nodes=1 sh -c 'echo "ran_on=$SLURMD_NODENAME"' >> "$FLOW_OUTPUT"
"""
env = { NODE = "${each.value}" }
pass_env = ["SLURM_CONF"]
"#;

#[test]
fn a_step_per_healthy_node_is_planned_deferred_and_runs_on_each() {
    let slurm = p4d_fleet(4, Features::default());
    let p = project(WORKFLOW);
    write_shipped(&p, "nvidia-smi.sbatch");
    // gpu-3 lists 7 of its 8 GPUs: found bad, drained, no instance.
    let faults = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(faults.path(), "gpu-3 gpus 7\n").unwrap();
    let env = fleet_env(&slurm, faults.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0).stdout;
    assert!(plan.contains("on_node[*]"), "{plan}");
    assert!(plan.contains("deferred"), "{plan}");
    let run = p.run_env(&["apply", "--auto-approve", "wf.toml"], &env);
    assert_eq!(run.code, 0, "{}\n{}", run.all(), slurm.logs());
    for i in [1, 2, 4] {
        let out = p
            .run_env(
                &["output", "wf.toml", &format!("on_node[\"gpu-{i}\"].ran_on")],
                &env,
            )
            .expect(0);
        assert_eq!(out.stdout.trim(), format!("gpu-{i}"), "{}", out.all());
    }
    let list = p
        .run_env(&["state", "list", "wf.toml"], &env)
        .expect(0)
        .stdout;
    assert!(!list.contains("on_node[\"gpu-3\"]"), "{list}");
    let bad = p
        .run_env(&["output", "wf.toml", "fleet.bad", "--json"], &env)
        .expect(0);
    let bad: Value = serde_json::from_str(bad.stdout.trim()).unwrap();
    assert_eq!(bad, serde_json::json!(["gpu-3"]));
    // Each instance's srun ran on its node, as Slurm recorded.
    let jobs = slurm.output("squeue", &["-h", "--states=all", "-o", "%j|%N|%T"]);
    for i in [1, 2, 4] {
        assert!(
            jobs.lines().any(|l| l == format!("sh|gpu-{i}|COMPLETED")),
            "{jobs}"
        );
    }
    let again = p
        .run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0)
        .stdout;
    assert!(again.contains("No changes"), "{again}");
}
