//! A single-GPU host's health check as an `exec` step: its script prints
//! `nvidia-smi -q`, `parse = "nvidia-smi"` reads it and `expect` gates it.
//! The outputs are real: a lent H100's `-q` (healthy) and a published
//! A100's with a row remap pending (providers/src/metrics/testdata/SOURCES).

use crate::support::Project;

/// A workflow whose step prints `sample` and gates its health.
fn check(p: &Project, sample: &str, parse: &str) {
    let path = format!(
        "{}/../providers/src/metrics/testdata/{sample}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    p.write("nvidia-smi-q.txt", &text);
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "gpu-health"

[steps.gpu]
provider = "exec"
[steps.gpu.inputs]
run = "cat nvidia-smi-q.txt"
parse = "{parse}"
expect = {{ ecc_uncorrected_volatile = "== 0", remapped_rows_pending = "== 0", remapped_rows_failure = "== 0" }}
"#
        ),
    );
}

#[test]
fn a_healthy_h100_passes_and_its_values_are_outputs() {
    let p = Project::new();
    check(&p, "h100-2026-11-27/nvidia-smi-q.txt", "nvidia-smi");
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("1 created"), "{}", apply.all());
    let temp = p
        .run(&["output", "wf.toml", "gpu.max_temperature_c"])
        .expect(0);
    assert_eq!(temp.stdout.trim(), "33");
    let gpus = p.run(&["output", "wf.toml", "gpu.gpus"]).expect(0);
    assert_eq!(gpus.stdout.trim(), "1");
}

#[test]
fn an_a100_with_a_pending_row_remap_fails_naming_the_value_and_the_gpu() {
    let p = Project::new();
    check(&p, "nvidia-smi-q-a100-remap-pending.txt", "nvidia-smi");
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let all = apply.all();
    assert!(
        all.contains("remapped_rows_pending = 1 is not == 0"),
        "{all}"
    );
    assert!(all.contains("GPU 00000000:10:1C.0: Pending"), "{all}");
    // Nothing was created: the step's outputs are not there.
    p.run(&["output", "wf.toml", "gpu.gpus"]).expect(1);
}

#[test]
fn validate_names_the_reader_a_misspelt_parse_meant() {
    let p = Project::new();
    check(&p, "h100-2026-11-27/nvidia-smi-q.txt", "nvidia_smi");
    let run = p.run(&["validate", "wf.toml"]).expect(1);
    let all = run.all();
    assert!(
        all.contains("flow reads no program called `nvidia_smi`"),
        "{all}"
    );
    assert!(all.contains("did you mean `nvidia-smi`?"), "{all}");
}
