//! A replacement under way, as a step keeps it to survive a kill -9 of
//! flow: which nodes are being replaced (each with its instance and group)
//! and every instance their groups had before any was terminated. It is
//! made durable before the first TerminateInstanceInAutoScalingGroup (the
//! Node, and its [`super::replace::REPLACING`] mark, goes with its
//! instance), and carried out from there, by the run that made it or a
//! resumed one, the same way: an instance Auto Scaling no longer has in
//! service is not terminated again, and a group's Ready node whose instance
//! was not there before is a new one.
//!
//! `kube.job` keeps a [`Replacement`] in its attempt's record;
//! `kube.node_check` keeps a [`Pending`] (the replacement and the verdicts
//! of its nodes) as its id.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ::kube::Client;
use serde_json::{Value, json};

use k8s_openapi::api::core::v1::Node;

use super::asg::{Aws, instance_of};
use super::replace::{self, Known, Replacing};
use super::{Member, instances};
use crate::contract::{OpContext, ProviderError};

/// Nodes being replaced and what their groups had before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::kube) struct Replacement {
    /// The old nodes, their instances and groups.
    pub(super) replacing: Vec<Replacing>,
    /// Every instance the groups had before the termination: a Ready node
    /// of another is a new one.
    pub(super) before: BTreeSet<String>,
}

impl Replacement {
    /// The replacement of `replacing`, before any of them is terminated:
    /// `kept`'s groups keep the instances it knew before (a resumed
    /// replacement), the others' are read from Auto Scaling now.
    pub(super) async fn of(
        aws: &Aws,
        replacing: Vec<Replacing>,
        kept: Option<&Replacement>,
    ) -> Result<Replacement, ProviderError> {
        let mut before = kept.map(|k| k.before.clone()).unwrap_or_default();
        let known: BTreeSet<&str> = kept.map(|k| k.groups()).unwrap_or_default();
        let fresh: BTreeSet<&str> = replacing
            .iter()
            .map(|r| r.group.as_str())
            .filter(|g| !known.contains(g))
            .collect();
        for g in fresh {
            before.extend(aws.group(g).await?.members.into_iter().map(|m| m.instance));
        }
        Ok(Replacement { replacing, before })
    }

    /// The groups of its nodes.
    pub(super) fn groups(&self) -> BTreeSet<&str> {
        self.replacing.iter().map(|r| r.group.as_str()).collect()
    }

    /// As a step's record keeps it.
    pub fn json(&self) -> Value {
        json!({
            "replacing": self.replacing.iter().map(|r| json!({
                "node": r.node, "instance": r.instance, "group": r.group})).collect::<Vec<_>>(),
            "before": self.before,
        })
    }

    /// [`Replacement::json`] read back.
    pub fn from_json(v: &Value) -> Option<Replacement> {
        let text = |r: &Value, k: &str| r[k].as_str().map(str::to_string);
        let replacing = v["replacing"]
            .as_array()?
            .iter()
            .map(|r| {
                Some(Replacing {
                    node: text(r, "node")?,
                    instance: text(r, "instance")?,
                    group: text(r, "group")?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let before = v["before"]
            .as_array()?
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<BTreeSet<_>>>()?;
        Some(Replacement { replacing, before })
    }
}

/// Carries `r` out: each old node's instance terminated through its group
/// (desired count kept; not when Auto Scaling no longer has it in service:
/// an earlier run's termination went through, and none is sent twice), the
/// groups waited for until each has its desired count of Ready nodes, and
/// each old node given a Ready node of its group whose instance was not
/// there before. Returns, per old node, `node`, `instance`, `group`,
/// `new_node`, and every new node with its group.
pub(super) async fn carry_out(
    ctx: &OpContext,
    client: &Client,
    aws: &Aws,
    r: &Replacement,
    replace_timeout: Duration,
) -> Result<(Vec<Value>, Vec<(Member, String)>), ProviderError> {
    replace::terminate(ctx, aws, &r.replacing).await?;
    let groups: BTreeSet<String> = r.groups().into_iter().map(str::to_string).collect();
    let known = Known {
        nodes: BTreeSet::new(),
        instances: r.before.clone(),
    };
    let new =
        replace::wait_for_strength(ctx, client, aws, &groups, &known, replace_timeout).await?;
    Ok((replace::attribute(&r.replacing, &new), new))
}

/// What `kube.node_check` keeps as its id while it replaces nodes: the
/// replacement and the verdict each old node was taken out for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    /// The replacement under way.
    pub replacement: Replacement,
    /// Each old node's verdict.
    pub verdicts: BTreeMap<String, Value>,
}

impl Pending {
    /// As the step's id.
    pub fn encode(&self) -> String {
        json!({"replacement": self.replacement.json(), "verdicts": self.verdicts}).to_string()
    }

    /// An id [`Pending::encode`] made; `None` for any other.
    pub fn decode(id: &str) -> Option<Pending> {
        let v: Value = serde_json::from_str(id).ok()?;
        Some(Pending {
            replacement: Replacement::from_json(&v["replacement"])?,
            verdicts: serde_json::from_value(v["verdicts"].clone()).ok()?,
        })
    }
}

/// What `kept` leaves to take up among the nodes `listed` now: the nodes
/// being replaced (its own, whose Nodes may be gone with their instances
/// and their marks with them, then those `marked` besides), and the Ready
/// nodes of its groups whose instances were not there before (its new
/// ones, to be checked as such).
pub(super) async fn take_up(
    aws: &Aws,
    kept: &Pending,
    listed: &[Node],
    marked: Vec<Replacing>,
) -> Result<(Vec<Replacing>, BTreeSet<String>), ProviderError> {
    let r = &kept.replacement;
    let mut earlier = r.replacing.clone();
    earlier.extend(
        marked
            .into_iter()
            .filter(|m| !r.replacing.iter().any(|k| k.node == m.node)),
    );
    let groups = r.groups();
    let now: Vec<Member> = listed.iter().map(Member::of).collect();
    let group_of = aws
        .groups_of(&instances(&now.iter().collect::<Vec<_>>()))
        .await?;
    let mut new = BTreeSet::new();
    for m in &now {
        let Some(i) = m.provider_id.as_deref().and_then(instance_of) else {
            continue;
        };
        let in_kept = group_of
            .get(i)
            .and_then(Option::as_deref)
            .is_some_and(|g| groups.contains(g));
        if in_kept && !r.before.contains(i) {
            new.insert(m.name.clone());
        }
    }
    Ok((earlier, new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_reads_back_as_it_was_kept() {
        let r = Replacement {
            replacing: vec![Replacing {
                node: "ip-10-0-1-5.ec2.internal".into(),
                instance: "i-0abc".into(),
                group: "eks-gpu-1234".into(),
            }],
            before: BTreeSet::from(["i-0abc".to_string(), "i-0def".to_string()]),
        };
        assert_eq!(Replacement::from_json(&r.json()), Some(r.clone()));
        assert_eq!(Replacement::from_json(&json!({"before": []})), None);
        let p = Pending {
            replacement: r,
            verdicts: BTreeMap::from([(
                "ip-10-0-1-5.ec2.internal".to_string(),
                json!({"status": "bad", "reason": "nvidia-smi lists 7 GPUs"}),
            )]),
        };
        assert_eq!(Pending::decode(&p.encode()), Some(p));
        assert_eq!(Pending::decode("1cfe9401-9053"), None);
        assert_eq!(Pending::decode(""), None);
    }
}
