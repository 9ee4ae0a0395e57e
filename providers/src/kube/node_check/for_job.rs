//! What `kube.job`'s restarts borrow of the node check: the `check` job
//! run alone on each suspect node of a failed attempt and judged as the
//! fleet's nodes are, and the policy's hand on the nodes found bad
//! (cordoned, tainted and drained; with `replace`, their instances
//! terminated through their Auto Scaling groups, desired count kept, and
//! the new nodes waited for), by the same code as `kube.node_check`'s, so
//! a resumed run cordons nothing twice and terminates no instance twice
//! ([`Replacement`] is what the job step keeps to take a replacement up).

use std::collections::BTreeMap;
use std::time::Duration;

use ::kube::Client;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use super::asg::Aws;
use super::jobs::Batch;
pub(in crate::kube) use super::jobs::pod_templates;
pub(in crate::kube) use super::resume::Replacement;
use super::spec::Spec;
use super::{Member, Run, instances, policy, replace, resume};
use crate::contract::{OpContext, ProviderError};
use crate::fleet::spec::Common;

/// Runs `common`'s check on each of `nodes` alone, all at once (the jobs
/// named with `prefix`), and returns each node's verdict.
pub(in crate::kube) async fn check(
    ctx: &OpContext,
    client: &Client,
    namespace: &str,
    common: &Common,
    nodes: &[Node],
    prefix: String,
) -> Result<BTreeMap<String, Value>, ProviderError> {
    let mut verdicts = BTreeMap::new();
    let Some(table) = &common.check else {
        return Ok(verdicts);
    };
    let run = Run {
        ctx,
        spec: Spec {
            nodes: String::new(),
            common: common.clone(),
            drain_timeout: Duration::ZERO,
            replace_timeout: Duration::ZERO,
        },
        batch: Batch {
            ctx,
            client: client.clone(),
            namespace: namespace.to_string(),
        },
        members: nodes.iter().map(Member::of).collect(),
        prefix,
    };
    run.check(table, &mut verdicts).await?;
    Ok(verdicts)
}

/// A node found bad, to take out.
#[derive(Debug, Clone)]
pub(in crate::kube) struct Bad {
    /// The node as the cluster has it (`None`: it is gone already).
    pub node: Option<Node>,
    /// Its name.
    pub name: String,
    /// A short reason, for the taint's value.
    pub short: String,
    /// The whole evidence, for the node's annotation.
    pub reason: String,
}

/// What the policy did.
#[derive(Debug, Clone, Default)]
pub(in crate::kube) struct TakenOut {
    /// The nodes cordoned (and tainted, drained).
    pub cordoned: Vec<String>,
    /// Policy replace: the replacement prepared, its instances not yet
    /// terminated ([`replace`] does that).
    pub replacement: Option<Replacement>,
}

/// Cordons, taints and drains each of `bad` that still exists; with
/// `replace`, marks each as being replaced first and returns what
/// [`replace`] then does: its instance terminated through its Auto Scaling
/// group. A node with no instance in a group fails before any is touched.
pub(in crate::kube) async fn take_out(
    ctx: &OpContext,
    client: &Client,
    bad: &[Bad],
    replacing: bool,
    drain_timeout: Duration,
) -> Result<TakenOut, ProviderError> {
    let mut out = TakenOut::default();
    let present: Vec<&Bad> = bad.iter().filter(|b| b.node.is_some()).collect();
    for b in bad.iter().filter(|b| b.node.is_none()) {
        ctx.reporter.event(&format!(
            "node {} is gone from the cluster: nothing to cordon",
            b.name
        ));
    }
    if present.is_empty() {
        return Ok(out);
    }
    let members: Vec<Member> = present
        .iter()
        .filter_map(|b| b.node.as_ref().map(Member::of))
        .collect();
    let aws = match replacing {
        true => Some(Aws::new(ctx).await?),
        false => None,
    };
    let located = match &aws {
        Some(aws) => {
            let refs: Vec<&Member> = members.iter().collect();
            replace::locate(&refs, &aws.groups_of(&instances(&refs)).await?)?
        }
        None => Vec::new(),
    };
    for b in &present {
        policy::cordon(ctx, client, &b.name, &b.short, &b.reason).await?;
        out.cordoned.push(b.name.clone());
    }
    for r in &located {
        replace::mark(client, r).await?;
    }
    policy::drain(ctx, client, &out.cordoned, drain_timeout).await?;
    let Some(aws) = aws else {
        return Ok(out);
    };
    out.replacement = Some(Replacement::of(&aws, located, None).await?);
    Ok(out)
}

/// Carries `r` out ([`resume::carry_out`]): per old node, `node`,
/// `instance`, `group`, `new_node`.
pub(in crate::kube) async fn replace(
    ctx: &OpContext,
    client: &Client,
    r: &Replacement,
    replace_timeout: Duration,
) -> Result<Vec<Value>, ProviderError> {
    let aws = Aws::new(ctx).await?;
    let (replaced, _) = resume::carry_out(ctx, client, &aws, r, replace_timeout).await?;
    for r in &replaced {
        ctx.reporter.event(&format!(
            "node {} replaced: {}",
            r["node"].as_str().unwrap_or("?"),
            json!(r["new_node"])
        ));
    }
    Ok(replaced)
}
