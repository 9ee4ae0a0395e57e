//! A node that replaced a bad one, tested in an NCCL pair with a healthy
//! node of the fleet when the step has `pairs`: a node the pairs named
//! slow is not known fast again by its replacement's `check` alone. The
//! pair's bus bandwidth is judged as the search judges a suspect's: below
//! the floor, or below `of_median` × the fleet's median, is bad.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Run;
use crate::contract::{ProviderError, Values};
use crate::fleet::{self, report};

/// The healthy nodes a new node may be paired with, and what its figure
/// is held to.
#[derive(Debug, Clone, Default)]
pub(super) struct Partners {
    /// Nodes known healthy (this run's pairs found them so), or, on a
    /// resume, the nodes Slurm can run a job on that were not replaced.
    pub nodes: Vec<String>,
    /// The median of this run's healthy pairs' figures (`None` on a resume,
    /// which measured none: the floor alone holds then).
    pub median: Option<f64>,
    /// The round number the pairs' jobs are named by (the run's last + 1).
    pub round: u32,
}

impl Partners {
    /// The healthy nodes of `verdicts` whose pairs measured them, and the
    /// median of their figures; `rounds` the rounds the run ran.
    pub(super) fn of_run(verdicts: &BTreeMap<String, Value>, rounds: u32) -> Partners {
        let healthy: Vec<(&String, f64)> = verdicts
            .iter()
            .filter(|(_, v)| v["status"] == "healthy" && v["by"] == "pairs")
            .filter_map(|(n, v)| Some((n, v["value"].as_f64()?)))
            .collect();
        let mut values: Vec<f64> = healthy.iter().map(|(_, v)| *v).collect();
        values.sort_by(f64::total_cmp);
        let median = match values.len() {
            0 => None,
            n if n % 2 == 1 => Some(values[n / 2]),
            n => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
        };
        Partners {
            nodes: healthy.into_iter().map(|(n, _)| n.clone()).collect(),
            median,
            round: rounds + 1,
        }
    }
}

/// The threshold a figure must reach: the floor or `of_median` × the
/// median, whichever is higher (as the search holds a suspect to it).
fn threshold(
    floor: Option<f64>,
    median: Option<f64>,
    of_median: f64,
) -> Option<(f64, &'static str)> {
    let median = median.map(|m| m * of_median);
    match (floor, median) {
        (Some(f), Some(m)) if f >= m => Some((f, "floor")),
        (_, Some(m)) => Some((m, "median")),
        (Some(f), None) => Some((f, "floor")),
        (None, None) => None,
    }
}

/// A pair's figure judged: the new node's verdict (its partner healthy).
fn judged(r: &report::Ran, partner: &str, limit: Option<(f64, &'static str)>) -> Value {
    let m = report::measure(r);
    let Some(value) = m.value else {
        return report::verdict(
            "unknown",
            "pairs",
            format!("its NCCL test with healthy node {partner} printed no bus bandwidth"),
            json!({"partner": partner, "line": m.line}),
        );
    };
    match limit {
        Some((threshold, against)) if value < threshold => report::bad_pair(fleet::Evidence {
            value,
            threshold,
            against,
            partner: partner.to_string(),
            line: m.line,
        }),
        _ => report::verdict(
            "healthy",
            "pairs",
            format!("busbw {value} GB/s with healthy node {partner}"),
            json!({"value": value, "partner": partner, "line": m.line}),
        ),
    }
}

/// Pairs each new node of `new` (its Slurm name, and the key of its
/// verdict in `verdicts`) whose check left it healthy, or that had none,
/// with a partner, all at once, and puts the pairs' verdict into
/// `verdicts` (a healthy one keeps the check's under `check`). Without a
/// partner the new node is unknown: nothing healthy to compare with.
pub(super) async fn pair_new_nodes(
    run: &Run<'_>,
    table: &Values,
    new: &[(String, String)],
    partners: &Partners,
    verdicts: &mut BTreeMap<String, Value>,
) -> Result<(), ProviderError> {
    let fit: Vec<&(String, String)> = new
        .iter()
        .filter(|(_, key)| verdicts.get(key).is_none_or(|v| v["status"] == "healthy"))
        .collect();
    let candidates: Vec<&String> = partners
        .nodes
        .iter()
        .filter(|p| !new.iter().any(|(n, _)| n == *p))
        .collect();
    if fit.is_empty() {
        return Ok(());
    }
    if candidates.is_empty() {
        for (_, key) in fit {
            let v = report::verdict(
                "unknown",
                "pairs",
                "no healthy node to run its NCCL pair with".into(),
                json!({}),
            );
            verdicts.insert(key.clone(), v);
        }
        return Ok(());
    }
    let pairs: Vec<(String, String)> = fit
        .iter()
        .enumerate()
        .map(|(i, (node, _))| (node.clone(), candidates[i % candidates.len()].clone()))
        .collect();
    let ran = run.pair_round(table, partners.round, pairs.clone()).await?;
    let c = &run.spec.common;
    let limit = threshold(c.floor, partners.median, c.of_median);
    let mut said = Vec::new();
    for (((node, partner), r), (_, key)) in pairs.iter().zip(&ran).zip(&fit) {
        let mut v = judged(r, partner, limit);
        said.push(format!(
            "{node}+{partner} {}",
            v["value"]
                .as_f64()
                .map_or("no figure".to_string(), |f| f.to_string())
        ));
        if let Some(c) = verdicts.get(key)
            && v["status"] == "healthy"
        {
            v["check"] = c.clone();
        }
        verdicts.insert(key.clone(), v);
    }
    run.ctx.reporter.event(&format!(
        "NCCL pairs of the new nodes with healthy ones: {}",
        said.join(", ")
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_the_nodes_the_pairs_found_healthy_and_their_median() {
        let verdicts: BTreeMap<String, Value> = [
            (
                "a",
                json!({"status": "healthy", "by": "pairs", "value": 17.0}),
            ),
            (
                "b",
                json!({"status": "healthy", "by": "pairs", "value": 19.0}),
            ),
            ("c", json!({"status": "bad", "by": "pairs", "value": 4.0})),
            ("d", json!({"status": "healthy", "by": "check"})),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        let p = Partners::of_run(&verdicts, 2);
        assert_eq!(p.nodes, ["a", "b"]);
        assert_eq!(p.median, Some(18.0));
        assert_eq!(p.round, 3);
    }

    #[test]
    fn a_new_node_is_held_to_the_higher_of_the_floor_and_the_median() {
        assert_eq!(
            threshold(Some(10.0), Some(20.0), 0.8),
            Some((16.0, "median"))
        );
        assert_eq!(
            threshold(Some(10.0), Some(10.0), 0.8),
            Some((10.0, "floor"))
        );
        assert_eq!(threshold(Some(10.0), None, 0.8), Some((10.0, "floor")));
        assert_eq!(threshold(None, None, 0.8), None);
        // What all_reduce_perf prints, its average bus bandwidth `v`.
        let ran = |v: &str| report::Ran {
            label: "job 7".into(),
            failed: None,
            text: include_str!("../../../../scripts/local-cloud/outputs/all_reduce_perf.txt")
                .lines()
                .map(|l| match l.contains("Avg bus bandwidth") {
                    true => format!("# Avg bus bandwidth    : {v}\n"),
                    false => format!("{l}\n"),
                })
                .collect(),
        };
        let slow = judged(&ran("4.4763"), "n1", Some((10.0, "floor")));
        assert_eq!(slow["status"], "bad");
        assert_eq!(slow["against"], "floor");
        assert_eq!(slow["partner"], "n1");
        let fast = judged(&ran("17.9053"), "n1", Some((10.0, "floor")));
        assert_eq!(fast["status"], "healthy", "{fast}");
        assert_eq!(fast["value"], 17.9053);
        let none = report::Ran {
            text: "NCCL WARN no fabric\n".into(),
            ..ran("1")
        };
        assert_eq!(judged(&none, "n1", None)["status"], "unknown");
    }
}
