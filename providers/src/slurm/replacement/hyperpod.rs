//! Policy `replace` where the cluster is SageMaker HyperPod
//! (`hyperpod_cluster`): each bad node's instance (the node of the
//! cluster whose hostname Slurm names it by) replaced with
//! BatchReplaceClusterNodes, the new instance waited for until it is
//! `Running` and Slurm lists it.
//!
//! Every replacement is durable before and after its call (the step's
//! `record`: the node, its instance, its group, the time the call was
//! about to go out, `+` once HyperPod answered, and why the node was bad).
//! A resume (kill -9 of flow anywhere) sends the call only for a
//! replacement whose old instance is still `Running` (HyperPod had not
//! taken it), so one node is replaced once.

use std::time::Duration;

use tokio::time::Instant;

use super::{Replaced, Replacing, UNKNOWN, all_sent, claim, now};
use crate::aws::hyperpod::nodes::{self as cluster_nodes, Node};
use crate::contract::{OpContext, ProviderError};
use crate::slurm::nodes;
use crate::slurm::remote::Remote;

/// The instances of the bad `names` in HyperPod cluster `cluster`,
/// found by hostname, each with why it is bad (`reason_of`); an error
/// naming a node that is no instance of it. A node HyperPod is replacing
/// already, or has replaced, on its own (automatic node recovery:
/// [`taken_by_hyperpod`]) is recorded as asked for, so that it is waited
/// for and not asked again. `started` (a failed job's start, seconds since
/// the epoch) bounds when its new instance was launched.
pub(super) async fn instances_of(
    ctx: &OpContext,
    cluster: &str,
    names: &[String],
    reason_of: impl Fn(&str) -> String,
    started: Option<u64>,
) -> Result<Vec<Replacing>, ProviderError> {
    let listed = cluster_nodes::list(ctx, cluster).await?;
    let since = now();
    names
        .iter()
        .map(|name| {
            let live = listed
                .iter()
                .find(|n| n.short_name() == Some(name.as_str()) && n.status != "ShuttingDown");
            if let Some(n) = live {
                return Ok(Replacing {
                    node: name.clone(),
                    instance_id: n.instance_id.clone(),
                    group: n.group.clone(),
                    since,
                    sent: false,
                    reason: reason_of(name),
                    by: None,
                });
            }
            let taken = taken_by_hyperpod(&listed, name, started).ok_or_else(|| {
                ProviderError::fatal(format!(
                    "Slurm node {name} is no instance of HyperPod cluster `{cluster}`: none of its {} nodes has the hostname {name}",
                    listed.len()
                ))
                .with_help("check `hyperpod_cluster`: the nodes checked must be that cluster's (aws sagemaker list-cluster-nodes)")
            })?;
            ctx.reporter.event(&format!("node {name}: {}: not asking again, waiting for its new node", taken.1));
            Ok(Replacing {
                reason: reason_of(name),
                ..taken.0
            })
        })
        .collect()
}

/// Node `name` as HyperPod's own replacement left it (automatic node
/// recovery, `NodeRecovery = "Automatic"`: HyperPod replaces a faulty node
/// without being asked): its instance `ShuttingDown`, or no node of the
/// cluster with its hostname while one was launched since `started` (the
/// replacement done; its old instance unknown, [`UNKNOWN`], its group that
/// of any new node). The replacement, recorded as asked for, and what was
/// seen; `None` for a node that is not being replaced.
fn taken_by_hyperpod(
    listed: &[Node],
    name: &str,
    started: Option<u64>,
) -> Option<(Replacing, String)> {
    let leaving = listed
        .iter()
        .find(|n| n.short_name() == Some(name) && n.status == "ShuttingDown");
    let (instance_id, group, since, seen) = match leaving {
        Some(n) => (
            n.instance_id.clone(),
            n.group.clone(),
            started.unwrap_or(n.launched as u64 + 1),
            format!(
                "HyperPod is replacing it already ({} ShuttingDown)",
                n.instance_id
            ),
        ),
        None => {
            let started = started?;
            if listed.iter().any(|n| n.short_name() == Some(name))
                || !listed.iter().any(|n| n.launched + 2.0 >= started as f64)
            {
                return None;
            }
            (
                UNKNOWN.to_string(),
                String::new(),
                started,
                "HyperPod replaced it already (no node of the cluster has its hostname now)"
                    .to_string(),
            )
        }
    };
    let r = Replacing {
        node: name.to_string(),
        instance_id,
        group,
        since,
        sent: true,
        reason: String::new(),
        by: None,
    };
    Some((r, seen))
}

/// The nodes of `names` (a failed job's, which started at `started`)
/// HyperPod is replacing or has replaced on its own
/// ([`taken_by_hyperpod`]), each recorded as asked for with why: a
/// NODE_FAIL whose dead node Slurm no longer lists (HyperPod's replacement
/// takes it out of Slurm's configuration) is named so. None when no node
/// of `names` is a node of the cluster (not this cluster's job).
pub(super) async fn replaced_since(
    ctx: &OpContext,
    cluster: &str,
    names: &[String],
    started: u64,
) -> Result<Vec<Replacing>, ProviderError> {
    let listed = cluster_nodes::list(ctx, cluster).await?;
    let ours = names.iter().any(|name| {
        listed
            .iter()
            .any(|n| n.short_name() == Some(name.as_str()) && n.status == "Running")
    });
    if !ours {
        return Ok(Vec::new());
    }
    Ok(names
        .iter()
        .filter_map(|name| {
            let (r, seen) = taken_by_hyperpod(&listed, name, Some(started))?;
            Some(Replacing {
                reason: format!("NODE_FAIL: node {name}: {seen}: automatic node recovery"),
                ..r
            })
        })
        .collect())
}

/// Sends BatchReplaceClusterNodes for the replacements not known to be sent
/// (unless HyperPod already took their instance), recording each before
/// and after the call with `record` (the step's id); returns them all sent.
/// A node HyperPod refuses because it is no longer `Running` (its own
/// automatic node recovery took it between the look and the call) is
/// taken, not an error.
pub(super) async fn send<F, Fut>(
    ctx: &OpContext,
    cluster: &str,
    mut replacing: Vec<Replacing>,
    record: F,
) -> Result<Vec<Replacing>, ProviderError>
where
    F: Fn(Vec<Replacing>) -> Fut,
    Fut: std::future::Future<Output = Result<(), ProviderError>>,
{
    if replacing.iter().all(|r| r.sent) {
        return Ok(replacing);
    }
    let listed = cluster_nodes::list(ctx, cluster).await?;
    // Shutting down or gone: HyperPod took the call before the answer was
    // recorded, or replaces the node on its own.
    let ask = claim(
        ctx,
        &mut replacing,
        |r| {
            !listed
                .iter()
                .any(|n| n.instance_id == r.instance_id && n.status == "Running")
        },
        &record,
    )
    .await?;
    if !ask.is_empty() {
        let to_send: Vec<String> = ask
            .iter()
            .map(|&i| replacing[i].instance_id.clone())
            .collect();
        let refused = cluster_nodes::replace(ctx, cluster, &to_send).await?;
        let sent: Vec<&String> = to_send
            .iter()
            .filter(|id| !refused.iter().any(|f| &f.node_id == *id))
            .collect();
        if !sent.is_empty() {
            ctx.reporter.event(&format!(
                "BatchReplaceClusterNodes for {} of HyperPod cluster `{cluster}`",
                sent.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !refused.is_empty() {
            let now_listed = cluster_nodes::list(ctx, cluster).await?;
            let (taken, not): (Vec<_>, Vec<_>) = refused
                .iter()
                .partition(|f| !still_running(&now_listed, &f.node_id));
            if !not.is_empty() {
                return Err(ProviderError::fatal(format!(
                    "HyperPod would not replace {}",
                    not.iter().map(|f| f.said()).collect::<Vec<_>>().join("; ")
                ))
                .with_help("a node that is not Running (being rebooted, replaced or updated) cannot be replaced: look at it with `aws sagemaker describe-cluster-node`"));
            }
            for f in taken {
                ctx.reporter.event(&format!(
                    "HyperPod would not replace {}: it is replacing it already, not asking again",
                    f.said()
                ));
            }
        }
    }
    all_sent(replacing, &record).await
}

/// Whether `id` is a `Running` node of `listed`.
fn still_running(listed: &[Node], id: &str) -> bool {
    listed
        .iter()
        .any(|n| n.instance_id == id && n.status == "Running")
}

/// Waits until each replaced instance is gone and a new instance of its
/// group, launched after the call, is `Running`, then until Slurm lists
/// that node usable, at most `limit`; the new nodes, in the order of
/// `replacing`.
pub(super) async fn wait(
    ctx: &OpContext,
    remote: &Remote,
    cluster: &str,
    partition: Option<&str>,
    replacing: &[Replacing],
    limit: Duration,
) -> Result<Vec<Replaced>, ProviderError> {
    let deadline = Instant::now() + limit;
    let mut said = String::new();
    let fresh: Vec<(Replacing, Node)> = loop {
        let listed = match cluster_nodes::list(ctx, cluster).await {
            Ok(listed) => listed,
            Err(e) if e.is_retryable() => {
                ctx.reporter
                    .log(&format!("listing the cluster's nodes: {}", e.message));
                pause(ctx, deadline, limit, "HyperPod to replace the nodes").await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        match new_instances(&listed, replacing) {
            Ok(Some(found)) => break found,
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        let now_saying = progress(&listed, replacing);
        if now_saying != said {
            ctx.reporter.event(&now_saying);
            said = now_saying;
        }
        pause(ctx, deadline, limit, "HyperPod to replace the nodes").await?;
    };
    let mut out = Vec::new();
    for (was, new) in fresh {
        let name = new.short_name().unwrap_or_default().to_string();
        ctx.reporter.event(&format!(
            "node {} ({}) replaced by {name} ({})",
            was.node, was.instance_id, new.instance_id
        ));
        let node = loop {
            // Slurm's controller restarts while nodes join and leave (as
            // Slurm needs for a changed node list): a failed look is
            // looked at again.
            match nodes::list(remote, partition).await {
                Ok(listed) => {
                    if let Some(n) = listed.into_iter().find(|n| n.name == name && n.usable()) {
                        break n;
                    }
                }
                Err(e) => ctx
                    .reporter
                    .log(&format!("listing Slurm's nodes: {}", e.message)),
            }
            pause(ctx, deadline, limit, &format!("Slurm to list node {name}")).await?;
        };
        out.push(Replaced {
            was,
            instance_id: new.instance_id,
            node,
        });
    }
    Ok(out)
}

async fn pause(
    ctx: &OpContext,
    deadline: Instant,
    limit: Duration,
    what: &str,
) -> Result<(), ProviderError> {
    if ctx.cancel.is_cancelled() {
        return Err(ProviderError::fatal(format!(
            "interrupted while waiting for {what}"
        )));
    }
    if Instant::now() > deadline {
        return Err(ProviderError::fatal(format!(
            "gave up waiting for {what} after {}; the next apply looks again",
            humantime::format_duration(limit)
        )));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

/// The new instance of each replacement, once every old one is gone and
/// every new one `Running` with a hostname; `None` while not yet; an
/// error for a new instance that failed.
fn new_instances(
    listed: &[Node],
    replacing: &[Replacing],
) -> Result<Option<Vec<(Replacing, Node)>>, ProviderError> {
    let mut taken: Vec<&str> = Vec::new();
    let mut found = Vec::new();
    for r in replacing {
        if listed.iter().any(|n| n.instance_id == r.instance_id) {
            return Ok(None);
        }
        let candidates = listed.iter().filter(|n| {
            (n.group == r.group || r.group.is_empty())
                && n.launched + 2.0 >= r.since as f64
                && !taken.contains(&n.instance_id.as_str())
        });
        let mut chosen = None;
        for n in candidates {
            match n.status.as_str() {
                "Running" if n.hostname.is_some() => {
                    chosen = Some(n);
                    break;
                }
                "Failure" => {
                    return Err(ProviderError::fatal(format!(
                        "the instance replacing node {} ({}) failed: {} {}",
                        r.node, r.instance_id, n.instance_id, n.message
                    ))
                    .with_help("its lifecycle script's output is in the cluster's CloudWatch log group /aws/sagemaker/Clusters/<name>/<id>"));
                }
                _ => {}
            }
        }
        match chosen {
            Some(n) => {
                taken.push(&n.instance_id);
                found.push((r.clone(), n.clone()));
            }
            None => return Ok(None),
        }
    }
    Ok(Some(found))
}

/// What the replacement is at, for the log.
fn progress(listed: &[Node], replacing: &[Replacing]) -> String {
    replacing
        .iter()
        .map(|r| {
            let old = listed
                .iter()
                .find(|n| n.instance_id == r.instance_id)
                .map_or("gone".to_string(), |n| n.status.clone());
            let new: Vec<String> = listed
                .iter()
                .filter(|n| {
                    (n.group == r.group || r.group.is_empty()) && n.launched + 2.0 >= r.since as f64
                })
                .map(|n| format!("{} {}", n.instance_id, n.status))
                .collect();
            format!(
                "replacing node {} ({} {old}): new instance {}",
                r.node,
                r.instance_id,
                if new.is_empty() {
                    "not launched yet".to_string()
                } else {
                    new.join(", ")
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, group: &str, status: &str, host: &str, launched: f64) -> Node {
        Node {
            instance_id: id.into(),
            group: group.into(),
            status: status.into(),
            message: String::new(),
            hostname: (!host.is_empty()).then(|| format!("{host}.ec2.internal")),
            launched,
        }
    }

    #[test]
    fn the_new_instance_is_its_groups_launched_after_the_call() {
        let r = Replacing {
            node: "ip-a".into(),
            instance_id: "i-old".into(),
            group: "w".into(),
            since: 1000,
            sent: true,
            reason: String::new(),
            by: None,
        };
        let rs = std::slice::from_ref(&r);
        // The old one still shutting down: not yet.
        let listed = vec![
            node("i-old", "w", "ShuttingDown", "ip-a", 10.0),
            node("i-new", "w", "Running", "ip-b", 1001.0),
        ];
        assert!(new_instances(&listed, rs).unwrap().is_none());
        // Gone, and the new one Running: found; an older node of the group,
        // or one of another group, is not it.
        let listed = vec![
            node("i-other", "w", "Running", "ip-c", 10.0),
            node("i-ctl", "controller", "Running", "ip-d", 1001.0),
            node("i-new", "w", "Running", "ip-b", 1001.0),
        ];
        let found = new_instances(&listed, rs).unwrap().unwrap();
        assert_eq!(found[0].1.instance_id, "i-new");
        assert_eq!(found[0].1.short_name(), Some("ip-b"));
        // Still pending: not yet; failed: the error says why.
        let listed = vec![node("i-new", "w", "Pending", "", 1001.0)];
        assert!(new_instances(&listed, rs).unwrap().is_none());
        let mut failed = node("i-new", "w", "Failure", "ip-b", 1001.0);
        failed.message = "Lifecycle script did not run successfully".into();
        let e = new_instances(&[failed], rs).unwrap_err();
        assert!(e.message.contains("Lifecycle script"), "{}", e.message);
    }

    #[test]
    fn a_node_hyperpod_is_replacing_or_replaced_on_its_own_is_taken() {
        // Its instance ShuttingDown (automatic node recovery): taken, with
        // its instance and group, waited for from the job's start.
        let listed = vec![
            node("i-old", "w", "ShuttingDown", "ip-a", 10.0),
            node("i-new", "w", "Pending", "", 1001.0),
            node("i-peer", "w", "Running", "ip-c", 10.0),
        ];
        let (r, seen) = taken_by_hyperpod(&listed, "ip-a", Some(1000)).unwrap();
        assert_eq!((r.instance_id.as_str(), r.group.as_str()), ("i-old", "w"));
        assert_eq!((r.since, r.sent), (1000, true));
        assert!(seen.contains("i-old ShuttingDown"), "{seen}");
        // A live node is not taken.
        assert!(taken_by_hyperpod(&listed, "ip-c", Some(1000)).is_none());
        // Gone, a node launched since the job started: replaced already,
        // its old instance unknown; the new one found in any group.
        let listed = vec![
            node("i-peer", "w", "Running", "ip-c", 10.0),
            node("i-new", "w", "Running", "ip-b", 1001.0),
        ];
        let (r, _) = taken_by_hyperpod(&listed, "ip-a", Some(1000)).unwrap();
        assert_eq!((r.instance_id.as_str(), r.group.as_str()), (UNKNOWN, ""));
        let found = new_instances(&listed, std::slice::from_ref(&r))
            .unwrap()
            .unwrap();
        assert_eq!(found[0].1.instance_id, "i-new");
        // Gone with nothing launched since, or no job start to go by: not
        // taken (the step fails naming it, as for a node of another cluster).
        assert!(taken_by_hyperpod(&listed, "ip-a", Some(5000)).is_none());
        assert!(taken_by_hyperpod(&listed, "ip-a", None).is_none());
        assert!(still_running(&listed, "i-new"));
        assert!(!still_running(&listed, "i-old"));
    }
}
