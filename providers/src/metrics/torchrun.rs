//! Training logs of scripts torchrun starts, in the two forms the runbooks'
//! test cases print:
//!
//! - the FSDP test case's `train.py` (awsome-distributed-training,
//!   `3.test_cases/pytorch/FSDP/src/train.py`), through the logging format
//!   of `model_utils/train_utils.py`:
//!   `2025-06-20 14:17:10 I [train.py:103] Batch 90 Loss: 7.24291, Speed: 9.41 samples/sec, lr: 0.000010`;
//! - llama-recipes' `finetuning.py` (the EKS, HyperPod and Batch
//!   fine-tuning cases), whose tqdm bar's description formats the loss
//!   (`src/llama_recipes/utils/train_utils.py`:
//!   `completed (loss: {loss.detach().float()})`, a one-element tensor that
//!   f-strings print as its number):
//!   `Training Epoch: 1/3, step 35/36 completed (loss: 2.507986545562744)`,
//!   one description after another on one line, `\r` between them;
//! - the DDP test case's `ddp.py` (`3.test_cases/pytorch/ddp/ddp.py`), one
//!   line per epoch and rank:
//!   `[RANK 0] Epoch 3 | Batchsize: 64 | Steps: 188 | Loss: 9.386539676022664e-08`,
//!   of which rank 0's are read (every rank prints its own), the epoch as
//!   the step.
//!
//! Throughput in tokens is read where a script prints it (`1234.5 tokens/s`,
//! `tokens/sec`).

use regex_lite::Regex;
use serde_json::{Value, json};

use super::{Kind, OutputSpec, Reading, number};

/// What the reader gives.
pub(super) const OUTPUTS: &[OutputSpec] = &[
    OutputSpec {
        name: "loss",
        kind: Kind::Number,
        about: "the last loss logged",
    },
    OutputSpec {
        name: "loss_first",
        kind: Kind::Number,
        about: "the first loss logged",
    },
    OutputSpec {
        name: "losses",
        kind: Kind::Table,
        about: "every loss logged, as `[step, loss]` pairs in the log's order",
    },
    OutputSpec {
        name: "samples_per_s",
        kind: Kind::Number,
        about: "the mean of the logged `Speed: X samples/sec`",
    },
    OutputSpec {
        name: "tokens_per_s",
        kind: Kind::Number,
        about: "the mean of the logged `X tokens/s`",
    },
];

/// A number as Python prints a float (`0.5`, `9.38e-08`, `0.0`, `7`): no
/// more, so that a line run into the next (`Loss: 0.5Epoch 10 | ...`, two
/// ranks writing to one pipe) still reads `0.5`.
const FLOAT: &str = r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?";

struct Patterns {
    fsdp: Regex,
    recipes: Regex,
    ddp: Regex,
    tokens: Regex,
}

fn patterns() -> &'static Patterns {
    static P: std::sync::OnceLock<Patterns> = std::sync::OnceLock::new();
    P.get_or_init(|| Patterns {
        fsdp: Regex::new(&format!(
            r"Batch (\d+) Loss: ({FLOAT})(?:, Speed: ({FLOAT}) samples/sec)?"
        ))
        .expect("valid"),
        // finetuning.py formats a one-element tensor, which prints as its
        // number (`(loss: 2.507986545562744)`, recorded on an H200); the
        // tensor's repr (`(loss: tensor(1.6624, device='cuda:0'))`) reads too.
        recipes: Regex::new(&format!(
            r"step (\d+)/\d+ completed \(loss: (?:tensor\()?({FLOAT})[,)]"
        ))
        .expect("valid"),
        ddp: Regex::new(&format!(
            r"\[RANK 0\] Epoch (\d+) \| Batchsize: \d+ \| Steps: \d+ \| Loss: ({FLOAT})"
        ))
        .expect("valid"),
        tokens: Regex::new(r"([0-9]+(?:\.[0-9]+)?)\s*tokens/s(?:ec)?\b").expect("valid"),
    })
}

fn mean(xs: &[f64]) -> Option<Value> {
    if xs.is_empty() {
        return None;
    }
    number(xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Reads every loss line and the throughput figures.
pub(super) fn read(lines: &[&str]) -> Option<Reading> {
    let p = patterns();
    let mut losses: Vec<(u64, f64, &str)> = Vec::new();
    let mut samples = Vec::new();
    let mut tokens = Vec::new();
    let (mut samples_line, mut tokens_line) = ("", "");
    for line in lines {
        if let Some(c) = p
            .fsdp
            .captures(line)
            .or_else(|| p.recipes.captures(line))
            .or_else(|| p.ddp.captures(line))
            && let (Ok(step), Ok(loss)) = (c[1].parse::<u64>(), c[2].parse::<f64>())
            && loss.is_finite()
        {
            losses.push((step, loss, line));
            if let Some(speed) = c.get(3).and_then(|s| s.as_str().parse::<f64>().ok()) {
                samples.push(speed);
                samples_line = line;
            }
        }
        if let Some(c) = p.tokens.captures(line)
            && let Ok(t) = c[1].parse::<f64>()
        {
            tokens.push(t);
            tokens_line = line;
        }
    }
    let (&(_, first, first_line), &(_, last, last_line)) = (losses.first()?, losses.last()?);
    let mut out = Reading::default();
    out.put("loss", number(last)?, last_line);
    out.put("loss_first", number(first)?, first_line);
    let pairs: Vec<Value> = losses.iter().map(|(s, l, _)| json!([s, l])).collect();
    out.put("losses", Value::Array(pairs), last_line);
    if let Some(m) = mean(&samples) {
        out.put("samples_per_s", m, samples_line);
    }
    if let Some(m) = mean(&tokens) {
        out.put("tokens_per_s", m, tokens_line);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::Program;
    use super::*;

    #[test]
    fn reads_the_fsdp_test_cases_published_log() {
        let r = Program::Torchrun
            .read(&super::super::sample("fsdp-train.txt"))
            .unwrap();
        assert_eq!(r.values["loss"], json!(7.50217));
        assert_eq!(r.values["loss_first"], json!(7.24291));
        assert_eq!(r.values["losses"][0], json!([90, 7.24291]));
        assert_eq!(r.values["losses"].as_array().unwrap().len(), 8);
        let speed = r.values["samples_per_s"].as_f64().unwrap();
        assert!((speed - 8.95625).abs() < 1e-9, "{speed}");
        assert!(!r.values.contains_key("tokens_per_s"));
        assert!(
            r.lines["loss"].contains("Batch 97 Loss: 7.50217"),
            "{:?}",
            r.lines
        );
    }

    #[test]
    fn reads_llama_recipes_steps_and_tokens() {
        let r = Program::Torchrun
            .read(&super::super::sample(
                "../scripts/local-cloud/outputs/finetuning.py.txt",
            ))
            .unwrap();
        assert_eq!(
            r.values["losses"],
            json!([[0, 2.0812], [99, 1.6624], [199, 1.5127], [306, 1.4419]])
        );
        let r = Program::Torchrun
            .read("step 1/2 completed (loss: 2.0)\n812.5 tokens/s\n787.5 tokens/sec\n")
            .unwrap();
        assert_eq!(r.values["tokens_per_s"], json!(800.0));
    }

    /// The runbooks' ddp.py, unmodified, on one H100 (testdata/h100-2026-11-27):
    /// killed after epoch 3's snapshot, then resumed from it.
    #[test]
    fn reads_the_ddp_test_cases_epochs_as_they_ran_on_a_gpu() {
        let first = Program::Torchrun
            .read(&super::super::sample("h100-2026-11-27/ddp-attempt1.txt"))
            .unwrap();
        assert_eq!(
            first.values["losses"],
            json!([
                [0, 0.04117797283594067],
                [1, 2.1430306800051853e-07],
                [2, 1.3400139794946596e-07],
                [3, 9.386539676022664e-08]
            ])
        );
        assert_eq!(
            first.lines["loss"],
            "[RANK 0] Epoch 3 | Batchsize: 64 | Steps: 188 | Loss: 9.386539676022664e-08"
        );
        let resumed = Program::Torchrun
            .read(&super::super::sample("h100-2026-11-27/ddp-attempt2.txt"))
            .unwrap();
        let epochs: Vec<u64> = resumed.values["losses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| pair[0].as_u64().unwrap())
            .collect();
        assert_eq!(epochs, (3..12).collect::<Vec<u64>>(), "resumed at epoch 3");
        assert_eq!(resumed.values["loss"], json!(0.0));
        // Other ranks' lines are their own losses, not more steps.
        let two_ranks = "[RANK 1] Epoch 0 | Batchsize: 32 | Steps: 8 | Loss: 0.9\n\
                         [RANK 0] Epoch 0 | Batchsize: 32 | Steps: 8 | Loss: 0.5\n";
        assert_eq!(
            Program::Torchrun.read(two_ranks).unwrap().values["losses"],
            json!([[0, 0.5]])
        );
    }

    /// finetuning.py's tqdm bar as a real run printed it (llama-recipes'
    /// aws-do-fsdp branch under torchrun on an H200,
    /// tests/fixtures/published/llama-recipes/SOURCES): descriptions after
    /// `\r`, a step's description again at each redraw, three epochs of
    /// steps 0-35.
    #[test]
    fn reads_llama_recipes_losses_between_progress_bar_redraws() {
        let r = Program::Torchrun
            .read(&super::super::sample(
                "../tests/fixtures/published/llama-recipes/finetuning-h200.txt",
            ))
            .unwrap();
        let losses = r.values["losses"].as_array().unwrap();
        assert_eq!(losses[0], json!([0, 6.327173709869385]));
        assert_eq!(losses.last().unwrap(), &json!([35, 2.507986545562744]));
        assert_eq!(r.values["loss_first"], json!(6.327173709869385));
        assert_eq!(r.values["loss"], json!(2.507986545562744));
        assert!(
            r.lines["loss"]
                .starts_with("Training Epoch: 3/3, step 35/36 completed (loss: 2.507986545562744)"),
            "{}",
            r.lines["loss"]
        );
        // The tensor's repr, as an older sample had it, reads the same.
        let repr =
            "Training Epoch: 1/1, step 99/307 completed (loss: tensor(1.6624, device='cuda:0'))";
        assert_eq!(
            Program::Torchrun.read(repr).unwrap().values["losses"],
            json!([[99, 1.6624]])
        );
    }

    /// The `losses = "decreasing"` gate on the DDP test case's real runs
    /// (H100 and H200, killed after epoch 3) and on llama-recipes' (H200):
    /// it holds; a run whose loss went up fails it, naming the means.
    #[test]
    fn the_decreasing_gate_holds_on_the_real_runs_and_fails_a_rising_loss() {
        use crate::capture::Matchers;
        let gate = crate::testing::values(
            json!({"parse": "torchrun", "expect": {"losses": "decreasing"}}),
        );
        let m = Matchers::from_values(&gate).unwrap();
        for file in [
            "h100-2026-11-27/ddp-attempt1.txt",
            "h200-2026-11-28/ddp-attempt1.txt",
            "../tests/fixtures/published/llama-recipes/finetuning-h200.txt",
        ] {
            let text = super::super::sample(file);
            assert!(m.check(&text).is_ok(), "{file}: {:?}", m.check(&text).err());
        }
        let rising = "[RANK 0] Epoch 0 | Batchsize: 64 | Steps: 188 | Loss: 0.5\n\
                      [RANK 0] Epoch 1 | Batchsize: 64 | Steps: 188 | Loss: 0.7\n";
        let e = m.check(rising).unwrap_err().to_string();
        assert!(e.contains("not decreasing"), "{e}");
    }

    /// Two ranks writing to one pipe run lines together; a loss stops at
    /// the number.
    #[test]
    fn a_loss_run_into_the_next_line_reads_as_its_number() {
        let text = "[RANK 0] Epoch 0 | Batchsize: 32 | Steps: 8 | Loss: 0.5Epoch 0 | Training snapshot saved at /fsx/snapshot.pt\n\
                    [RANK 0] Epoch 1 | Batchsize: 32 | Steps: 8 | Loss: 2.5e-07[RANK 1] Epoch 1 | Batchsize: 32 | Steps: 8 | Loss: 0.1\n";
        assert_eq!(
            Program::Torchrun.read(text).unwrap().values["losses"],
            json!([[0, 0.5], [1, 2.5e-07]])
        );
    }

    #[test]
    fn a_log_without_losses_is_not_read() {
        assert!(Program::Torchrun.read("Epoch 1 | Batchsize: 32\n").is_err());
    }
}
