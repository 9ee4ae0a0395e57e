//! Slurm's own commands, driven as a user would: `sbatch --parsable` to
//! submit, `scontrol show job -o` to follow (every Slurm since 2.x prints
//! it, and it expands the output file's name), `sacct` for a job the
//! controller has forgotten, `scancel` to stop one.

use std::collections::BTreeMap;

use super::remote::{Ran, Remote};
use crate::contract::ProviderError;

/// The `--comment` flow gives a job: `flow:` + the operation token, which
/// finds the job again after a crash.
pub(crate) fn token_comment(token: &str) -> String {
    format!("flow:{token}")
}

/// One line of `scontrol show job -o`: a job, or one task (or a range of
/// pending tasks) of an array job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobLine {
    fields: BTreeMap<String, String>,
}

impl JobLine {
    /// A field's value (`JobState`, `ExitCode`, `StdOut`, …), when present
    /// and not Slurm's `(null)`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty() && *v != "(null)")
    }

    /// The job's state (`RUNNING`, `COMPLETED`, …), without a `+` suffix.
    pub fn state(&self) -> &str {
        self.get("JobState")
            .map_or("UNKNOWN", |s| s.split(['+', ' ']).next().unwrap_or(s))
    }

    /// The id a user would name this line by: `ARRAY_TASK` for an array task, else the job id.
    pub fn label(&self) -> String {
        match (self.get("ArrayJobId"), self.get("ArrayTaskId")) {
            (Some(a), Some(t)) => format!("{a}_{t}"),
            _ => self.get("JobId").unwrap_or("?").to_string(),
        }
    }

    /// The exit code as Slurm writes it (`0:0`, `1:0`, `0:9`).
    pub fn exit_code(&self) -> &str {
        self.get("ExitCode").unwrap_or("0:0")
    }

    /// Sets a field (the output file worked out for a line accounting gave).
    pub fn set(&mut self, key: &str, value: String) {
        self.fields.insert(key.to_string(), value);
    }
}

/// States a job never leaves.
pub(crate) fn finished(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "OUT_OF_MEMORY"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// What a finished state means, for the step's failure message.
pub(crate) fn meaning(state: &str) -> &'static str {
    match state {
        "FAILED" => "the script exited with a non-zero code",
        "CANCELLED" => "it was cancelled (scancel, or an administrator)",
        "TIMEOUT" => "it ran past its time limit (--time)",
        "OUT_OF_MEMORY" => "a process was killed for using more memory than allowed",
        "NODE_FAIL" => "a node it ran on failed",
        "PREEMPTED" => "a job of higher priority took its nodes",
        "BOOT_FAIL" => "its nodes did not boot",
        "DEADLINE" => "it could not finish before its --deadline",
        _ => "it did not complete",
    }
}

/// The lines of `scontrol show job -o` output, parsed. A value may hold
/// spaces (a `Reason`, a path): a word is a new field only when it reads
/// `Key=`, with `Key` a letter followed by letters, digits, `_`, `/` or `:`.
pub(crate) fn parse_jobs(text: &str) -> Vec<JobLine> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("JobId="))
        .map(|line| {
            let mut fields = BTreeMap::new();
            let mut current: Option<String> = None;
            for word in line.split(' ').filter(|w| !w.is_empty()) {
                match field_start(word) {
                    Some((key, value)) => {
                        fields.insert(key.to_string(), value.to_string());
                        current = Some(key.to_string());
                    }
                    None => {
                        if let Some(v) = current.as_ref().and_then(|k| fields.get_mut(k)) {
                            v.push(' ');
                            v.push_str(word);
                        }
                    }
                }
            }
            JobLine { fields }
        })
        .collect()
}

/// `(key, value)` when `word` starts a field.
fn field_start(word: &str) -> Option<(&str, &str)> {
    let (key, value) = word.split_once('=')?;
    let mut chars = key.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | ':')))
    .then_some((key, value))
}

/// Submits `script` (on standard input) with `args`; the job id.
pub(crate) async fn submit(
    remote: &Remote,
    args: &[String],
    script: &str,
) -> Result<String, ProviderError> {
    let mut argv = vec!["sbatch", "--parsable"];
    argv.extend(args.iter().map(String::as_str));
    let ran = remote.run(&argv, Some(script.as_bytes())).await?;
    if !ran.ok() {
        let why = ran.complaint();
        // A timeout talking to the controller may have queued the job all
        // the same; anything else sbatch says is a refusal.
        let err = if why.contains("timed out") || why.contains("Unable to contact") {
            ProviderError::retryable(format!("sbatch on {}: {why}", remote.describe()))
        } else {
            ProviderError::not_created(format!("sbatch on {} refused the job: {why}", remote.describe()))
                .with_help("fix the script's #SBATCH lines or the step's sbatch options; `sbatch --test-only SCRIPT` on the cluster shows what it would do")
        };
        return Err(err);
    }
    let id = ran
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().split(';').next().unwrap_or("").to_string())
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            ProviderError::fatal(format!(
                "sbatch on {} printed no job id: {:?}",
                remote.describe(),
                ran.stdout.trim()
            ))
        })?;
    Ok(id)
}

/// The controller's lines for job `id` (one per array task or range), or
/// `None` when it no longer knows the id.
pub(crate) async fn show(remote: &Remote, id: &str) -> Result<Option<Vec<JobLine>>, ProviderError> {
    let ran = remote
        .run(&["scontrol", "show", "job", "-o", id], None)
        .await?;
    if ran.ok() {
        return Ok(Some(parse_jobs(&ran.stdout)));
    }
    if ran.complaint().contains("Invalid job id") {
        return Ok(None);
    }
    Err(controller_error(remote, "scontrol show job", &ran))
}

/// The id of the job (the array's id, for an array) whose comment is
/// `comment`, among the jobs the controller knows.
pub(crate) async fn find_by_comment(
    remote: &Remote,
    comment: &str,
) -> Result<Option<String>, ProviderError> {
    let ran = remote.run(&["scontrol", "show", "job", "-o"], None).await?;
    if !ran.ok() {
        if ran.complaint().contains("No jobs in the system") {
            return Ok(None);
        }
        return Err(controller_error(remote, "scontrol show job", &ran));
    }
    Ok(parse_jobs(&ran.stdout)
        .into_iter()
        .find(|j| j.get("Comment") == Some(comment))
        .and_then(|j| j.get("ArrayJobId").or(j.get("JobId")).map(str::to_string)))
}

/// The id of the job (the array's id) whose comment is `comment` among
/// those accounting recorded in the last 30 days, for a job the controller
/// has forgotten. Accounting keeps comments only with
/// `AccountingStoreFlags=job_comment`; without it, or without accounting,
/// `None`.
pub(crate) async fn accounted_by_comment(
    remote: &Remote,
    comment: &str,
) -> Result<Option<String>, ProviderError> {
    let Some(out) = sacct(remote, &["-S", "now-30days"], "JobID,Comment").await? else {
        return Ok(None);
    };
    Ok(out.lines().find_map(|l| {
        let (job, text) = l.split_once('|')?;
        (text == comment).then(|| job.split('_').next().unwrap_or(job).to_string())
    }))
}

/// What `sacct` prints for the jobs `select` chooses, one line per job
/// (`-X`), without a header, fields `fields` separated by `|`; `None` when
/// accounting is off or refuses.
async fn sacct(
    remote: &Remote,
    select: &[&str],
    fields: &str,
) -> Result<Option<String>, ProviderError> {
    let mut args = vec!["sacct", "-X", "-n", "-P"];
    args.extend_from_slice(select);
    args.extend(["-o", fields]);
    let ran = remote.run(&args, None).await?;
    Ok(ran.ok().then_some(ran.stdout))
}

/// The fields asked of `sacct`, in order, each with the `scontrol` name it
/// is kept under (so a [`JobLine`] reads the same from both); `WorkDir`
/// last, as the one that may hold the separator.
const ACCOUNTED: [(&str, &str); 8] = [
    ("JobID", "JobId"),
    ("JobIDRaw", "JobIDRaw"),
    ("JobName", "JobName"),
    ("User", "User"),
    ("State", "JobState"),
    ("ExitCode", "ExitCode"),
    ("NodeList", "NodeList"),
    ("WorkDir", "WorkDir"),
];

/// Job `id` as accounting recorded it (`sacct`), for a job the controller
/// has forgotten (no `StdOut` there: see `output_path`); `None` when
/// accounting is off or does not know it.
pub(crate) async fn accounted(
    remote: &Remote,
    id: &str,
) -> Result<Option<Vec<JobLine>>, ProviderError> {
    let fields: Vec<&str> = ACCOUNTED.iter().map(|(sacct, _)| *sacct).collect();
    let Some(out) = sacct(remote, &["-j", id], &fields.join(",")).await? else {
        return Ok(None);
    };
    let lines: Vec<JobLine> = out.lines().filter_map(accounted_line).collect();
    Ok((!lines.is_empty()).then_some(lines))
}

/// One line of `sacct -P` output with the [`ACCOUNTED`] fields.
fn accounted_line(line: &str) -> Option<JobLine> {
    let values: Vec<&str> = line.splitn(ACCOUNTED.len(), '|').collect();
    if values.len() < ACCOUNTED.len() {
        return None;
    }
    let fields = ACCOUNTED
        .iter()
        .zip(values)
        .map(|((_, key), v)| (key.to_string(), v.to_string()))
        .collect();
    Some(JobLine { fields })
}

/// Cancels job `id` (every task of an array).
pub(crate) async fn cancel(remote: &Remote, id: &str) -> Result<(), ProviderError> {
    let ran = remote.run(&["scancel", id], None).await?;
    if ran.ok() || ran.complaint().contains("Invalid job id") {
        return Ok(());
    }
    Err(controller_error(remote, "scancel", &ran))
}

/// A Slurm command that failed: the controller may be busy or restarting,
/// so it is worth asking again.
fn controller_error(remote: &Remote, what: &str, ran: &Ran) -> ProviderError {
    ProviderError::retryable(format!(
        "{what} on {} failed: {}",
        remote.describe(),
        ran.complaint()
    ))
    .with_help("check that slurmctld is up (`scontrol ping` on the cluster)")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as Slurm 22.05 prints them (`scontrol show job -o`), shortened.
    const DONE: &str = "JobId=7 JobName=nccl UserId=root(0) JobState=COMPLETED Reason=None Dependency=(null) ExitCode=0:0 NodeList=vm Comment=flow:tok-1 StdOut=/fsx/logs/nccl 7.out WorkDir=/fsx";
    const ARRAY: &str = "JobId=9 ArrayJobId=8 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 StdOut=/tmp/a_8_1.out\nJobId=8 ArrayJobId=8 ArrayTaskId=2-3 JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0";

    #[test]
    fn scontrol_lines_parse_with_spaces_in_values() {
        let jobs = parse_jobs(DONE);
        assert_eq!(jobs.len(), 1);
        let j = &jobs[0];
        assert_eq!(j.state(), "COMPLETED");
        assert_eq!(j.exit_code(), "0:0");
        assert_eq!(j.get("StdOut"), Some("/fsx/logs/nccl 7.out"));
        assert_eq!(j.get("Comment"), Some("flow:tok-1"));
        assert_eq!(j.get("Dependency"), None);
        assert_eq!(j.label(), "7");
        let tasks = parse_jobs(ARRAY);
        assert_eq!(tasks[0].label(), "8_1");
        assert_eq!(tasks[1].label(), "8_2-3");
        assert!(finished(tasks[0].state()) && !finished(tasks[1].state()));
        let plus = parse_jobs("JobId=3 JobState=CANCELLED+ Reason=None");
        assert_eq!(plus[0].state(), "CANCELLED");
        assert!(parse_jobs("slurm_load_jobs error: Invalid job id specified").is_empty());
    }

    #[test]
    fn accounting_lines_keep_a_separator_in_the_working_folder() {
        let l = accounted_line("12_3|15|nccl|root|OUT_OF_MEMORY|0:125|node1|/fsx/a|b").unwrap();
        assert_eq!(l.label(), "12_3");
        assert_eq!(l.state(), "OUT_OF_MEMORY");
        assert_eq!(l.get("JobIDRaw"), Some("15"));
        assert_eq!(l.get("WorkDir"), Some("/fsx/a|b"));
        assert!(accounted_line("12|FAILED").is_none());
    }

    #[test]
    fn finished_states_have_a_meaning() {
        for s in [
            "FAILED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "NODE_FAIL",
            "PREEMPTED",
            "BOOT_FAIL",
            "DEADLINE",
        ] {
            assert!(finished(s));
            assert_ne!(meaning(s), "it did not complete");
        }
        assert!(!finished("RUNNING") && !finished("PENDING") && !finished("COMPLETING"));
    }
}
