//! Where a job writes its standard output, worked out as sbatch decides it,
//! for a job only accounting still knows: `sacct` (Slurm 22.05) has no
//! `StdOut` field, while `scontrol show job` gives the path only until the
//! controller forgets the job (`MinJobAge`). The pattern is the `--output`
//! on sbatch's command line (the step's `output` input or its
//! `sbatch_args`), else the script's `#SBATCH --output`/`-o` line, else
//! Slurm's default, `slurm-%j.out` (`slurm-%A_%a.out` for an array), and a
//! relative one is in the job's working folder. The replacement symbols
//! are sbatch's "filename pattern" (`man sbatch`): `%%`, `%A`, `%a`, `%j`,
//! `%x`, `%u`, `%N`, each with an optional zero-padding width (`%3a`).

use super::control::JobLine;

/// A job's `--output` pattern; `None` for Slurm's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OutputPattern {
    pattern: Option<String>,
}

impl OutputPattern {
    /// The pattern sbatch uses for a job submitted with `args` (command
    /// line options, which win) and `script`.
    pub fn of(args: &[String], script: &str) -> OutputPattern {
        let from_args = option_value(args.iter().map(String::as_str));
        let from_script = || option_value(header_options(script).iter().map(String::as_str));
        OutputPattern {
            pattern: from_args.or_else(from_script),
        }
    }

    /// The file `line` (a job or array task as `sacct` lists it, with
    /// `JobIDRaw`, `JobName`, `User`, `NodeList` and `WorkDir`) writes to;
    /// `None` when the pattern names something the line does not tell.
    pub fn expand(&self, line: &JobLine) -> Option<String> {
        let label = line.get("JobId")?;
        let (array_id, task) = match label.split_once('_') {
            Some((a, t)) => (a, Some(t)),
            None => (label, None),
        };
        let default = if task.is_some() {
            "slurm-%A_%a.out"
        } else {
            "slurm-%j.out"
        };
        let mut out = String::new();
        let mut chars = self
            .pattern
            .as_deref()
            .unwrap_or(default)
            .chars()
            .peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let mut width = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                width.push(*d);
                chars.next();
            }
            let symbol = chars.next()?;
            let value = match symbol {
                '%' => "%".to_string(),
                'j' => line.get("JobIDRaw").unwrap_or(label).to_string(),
                'A' => array_id.to_string(),
                'a' => task?.to_string(),
                'x' => line.get("JobName")?.to_string(),
                'u' => line.get("User")?.to_string(),
                // The first node, when the list names one plainly.
                'N' => line
                    .get("NodeList")
                    .map(|n| n.split(',').next().unwrap_or(n))
                    .filter(|n| !n.contains('['))?
                    .to_string(),
                _ => return None,
            };
            let width: usize = width.parse().unwrap_or(0);
            out.push_str(&format!("{value:0>width$}"));
        }
        if out.starts_with('/') {
            return Some(out);
        }
        let workdir = line.get("WorkDir")?;
        Some(format!("{}/{out}", workdir.trim_end_matches('/')))
    }
}

/// The options of the script's `#SBATCH` lines, split into words; sbatch
/// reads them until the first line that is neither a comment nor blank.
fn header_options(script: &str) -> Vec<String> {
    script
        .lines()
        .map(str::trim)
        .take_while(|l| l.is_empty() || l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("#SBATCH"))
        .flat_map(|rest| {
            // A `#` after the options starts a comment.
            let rest = rest.split(" #").next().unwrap_or(rest);
            rest.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The last `--output` value among `words` (`--output=P`, `--output P`,
/// `-o P`, `-oP`), as sbatch takes the last one given.
fn option_value<'a>(words: impl Iterator<Item = &'a str>) -> Option<String> {
    let words: Vec<&str> = words.collect();
    let mut found = None;
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if let Some(v) = w.strip_prefix("--output=") {
            found = Some(v);
        } else if w == "--output" || w == "-o" {
            found = words.get(i + 1).copied();
            i += 1;
        } else if let Some(v) = w.strip_prefix("-o").filter(|v| !v.is_empty()) {
            found = Some(v);
        }
        i += 1;
    }
    found.map(|v| v.trim_matches(|c| c == '"' || c == '\'').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::control::parse_jobs;

    fn line(fields: &str) -> JobLine {
        parse_jobs(&format!("JobId={fields}")).remove(0)
    }

    #[test]
    fn the_command_line_wins_over_the_script_and_the_default_is_slurms() {
        let script = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --output=logs/%x_%j.out # where\nsrun x\n#SBATCH -o late.out\n";
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let of = |a: &[&str], script: &str| OutputPattern::of(&args(a), script).pattern;
        assert_eq!(of(&[], script).as_deref(), Some("logs/%x_%j.out"));
        assert_eq!(
            of(&["--comment=flow:t", "--output=o/%j"], script).as_deref(),
            Some("o/%j")
        );
        assert_eq!(of(&["-o", "a.out"], script).as_deref(), Some("a.out"));
        assert_eq!(
            of(&[], "#!/bin/sh\n#SBATCH -ojob.out\n").as_deref(),
            Some("job.out")
        );
        assert_eq!(of(&[], "#!/bin/sh\necho\n"), None);
        // Slurm's defaults, for a job and for an array task.
        let default = OutputPattern::default();
        assert_eq!(
            default.expand(&line("7 WorkDir=/w")).as_deref(),
            Some("/w/slurm-7.out")
        );
        assert_eq!(
            default
                .expand(&line("7_3 JobIDRaw=9 WorkDir=/w"))
                .as_deref(),
            Some("/w/slurm-7_3.out")
        );
    }

    #[test]
    fn patterns_expand_from_what_accounting_tells() {
        let job = line("41 JobIDRaw=41 JobName=nccl User=root NodeList=node1 WorkDir=/fsx/run/");
        let p = |s: &str| OutputPattern {
            pattern: Some(s.to_string()),
        };
        assert_eq!(
            p("logs/%x_%j.out").expand(&job).as_deref(),
            Some("/fsx/run/logs/nccl_41.out")
        );
        assert_eq!(
            p("/abs/%u-%N-%5j-100%%.log").expand(&job).as_deref(),
            Some("/abs/root-node1-00041-100%.log")
        );
        // No array task in a plain job; an unknown symbol; no WorkDir.
        assert_eq!(p("%a.out").expand(&job), None);
        assert_eq!(p("%t.out").expand(&job), None);
        assert_eq!(p("x.out").expand(&line("41 JobName=n")), None);
        let task = line("8_2 JobIDRaw=10 JobName=a WorkDir=/w NodeList=n[1-2]");
        assert_eq!(
            p("slurm-%A_%a.out").expand(&task).as_deref(),
            Some("/w/slurm-8_2.out")
        );
        assert_eq!(p("%j.out").expand(&task).as_deref(), Some("/w/10.out"));
        assert_eq!(p("%N.out").expand(&task), None);
    }
}
