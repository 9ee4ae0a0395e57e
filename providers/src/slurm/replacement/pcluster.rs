//! Policy `replace` where the cluster is ParallelCluster's
//! (`pcluster_cluster`): a bad static node is set
//! DOWN with flow's reason, which has ParallelCluster's clustermgtd replace
//! it — static nodes "are not terminated by the system, unless … the
//! change of the Slurm node status to DRAIN or DOWN"
//! (<https://docs.aws.amazon.com/parallelcluster/latest/ug/slurm-workload-manager-v3.html>):
//! its instance terminated, a new one launched under the same Slurm node
//! name, the node's address (`NodeAddr`) set to the new instance's. Then
//! the step waits until Slurm has the node back in service on a new
//! instance.
//!
//! Which instance a node is: the cluster's compute instance (tags
//! `parallelcluster:cluster-name` and `parallelcluster:node-type =
//! Compute`) whose private address is the node's `NodeAddr`, as
//! clustermgtd itself matches them. A replacement is recorded before and
//! after the DOWN (the step's `record`, the node's address in place of
//! HyperPod's instance group), and a resumed
//! run sets the node DOWN only while it is still up on its old instance:
//! one node is replaced once.

use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use tokio::time::Instant;

use super::{Replaced, Replacing, UNKNOWN, all_sent, claim, now};
use crate::aws::config::sdk_config;
use crate::aws::error;
use crate::contract::{OpContext, ProviderError};
use crate::slurm::nodes::{self, SlurmNode};
use crate::slurm::remote::Remote;

/// A compute instance of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Instance {
    /// `i-…`.
    id: String,
    /// `pending`, `running`, `shutting-down`, `terminated`, …
    state: String,
    /// Its private address.
    ip: String,
    /// When it was launched, seconds since the epoch.
    launched: Option<u64>,
}

impl Instance {
    fn up(&self) -> bool {
        self.state == "pending" || self.state == "running"
    }
}

/// The compute fleet of a ParallelCluster cluster, in EC2.
pub(super) struct Fleet {
    ec2: aws_sdk_ec2::Client,
    cluster: String,
}

impl Fleet {
    /// EC2 in the step's region, for cluster `cluster`.
    pub async fn new(ctx: &OpContext, cluster: &str) -> Result<Fleet, ProviderError> {
        Ok(Fleet {
            ec2: aws_sdk_ec2::Client::new(&sdk_config(ctx).await?),
            cluster: cluster.to_string(),
        })
    }

    /// The cluster's compute instances, as EC2 lists them now.
    async fn instances(&self) -> Result<Vec<Instance>, ProviderError> {
        let tag = |k: &str, v: &str| Filter::builder().name(format!("tag:{k}")).values(v).build();
        let mut pages = self
            .ec2
            .describe_instances()
            .filters(tag("parallelcluster:cluster-name", &self.cluster))
            .filters(tag("parallelcluster:node-type", "Compute"))
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                error::aws(
                    &format!("list the compute instances of cluster `{}`", self.cluster),
                    e,
                )
            })?;
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                out.push(Instance {
                    id: i.instance_id().unwrap_or_default().to_string(),
                    state: i
                        .state()
                        .and_then(|s| s.name())
                        .map_or("", |n| n.as_str())
                        .to_string(),
                    ip: i.private_ip_address().unwrap_or_default().to_string(),
                    launched: i.launch_time().and_then(|t| u64::try_from(t.secs()).ok()),
                });
            }
        }
        Ok(out)
    }
}

/// The instance up at `address`, if any.
fn at<'a>(fleet: &'a [Instance], address: &str) -> Option<&'a Instance> {
    fleet.iter().find(|i| i.ip == address && i.up())
}

/// Whether `i` was launched by `t` (seconds since the epoch, a second's
/// slack), or either time is unknown.
fn launched_by(i: &Instance, t: Option<u64>) -> bool {
    match (t, i.launched) {
        (Some(t), Some(l)) => l <= t + 1,
        _ => true,
    }
}

/// The instance a node at `address` is: the one up there, else one
/// shutting down or terminated there (clustermgtd took the node before
/// flow looked: a static node Slurm set DOWN, as a dead node's is, is
/// replaced without being asked).
fn of_node<'a>(fleet: &'a [Instance], address: &str) -> Option<&'a Instance> {
    at(fleet, address).or_else(|| {
        fleet
            .iter()
            .find(|i| i.ip == address && !address.is_empty())
    })
}

/// The instances of the drained `names` in ParallelCluster cluster
/// `cluster` (by each node's `NodeAddr`), each with why it is bad
/// (`reason_of`); an error naming a dynamic node (ParallelCluster replaces
/// static ones) or a node that is no instance of the cluster. A node whose
/// instance clustermgtd is terminating already is recorded with it, and
/// [`send`] then sees it taken. With `launched_before` (the failed job's
/// start), an instance launched since is not the node the job ran on: a
/// node that is on one already was replaced by clustermgtd before flow
/// looked (a dead node is DOWN, which clustermgtd replaces unasked), and
/// its old instance, no longer at its address, is recorded as
/// [`UNKNOWN`]. A DOWN node with no instance at its address at all (its
/// old one gone from EC2's listing, the new one not there yet) is that
/// replacement under way ([`taken_by_clustermgtd`]): recorded as asked
/// for, old instance [`UNKNOWN`], and waited for.
pub(super) async fn instances_of(
    ctx: &OpContext,
    remote: &Remote,
    fleet: &Fleet,
    names: &[String],
    reason_of: impl Fn(&str) -> String,
    launched_before: Option<u64>,
) -> Result<Vec<Replacing>, ProviderError> {
    let cluster = &fleet.cluster;
    if let Some(name) = names.iter().find(|n| n.contains("-dy-")) {
        return Err(ProviderError::fatal(format!(
            "node {name} is a dynamic node of ParallelCluster cluster `{cluster}`: ParallelCluster replaces static nodes (MinCount); a dynamic one is powered down and launched anew when a job needs it"
        ))
        .with_help("check only static nodes with policy `replace` (their names have `-st-`), or use policy `drain`"));
    }
    let addresses = nodes::addresses(remote).await?;
    let listed = fleet.instances().await?;
    let earlier: Vec<Instance> = listed
        .iter()
        .filter(|i| launched_by(i, launched_before))
        .cloned()
        .collect();
    let since = now();
    names
        .iter()
        .map(|name| {
            let (address, state) = addresses
                .get(name)
                .map_or(("", ""), |a| (a.0.as_str(), a.1.as_str()));
            let mut sent = false;
            let instance_id = match of_node(&earlier, address) {
                Some(i) => i.id.clone(),
                None if at(&listed, address).is_some() => UNKNOWN.to_string(),
                None if taken_by_clustermgtd(&listed, state) => {
                    ctx.reporter.event(&format!(
                        "node {name}: ParallelCluster is replacing it already (Slurm has it {state}; no instance of the cluster is at its address {address} any more): not setting it DOWN again, waiting for its new instance"
                    ));
                    sent = true;
                    UNKNOWN.to_string()
                }
                None => {
                    return Err(ProviderError::fatal(format!(
                        "Slurm node {name} (address {address}) is no instance of ParallelCluster cluster `{cluster}`: none of its {} compute instances is up at that address",
                        listed.len()
                    ))
                    .with_help("check `pcluster_cluster`: the nodes checked must be that cluster's (pcluster describe-cluster-instances)"));
                }
            };
            Ok(Replacing {
                node: name.clone(),
                instance_id,
                group: address.to_string(),
                since,
                sent,
                reason: reason_of(name),
                by: None,
            })
        })
        .collect()
}

/// Whether a node with no instance of the cluster at its address (its old
/// one terminated and gone from EC2's listing: EC2 drops a terminated
/// instance's tags, by which the fleet is listed, and later the instance)
/// is clustermgtd's replacement under way: Slurm has the node DOWN (as
/// clustermgtd sets a static node it replaces, and Slurm a dead one),
/// and the cluster has compute instances (it is the node's cluster).
fn taken_by_clustermgtd(listed: &[Instance], state: &str) -> bool {
    !listed.is_empty() && state.to_ascii_uppercase().contains("DOWN")
}

/// The nodes of `names` ParallelCluster has replaced since `started` (a
/// failed job's start, seconds since the epoch): each on an instance
/// launched after it, as clustermgtd leaves a static node it replaced
/// when Slurm set it DOWN (a node that died) before flow looked. Each is
/// recorded as asked for, its old instance [`UNKNOWN`] (no longer at the
/// node's address), so [`wait`] only waits for it in service.
pub(super) async fn replaced_since(
    remote: &Remote,
    fleet: &Fleet,
    names: &[String],
    started: u64,
) -> Result<Vec<Replacing>, ProviderError> {
    let addresses = nodes::addresses(remote).await?;
    let listed = fleet.instances().await?;
    let since = now();
    Ok(names
        .iter()
        .filter_map(|name| {
            let address = addresses.get(name).map(|a| a.0.clone())?;
            let now_on = at(&listed, &address)?;
            (!launched_by(now_on, Some(started))).then(|| Replacing {
                node: name.clone(),
                instance_id: UNKNOWN.to_string(),
                group: address.clone(),
                since,
                sent: true,
                reason: format!(
                    "NODE_FAIL: ParallelCluster replaced node {name} since the job started (now on {} at {address})",
                    now_on.id
                ),
                by: None,
            })
        })
        .collect())
}

/// Sets DOWN the nodes of the replacements not known to be asked for,
/// unless clustermgtd took them already (the node is down, or on another
/// instance), recording each before and after with `record` (the step's
/// id); returns them all sent.
pub(super) async fn send<F, Fut>(
    ctx: &OpContext,
    remote: &Remote,
    fleet: &Fleet,
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
    let listed = fleet.instances().await?;
    let addresses = nodes::addresses(remote).await?;
    // Still on its old instance and not down: clustermgtd has not taken it.
    let ask = claim(
        ctx,
        &mut replacing,
        |r| {
            let slurm = addresses.get(&r.node);
            let on_old = slurm.is_some_and(|(a, _)| *a == r.group)
                && at(&listed, &r.group).is_some_and(|i| i.id == r.instance_id);
            let down = slurm.is_some_and(|(_, state)| state.contains("DOWN"));
            !on_old || down
        },
        &record,
    )
    .await?;
    for &i in &ask {
        let r = &replacing[i];
        let why = r.reason.split_once(": ").map_or(r.reason.as_str(), |x| x.1);
        nodes::down(remote, &r.node, &nodes::reason(why)).await?;
        ctx.reporter.event(&format!(
            "set node {} ({}) DOWN for ParallelCluster to replace: its clustermgtd terminates a DOWN static node's instance and launches another under the node's name",
            r.node, r.instance_id
        ));
    }
    all_sent(replacing, &record).await
}

/// What one replacement is at: its new instance once the old one is no
/// longer up and Slurm has the node usable at the address of another
/// instance that is up.
fn settled<'a>(
    r: &Replacing,
    listed: &'a [Instance],
    address: Option<&String>,
    node: Option<&SlurmNode>,
) -> Result<&'a Instance, String> {
    let old = listed.iter().find(|i| i.id == r.instance_id);
    let old_state = old.map_or("gone", |i| i.state.as_str());
    let address = address.map_or("", String::as_str);
    let state = node.map_or("not listed", |n| n.state.as_str());
    let now_at = at(listed, address);
    let saying = format!(
        "replacing node {} ({} {old_state}): Slurm has it {state} at {address} ({})",
        r.node,
        r.instance_id,
        now_at.map_or("no instance up there", |i| i.id.as_str())
    );
    match (old, now_at, node) {
        (Some(o), ..) if o.up() => Err(saying),
        (_, Some(new), Some(n))
            if new.id != r.instance_id && n.usable() && new.state == "running" =>
        {
            Ok(new)
        }
        _ => Err(saying),
    }
}

/// Waits until each replacement is settled (see [`settled`]), at most
/// `limit`; the new nodes, in the order of `replacing`.
pub(super) async fn wait(
    ctx: &OpContext,
    remote: &Remote,
    fleet: &Fleet,
    partition: Option<&str>,
    replacing: &[Replacing],
    limit: Duration,
) -> Result<Vec<Replaced>, ProviderError> {
    let deadline = Instant::now() + limit;
    let mut said = String::new();
    let mut pause = Duration::from_millis(500);
    loop {
        let looked = async {
            Ok::<_, ProviderError>((
                fleet.instances().await?,
                nodes::addresses(remote).await?,
                nodes::list(remote, partition).await?,
            ))
        }
        .await;
        match looked {
            Ok((listed, addresses, slurm)) => {
                let mut done = Vec::new();
                let mut waiting = Vec::new();
                for r in replacing {
                    let node = slurm.iter().find(|n| n.name == r.node);
                    let address = addresses.get(&r.node).map(|a| &a.0);
                    match settled(r, &listed, address, node) {
                        Ok(new) => done.push((r, new.clone(), node.cloned())),
                        Err(saying) => waiting.push(saying),
                    }
                }
                if waiting.is_empty() {
                    return Ok(done
                        .into_iter()
                        .filter_map(|(r, new, node)| {
                            ctx.reporter.event(&format!(
                                "node {} replaced: {} ({}) by {} ({})",
                                r.node, r.instance_id, r.group, new.id, new.ip
                            ));
                            Some(Replaced {
                                was: r.clone(),
                                instance_id: new.id,
                                node: node?,
                            })
                        })
                        .collect());
                }
                let now_saying = waiting.join("; ");
                if now_saying != said {
                    ctx.reporter.event(&now_saying);
                    said = now_saying;
                }
            }
            // slurmctld or EC2 not answering a look: looked at again.
            Err(e) if e.is_retryable() => ctx
                .reporter
                .log(&format!("looking at the replacement: {}", e.message)),
            Err(e) => return Err(e),
        }
        if ctx.cancel.is_cancelled() {
            return Err(ProviderError::fatal(
                "interrupted while waiting for ParallelCluster to replace the nodes",
            ));
        }
        if Instant::now() > deadline {
            return Err(ProviderError::fatal(format!(
                "gave up waiting for ParallelCluster to replace the nodes after {}: {said}",
                humantime::format_duration(limit)
            ))
            .with_help("clustermgtd's log on the head node (/var/log/parallelcluster/clustermgtd) says what it did; the next apply looks again, without setting the node DOWN again"));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(id: &str, state: &str, ip: &str) -> Instance {
        Instance {
            id: id.into(),
            state: state.into(),
            ip: ip.into(),
            launched: None,
        }
    }

    fn node(state: &str) -> SlurmNode {
        SlurmNode {
            name: "q-st-cr-1".into(),
            state: state.into(),
            features: vec![],
            reason: None,
        }
    }

    #[test]
    fn a_node_is_the_instance_up_at_its_address_else_the_one_leaving_it() {
        let fleet = vec![
            i("i-gone", "terminated", "10.0.0.5"),
            i("i-up", "running", "10.0.0.5"),
        ];
        assert_eq!(
            of_node(&fleet, "10.0.0.5").map(|i| i.id.as_str()),
            Some("i-up")
        );
        let fleet = vec![i("i-leaving", "shutting-down", "10.0.0.5")];
        assert_eq!(
            of_node(&fleet, "10.0.0.5").map(|i| i.id.as_str()),
            Some("i-leaving")
        );
        assert!(of_node(&fleet, "10.0.0.6").is_none());
        assert!(of_node(&[i("i-x", "terminated", "")], "").is_none());
        // Launched since the job started: not the node the job ran on.
        let new = Instance {
            launched: Some(2000),
            ..i("i-new", "running", "10.0.0.9")
        };
        assert!(!launched_by(&new, Some(1000)));
        assert!(launched_by(&new, Some(1999)));
        assert!(launched_by(&new, None));
    }

    #[test]
    fn a_replacement_is_settled_on_a_new_running_instance_with_the_node_usable() {
        let r = Replacing {
            node: "q-st-cr-1".into(),
            instance_id: "i-old".into(),
            group: "10.0.0.5".into(),
            since: 0,
            sent: true,
            reason: String::new(),
            by: None,
        };
        let addr = |a: &str| Some(a.to_string());
        // Set DOWN, clustermgtd not there yet: the old instance is up.
        let listed = vec![i("i-old", "running", "10.0.0.5")];
        let e = settled(&r, &listed, addr("10.0.0.5").as_ref(), Some(&node("down"))).unwrap_err();
        assert!(e.contains("i-old running"), "{e}");
        // Terminated, the new one launched, the node still down.
        let listed = vec![
            i("i-old", "terminated", "10.0.0.5"),
            i("i-new", "running", "10.0.0.9"),
        ];
        let e = settled(&r, &listed, addr("10.0.0.9").as_ref(), Some(&node("down"))).unwrap_err();
        assert!(e.contains("down at 10.0.0.9 (i-new)"), "{e}");
        // Back idle at the new address: settled on i-new.
        let new = settled(&r, &listed, addr("10.0.0.9").as_ref(), Some(&node("idle"))).unwrap();
        assert_eq!(new.id, "i-new");
        // Idle but still at the old instance's address (not replaced): no.
        let listed = vec![i("i-old", "running", "10.0.0.5")];
        assert!(settled(&r, &listed, addr("10.0.0.5").as_ref(), Some(&node("idle"))).is_err());
    }

    #[test]
    fn a_down_node_with_no_instance_left_at_its_address_is_clustermgtds_replacement() {
        let fleet = vec![i("i-peer", "running", "10.0.0.6")];
        assert!(taken_by_clustermgtd(&fleet, "DOWN+NOT_RESPONDING"));
        assert!(taken_by_clustermgtd(&fleet, "DOWN+DRAIN"));
        // Up in Slurm: not being replaced (a node of another cluster).
        assert!(!taken_by_clustermgtd(&fleet, "IDLE"));
        // No instance at all: not this node's cluster.
        assert!(!taken_by_clustermgtd(&[], "DOWN"));
    }
}
