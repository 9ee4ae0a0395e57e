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

/// `workflows/gpu-host-check.toml` as shipped, on a host whose
/// `nvidia-smi` and `all_reduce_perf` print what a real H200 printed
/// (scripts on PATH that print the recording: this machine has no GPU).
fn host_check(p: &Project, gpus: &str) -> crate::support::Run {
    let data = format!(
        "{}/../providers/src/metrics/testdata/h200-2026-11-28",
        env!("CARGO_MANIFEST_DIR")
    );
    let bin = p.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    p.write(
        "bin/nvidia-smi",
        &format!("#!/bin/sh\n[ \"$1\" = -q ] && exec cat '{data}/nvidia-smi-q.txt'\nexit 2\n"),
    );
    p.write(
        "bin/all_reduce_perf",
        &format!(
            "#!/bin/sh\n[ \"$*\" = '-b 8 -e 1G -f 2 -g {gpus}' ] || {{ echo \"args: $*\"; exit 2; }}\nexec cat '{data}/nccl-allreduce.txt'\n"
        ),
    );
    for f in ["bin/nvidia-smi", "bin/all_reduce_perf"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p.path().join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let shipped = format!(
        "{}/../workflows/gpu-host-check.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::copy(&shipped, p.path().join("gpu-host-check.toml")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    p.run_env(
        &[
            "apply",
            "gpu-host-check.toml",
            "--var",
            &format!("gpus={gpus}"),
            "--auto-approve",
        ],
        &[("PATH", &path)],
    )
}

#[test]
fn the_shipped_host_check_passes_on_an_h200_and_records_its_values() {
    let p = Project::new();
    let apply = host_check(&p, "1").expect(0);
    assert!(apply.stdout.contains("2 created"), "{}", apply.all());
    let runs = p.run(&["runs", "gpu-host-check.toml"]).expect(0);
    assert!(
        runs.stdout.contains("max_temperature_c=34"),
        "{}",
        runs.all()
    );
    assert!(runs.stdout.contains("algbw_peak=2123.8"), "{}", runs.all());
}

#[test]
fn the_shipped_host_check_fails_a_host_with_fewer_gpus_than_its_type_naming_the_line() {
    let p = Project::new();
    let apply = host_check(&p, "8").expect(1);
    let all = apply.all();
    assert!(all.contains("expect: gpus = 1 is not == 8"), "{all}");
    assert!(all.contains("Attached GPUs"), "{all}");
    assert!(all.contains("nccl") && all.contains("skipped"), "{all}");
}
