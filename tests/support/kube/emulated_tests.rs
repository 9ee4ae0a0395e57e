use std::collections::BTreeMap;
use std::process::Command;

use super::{fill, names_for};
use crate::support::workspace_root;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What `batch_compute.py --render` prints for `file` (a path) run by
/// `command` with `vars` as its environment.
fn python_render(file: &std::path::Path, vars: &[(&str, &str)], command: &str) -> String {
    let script = workspace_root().join("scripts/local-cloud/batch_compute.py");
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(script)
        .arg("--render")
        .arg(file)
        .args(vars.iter().map(|(k, v)| format!("{k}={v}")))
        .arg("--")
        .args(command.split_whitespace())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What the Rust fill gives for the same.
fn rust_render(file: &std::path::Path, vars: &[(&str, &str)], command: &str) -> String {
    let program = file.file_name().unwrap().to_str().unwrap();
    let program = program.strip_suffix(".txt").unwrap();
    let env = env(vars);
    let mut line = command.to_string();
    for v in env.values() {
        line.push(' ');
        line.push_str(v);
    }
    let text = std::fs::read_to_string(file).unwrap();
    fill(&text, &names_for(program, &line, &env))
}

const RULES: &str = "head ${X} ${ARG1 - 1} ${ARG1-1} ${2 + 3 * 4} ${10 - 4 - 3} ${0 - 7 / 2} ${0 - 7 % 3} ${NEG / 2} ${NEG % 3} ${Q} ${ARG1 / 0} ${X + 1} ${1 2} ${a{b} $${X}
${for E in 0..ARG1}
e ${E}
${if E % ARG2 == 0}
snap ${E} of ${ARG3}
${end}
${if E >= ARG1 - 1}
last ${E}
${end}
${end}
${for E in 0..NOPE}
x ${E}
${end}
${if X == 1}
never
${end}
${for E in 3..1}
none
${end}
${end}
${for_not_a_block}
tail";

#[test]
fn the_rule_repeats_judges_counts_and_leaves_what_has_no_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prog.txt");
    std::fs::write(&file, RULES).unwrap();
    let got = rust_render(
        &file,
        &[("X", "hi"), ("NEG", "-7")],
        "run /w/prog 5 2 --flag",
    );
    assert_eq!(
        got,
        "head hi 4 4 14 3 -3 -1 -4 2 ${Q} ${ARG1 / 0} ${X + 1} ${1 2} ${a{b} $hi\n\
         e 0\nsnap 0 of --flag\ne 1\ne 2\nsnap 2 of --flag\ne 3\ne 4\nsnap 4 of --flag\nlast 4\n\
         ${for E in 0..NOPE}\nx ${E}\n${end}\n\
         ${if X == 1}\nnever\n${end}\n\
         ${end}\n${for_not_a_block}\ntail"
    );
    // The environment wins over the program's arguments.
    let got = rust_render(&file, &[("ARG1", "1")], "run /w/prog 5 2");
    // (ARG3 is the next word: the environment's values follow the command.)
    assert!(got.contains("\ne 0\nsnap 0 of 1\nlast 0\n${for"), "{got}");
}

/// The Batch emulator (Python) and the Kubernetes test driver (Rust) fill
/// every emulated output, and a template exercising every form, alike.
#[test]
fn the_batch_emulator_and_the_kube_driver_fill_alike() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("prog.txt");
    std::fs::write(&rules, RULES).unwrap();
    let mut files = vec![rules];
    let outputs = workspace_root().join("scripts/local-cloud/outputs");
    for entry in std::fs::read_dir(&outputs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            files.push(path);
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("X", "hi"), ("NEG", "-7"), ("EPOCHS", "12")],
            "torchrun /w/ddp.py 12 5 --batch_size=32",
        ),
        (&[], "bash -c run"),
        (&[("TEST_CMD", "/w/prog 7 3 z")], "bash -c $TEST_CMD"),
        (&[("ARG1", "x")], "torchrun /w/ddp.py 3 1"),
    ];
    for file in &files {
        for (vars, command) in cases {
            let program = file.file_stem().unwrap().to_str().unwrap();
            let command = command
                .replace("ddp.py", program)
                .replace("/w/prog", program);
            assert_eq!(
                rust_render(file, vars, &command),
                python_render(file, vars, &command),
                "{} with {vars:?} run by {command}",
                file.display()
            );
        }
    }
}

#[test]
fn every_emulated_output_says_so_on_its_first_line() {
    let outputs = workspace_root().join("scripts/local-cloud/outputs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&outputs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            let text = std::fs::read_to_string(&path).unwrap();
            let program = path.file_stem().unwrap().to_str().unwrap();
            assert!(
                text.starts_with(&format!("{} {program}", flow_providers::metrics::EMULATED)),
                "{}: {}",
                path.display(),
                text.lines().next().unwrap_or_default()
            );
            seen += 1;
        }
    }
    assert!(seen >= 5, "{seen}");
}

/// ddp.py as the runbook's program prints it: epochs counted from 0, a
/// snapshot (from each of the two ranks) every SAVE_EVERY epochs, no
/// closing line.
#[test]
fn the_emulated_ddp_counts_from_zero_and_snapshots_as_upstream() {
    let file = workspace_root().join("scripts/local-cloud/outputs/ddp.py.txt");
    let out = rust_render(
        &file,
        &[("EPOCHS", "40")],
        "torchrun --nproc_per_node=2 /workspace/ddp.py 40 10 --batch_size=32",
    );
    let epochs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("[RANK 0] Epoch "))
        .collect();
    assert_eq!(epochs.len(), 40, "{out}");
    assert_eq!(epochs[0], "[RANK 0] Epoch 0 | Batchsize: 32 | Steps: 8");
    assert_eq!(epochs[39], "[RANK 0] Epoch 39 | Batchsize: 32 | Steps: 8");
    let snapshots: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("Training snapshot saved"))
        .collect();
    assert_eq!(snapshots.len(), 8, "{out}");
    assert_eq!(
        snapshots[6],
        "Epoch 30 | Training snapshot saved at /fsx/snapshot.pt"
    );
    assert!(
        out.trim_end()
            .ends_with("[RANK 1] Epoch 39 | Batchsize: 32 | Steps: 8"),
        "{out}"
    );
    assert!(!out.contains("${") && !out.contains("finished"), "{out}");
}
