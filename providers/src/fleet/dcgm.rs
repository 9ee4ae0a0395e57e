//! What a node's `dcgmi diag -r LEVEL` table says: each test's result
//! (`Pass`, `Fail`, `Warn`, `Skip`, with dcgmi's ` - All` or ` - GPU: 3`
//! after it), and the `Error`/`Warning` rows under a test, whose text dcgmi
//! wraps over continuation rows with an empty first column. The check of
//! `check.dcgm`: a test that fails makes the node bad, with the test's row
//! and its error as evidence (providers/src/fleet/testdata/ holds a
//! published table).

/// What a check script prints where the node has no `dcgmi` (the shipped
/// workflows/slurm/node-health.sbatch does): DCGM's tests are then skipped,
/// not failed, as issue 40 asks ("where dcgmi exists").
pub const SKIPPED: &str = "flow: dcgmi not found";

/// One test of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Test {
    /// Its name (`PCIe`, `GPU Memory`).
    pub name: String,
    /// Its result as printed (`Fail - GPU: 3`).
    pub result: String,
    /// What the `Error` and `Warning` rows under it say, joined.
    pub detail: String,
    /// Its row, as printed.
    pub line: String,
}

impl Test {
    /// Whether dcgmi says it failed.
    pub fn failed(&self) -> bool {
        self.result.starts_with("Fail")
    }
}

/// The cells of a table line: `| name | result |` → (name, result). The
/// result keeps its leading spaces but the one of the column's margin:
/// dcgmi wraps a long message at the column's width, mid-word, so a space
/// at the start of a continuation is part of the text.
fn cells(line: &str) -> Option<(&str, &str)> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let (name, result) = inner.split_once('|')?;
    // Section rules (`|-----  Deployment  ----+----|`) are not rows.
    if name.trim_start().starts_with("---") {
        return None;
    }
    let result = result.strip_prefix(' ').unwrap_or(result).trim_end();
    Some((name.trim(), result))
}

/// The tests of the `dcgmi diag` table in `text` (the check job's whole
/// output), in order; `None` when it holds no such table (dcgmi did not run,
/// or its output is not a diag table).
pub fn read(text: &str) -> Option<Vec<Test>> {
    let start = text
        .lines()
        .position(|l| cells(l).is_some_and(|(n, r)| n == "Diagnostic" && r == "Result"))?;
    let mut tests: Vec<Test> = Vec::new();
    let mut metadata = false;
    for line in text.lines().skip(start + 1) {
        let trimmed = line.trim();
        if trimmed.starts_with("|-----") || trimmed.starts_with("+-----") {
            metadata = trimmed.contains("Metadata");
            continue;
        }
        if trimmed.starts_with("+===") || trimmed.starts_with("+---") {
            continue;
        }
        let Some((name, result)) = cells(line) else {
            break;
        };
        match name {
            "" | "Error" | "Warning" | "Info" => {
                if let Some(last) = tests.last_mut() {
                    // dcgmi cuts a long message at the column's width.
                    last.detail.push_str(result);
                    if name.is_empty() {
                        continue;
                    }
                }
            }
            _ if metadata => {}
            _ => tests.push(Test {
                name: name.to_string(),
                result: result.trim().to_string(),
                detail: String::new(),
                line: trimmed.to_string(),
            }),
        }
    }
    Some(tests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSED: &str = include_str!("testdata/dcgmi-diag-r2-p4de.txt");

    #[test]
    fn the_published_table_reads_every_test_passed() {
        let tests = read(PASSED).expect("a diag table");
        let names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Denylist",
                "NVML Library",
                "CUDA Main Library",
                "Permissions and OS Blocks",
                "Persistence Mode",
                "Environment Variables",
                "Page Retirement/Row Remap",
                "Graphics Processes",
                "Inforom",
                "PCIe",
                "GPU Memory"
            ]
        );
        assert!(tests.iter().all(|t| !t.failed()));
        assert_eq!(tests[9].result, "Pass - All");
    }

    #[test]
    fn a_failed_test_keeps_its_row_and_its_wrapped_error() {
        let failed = PASSED.replace(
            "| PCIe                      | Pass - All                                     |\n",
            "| PCIe                      | Fail - GPU: 3                                  |\n\
             | Error                     | GPU 3 NvLink 5 is down: expected 12 links up, fo |\n\
             |                           | und 11                                         |\n",
        );
        let tests = read(&failed).unwrap();
        let bad: Vec<&Test> = tests.iter().filter(|t| t.failed()).collect();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].name, "PCIe");
        assert_eq!(
            bad[0].detail,
            "GPU 3 NvLink 5 is down: expected 12 links up, found 11"
        );
        assert!(bad[0].line.starts_with("| PCIe"), "{}", bad[0].line);
        assert_eq!(tests.last().unwrap().name, "GPU Memory");
    }

    #[test]
    fn output_without_a_table_reads_none() {
        assert_eq!(read("dcgmi: command not found\n"), None);
        assert_eq!(read("+------+\n| a | b |\n"), None);
    }
}
