//! Every `success_pattern`, `capture`, `parse` and `expect` of every shipped
//! workflow (`workflows/*.toml`, `workflows/modules/*/main.toml`), held to
//! what the program its step runs really prints: output published with the
//! runbook or upstream, or recorded from the program run as published (each
//! sample names its source; `providers/src/metrics/testdata/SOURCES` and
//! `tests/fixtures/published/SOURCES` say more).
//!
//! For each step with such rules and each of its samples: `success_pattern`
//! matches, every `capture` takes a value, `parse` reads the output, and
//! every value an `expect` gate judges is found (unless the sample is said
//! not to print it, and why); where a sample is a whole run, the gates are
//! judged too. A step with rules and no sample fails the test, so a rule
//! added later is held to the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Matchers;
use crate::contract::Values;

/// The workspace's root folder.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("providers/ is in the workspace")
        .to_path_buf()
}

/// A file of the workspace (`../shared/…` too), or lines `from..=to` of it.
fn text(path: &str, lines: Option<(usize, usize)>) -> String {
    let full = root().join(path);
    let all = std::fs::read_to_string(&full).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (shared/ is the folder beside the repository)",
            full.display()
        )
    });
    match lines {
        None => all,
        Some((from, to)) => {
            all.lines()
                .skip(from - 1)
                .take(to + 1 - from)
                .fold(String::new(), |mut s, l| {
                    s.push_str(l);
                    s.push('\n');
                    s
                })
        }
    }
}

/// One sample of a program's output a step's rules are held to.
struct Sample {
    /// The file, from the workspace's root.
    path: &'static str,
    /// Only these lines of it (a runbook page's quoted output).
    lines: Option<(usize, usize)>,
    /// What it is and where it was published.
    source: &'static str,
    /// The values it must give (`name`, JSON).
    values: &'static [(&'static str, &'static str)],
    /// Gated values it does not print, and why.
    absent: &'static [(&'static str, &'static str)],
    /// A run's output from start to end (`success_pattern` must match), or
    /// an excerpt of one (only `capture` and `parse` are held to it).
    whole: bool,
    /// The `${…}` of the rules, filled as the run's arguments fill them.
    fill: &'static [(&'static str, &'static str)],
    /// Whether the gates are judged too (a whole run, with every value).
    judge: bool,
}

const BATCH_EFA: &str = "providers/src/metrics/testdata/nccl-tests-batch-efa.txt";
const EKS_EFA_INFO: &str = "providers/src/metrics/testdata/nccl-tests-eks-efa-info.txt";
const H100_NCCL_INFO: &str =
    "providers/src/metrics/testdata/h100-2026-11-27/nccl-allreduce-info.txt";
const CPU_DDP: &str = "tests/fixtures/published/cpu-ddp/attempt1.txt";
const CPU_DDP_RESUMED: &str = "tests/fixtures/published/cpu-ddp/attempt2-resumed.txt";
const LLAMA_RECIPES: &str = "tests/fixtures/published/llama-recipes/finetuning-h200.txt";
const NO_INFO: &str = "the published run had no NCCL_DEBUG=INFO, so no network line";

/// The samples of each step with rules: (workflow file, step) → samples.
fn cases() -> Vec<((&'static str, &'static str), Vec<Sample>)> {
    let nccl_info = |fill| Sample {
        path: EKS_EFA_INFO,
        lines: None,
        source: "aws-efa-eks README's all_reduce_perf log with NCCL_DEBUG=INFO",
        values: &[
            ("busbw", "11.2432"),
            ("out_of_bounds", "0"),
            ("transport", "\"efa\""),
        ],
        absent: &[],
        whole: true,
        fill,
        judge: true,
    };
    vec![
        (
            ("modules/batch-efa/main.toml", "nccl"),
            vec![
                Sample {
                    path: BATCH_EFA,
                    lines: None,
                    source: "awsome-distributed-training nccl-tests/aws-batch README, lines 28-64",
                    values: &[("busbw", "156.742"), ("out_of_bounds", "0")],
                    absent: &[("transport", NO_INFO)],
                    whole: true,
                    fill: &[("${inputs.min_busbw}", "10")],
                    judge: false,
                },
                nccl_info(&[("${inputs.min_busbw}", "10")]),
            ],
        ),
        (
            ("eks-p4d.toml", "nvidia_smi"),
            vec![
                Sample {
                    path: "providers/src/metrics/testdata/h100-2026-11-27/nvidia-smi.txt",
                    lines: None,
                    source: "nvidia-smi recorded on an H100 (driver 580.159.04, CUDA 13.0)",
                    values: &[
                        ("driver_version", "\"580.159.04\""),
                        ("cuda_version", "13.0"),
                    ],
                    absent: &[],
                    whole: true,
                    fill: &[],
                    judge: true,
                },
                Sample {
                    path: "providers/src/metrics/testdata/h200-2026-11-28/nvidia-smi.txt",
                    lines: None,
                    source: "nvidia-smi recorded on an H200 (driver 580.159.04, CUDA 13.0)",
                    values: &[
                        ("driver_version", "\"580.159.04\""),
                        ("cuda_version", "13.0"),
                    ],
                    absent: &[],
                    whole: true,
                    fill: &[],
                    judge: true,
                },
            ],
        ),
        (
            ("eks-p4d.toml", "nccl"),
            vec![nccl_info(&[("${vars.min_busbw}", "10")])],
        ),
        (
            ("eks-p4d.toml", "train"),
            vec![Sample {
                path: LLAMA_RECIPES,
                lines: None,
                source: "llama-recipes finetuning.py (aws-do-fsdp) run by torchrun on an H200",
                values: &[
                    ("train_epoch_loss", "2.6553"),
                    ("loss", "2.507986545562744"),
                    ("loss_first", "6.327173709869385"),
                ],
                absent: &[],
                whole: true,
                fill: &[],
                judge: true,
            }],
        ),
        (
            ("torchrec-eks.toml", "train"),
            vec![Sample {
                path: "providers/src/metrics/testdata/torchrec-dlrm-cpu.txt",
                lines: None,
                source: "TorchRec's DLRM example run on 2 CPU ranks with random data",
                values: &[("auroc", "0.5013654828071594")],
                absent: &[],
                whole: true,
                fill: &[("${vars.min_auroc}", "0.75")],
                judge: false, // random data: an AUROC of 0.5 fails the gate, as it should
            }],
        ),
        (
            ("hyperpod-cpu-ddp.toml", "train"),
            vec![
                Sample {
                    path: "../shared/seeds/hyperpod-cpu-ddp.md",
                    lines: Some((219, 238)),
                    source: "the runbook's `kubectl logs -f fsdp-worker-0` (mid-run: no last epoch to judge)",
                    values: &[("last_epoch", "4992"), ("last_snapshot_epoch", "4990")],
                    absent: &[],
                    whole: false,
                    fill: &[("${vars.epochs}", "5000"), ("${vars.epochs - 1}", "4999")],
                    judge: false,
                },
                Sample {
                    path: CPU_DDP,
                    lines: None,
                    source: "the runbook's ddp.py run as published, 20 epochs",
                    values: &[("last_epoch", "19"), ("last_snapshot_epoch", "10")],
                    absent: &[],
                    whole: true,
                    fill: &[("${vars.epochs}", "20"), ("${vars.epochs - 1}", "19")],
                    judge: true,
                },
                Sample {
                    path: CPU_DDP_RESUMED,
                    lines: None,
                    source: "the same, resumed from its snapshot at epoch 10",
                    values: &[("last_epoch", "19"), ("last_snapshot_epoch", "10")],
                    absent: &[],
                    whole: true,
                    fill: &[("${vars.epochs}", "20"), ("${vars.epochs - 1}", "19")],
                    judge: true,
                },
            ],
        ),
        (
            ("gpu-host-check.toml", "gpu"),
            vec![
                Sample {
                    path: "providers/src/metrics/testdata/h100-2026-11-27/nvidia-smi-q.txt",
                    lines: None,
                    source: "nvidia-smi -q recorded on an H100 (driver 580.159.04)",
                    values: &[("gpus", "1"), ("max_temperature_c", "33")],
                    absent: &[],
                    whole: true,
                    fill: &[("${vars.gpus}", "1"), ("${vars.max_temperature_c}", "85")],
                    judge: true,
                },
                Sample {
                    path: "providers/src/metrics/testdata/h200-2026-11-28/nvidia-smi-q.txt",
                    lines: None,
                    source: "nvidia-smi -q recorded on an H200 (driver 580.159.04)",
                    values: &[("gpus", "1"), ("max_temperature_c", "34")],
                    absent: &[],
                    whole: true,
                    fill: &[("${vars.gpus}", "1"), ("${vars.max_temperature_c}", "85")],
                    judge: true,
                },
            ],
        ),
        (
            ("gpu-host-check.toml", "nccl"),
            vec![
                Sample {
                    path: "providers/src/metrics/testdata/h100-2026-11-27/nccl-allreduce.txt",
                    lines: None,
                    source: "nccl-tests 2.19.6 all_reduce_perf -b 8 -e 1G -f 2 -g 1 recorded on one H100",
                    values: &[("busbw", "0.0"), ("out_of_bounds", "0")],
                    absent: &[],
                    whole: true,
                    fill: &[("${vars.min_busbw}", "0")],
                    judge: true,
                },
                Sample {
                    path: "providers/src/metrics/testdata/h200-2026-11-28/nccl-allreduce.txt",
                    lines: None,
                    source: "nccl-tests 2.19.6 all_reduce_perf -b 8 -e 1G -f 2 -g 1 recorded on one H200",
                    values: &[
                        ("busbw", "0.0"),
                        ("out_of_bounds", "0"),
                        ("algbw_peak", "2123.8"),
                    ],
                    absent: &[],
                    whole: true,
                    fill: &[("${vars.min_busbw}", "0")],
                    judge: true,
                },
            ],
        ),
        (
            ("pcluster-p5.toml", "nccl"),
            vec![Sample {
                path: H100_NCCL_INFO,
                lines: None,
                source: "nccl-tests 2.19.6 all_reduce_perf recorded on one H100 with NCCL_DEBUG=INFO",
                values: &[
                    ("busbw", "0"),
                    ("out_of_bounds", "0"),
                    ("transport", "\"socket\""),
                ],
                absent: &[],
                whole: true,
                fill: &[],
                judge: false, // one GPU, no EFA: transport == efa fails there, as it should
            }],
        ),
        (
            ("pcluster-p5.toml", "train"),
            vec![Sample {
                path: CPU_DDP,
                lines: None,
                source: "the runbook's ddp.py run as published, 20 epochs",
                values: &[("last_epoch", "19")],
                absent: &[],
                whole: true,
                fill: &[("${vars.epochs}", "20"), ("${vars.epochs - 1}", "19")],
                judge: true,
            }],
        ),
    ]
}

const RULES: [&str; 4] = ["success_pattern", "capture", "parse", "expect"];

/// The rules of every step of the shipped workflows that has any:
/// (file under workflows/, step) → its inputs, as written.
fn shipped() -> BTreeMap<(String, String), Values> {
    let dir = root().join("workflows");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("workflows/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    for m in std::fs::read_dir(dir.join("modules")).expect("workflows/modules/") {
        let name = m.unwrap().file_name().into_string().unwrap();
        files.push(format!("modules/{name}/main.toml"));
    }
    let mut out = BTreeMap::new();
    for file in files {
        let source = std::fs::read_to_string(dir.join(&file)).unwrap();
        let doc: toml::Table = toml::from_str(&source).unwrap_or_else(|e| panic!("{file}: {e}"));
        let steps = doc.get("steps").and_then(|s| s.as_table());
        for (step, body) in steps.into_iter().flatten() {
            let inputs = serde_json::to_value(&body["inputs"]).unwrap();
            let rules: Values = inputs
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| RULES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !rules.is_empty() {
                out.insert((file.clone(), step.clone()), rules);
            }
        }
    }
    out
}

/// `rules` with every `${…}` replaced by `fill`'s value; one `fill` does
/// not name fails the test.
fn filled(rules: &Values, fill: &[(&str, &str)], at: &str) -> Values {
    fn walk(v: &mut Value, fill: &[(&str, &str)], at: &str) {
        match v {
            Value::String(text) => {
                for (expr, value) in fill {
                    *text = text.replace(expr, value);
                }
                assert!(!text.contains("${"), "{at}: fill `{text}` in the sample");
            }
            Value::Object(m) => m.values_mut().for_each(|v| walk(v, fill, at)),
            _ => {}
        }
    }
    let mut out = rules.clone();
    out.values_mut().for_each(|v| walk(v, fill, at));
    out
}

/// Holds one step's rules to one sample; the error says what did not hold.
fn hold(rules: &Values, sample: &Sample, at: &str) -> Result<(), String> {
    let at = format!("{at} on {} ({})", sample.path, sample.source);
    let output = text(sample.path, sample.lines);
    let rules = &filled(rules, sample.fill, &at);
    let mut reading = rules.clone();
    let gates = reading.remove("expect");
    if !sample.whole {
        reading.remove("success_pattern");
    }
    let m = Matchers::from_values(&reading).map_err(|p| format!("{at}: {}", p.message))?;
    let found = m.check(&output).map_err(|e| format!("{at}: {e}"))?;
    let gated = gates.as_ref().and_then(Value::as_object);
    for name in gated.into_iter().flat_map(|g| g.keys()) {
        let absent = sample.absent.iter().any(|(n, _)| n == name);
        if found.contains_key(name) == absent {
            return Err(format!(
                "{at}: gate `{name}`'s value is {}",
                if absent {
                    "there, though the sample says it is not"
                } else {
                    "not in the program's output"
                }
            ));
        }
    }
    for (name, want) in sample.values {
        let want: Value = serde_json::from_str(want).unwrap();
        if found.get(*name) != Some(&want) {
            return Err(format!("{at}: {name} = {:?}, not {want}", found.get(*name)));
        }
    }
    if sample.judge {
        let m = Matchers::from_values(rules).map_err(|p| format!("{at}: {}", p.message))?;
        m.check(&output).map_err(|e| format!("{at}: {e}"))?;
    }
    Ok(())
}

#[test]
fn every_shipped_rule_holds_on_the_programs_published_output() {
    let shipped = shipped();
    let cases = cases();
    let mut failed = Vec::new();
    for ((file, step), rules) in &shipped {
        let at = format!("workflows/{file} step {step}");
        let Some((_, samples)) = cases.iter().find(|((f, s), _)| f == file && s == step) else {
            failed.push(format!(
                "{at}: no published output holds its rules {rules:?}"
            ));
            continue;
        };
        for sample in samples {
            if let Err(e) = hold(rules, sample, &at) {
                failed.push(e);
            }
        }
    }
    for ((file, step), _) in &cases {
        if !shipped.contains_key(&(file.to_string(), step.to_string())) {
            failed.push(format!(
                "workflows/{file} step {step}: has samples but no rules"
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The controls: rules that do not fit what the program prints fail.
#[test]
fn rules_that_do_not_fit_the_published_output_fail() {
    let ddp = text(CPU_DDP, None);
    let rules = |v: Value| v.as_object().unwrap().clone();
    // Before issue 44: epochs counted from 1, as flow's rewrite of ddp.py did.
    let old = rules(serde_json::json!({"success_pattern": r"\[RANK 0\] Epoch 20 \|"}));
    let e = Matchers::from_values(&old)
        .unwrap()
        .check(&ddp)
        .unwrap_err();
    assert!(e.to_string().contains("never matched"), "{e}");
    // A run that stopped before its last epoch fails the gate.
    let shipped = shipped();
    let train = &shipped[&("hyperpod-cpu-ddp.toml".into(), "train".into())];
    let fill: &[(&str, &str)] = &[("${vars.epochs - 1}", "24")];
    let m = Matchers::from_values(&filled(train, fill, "control")).unwrap();
    let e = m.check(&ddp).unwrap_err().to_string();
    assert!(e.contains("last_epoch") && e.contains("24"), "{e}");
    // A program that prints no epoch line: the capture names its pattern.
    let other = text(LLAMA_RECIPES, None);
    let e = m.check(&other).unwrap_err().to_string();
    assert!(
        e.contains("capture `last_epoch`") && e.contains("first lines: I1128 08:50:27"),
        "{e}"
    );
}

/// The vendored ddp.py is the runbook's, byte for byte.
#[test]
fn the_vendored_training_program_is_unchanged() {
    use sha2::Digest;
    let dir = root().join("workflows/docker/cpu-ddp");
    let source = std::fs::read_to_string(dir.join("SOURCE")).unwrap();
    let recorded = source
        .lines()
        .find_map(|l| l.strip_prefix("sha256"))
        .map(str::trim)
        .expect("SOURCE names a sha256");
    let bytes = std::fs::read(dir.join("ddp.py")).unwrap();
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), recorded);
}
