//! Policy `replace` on EKS: a bad node, once cordoned, tainted and
//! drained, has its EC2 instance terminated through its Auto Scaling group
//! with the desired count kept ([`super::asg`]); the group launches another
//! instance, whose kubelet registers a new Node, and the step waits for it
//! to be Ready and checks it.
//!
//! A node is marked `flow.dev/replacing: INSTANCE@GROUP` before its
//! instance is terminated, and the replacement is kept durably (in the
//! step's id: [`super::resume`]), so that a run killed at any point is
//! taken up by the next: a node being replaced is not checked again, and
//! its instance is terminated only while Auto Scaling still has it in
//! service (never twice); the Node and its mark go with the instance, so
//! what was kept names it and its group's new node; and before checking,
//! the step waits for every other group of the fleet to have its desired
//! count of Ready nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ::kube::Client;
use ::kube::api::{Api, ListParams, Patch, PatchParams};
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use super::asg::{Aws, GROUP_TAG, instance_of};
use super::jobs::Batch;
use super::{Member, Run, TAINT};
use crate::contract::{OpContext, ProviderError};
use crate::fleet::report::{evidence, record, verdict};
use crate::kube::errors::kube as kube_error;

/// The annotation of a node whose instance flow is replacing.
pub(super) const REPLACING: &str = "flow.dev/replacing";

/// A bad node and what replaces it: its instance and the group that will
/// launch another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Replacing {
    /// The Node's name.
    pub node: String,
    /// Its EC2 instance.
    pub instance: String,
    /// The instance's Auto Scaling group.
    pub group: String,
}

impl Replacing {
    /// What the node's [`REPLACING`] annotation holds: `INSTANCE@GROUP`.
    pub fn annotation(&self) -> String {
        format!("{}@{}", self.instance, self.group)
    }

    /// The replacement a node's annotation records.
    pub fn from_annotation(node: &str, text: &str) -> Option<Replacing> {
        let (instance, group) = text.split_once('@')?;
        (!instance.is_empty() && !group.is_empty()).then(|| Replacing {
            node: node.to_string(),
            instance: instance.to_string(),
            group: group.to_string(),
        })
    }
}

/// What was there before a termination: a node named in `nodes`, or one
/// whose instance is in `instances`, is not new.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::kube) struct Known {
    /// Node names.
    pub nodes: BTreeSet<String>,
    /// EC2 instance ids.
    pub instances: BTreeSet<String>,
}

impl Known {
    /// The nodes `nodes` names.
    pub fn nodes(nodes: BTreeSet<String>) -> Known {
        Known {
            nodes,
            instances: BTreeSet::new(),
        }
    }

    /// Whether node `name` of instance `instance` was there before.
    fn has(&self, name: &str, instance: &str) -> bool {
        self.nodes.contains(name) || self.instances.contains(instance)
    }
}

/// Whether a Node is Ready (its `Ready` condition is `True`).
pub(super) fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The replacements earlier runs left under way: the nodes marked
/// [`REPLACING`].
pub(super) fn in_flight(nodes: &[Node]) -> Vec<Replacing> {
    nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.as_deref()?;
            let text = n.metadata.annotations.as_ref()?.get(REPLACING)?;
            Replacing::from_annotation(name, text)
        })
        .collect()
}

/// What replaces each of `bad` (whose instances' groups `groups` gives,
/// from [`Aws::groups_of`]); fails before anything is touched, naming each
/// node nothing would replace and why.
pub(super) fn locate(
    bad: &[&Member],
    groups: &BTreeMap<String, Option<String>>,
) -> Result<Vec<Replacing>, ProviderError> {
    let mut found = Vec::new();
    let mut refused = Vec::new();
    for m in bad {
        let instance = m.provider_id.as_deref().and_then(instance_of);
        match (instance, instance.and_then(|i| groups.get(i))) {
            (None, _) => refused.push(format!(
                "node {}: its spec.providerID ({}) names no EC2 instance (aws:///ZONE/i-…)",
                m.name,
                m.provider_id.as_deref().unwrap_or("none")
            )),
            (Some(i), None) => refused.push(format!(
                "node {}: EC2 does not know its instance {i} in this region",
                m.name
            )),
            (Some(i), Some(None)) => refused.push(format!(
                "node {}: its instance {i} is in no Auto Scaling group (no {GROUP_TAG} tag), so nothing would launch another",
                m.name
            )),
            (Some(i), Some(Some(g))) => found.push(Replacing {
                node: m.name.clone(),
                instance: i.to_string(),
                group: g.clone(),
            }),
        }
    }
    if refused.is_empty() {
        return Ok(found);
    }
    Err(ProviderError::fatal(format!(
        "policy replace cannot replace {}: no node was taken out",
        refused.join("; ")
    ))
    .with_help("replace needs nodes of an EKS node group (or another Auto Scaling group); use `policy = \"cordon\"` for these nodes and replace them by hand"))
}

/// Marks `r`'s node as being replaced, before its instance is terminated.
pub(super) async fn mark(client: &Client, r: &Replacing) -> Result<(), ProviderError> {
    Api::<Node>::all(client.clone())
        .patch(
            &r.node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {REPLACING: r.annotation()}}})),
        )
        .await
        .map_err(|e| kube_error(&format!("mark node `{}` as being replaced", r.node), e))?;
    Ok(())
}

/// Terminates each instance of `replacing` through its group, desired count
/// kept, unless Auto Scaling no longer has it in service (an earlier run's
/// termination went through): never twice.
pub(super) async fn terminate(
    ctx: &OpContext,
    aws: &Aws,
    replacing: &[Replacing],
) -> Result<(), ProviderError> {
    for r in replacing {
        if !aws.in_service(&r.instance).await? {
            ctx.reporter.event(&format!(
                "instance {} of node {} is already leaving group {}: not terminated again",
                r.instance, r.node, r.group
            ));
            continue;
        }
        let said = aws.terminate(&r.instance).await?;
        ctx.reporter.event(&format!(
            "terminated instance {} of node {} through Auto Scaling group {} (desired count kept: the group launches a replacement): {said}",
            r.instance, r.node, r.group
        ));
    }
    Ok(())
}

/// The Nodes whose `spec.providerID` names an EC2 instance, by instance.
async fn nodes_by_instance(client: &Client) -> Result<BTreeMap<String, Node>, ProviderError> {
    let all = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| kube_error("list the nodes", e))?;
    Ok(all
        .items
        .into_iter()
        .filter_map(|n| {
            let id = instance_of(n.spec.as_ref()?.provider_id.as_deref()?)?.to_string();
            Some((id, n))
        })
        .collect())
}

/// Waits until each of `groups` is at strength: its desired count of
/// instances in service, each with a Ready Node. Returns the Ready Nodes
/// of those groups that `known` does not name, by node or by instance (the
/// new ones), as members with their group. Fails after `timeout`, naming
/// what is missing.
pub(super) async fn wait_for_strength(
    ctx: &OpContext,
    client: &Client,
    aws: &Aws,
    groups: &BTreeSet<String>,
    known: &Known,
    timeout: Duration,
) -> Result<Vec<(Member, String)>, ProviderError> {
    let deadline = Instant::now() + timeout;
    let mut last_said = String::new();
    // Soon at first (a replacement often registers within seconds of the
    // look before), then no more often than every 10 s: each look reads
    // every group from Auto Scaling.
    let mut pause = Duration::from_millis(500);
    loop {
        let said = match look(client, aws, groups, known).await {
            Ok(Strength::Full(new)) => return Ok(new),
            Ok(Strength::Short(short)) => short,
            // A throttled or lost read is tried again at the next look.
            Err(e) if e.is_retryable() && Instant::now() < deadline => e.message,
            Err(e) => return Err(e),
        };
        if said != last_said {
            ctx.reporter
                .event(&format!("waiting for new nodes: {said}"));
            last_said = said.clone();
        }
        if Instant::now() >= deadline {
            return Err(ProviderError::fatal(format!(
                "the replacement nodes were not Ready after {}: {said}",
                humantime::format_duration(timeout)
            ))
            .with_help("look at the group's activities (aws autoscaling describe-scaling-activities) and the new instances' kubelets; `flow apply` again waits on, terminating nothing twice"));
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => pause = (pause * 2).min(Duration::from_secs(10)),
            _ = ctx.cancel.cancelled() => {
                return Err(ProviderError::fatal("interrupted while waiting for the replacement nodes: the next apply waits on"));
            }
        }
    }
}

/// What one look at the groups found.
enum Strength {
    /// Every group at strength: the Ready nodes `known` does not name.
    Full(Vec<(Member, String)>),
    /// What each group short of Ready nodes lacks.
    Short(String),
}

/// One look at `groups` (see [`wait_for_strength`]).
async fn look(
    client: &Client,
    aws: &Aws,
    groups: &BTreeSet<String>,
    known: &Known,
) -> Result<Strength, ProviderError> {
    let nodes = nodes_by_instance(client).await?;
    let mut short = Vec::new();
    let mut new = Vec::new();
    for name in groups {
        let g = aws.group(name).await?;
        let serving: Vec<&str> = g
            .members
            .iter()
            .filter(|m| m.lifecycle == "InService")
            .map(|m| m.instance.as_str())
            .collect();
        let ready: Vec<(&str, &Node)> = serving
            .iter()
            .filter_map(|i| Some((*i, nodes.get(*i)?)))
            .filter(|(_, n)| ready(n))
            .collect();
        if ready.len() < g.desired {
            short.push(format!(
                "group {name}: {} of {} nodes Ready ({} instance(s) in service)",
                ready.len(),
                g.desired,
                serving.len()
            ));
            continue;
        }
        for (instance, n) in ready {
            let m = Member::of(n);
            if !known.has(&m.name, instance) {
                new.push((m, name.clone()));
            }
        }
    }
    if !short.is_empty() {
        return Ok(Strength::Short(short.join("; ")));
    }
    new.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(Strength::Full(new))
}

/// The verdict of a node an earlier run was replacing: what its
/// [`TAINT`] annotation says it was taken out for.
pub(super) fn earlier_verdict(listed: &[Node], r: &Replacing) -> Value {
    let why = listed
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(r.node.as_str()))
        .and_then(|n| n.metadata.annotations.as_ref()?.get(TAINT).cloned())
        .unwrap_or_else(|| "taken out by an earlier run".into());
    verdict(
        "bad",
        "earlier run",
        format!("being replaced since an earlier run of this step ({why})"),
        json!({"short": "replacing", "instance": r.instance, "group": r.group}),
    )
}

/// Each replaced node with its instance, group and the node that replaced
/// it: a group's new nodes go to its replaced nodes in name order (a group
/// that launched none for it, or whose new node registered before a resumed
/// run listed the fleet, leaves `new_node` null).
pub(super) fn attribute(replacing: &[Replacing], new: &[(Member, String)]) -> Vec<Value> {
    let mut left: Vec<&(Member, String)> = new.iter().collect();
    replacing
        .iter()
        .map(|r| {
            let by = left
                .iter()
                .position(|(_, g)| *g == r.group)
                .map(|i| left.remove(i).0.name.clone());
            json!({"node": r.node, "instance": r.instance, "group": r.group, "new_node": by})
        })
        .collect()
}

/// Each replaced node's verdict names the node that replaced it.
pub(super) fn note_replaced(verdicts: &mut BTreeMap<String, Value>, replaced: &[Value]) {
    for r in replaced {
        if let Some(v) = r["node"].as_str().and_then(|n| verdicts.get_mut(n)) {
            v["replaced_by"] = r["new_node"].clone();
            v["instance"] = r["instance"].clone();
        }
    }
}

/// The new nodes checked as the fleet was: each alone, then (with `pairs`)
/// each in a pair with a healthy node of the fleet, beside two more healthy
/// nodes for a median to compare with. Their verdicts go into `verdicts`;
/// the partners' are not changed. Returns the rounds of pairs run.
pub(super) async fn check_new(
    fleet: &Run<'_>,
    new: &[Member],
    verdicts: &mut BTreeMap<String, Value>,
) -> Result<u32, ProviderError> {
    if new.is_empty() {
        return Ok(0);
    }
    let names: Vec<&str> = new.iter().map(|m| m.name.as_str()).collect();
    fleet
        .ctx
        .reporter
        .event(&format!("checking the new node(s) {}", names.join(", ")));
    let healthy: Vec<&Member> = fleet
        .members
        .iter()
        .filter(|m| {
            verdicts
                .get(&m.name)
                .is_some_and(|v| v["status"] == "healthy")
        })
        .take(new.len() + 2)
        .collect();
    let mut members = Vec::new();
    for (i, m) in new.iter().enumerate() {
        members.push(m.clone());
        if let Some(p) = healthy.get(i) {
            members.push((*p).clone());
        }
    }
    members.extend(healthy.iter().skip(new.len()).map(|m| (*m).clone()));
    let mut run = Run {
        ctx: fleet.ctx,
        spec: fleet.spec.clone(),
        batch: Batch {
            ctx: fleet.ctx,
            client: fleet.batch.client.clone(),
            namespace: fleet.batch.namespace.clone(),
        },
        members: new.to_vec(),
        prefix: "new-".into(),
    };
    let mut fresh = BTreeMap::new();
    if let Some(table) = &run.spec.common.check {
        run.check(table, &mut fresh).await?;
    }
    let mut rounds = 0;
    if run.spec.common.pairs.is_some() {
        run.members = members;
        let mut by_pairs = fresh.clone();
        rounds = match run.checks_pairs_only(&mut by_pairs).await {
            Ok(rounds) => rounds,
            Err(e) => {
                // The history holds the whole fleet's verdicts, not only
                // those of the nodes this search paired.
                verdicts.extend(fresh);
                record(fleet.ctx, verdicts);
                return Err(e);
            }
        };
        for m in new {
            if let Some(v) = by_pairs.remove(&m.name) {
                fresh.insert(m.name.clone(), v);
            }
        }
    }
    verdicts.extend(fresh);
    Ok(rounds)
}

/// Fails when a new node is not healthy: it is named with its evidence and
/// left as it is (never replaced in turn by the same run).
pub(super) fn new_ones_fail(
    verdicts: &BTreeMap<String, Value>,
    new: &[Member],
    replaced: &[String],
) -> Result<(), ProviderError> {
    let failed: Vec<String> = new
        .iter()
        .filter(|m| {
            verdicts
                .get(&m.name)
                .is_none_or(|v| v["status"] != "healthy")
        })
        .map(|m| m.name.clone())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(ProviderError::fatal(format!(
        "the new node(s) {} are not healthy: {}{}",
        failed.join(", "),
        evidence(verdicts, &failed),
        if replaced.is_empty() {
            String::new()
        } else {
            format!(" (replaced: {})", replaced.join(", "))
        }
    ))
    .with_help("a new node is not replaced in turn: look at the instance type's capacity and the checks, then `flow apply` again"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, provider_id: Option<&str>) -> Member {
        Member {
            name: name.into(),
            host: name.into(),
            instance_type: None,
            provider_id: provider_id.map(str::to_string),
        }
    }

    #[test]
    fn annotations_record_instance_and_group() {
        let r = Replacing {
            node: "ip-10-0-1-5.ec2.internal".into(),
            instance: "i-0abc".into(),
            group: "eks-gpu-1234".into(),
        };
        assert_eq!(r.annotation(), "i-0abc@eks-gpu-1234");
        assert_eq!(
            Replacing::from_annotation(&r.node, &r.annotation()),
            Some(r.clone())
        );
        assert_eq!(Replacing::from_annotation("n", "i-0abc"), None);
        assert_eq!(Replacing::from_annotation("n", "@g"), None);
    }

    /// A group's new nodes go to its replaced nodes in order; a replaced
    /// node whose group launched none (seen) has none.
    #[test]
    fn new_nodes_are_given_to_the_nodes_of_their_group() {
        let r = |node: &str, group: &str| Replacing {
            node: node.into(),
            instance: format!("i-{node}"),
            group: group.into(),
        };
        let new = [
            (member("n-a", None), "g1".to_string()),
            (member("n-b", None), "g2".to_string()),
        ];
        let got = attribute(&[r("a", "g1"), r("b", "g1"), r("c", "g2")], &new);
        assert_eq!(got[0]["new_node"], "n-a");
        assert_eq!(got[1]["new_node"], serde_json::Value::Null);
        assert_eq!(got[2]["new_node"], "n-b");
        assert_eq!(got[2]["instance"], "i-c");
        let mut verdicts = BTreeMap::from([(
            "a".to_string(),
            verdict("bad", "check", "gpus".into(), json!({})),
        )]);
        note_replaced(&mut verdicts, &got);
        assert_eq!(verdicts["a"]["replaced_by"], "n-a");
        assert_eq!(verdicts["a"]["instance"], "i-a");
    }

    /// Every node nothing would replace is named with why, and none is
    /// replaced when one of them cannot be.
    #[test]
    fn nodes_nothing_would_replace_are_refused_by_name() {
        let a = member("a", Some("aws:///us-east-1a/i-1"));
        let b = member("b", Some("aws:///us-east-1a/i-2"));
        let c = member("c", None);
        let d = member("d", Some("aws:///us-east-1a/i-4"));
        let groups = BTreeMap::from([
            ("i-1".to_string(), Some("eks-gpu".to_string())),
            ("i-2".to_string(), None),
        ]);
        let found = locate(&[&a], &groups).unwrap();
        assert_eq!(found[0].group, "eks-gpu");
        let e = locate(&[&a, &b, &c, &d], &groups).unwrap_err();
        assert!(e.message.starts_with("policy replace cannot replace node b: its instance i-2 is in no Auto Scaling group (no aws:autoscaling:groupName tag)"), "{}", e.message);
        assert!(
            e.message
                .contains("node c: its spec.providerID (none) names no EC2 instance"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("node d: EC2 does not know its instance i-4"),
            "{}",
            e.message
        );
        assert!(
            e.message.ends_with("no node was taken out"),
            "{}",
            e.message
        );
    }
}
