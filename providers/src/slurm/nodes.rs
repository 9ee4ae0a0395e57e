//! A Slurm cluster's nodes (for `slurm.node_check`, `slurm.job`'s restarts
//! and the replacement of a bad node), as Slurm's own commands tell them:
//! `scontrol show hostnames` expands a hostlist, `sinfo -N` gives each
//! node's state, features and reason; a bad node is drained with
//! `scontrol update State=DRAIN Reason="flow: …"` and, on destroy, resumed
//! only while that reason is still flow's.

use std::collections::BTreeMap;

use crate::contract::ProviderError;
use crate::slurm::remote::{Ran, Remote};

/// What a reason flow writes starts with.
pub(super) const REASON_PREFIX: &str = "flow: ";

/// The longest reason written: Slurm keeps it whole, but `sinfo` and
/// `scontrol show node` print it on one line.
const REASON_MAX: usize = 240;

/// A node as `sinfo -N` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlurmNode {
    /// Its name.
    pub name: String,
    /// Its state, long form (`idle`, `mixed`, `drained`, `down*`).
    pub state: String,
    /// Its features (ParallelCluster's `static,p4d.24xlarge,…`).
    pub features: Vec<String>,
    /// Why it is drained or down, when it is.
    pub reason: Option<String>,
}

impl SlurmNode {
    /// Whether Slurm would start a job there now or soon: not drained,
    /// down, failed, in maintenance, or silent (`*`).
    pub fn usable(&self) -> bool {
        let s = self.state.to_ascii_lowercase();
        !s.ends_with('*')
            && !["drain", "down", "fail", "maint", "inval", "reboot", "unk"]
                .iter()
                .any(|w| s.contains(w))
    }

    /// Whether it is drained (or draining) with a reason flow wrote.
    pub fn drained_by_flow(&self) -> bool {
        self.state.to_ascii_lowercase().contains("drain")
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with(REASON_PREFIX))
    }

    /// The instance type its features name (ParallelCluster gives each
    /// static node `static,p4d.24xlarge,p4d,…`): the first with a dot.
    pub fn instance_type(&self) -> Option<&str> {
        self.features.iter().map(String::as_str).find(|f| {
            f.contains('.')
                && f.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
        })
    }
}

/// The `sinfo -N -o` format [`parse_sinfo`] reads: name, state, features,
/// reason (last: it may hold the separator).
pub(super) const SINFO_FORMAT: &str = "%N|%T|%f|%E";

/// The lines of `sinfo -h -N -o "%N|%T|%f|%E"`, one per node (a node in
/// several partitions is listed once).
pub(super) fn parse_sinfo(text: &str) -> Vec<SlurmNode> {
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.trim().splitn(4, '|');
        let (Some(name), Some(state), Some(features), reason) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        let reason = reason
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != "none" && *r != "(null)")
            .map(str::to_string);
        seen.entry(name.to_string()).or_insert(SlurmNode {
            name: name.to_string(),
            state: state.trim().to_string(),
            features: features
                .split(',')
                .map(str::trim)
                .filter(|f| !f.is_empty() && *f != "(null)")
                .map(str::to_string)
                .collect(),
            reason,
        });
    }
    seen.into_values().collect()
}

/// A Slurm command that failed.
fn failed(remote: &Remote, what: &str, ran: &Ran) -> ProviderError {
    ProviderError::retryable(format!(
        "{what} on {} failed: {}",
        remote.describe(),
        ran.complaint()
    ))
    .with_help("check that slurmctld is up (`scontrol ping` on the cluster)")
}

/// The names `hostlist` stands for (`scontrol show hostnames`).
pub(crate) async fn expand(remote: &Remote, hostlist: &str) -> Result<Vec<String>, ProviderError> {
    let ran = remote
        .run(&["scontrol", "show", "hostnames", hostlist], None)
        .await?;
    if !ran.ok() {
        return Err(ProviderError::invalid(format!(
            "`scontrol show hostnames {hostlist}` on {} refused it: {}",
            remote.describe(),
            ran.complaint()
        ))
        .with_help("give `nodes` as a Slurm hostlist, e.g. \"compute-[1-16]\""));
    }
    Ok(ran.stdout.split_whitespace().map(str::to_string).collect())
}

/// Every node `sinfo` lists (of `partition`, when given).
pub(crate) async fn list(
    remote: &Remote,
    partition: Option<&str>,
) -> Result<Vec<SlurmNode>, ProviderError> {
    let mut argv = vec!["sinfo", "-h", "-N", "-o", SINFO_FORMAT];
    if let Some(p) = partition {
        argv.extend(["-p", p]);
    }
    let ran = remote.run(&argv, None).await?;
    if !ran.ok() {
        return Err(failed(remote, "sinfo", &ran));
    }
    Ok(parse_sinfo(&ran.stdout))
}

/// The reason flow writes for a bad node: `flow: ` and its verdict.
pub(crate) fn reason(why: &str) -> String {
    let mut r = format!("{REASON_PREFIX}{why}");
    if r.len() > REASON_MAX {
        let mut end = REASON_MAX - 1;
        while !r.is_char_boundary(end) {
            end -= 1;
        }
        r.truncate(end);
        r.push('…');
    }
    r
}

/// Drains `node` with `reason` (jobs running there finish; none starts).
pub(crate) async fn drain(remote: &Remote, node: &str, reason: &str) -> Result<(), ProviderError> {
    let name = format!("NodeName={node}");
    let why = format!("Reason={reason}");
    let ran = remote
        .run(&["scontrol", "update", &name, "State=DRAIN", &why], None)
        .await?;
    if !ran.ok() {
        return Err(failed(remote, &format!("scontrol update {name} State=DRAIN"), &ran)
            .with_help("draining needs Slurm's operator or admin rights: run flow as SlurmUser or root on the head node, or give it `sacctmgr` admin level"));
    }
    Ok(())
}

/// Sets `node` DOWN with `reason` (jobs there are killed and requeued):
/// on ParallelCluster, what has clustermgtd replace a static node.
pub(super) async fn down(remote: &Remote, node: &str, reason: &str) -> Result<(), ProviderError> {
    let name = format!("NodeName={node}");
    let why = format!("Reason={reason}");
    let ran = remote
        .run(&["scontrol", "update", &name, "State=DOWN", &why], None)
        .await?;
    if !ran.ok() {
        return Err(failed(remote, &format!("scontrol update {name} State=DOWN"), &ran)
            .with_help("setting a node DOWN needs Slurm's operator or admin rights: run flow as SlurmUser or root on the head node"));
    }
    Ok(())
}

/// Each node's address (`NodeAddr`) and state flags (`State`, as
/// `DOWN+DRAIN`: sinfo prints a node DOWN and drained as `drained`), from
/// `scontrol -o show node`: on ParallelCluster, the address is the private
/// address of the instance behind the node.
pub(super) async fn addresses(
    remote: &Remote,
) -> Result<BTreeMap<String, (String, String)>, ProviderError> {
    let ran = remote
        .run(&["scontrol", "-o", "show", "node"], None)
        .await?;
    if !ran.ok() {
        return Err(failed(remote, "scontrol show node", &ran));
    }
    Ok(parse_show_node(&ran.stdout))
}

/// The lines of `scontrol -o show node`: name → (NodeAddr, State).
fn parse_show_node(text: &str) -> BTreeMap<String, (String, String)> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .map(str::to_string)
            };
            Some((
                field("NodeName=")?,
                (field("NodeAddr=")?, field("State=").unwrap_or_default()),
            ))
        })
        .collect()
}

/// Resumes `node`.
pub(super) async fn resume(remote: &Remote, node: &str) -> Result<(), ProviderError> {
    let name = format!("NodeName={node}");
    let ran = remote
        .run(&["scontrol", "update", &name, "State=RESUME"], None)
        .await?;
    if !ran.ok() {
        return Err(failed(
            remote,
            &format!("scontrol update {name} State=RESUME"),
            &ran,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // As Slurm 22.05's `sinfo -h -N -o "%N|%T|%f|%E"` prints them.
    const SINFO: &str = "c1|idle|static,p4d.24xlarge,p4d|none\n\
        c2|drained|static,p4d.24xlarge,p4d|flow: nvidia-smi lists 7 GPUs | of 8\n\
        c2|drained|static,p4d.24xlarge,p4d|flow: nvidia-smi lists 7 GPUs | of 8\n\
        c3|down*|(null)|Not responding\n\
        c4|mixed|(null)|none\n\
        c5|draining|(null)|admin: bad DIMM\n";

    #[test]
    fn sinfo_lines_give_state_features_and_reason() {
        let nodes = parse_sinfo(SINFO);
        assert_eq!(nodes.len(), 5);
        let [c1, c2, c3, c4, c5] = &nodes[..] else {
            panic!()
        };
        assert!(c1.usable() && c4.usable());
        assert!(!c2.usable() && !c3.usable() && !c5.usable());
        assert_eq!(c1.instance_type(), Some("p4d.24xlarge"));
        assert_eq!(c1.reason, None);
        assert_eq!(c3.instance_type(), None);
        assert!(c3.features.is_empty());
        assert_eq!(
            c2.reason.as_deref(),
            Some("flow: nvidia-smi lists 7 GPUs | of 8")
        );
        assert!(c2.drained_by_flow());
        assert!(
            !c5.drained_by_flow(),
            "an administrator's reason is not flow's"
        );
        assert!(!c3.drained_by_flow());
    }

    #[test]
    fn show_node_gives_each_nodes_address_and_state() {
        // As Slurm 22.05's `scontrol -o show node` prints them (cut).
        let text = "NodeName=q-st-cr-1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 \
            NodeAddr=10.0.1.6 NodeHostName=ip-10-0-1-6 Version=22.05.8 State=DOWN+DRAIN \
            ThreadsPerCore=1 Reason=flow: nvidia-smi lists 7 GPUs [root@2026-11-28T06:06:24]\n\
            NodeName=q-st-cr-2 Arch=x86_64 NodeAddr=10.0.1.7 NodeHostName=ip-10-0-1-7 State=IDLE\n";
        let nodes = parse_show_node(text);
        assert_eq!(
            nodes["q-st-cr-1"],
            ("10.0.1.6".to_string(), "DOWN+DRAIN".to_string())
        );
        assert_eq!(nodes["q-st-cr-2"], ("10.0.1.7".into(), "IDLE".into()));
    }

    #[test]
    fn reasons_start_with_flow_and_stay_short() {
        assert_eq!(reason("busbw 4.4 GB/s"), "flow: busbw 4.4 GB/s");
        let long = reason(&"é".repeat(400));
        assert!(
            long.len() <= REASON_MAX + 3 && long.ends_with('…'),
            "{}",
            long.len()
        );
    }
}
