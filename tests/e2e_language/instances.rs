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
