//! An instance named by a key worked out from variables, where the
//! expansion cannot write it in ahead: in what a module call passes.

use super::lines_in_order;
use crate::support::Project;

#[test]
fn a_module_call_reads_the_instance_its_variables_name() {
    let p = Project::new();
    p.write(
        "modules/train/main.toml",
        r#"
[inputs.busbw]

[steps.run]
provider = "exec"
[steps.run.inputs]
run = "echo train-at-${inputs.busbw} >> runs.log"
"#,
    );
    p.write(
        "w.toml",
        r#"
[workflow]
name = "pick"

[vars.gpu_nodes]
default = 4

[steps.nccl]
provider = "exec"
for_each = [2, 4]
[steps.nccl.inputs]
run = "echo busbw=${each.value}0 >> $FLOW_OUTPUT"

[modules.train]
source = "modules/train"
inputs = { busbw = "${steps.nccl[vars.gpu_nodes].outputs.busbw}" }
"#,
    );
    p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    assert_eq!(lines_in_order(&p, "runs.log"), ["train-at-40"]);
    // Another key: the module's step reads the other instance.
    let plan = p.run(&["plan", "w.toml", "--var", "gpu_nodes=2"]).expect(0);
    assert!(plan.stdout.contains("~ train.run"), "{}", plan.stdout);
    p.run(&["apply", "w.toml", "--var", "gpu_nodes=2", "--auto-approve"])
        .expect(0);
    assert_eq!(
        lines_in_order(&p, "runs.log"),
        ["train-at-40", "train-at-20"]
    );
}

/// A step made or not by a variable (`for_each` over zero or one key), and
/// a step that reads it either way: `[*]` lists every instance's output,
/// `one()` gives the only one or `null`, and an input that is `null` is as
/// if it were not written.
const OPTIONAL: &str = r#"
[workflow]
name = "optional"

[vars.create]
type = "bool"
default = false

[steps.cluster]
provider = "null"
for_each = '${vars.create ? ["new"] : []}'
[steps.cluster.inputs]
id = "cluster-${each.key}"

[steps.use]
provider = "null"
[steps.use.inputs]
all = "${steps.cluster[*].outputs.id}"
connection = "${one(steps.cluster[*].outputs.id)}"
kubeconfig = '${vars.create ? null : "~/.kube/config"}'
"#;

#[test]
fn a_step_made_or_not_by_a_variable_is_read_with_splat_and_one() {
    let p = Project::new();
    p.write("w.toml", OPTIONAL);
    p.run(&["apply", "w.toml", "--auto-approve"]).expect(0);
    let out = p.run(&["output", "w.toml", "use", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["all"], serde_json::json!([]), "{v}");
    assert!(v.get("connection").is_none(), "null is not written: {v}");
    assert_eq!(v["kubeconfig"], "~/.kube/config");

    let plan = p.run(&["plan", "w.toml", "--var", "create=true"]).expect(0);
    assert!(
        plan.stdout.contains(r#"+ cluster["new"]"#),
        "{}",
        plan.stdout
    );
    assert!(plan.stdout.contains("~ use"), "{}", plan.stdout);
    p.run(&["apply", "w.toml", "--var", "create=true", "--auto-approve"])
        .expect(0);
    let out = p.run(&["output", "w.toml", "use", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["all"], serde_json::json!(["cluster-new"]), "{v}");
    assert_eq!(v["connection"], "cluster-new");
    assert!(v.get("kubeconfig").is_none(), "{v}");
}
