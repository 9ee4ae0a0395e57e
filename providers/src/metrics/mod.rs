//! The output of the programs the runbooks run, read into typed values that
//! gates can judge: nccl-tests (the results table, the average bus
//! bandwidth, the out-of-bounds count), torchrun training logs (loss per
//! step, throughput), TorchRec's DLRM example (AUROC) and nvidia-smi's GPU
//! health (temperatures, ECC counts, row remaps, clocks). A job step asks
//! for one with `parse = "nccl-tests"`; its values become outputs, next to
//! what `capture` takes with regexes. The formats each reader follows are
//! named in its module, and `testdata/SOURCES` says where the real outputs
//! its tests read were published.

pub mod gate;
mod nccl;
mod nvidia_smi;
mod tags;
mod torchrec;
mod torchrun;
mod transport;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::contract::Values;

/// What a value is, as far as a gate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A number.
    Number,
    /// A table of numbers (message size → bandwidths, step → loss).
    Table,
    /// Text.
    Text,
}

impl Kind {
    /// The kind of a value as found.
    pub fn of(value: &Value) -> Kind {
        match value {
            Value::Number(_) => Kind::Number,
            Value::Object(_) | Value::Array(_) => Kind::Table,
            _ => Kind::Text,
        }
    }

    /// How an error names it.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Number => "a number",
            Kind::Table => "a table of numbers",
            Kind::Text => "text",
        }
    }
}

/// A program whose output flow reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// NVIDIA's nccl-tests (`all_reduce_perf` and the other `*_perf`).
    NcclTests,
    /// A training script started by torchrun (the FSDP test case, the
    /// llama-recipes fine-tuning script).
    Torchrun,
    /// TorchRec's DLRM example.
    Torchrec,
    /// `nvidia-smi -q` or `nvidia-smi --query-gpu=… --format=csv`: a GPU
    /// health check.
    NvidiaSmi,
}

/// One value a program's reader gives: its name, kind and meaning.
#[derive(Debug, Clone, Copy)]
pub struct OutputSpec {
    /// The output's name.
    pub name: &'static str,
    /// What it is.
    pub kind: Kind,
    /// What it means, for the docs and errors.
    pub about: &'static str,
}

impl Program {
    /// Every program, in the order the docs list them.
    pub const ALL: [Program; 4] = [
        Program::NcclTests,
        Program::Torchrun,
        Program::Torchrec,
        Program::NvidiaSmi,
    ];

    /// The program `parse` names (`"nccl-tests"`).
    pub fn from_name(name: &str) -> Option<Program> {
        Program::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Its name in `parse`.
    pub fn name(self) -> &'static str {
        match self {
            Program::NcclTests => "nccl-tests",
            Program::Torchrun => "torchrun",
            Program::Torchrec => "torchrec",
            Program::NvidiaSmi => "nvidia-smi",
        }
    }

    /// Where output `name` of its reader comes from, for the error of a
    /// value not found (`nccl-tests's output`).
    pub fn source_of(self, name: &str) -> String {
        match (self, name) {
            (Program::NcclTests, "transport") => format!(
                "{}'s output, which prints `NCCL INFO` network lines only with NCCL_DEBUG=INFO,",
                self.name()
            ),
            (Program::NvidiaSmi, "gpus") => format!("{}'s output", self.name()),
            (Program::NvidiaSmi, _) => format!(
                "{}'s output, where a GPU that prints `N/A` or `[Not Supported]` for a field it needs, or a query without that field, gives none,",
                self.name()
            ),
            _ => format!("{}'s output", self.name()),
        }
    }

    /// The outputs its reader gives.
    pub fn outputs(self) -> &'static [OutputSpec] {
        match self {
            Program::NcclTests => nccl::OUTPUTS,
            Program::Torchrun => torchrun::OUTPUTS,
            Program::Torchrec => torchrec::OUTPUTS,
            Program::NvidiaSmi => nvidia_smi::OUTPUTS,
        }
    }

    /// Reads `text`, the job's whole output.
    pub fn read(self, text: &str) -> Result<Reading, Unreadable> {
        // A progress bar redraws its line after `\r`: each drawing is a line.
        let lines: Vec<&str> = text.split(['\n', '\r']).map(tags::strip).collect();
        let reading = match self {
            Program::NcclTests => nccl::read(&lines),
            Program::Torchrun => torchrun::read(&lines),
            Program::Torchrec => torchrec::read(&lines),
            Program::NvidiaSmi => nvidia_smi::read(&lines),
        };
        let mut reading = reading.ok_or_else(|| Unreadable {
            program: self,
            head: text.lines().take(5).map(str::to_string).collect(),
        })?;
        // Output flow's local cloud made up says so: the run is labelled.
        if let Some(note) = lines
            .iter()
            .find_map(|l| l.trim_start().strip_prefix(EMULATED))
        {
            let note = format!("{}{note}", EMULATED.trim_start_matches("# "));
            reading.put("emulated", serde_json::Value::String(note.clone()), &note);
        }
        Ok(reading)
    }
}

/// The first line of output flow's local cloud emulates
/// (`scripts/local-cloud/batch_compute.py`); a reading of it gets an
/// `emulated` value holding the line.
pub const EMULATED: &str = "# flow local cloud: emulated";

/// What a reader found: values by output name, and for each the line of
/// the output it came from (shown when a gate fails).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The values.
    pub values: Values,
    /// The line each value was read from.
    pub lines: BTreeMap<String, String>,
}

impl Reading {
    fn put(&mut self, name: &str, value: Value, line: &str) {
        self.values.insert(name.to_string(), value);
        self.lines.insert(name.to_string(), line.trim().to_string());
    }
}

/// Output a reader found nothing of its program's in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the output is not {} output ({}); its first lines:\n{}", .program.name(), .program.expected(), shown(.head))]
pub struct Unreadable {
    /// The program it was read as.
    pub program: Program,
    /// The output's first 5 lines.
    pub head: Vec<String>,
}

impl Program {
    /// What its reader looks for, for [`Unreadable`].
    fn expected(self) -> &'static str {
        match self {
            Program::NcclTests => "no results table under a `#  size  count  type …  busbw` header",
            Program::Torchrun => {
                "no `Batch N Loss: X`, `step N/M completed (loss: X)` or `[RANK 0] Epoch N | … | Loss: X` line"
            }
            Program::Torchrec => "no `AUROC over STAGE set: X` line",
            Program::NvidiaSmi => {
                "no `nvidia-smi -q` GPU section, no `--format=csv` header naming the query's fields (`csv,noheader` cannot be read) with a row under it, and no `No devices were found`"
            }
        }
    }
}

fn shown(head: &[String]) -> String {
    if head.is_empty() {
        return "  (the output is empty)".into();
    }
    head.iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A float as a JSON number (finite ones only).
fn number(f: f64) -> Option<Value> {
    serde_json::Number::from_f64(f).map(Value::Number)
}

/// A sample of real output: `testdata/NAME`, or with `../` a file of the
/// workspace (the local cloud's emulated outputs).
#[cfg(test)]
fn sample(name: &str) -> String {
    let path = match name.strip_prefix("../") {
        Some(rest) => format!("{}/../{rest}", env!("CARGO_MANIFEST_DIR")),
        None => format!("{}/src/metrics/testdata/{name}", env!("CARGO_MANIFEST_DIR")),
    };
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_named_as_parse_names_them() {
        for p in Program::ALL {
            assert_eq!(Program::from_name(p.name()), Some(p));
        }
        assert_eq!(Program::from_name("nccl"), None);
    }

    #[test]
    fn output_the_local_cloud_made_up_is_labelled_emulated() {
        let text = format!(
            "{EMULATED} all_reduce_perf on p5.48xlarge\n{}",
            sample("nccl-tests-batch-efa.txt")
        );
        let r = Program::NcclTests.read(&text).unwrap();
        assert_eq!(
            r.values["emulated"],
            "flow local cloud: emulated all_reduce_perf on p5.48xlarge"
        );
        let real = Program::NcclTests
            .read(&sample("nccl-tests-batch-efa.txt"))
            .unwrap();
        assert!(!real.values.contains_key("emulated"));
    }

    #[test]
    fn output_of_another_program_shows_its_first_five_lines() {
        let text = "a\nb\nc\nd\ne\nf\n";
        let e = Program::NcclTests.read(text).unwrap_err();
        assert_eq!(e.head, ["a", "b", "c", "d", "e"]);
        let said = e.to_string();
        assert!(said.contains("not nccl-tests output"), "{said}");
        assert!(said.contains("  | e") && !said.contains("  | f"), "{said}");
        let empty = Program::Torchrec.read("").unwrap_err().to_string();
        assert!(empty.contains("(the output is empty)"), "{empty}");
    }
}
