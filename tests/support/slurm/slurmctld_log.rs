//! What slurmctld's own log says it did to nodes, for the tests whose
//! clusters are hosts (HyperPod's and ParallelCluster's): Slurm's word,
//! not flow's, for which node was drained and why.

/// The nodes slurmctld's log `log` says were drained: each with the reason
/// it was given, in order, once. A node replaced since (gone from Slurm,
/// or back under its name on a new machine) is still there.
pub fn drained(log: &str) -> Vec<(String, String)> {
    let mut reasons: Vec<(String, String)> = Vec::new();
    let mut drained = Vec::new();
    for line in log.lines() {
        let Some((_, rest)) = line.split_once("update_node: node ") else {
            continue;
        };
        if let Some((node, reason)) = rest.split_once(" reason set to: ") {
            reasons.push((node.to_string(), reason.to_string()));
        } else if let Some((node, state)) = rest.split_once(" state set to ")
            && state.starts_with("DRAIN")
            && let Some(r) = reasons.iter().rev().find(|r| r.0 == node)
            && !drained.contains(r)
        {
            drained.push(r.clone());
        }
    }
    drained
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_is_the_reason_given_before_the_state() {
        let log = "\
[2026-11-28T10:00:00.001] update_node: node n-2 reason set to: flow: busbw 4.4 GB/s < 10 (floor)
[2026-11-28T10:00:00.002] update_node: node n-2 state set to DRAINING
[2026-11-28T10:00:01.000] update_node: node n-3 reason set to: Static node maintenance
[2026-11-28T10:00:01.001] update_node: node n-3 state set to DOWN
[2026-11-28T10:00:02.000] update_node: node n-2 state set to DRAINED
";
        assert_eq!(
            drained(log),
            [(
                "n-2".to_string(),
                "flow: busbw 4.4 GB/s < 10 (floor)".to_string()
            )]
        );
    }
}
