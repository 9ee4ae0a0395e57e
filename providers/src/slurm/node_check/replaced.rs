//! What follows a replacement of `slurm.node_check`'s policy `replace`
//! ([`super::replace`]): the new nodes checked as the run checked the
//! others, each replacement as the `replaced` output lists it, and the end
//! of a run a kill -9 interrupted while it replaced.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::jobs::Batch;
use super::new_pairs::{Partners, pair_new_nodes};
use super::replace;
use super::spec::Spec;
use super::{Run, report};
use crate::contract::{Applied, OpContext, ProviderError, Values};
use crate::slurm::nodes::SlurmNode;
use crate::slurm::remote::Remote;
use crate::slurm::replacement::{self, Replaced, Replacing, Through};

/// What a replacement left: the step's id, the new nodes' verdicts, and
/// each replacement as the `replaced` output lists it.
pub(super) struct ReplacedAndChecked {
    /// The step's id, every replacement sent.
    pub id: String,
    /// The new nodes' verdicts.
    pub verdicts: BTreeMap<String, Value>,
    /// Each replacement, as the `replaced` output lists it.
    pub replaced: Vec<Value>,
}

/// The key of a new node's verdict: its name, or, where the node kept the
/// replaced one's name (ParallelCluster), `NAME@NEW-INSTANCE`, so that the
/// replaced node's verdict stays under its name.
fn verdict_key(d: &Replaced) -> String {
    if d.node.name == d.was.node {
        format!("{}@{}", d.node.name, d.instance_id)
    } else {
        d.node.name.clone()
    }
}

/// Replaces `replacing` through the cluster `through` names (asked for
/// once: see [`crate::slurm::replacement`]), waits for the new nodes, and
/// checks them: `check` alone, then, with `pairs`, in an NCCL pair with
/// one of `partners`.
pub(super) async fn replaced_and_checked(
    ctx: &OpContext,
    remote: &Remote,
    spec: &Spec,
    through: &Through,
    held: &[String],
    replacing: Vec<Replacing>,
    partners: Partners,
) -> Result<ReplacedAndChecked, ProviderError> {
    let record =
        |r: Vec<Replacing>| async move { ctx.checkpoint.made(&replace::encode(held, &r)).await };
    let (sent, done) = replacement::replace(
        ctx,
        remote,
        through,
        spec.partition.as_deref(),
        replacing,
        spec.replace_timeout,
        record,
    )
    .await?;
    let id = replace::encode(held, &sent);
    let members: Vec<SlurmNode> = done.iter().map(|d| d.node.clone()).collect();
    let mut verdicts = BTreeMap::new();
    let run = Run {
        ctx,
        batch: Batch {
            ctx,
            remote,
            partition: spec.partition.clone(),
        },
        members: members.clone(),
        spec: spec.clone(),
    };
    if let Some(table) = &spec.common.check {
        let mut checked = BTreeMap::new();
        run.check(table, &members, &mut checked).await?;
        for d in &done {
            if let Some(v) = checked.remove(&d.node.name) {
                verdicts.insert(verdict_key(d), v);
            }
        }
    }
    if let Some(table) = &spec.common.pairs {
        let new: Vec<(String, String)> = done
            .iter()
            .map(|d| (d.node.name.clone(), verdict_key(d)))
            .collect();
        pair_new_nodes(&run, table, &new, &partners, &mut verdicts).await?;
    }
    let replaced = done
        .iter()
        .map(|d| {
            let verdict = verdicts.get(&verdict_key(d));
            json!({
                "node": d.was.node,
                "instance_id": d.was.instance_id,
                "by": d.node.name,
                "by_instance_id": d.instance_id,
                "status": verdict.map_or(json!("unchecked"), |v| v["status"].clone()),
                "reason": verdict.map_or(json!("the step has no `check`: the new node runs no job"), |v| v["reason"].clone()),
            })
        })
        .collect();
    Ok(ReplacedAndChecked {
        id,
        verdicts,
        replaced,
    })
}

/// Fails naming each new node whose check was not healthy (it stays in
/// Slurm, undrained: another replacement is the user's call).
pub(super) fn replacements_healthy(replaced: &[Value]) -> Result<(), ProviderError> {
    let bad: Vec<String> = replaced
        .iter()
        .filter(|r| r["status"] != "healthy" && r["status"] != "unchecked")
        .map(|r| {
            format!(
                "{} (replacing {}): {}: {}",
                r["by"].as_str().unwrap_or_default(),
                r["node"].as_str().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default(),
                r["reason"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(ProviderError::fatal(format!(
        "the replacement node's check failed: {}",
        bad.join("; ")
    ))
    .with_help("the new node is in Slurm and not drained; apply again to check the fleet, which drains and replaces it under policy `replace`"))
}

/// A resume (kill -9 of flow) of a run whose id records replacements:
/// they are carried to the end (sent only where HyperPod had not taken
/// the node) and the new nodes checked, as the run would have.
pub(super) async fn resume_replacing(
    ctx: &OpContext,
    inputs: &Values,
    id: &str,
) -> Result<Applied, ProviderError> {
    let spec = Spec::from_values(inputs)?;
    let remote = Remote::from_inputs(inputs, &ctx.workdir)?;
    let (held, replacing) = replace::decode(id);
    let Some(through) = spec.replace_through.clone() else {
        return Err(ProviderError::fatal(format!(
            "the run that drained {} was replacing them, but the step no longer has policy `replace` and `hyperpod_cluster` or `pcluster_cluster`",
            held.join(", ")
        )));
    };
    ctx.reporter.event(&format!(
        "resuming the replacement of {}",
        replacing
            .iter()
            .map(|r| format!("{} ({})", r.node, r.instance_id))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // The replaced nodes' verdicts as the killed run recorded them (`by`
    // and reason), then the new nodes': every verdict of the run, in its
    // history too.
    let mut verdicts: BTreeMap<String, Value> = replacing
        .iter()
        .map(|r| {
            let (by, reason) = r.reason.split_once(": ").unwrap_or(("check", &r.reason));
            let v = report::verdict("bad", by, reason.to_string(), json!({}));
            (r.node.clone(), v)
        })
        .collect();
    // The nodes to pair a new one with: those Slurm can run a job on that
    // were not replaced (this run measured none healthy).
    let partners = Partners {
        nodes: crate::slurm::nodes::list(&remote, spec.partition.as_deref())
            .await?
            .into_iter()
            .filter(|n| n.usable() && !held.contains(&n.name))
            .map(|n| n.name)
            .collect(),
        ..Partners::default()
    };
    let done =
        replaced_and_checked(ctx, &remote, &spec, &through, &held, replacing, partners).await?;
    verdicts.extend(done.verdicts);
    report::record(ctx, &verdicts);
    let names: Vec<String> = verdicts.keys().cloned().collect();
    let mut outputs = report::outputs(&names, &verdicts, 0, "drained", &held);
    outputs.insert("skipped".into(), json!([]));
    outputs.insert("replaced".into(), json!(done.replaced));
    replacements_healthy(&done.replaced)?;
    Ok(Applied {
        id: Some(done.id),
        outputs,
        private: json!({}),
    })
}
