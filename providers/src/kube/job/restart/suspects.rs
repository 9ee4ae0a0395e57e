//! The suspect nodes of a failed or hung `kube.job` attempt, from
//! Kubernetes' own word first: each node its pods ran on (`spec.nodeName`)
//! that is gone from the cluster or not Ready (its kubelet stopped posting
//! status: the node lifecycle controller sets `Ready` to `Unknown`) is
//! **bad**; the nodes of its failed pods (a container that exited
//! non-zero, a pod evicted or deleted under it) and those an Xid line or an
//! NCCL warning naming a peer in its logs points at
//! ([`crate::fleet::suspects`]) are suspects, **unknown** until a check
//! says more. With no suspect, every node of the attempt is unknown.

use std::collections::BTreeMap;

use ::kube::Client;
use ::kube::api::Api;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::contract::ProviderError;
use crate::fleet::suspects::pointed;
use crate::kube::errors::kube as kube_error;

/// What an attempt's pods, their nodes and its logs say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Suspects {
    /// The nodes its pods ran on, sorted.
    pub nodes: Vec<String>,
    /// Found bad by Kubernetes' word: node, why, a short reason for the taint.
    pub bad: Vec<(String, String, String)>,
    /// Named, not known bad: node and why.
    pub named: Vec<(String, String)>,
    /// The nodes that still exist, by name.
    pub listed: BTreeMap<String, Node>,
}

impl Suspects {
    /// Whether nothing named a node (every node of the attempt is unknown).
    pub fn none_named(&self) -> bool {
        self.bad.is_empty() && self.named.is_empty()
    }

    /// The suspect nodes (every node of the attempt when none was named).
    pub fn suspect_nodes(&self) -> Vec<String> {
        if self.none_named() {
            return self.nodes.clone();
        }
        let mut out: Vec<String> = self.bad.iter().map(|b| b.0.clone()).collect();
        for (n, _) in &self.named {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Whether `node` is bad already.
    pub fn is_bad(&self, node: &str) -> bool {
        self.bad.iter().any(|b| b.0 == node)
    }

    /// What named the suspects, in a line.
    pub fn said(&self) -> String {
        if self.none_named() {
            return match self.nodes.len() {
                0 => "no pod of it was on a node".into(),
                _ => format!(
                    "nothing named a node: its nodes {} are unknown",
                    self.nodes.join(", ")
                ),
            };
        }
        let mut parts: Vec<String> = self.bad.iter().map(|b| b.1.clone()).collect();
        parts.extend(self.named.iter().map(|n| n.1.clone()));
        parts.join("; ")
    }
}

/// Why `node` is bad by Kubernetes' word: gone, or its `Ready` condition
/// not `True`; with a short reason for the taint.
fn node_word(name: &str, node: Option<&Node>) -> Option<(String, String)> {
    let Some(node) = node else {
        return Some((
            format!("node {name} is gone from the cluster"),
            "node-gone".into(),
        ));
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => None,
        Some(c) => Some((
            format!(
                "node {name} is NotReady (Ready={}{}{})",
                c.status,
                c.reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(", {r}")),
                c.message
                    .as_deref()
                    .map_or(String::new(), |m| format!(": {m}"))
            ),
            "node-not-ready".into(),
        )),
        // A node that never said it is Ready (no kubelet yet) is left to
        // the check.
        None => None,
    }
}

/// The lines of `text` that name one of `nodes` (an Xid line, an NCCL
/// warning naming a peer), the first for each node: what a hung
/// attempt's record keeps for a resume to name the same suspects.
pub(crate) fn naming_lines(text: &str, nodes: &[String]) -> Vec<String> {
    let mut named = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let fresh = pointed(line, nodes)
            .into_iter()
            .filter(|p| named.insert(p.node.clone()))
            .count();
        if fresh > 0 {
            out.push(line.to_string());
        }
    }
    out
}

/// Why `pod` failed, in short, when it did: a container that exited
/// non-zero, the pod failed as a whole (evicted), or deleted under the job.
fn pod_failure(pod: &Pod) -> Option<String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(format!("pod {name} was being deleted"));
    }
    let status = pod.status.as_ref()?;
    for cs in status.container_statuses.iter().flatten() {
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref())
            && t.exit_code != 0
        {
            return Some(format!(
                "pod {name} exited with code {}{}",
                t.exit_code,
                t.reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(" ({r})"))
            ));
        }
    }
    (status.phase.as_deref() == Some("Failed")).then(|| {
        format!(
            "pod {name} failed{}",
            status
                .reason
                .as_deref()
                .map_or(String::new(), |r| format!(" ({r})"))
        )
    })
}

/// The suspects of an attempt whose pods were `pods` (on `nodes`, too,
/// when its pods are gone) and whose logs are `text`.
pub(crate) async fn find(
    client: &Client,
    pods: &[Pod],
    nodes: &[String],
    text: &str,
) -> Result<Suspects, ProviderError> {
    let mut s = Suspects {
        nodes: nodes.to_vec(),
        ..Suspects::default()
    };
    for p in pods {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone())
            && !s.nodes.contains(&n)
        {
            s.nodes.push(n);
        }
    }
    s.nodes.sort();
    let api = Api::<Node>::all(client.clone());
    for n in &s.nodes {
        let node = api
            .get_opt(n)
            .await
            .map_err(|e| kube_error(&format!("read node `{n}`"), e))?;
        if let Some((why, short)) = node_word(n, node.as_ref()) {
            s.bad.push((n.clone(), why, short));
        }
        if let Some(node) = node {
            s.listed.insert(n.clone(), node);
        }
    }
    let mut failed_on: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in pods {
        if let (Some(n), Some(why)) = (
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            pod_failure(p),
        ) {
            failed_on.entry(n).or_default().push(why);
        }
    }
    for hit in pointed(text, &s.nodes) {
        if !s.is_bad(&hit.node) && !s.named.iter().any(|(n, _)| *n == hit.node) {
            s.named.push((hit.node, hit.why));
        }
    }
    for (n, whys) in failed_on {
        if !s.is_bad(&n) && !s.named.iter().any(|(m, _)| *m == n) {
            s.named
                .push((n.clone(), format!("{} on {n}", whys.join(", "))));
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": "NodeStatusUnknown",
             "message": "Kubelet stopped posting node status."}]}}))
        .unwrap()
    }

    #[test]
    fn kubernetes_word_makes_a_node_bad() {
        assert!(node_word("n", Some(&node("True"))).is_none());
        let (why, short) = node_word("n", Some(&node("Unknown"))).unwrap();
        assert_eq!(
            why,
            "node n is NotReady (Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting node status.)"
        );
        assert_eq!(short, "node-not-ready");
        assert_eq!(node_word("n", None).unwrap().1, "node-gone");
    }

    #[test]
    fn a_hung_attempts_record_keeps_the_first_line_naming_each_node() {
        let nodes: Vec<String> = ["g0", "g1", "g2"].map(String::from).to_vec();
        let text = "[RANK 0] Epoch 3 | Loss: 0.5\n\
            g0:41:77 [0] NCCL WARN NET/Socket : peer g2<43562> sent nothing for 0 ms\n\
            g1:41:77 [0] NCCL WARN NET/Socket : peer g2<43562> sent nothing for 0 ms\n\
            g0:41:77 [0] NCCL WARN NET/Socket : peer g2<43562> sent nothing for 250 ms\n";
        let lines = naming_lines(text, &nodes);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("peer g2<43562> sent nothing for 0 ms"));
        // What a resume reads from them names the same node.
        let again: Vec<String> = pointed(&lines.join("\n"), &nodes)
            .into_iter()
            .map(|p| p.node)
            .collect();
        assert_eq!(again, ["g2"]);
    }

    #[test]
    fn a_failed_pod_says_why() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "w-1"},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "c", "image": "i",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}))
        .unwrap();
        assert_eq!(
            pod_failure(&p).unwrap(),
            "pod w-1 exited with code 1 (Error)"
        );
        let ok: Pod = serde_json::from_value(json!({"metadata": {"name": "w-0"},
            "status": {"phase": "Running"}}))
        .unwrap();
        assert!(pod_failure(&ok).is_none());
        let s = Suspects {
            nodes: vec!["a".into(), "b".into()],
            ..Suspects::default()
        };
        assert_eq!(s.suspect_nodes(), ["a", "b"]);
        assert!(s.said().contains("unknown"));
    }
}
