//! What a failed attempt's nodes get: the suspects named (NODE_FAIL's down
//! nodes, the nodes Xid and NCCL lines point at, else every node of the
//! job as unknown), the step's `check` run on those Slurm can still run a
//! job on (slurm.node_check's batch of pinned jobs, judged by the fleet's
//! rules), and the nodes found bad drained with flow's reason, once: a
//! node flow drained already (before a kill -9, say) is not drained again.

use serde_json::Value;

use crate::capture::Matchers;
use crate::contract::{OpContext, ProviderError, Values};
use crate::fleet;
use crate::fleet::suspects;
use crate::slurm::node_check::jobs::{Batch, Pinned, values_for};
use crate::slurm::nodes::{self, SlurmNode};
use crate::slurm::remote::Remote;
use crate::slurm::run::Seen;

use super::spec::Spec;

/// What a failed attempt says of its nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Suspects {
    /// Every node the job ran on.
    pub nodes: Vec<String>,
    /// Nodes found bad, each with why: NODE_FAIL's, and those whose check
    /// found them bad.
    pub bad: Vec<(String, String)>,
    /// Nodes its output points at (Xid, NCCL), each with why.
    pub pointed: Vec<(String, String)>,
}

impl Suspects {
    /// The nodes named suspect: those found bad or pointed at, else (none
    /// named) every node of the job.
    pub fn named(&self) -> Vec<String> {
        let mut out: Vec<String> = self.bad.iter().map(|(n, _)| n.clone()).collect();
        for (n, _) in &self.pointed {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Whether nothing named a node: every node of the job is unknown.
    pub fn unknown(&self) -> bool {
        self.bad.is_empty() && self.pointed.is_empty()
    }

    /// The suspects as the attempt's record says them.
    pub fn said(&self) -> String {
        let mut parts: Vec<String> = self.bad.iter().map(|(_, why)| why.clone()).collect();
        parts.extend(self.pointed.iter().map(|(_, why)| why.clone()));
        if parts.is_empty() {
            return format!(
                "no line names a node: {} unknown",
                if self.nodes.is_empty() {
                    "its nodes".to_string()
                } else {
                    self.nodes.join(", ")
                }
            );
        }
        parts.join("; ")
    }
}

/// The nodes of `seen` (its NodeList, expanded by Slurm).
async fn job_nodes(remote: &Remote, seen: &Seen) -> Result<Vec<String>, ProviderError> {
    let mut out: Vec<String> = Vec::new();
    for list in seen.lines.iter().filter_map(|l| l.get("NodeList")) {
        if list == "None assigned" {
            continue;
        }
        for n in nodes::expand(remote, list).await? {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

/// The reason flow drains a node of `step`'s job `job` with.
fn reason_for(step: &str, job: &str, why: &str) -> String {
    nodes::reason(&format!("{step} job {job}: {why}"))
}

/// The suspects of a failed attempt: with NODE_FAIL the job's nodes Slurm
/// lists down or not responding now (all of them, when it lists none so
/// and `all_when_none_down`; policy `replace` replaces only a node Slurm
/// names), found bad; the nodes `text` points at; and a node flow drained
/// already for this very job (before a kill -9), bad as it was found then.
pub(crate) async fn find(
    remote: &Remote,
    step: &str,
    seen: &Seen,
    text: &str,
    all_when_none_down: bool,
) -> Result<(Suspects, Vec<SlurmNode>), ProviderError> {
    let names = job_nodes(remote, seen).await?;
    let listed = nodes::list(remote, None).await?;
    let mut s = Suspects {
        pointed: suspects::pointed(text, &names)
            .into_iter()
            .map(|p| (p.node, p.why))
            .collect(),
        nodes: names,
        bad: Vec::new(),
    };
    if seen.state() == "NODE_FAIL" {
        let down: Vec<&SlurmNode> = listed
            .iter()
            .filter(|l| s.nodes.contains(&l.name) && !l.usable())
            .collect();
        let failed: Vec<String> = match (down.is_empty(), all_when_none_down) {
            (true, true) => s.nodes.clone(),
            (true, false) => Vec::new(),
            (false, _) => down.iter().map(|d| d.name.clone()).collect(),
        };
        s.bad = failed
            .into_iter()
            .map(|n| {
                let why = format!("NODE_FAIL: Slurm ended the job for node {n}");
                (n, why)
            })
            .collect();
    }
    let ours = reason_for(step, &seen.id, "");
    for l in listed.iter().filter(|l| s.nodes.contains(&l.name)) {
        if l.drained_by_flow()
            && l.reason.as_deref().is_some_and(|r| r.starts_with(&ours))
            && !s.bad.iter().any(|(b, _)| b == &l.name)
        {
            let why = format!(
                "found bad before: {}",
                l.reason.as_deref().unwrap_or_default()
            );
            s.bad.push((l.name.clone(), why));
        }
    }
    Ok((s, listed))
}

/// Runs the step's `check` on the suspects Slurm can run a job on (not
/// those found bad already, nor drained or down ones), all at once, and
/// adds those it finds bad to `s.bad`; each verdict goes to the log.
pub(crate) async fn check(
    ctx: &OpContext,
    remote: &Remote,
    spec: &Spec,
    attempt: u32,
    s: &mut Suspects,
    listed: &[SlurmNode],
    partition: Option<String>,
) -> Result<(), ProviderError> {
    let Some(table) = &spec.check else {
        return Ok(());
    };
    let wanted: Vec<&SlurmNode> = s
        .named()
        .iter()
        .chain(if s.unknown() {
            s.nodes.iter()
        } else {
            [].iter()
        })
        .filter(|n| !s.bad.iter().any(|(b, _)| b == *n))
        .filter_map(|n| listed.iter().find(|l| &l.name == n))
        .filter(|l| l.usable())
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
    ctx.reporter.event(&format!(
        "checking the suspect node{} of attempt {attempt}: {}",
        if names.len() == 1 { "" } else { "s" },
        names.join(", ")
    ));
    // The check jobs carry a comment of their own: the attempts' comments
    // find only the training's jobs.
    let mut check_ctx = ctx.clone();
    check_ctx.token = format!("{}-c{attempt}", ctx.token);
    let batch = Batch {
        ctx: &check_ctx,
        remote,
        partition,
    };
    let pinned: Vec<Pinned> = wanted
        .iter()
        .map(|w| Pinned {
            suffix: format!("check-{}", w.name),
            nodes: vec![w.name.clone()],
            values: values_for(std::slice::from_ref(&w.name)),
        })
        .collect();
    let matchers = Matchers::from_values(table)
        .map_err(|p| ProviderError::invalid(format!("check: {}", p.message)))?;
    let ran = batch.run(table, &pinned).await?;
    for (w, r) in wanted.iter().zip(ran) {
        let want = fleet::check::Wanted::of(
            &spec.rules,
            w.instance_type().ok_or(
                "no feature of the node names an instance type, as ParallelCluster's static,p4d.24xlarge,… do",
            ),
        );
        let v = fleet::check::judge(&r, &want, &matchers);
        let reason = v["reason"].as_str().unwrap_or_default().to_string();
        let status = v["status"].as_str().unwrap_or("unknown");
        ctx.reporter
            .event(&format!("check {}: {status}: {reason}", w.name));
        if status == "bad" {
            s.bad
                .push((w.name.clone(), format!("check on {}: {reason}", w.name)));
        }
    }
    Ok(())
}

/// Drains each node of `bad` (with why) that flow has not drained already,
/// the reason naming the step's job; the names, those drained before
/// included.
pub(crate) async fn drain(
    ctx: &OpContext,
    remote: &Remote,
    job: &str,
    bad: &[(String, String)],
    listed: &[SlurmNode],
) -> Result<Vec<String>, ProviderError> {
    let mut drained = Vec::new();
    for (node, why) in bad {
        let before = listed.iter().find(|l| &l.name == node);
        if before.is_some_and(SlurmNode::drained_by_flow) {
            ctx.reporter.event(&format!(
                "node {node} is drained by flow already: {}",
                before.and_then(|b| b.reason.as_deref()).unwrap_or_default()
            ));
        } else {
            let reason = reason_for(&ctx.step, job, why);
            nodes::drain(remote, node, &reason).await?;
            ctx.reporter
                .event(&format!("drained node {node}: {reason}"));
        }
        drained.push(node.clone());
    }
    Ok(drained)
}

/// When the job of `seen` started, in seconds since the epoch: its
/// `StartTime`, which Slurm prints in the local time of the machine its
/// commands run on, read by `date` there; `None` when Slurm gives none or
/// `date` cannot read it.
pub(crate) async fn started_at(remote: &Remote, seen: &Seen) -> Option<u64> {
    let start = seen
        .lines
        .iter()
        .filter_map(|l| l.get("StartTime"))
        .find(|t| t.contains('T'))?
        .to_string();
    let ran = remote
        .run(&["date", "-d", &start, "+%s"], None)
        .await
        .ok()?;
    ran.ok().then(|| ran.stdout.trim().parse().ok()).flatten()
}

/// The newest entry of `dir` on the cluster (by modification time, `find`
/// run where Slurm's commands run: here, or over SSH); `None` when it is
/// empty or not there yet.
pub(crate) async fn newest_checkpoint(
    remote: &Remote,
    dir: &str,
) -> Result<Option<String>, ProviderError> {
    let ran = remote
        .run(
            &[
                "find",
                dir,
                "-mindepth",
                "1",
                "-maxdepth",
                "1",
                "-printf",
                "%T@ %p\\n",
            ],
            None,
        )
        .await?;
    if !ran.ok() {
        // A folder the first attempt never made: nothing to resume from.
        if ran.complaint().contains("No such file") {
            return Ok(None);
        }
        return Err(ProviderError::retryable(format!(
            "could not list the checkpoints in {dir} on {}: {}",
            remote.describe(),
            ran.complaint()
        )));
    }
    Ok(suspects::newest(&ran.stdout))
}

/// The partition input, for the check jobs.
pub(crate) fn partition(values: &Values) -> Option<String> {
    values
        .get("partition")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspects_say_what_named_them_or_that_none_did() {
        let mut s = Suspects {
            nodes: vec!["gpu-1".into(), "gpu-2".into()],
            ..Suspects::default()
        };
        assert!(s.unknown());
        assert_eq!(s.said(), "no line names a node: gpu-1, gpu-2 unknown");
        s.pointed
            .push(("gpu-2".into(), "Xid 79 on gpu-2: …".into()));
        s.bad.push((
            "gpu-2".into(),
            "check on gpu-2: nvidia-smi lists 7 GPUs".into(),
        ));
        assert_eq!(s.named(), ["gpu-2"]);
        assert_eq!(
            s.said(),
            "check on gpu-2: nvidia-smi lists 7 GPUs; Xid 79 on gpu-2: …"
        );
        assert!(!s.unknown());
    }
}
