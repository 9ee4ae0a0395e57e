//! Policy `replace` of a `slurm.job`'s restarts: the nodes a failed
//! attempt found bad (NODE_FAIL, or the step's check) drained, then
//! replaced by their platform through [`crate::slurm::replacement`] (the
//! code `slurm.node_check` replaces with), and waited for until they are in
//! service, before the next attempt is submitted.
//!
//! Each replacement is recorded in the attempt, in the step's id, before
//! anything is touched (the node, its instance), before and after the
//! platform is asked, and once the new node is in service (its instance
//! and name). A resume (kill -9 of flow anywhere) carries the recorded
//! replacements on: a node is asked for once (the platform's old instance
//! tells whether the call went out), never found bad again by a guess (the
//! replaced node is gone from the job's cluster), and a replacement done
//! is not waited for again.

use super::fault::{self, Suspects};
use super::spec::{Recorded, Spec, encode};
use crate::contract::{OpContext, ProviderError};
use crate::slurm::nodes;
use crate::slurm::remote::Remote;
use crate::slurm::replacement::{self, Replacing, Through};

/// The suspects of an attempt whose replacements were recorded before a
/// kill: its bad nodes, each with why, as they were found.
pub(super) fn suspects_of(replacing: &[Replacing]) -> Suspects {
    Suspects {
        nodes: replacing.iter().map(|r| r.node.clone()).collect(),
        bad: replacing
            .iter()
            .map(|r| (r.node.clone(), r.reason.clone()))
            .collect(),
        pointed: Vec::new(),
    }
}

/// What the attempt's record says of one replacement:
/// `gpu-3 (i-0a) by ip-10-1-0-9 (i-0b)`.
pub(super) fn said(r: &Replacing) -> String {
    match &r.by {
        Some((instance, node)) => format!("{} ({}) by {node} ({instance})", r.node, r.instance_id),
        None => format!("{} ({}): not in service yet", r.node, r.instance_id),
    }
}

/// Where a step's job runs and what it asks of the replacement.
pub(super) struct Replacer<'a> {
    /// The operation.
    pub ctx: &'a OpContext,
    /// Where Slurm's commands run.
    pub remote: &'a Remote,
    /// The step's restart inputs.
    pub spec: &'a Spec,
    /// The platform that replaces.
    pub through: &'a Through,
    /// The job's partition, where new nodes are looked for.
    pub partition: Option<String>,
}

impl Replacer<'_> {
    /// Replaces the `bad` nodes of attempt `at` (job `job`, which started
    /// at `started`, seconds since the epoch), carrying on what `recorded`
    /// holds of it already, or `already` (those the platform replaced on
    /// its own, to wait for): drained (unless the platform was asked
    /// already), replaced once, each new node waited for; every step
    /// durable in the step's id. The replacements, each with its new node.
    pub async fn replace(
        &self,
        recorded: &mut [Recorded],
        at: usize,
        job: &str,
        bad: &[(String, String)],
        started: Option<u64>,
        already: Vec<Replacing>,
    ) -> Result<Vec<Replacing>, ProviderError> {
        let ctx = self.ctx;
        if recorded[at].replacing.is_empty() && !already.is_empty() {
            for r in &already {
                ctx.reporter.event(&format!(
                    "node {}: {}: waiting for it in service",
                    r.node, r.reason
                ));
            }
            recorded[at].replacing = already;
            ctx.checkpoint.made(&encode(recorded)).await?;
        } else if recorded[at].replacing.is_empty() {
            let names: Vec<String> = bad.iter().map(|(n, _)| n.clone()).collect();
            let reason_of = |n: &str| {
                bad.iter()
                    .find(|(b, _)| b == n)
                    .map_or(String::new(), |(_, why)| why.clone())
            };
            recorded[at].replacing = replacement::instances_of(
                ctx,
                self.remote,
                self.through,
                &names,
                reason_of,
                started,
            )
            .await?;
            // Durable before any node is touched.
            ctx.checkpoint.made(&encode(recorded)).await?;
        } else {
            ctx.reporter.event(&format!(
                "resuming the replacement of {}",
                recorded[at]
                    .replacing
                    .iter()
                    .map(|r| format!("{} ({})", r.node, r.instance_id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let pending: Vec<Replacing> = recorded[at]
            .replacing
            .iter()
            .filter(|r| r.by.is_none())
            .cloned()
            .collect();
        if pending.is_empty() {
            return Ok(recorded[at].replacing.clone());
        }
        // Drained first, as slurm.node_check does: Slurm starts nothing
        // there while the platform replaces it. A node the platform was
        // asked for already may be gone from Slurm: it is not touched.
        let listed = nodes::list(self.remote, None).await?;
        let to_drain: Vec<(String, String)> = pending
            .iter()
            .filter(|r| !r.sent && listed.iter().any(|l| l.name == r.node))
            .map(|r| (r.node.clone(), r.reason.clone()))
            .collect();
        fault::drain(ctx, self.remote, job, &to_drain, &listed).await?;
        let base: Vec<Recorded> = recorded.to_vec();
        let record = |now: Vec<Replacing>| {
            let mut rec = base.clone();
            for r in rec[at].replacing.iter_mut() {
                if let Some(n) = now.iter().find(|n| n.node == r.node) {
                    *r = n.clone();
                }
            }
            async move { ctx.checkpoint.made(&encode(&rec)).await }
        };
        let (sent, done) = replacement::replace(
            ctx,
            self.remote,
            self.through,
            self.partition.as_deref(),
            pending,
            self.spec.replace_timeout,
            record,
        )
        .await?;
        for r in recorded[at].replacing.iter_mut() {
            if let Some(s) = sent.iter().find(|s| s.node == r.node) {
                r.sent = s.sent;
            }
            if let Some(d) = done.iter().find(|d| d.was.node == r.node) {
                r.by = Some((d.instance_id.clone(), d.node.name.clone()));
            }
        }
        // Durable once in service: a resume neither asks nor waits again.
        ctx.checkpoint.made(&encode(recorded)).await?;
        Ok(recorded[at].replacing.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_replacement_tells_its_bad_node_and_its_new_one() {
        let mut r = Replacing {
            node: "ip-a".into(),
            instance_id: "i-old".into(),
            group: "worker-group-1".into(),
            since: 1,
            sent: true,
            reason: "NODE_FAIL: Slurm ended the job for node ip-a".into(),
            by: None,
        };
        assert_eq!(said(&r), "ip-a (i-old): not in service yet");
        r.by = Some(("i-new".into(), "ip-b".into()));
        assert_eq!(said(&r), "ip-a (i-old) by ip-b (i-new)");
        let s = suspects_of(std::slice::from_ref(&r));
        assert_eq!(s.named(), ["ip-a"]);
        assert_eq!(s.said(), "NODE_FAIL: Slurm ended the job for node ip-a");
    }
}
