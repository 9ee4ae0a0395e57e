//! The pairwise search (see `fleet`): round 1 tests disjoint pairs; later
//! rounds test each suspect with a node already known healthy. While none
//! is known healthy, the node round 1 left out (an odd count) is tried with
//! the bad pairs' nodes, one at a time, until a pair of them measures well.

use std::collections::{BTreeMap, VecDeque};

use super::verdict::{Evidence, Finding, Measured, Rule, Verdict};

/// A search for the bad nodes of one fleet, driven by its caller: ask for a
/// [`Search::round`], run its pairs, [`Search::record`] what they measured,
/// until [`Search::finding`] has the answer.
#[derive(Debug)]
pub struct Search {
    size: usize,
    rule: Rule,
    rounds: u32,
    /// Round 1's pairs, until handed out.
    first: Vec<(String, String)>,
    /// The pairs handed out and not recorded yet.
    pending: Vec<(String, String)>,
    /// The fleet's median of round 1.
    median: Option<f64>,
    verdicts: BTreeMap<String, Verdict>,
    /// Nodes known healthy: the partners of later rounds.
    healthy: Vec<String>,
    /// Nodes to test with a healthy partner.
    suspects: VecDeque<String>,
    /// The node round 1 left out (an odd count), until measured well.
    unmeasured: Option<String>,
    /// The pair tried while no node is known healthy, in the round handed
    /// out; the pairs tried so, which measured badly or not at all.
    probe: Option<(String, String)>,
    probed: Vec<(String, String)>,
    finding: Option<Finding>,
}

impl Search {
    /// A search over `nodes` (distinct names) judged by `rule`.
    pub fn new(nodes: impl IntoIterator<Item = String>, rule: Rule) -> Search {
        let nodes: Vec<String> = nodes.into_iter().collect();
        let mut search = Search {
            size: nodes.len(),
            rule,
            rounds: 0,
            first: nodes
                .chunks_exact(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect(),
            pending: Vec::new(),
            median: None,
            verdicts: BTreeMap::new(),
            healthy: Vec::new(),
            // An odd node out waits for a healthy partner.
            suspects: nodes.chunks_exact(2).remainder().iter().cloned().collect(),
            unmeasured: nodes.chunks_exact(2).remainder().first().cloned(),
            probe: None,
            probed: Vec::new(),
            finding: None,
        };
        if search.size < 2 {
            search.finding = Some(Finding::NoHealthyNode { rounds: 0 });
        }
        search
    }

    /// The pairs to test now, all at once; `None` once the search is over.
    pub fn round(&mut self) -> Option<Vec<(String, String)>> {
        if self.finding.is_some() {
            return None;
        }
        if !self.pending.is_empty() {
            return Some(self.pending.clone());
        }
        let pairs = if self.rounds == 0 {
            std::mem::take(&mut self.first)
        } else if self.healthy.is_empty() {
            let probe = self
                .next_probe()
                .expect("conclude ends a search without one");
            self.probe = Some(probe.clone());
            vec![probe]
        } else {
            let n = self.suspects.len().min(self.healthy.len());
            (0..n)
                .map(|i| {
                    let suspect = self.suspects.pop_front().expect("counted");
                    (suspect, self.healthy[i].clone())
                })
                .collect()
        };
        self.pending = pairs.clone();
        Some(pairs)
    }

    /// What each pair of the round measured, in the round's order.
    pub fn record(&mut self, measured: Vec<Measured>) {
        assert_eq!(
            measured.len(),
            self.pending.len(),
            "one measurement per pair of the round"
        );
        let pairs = std::mem::take(&mut self.pending);
        let first = self.rounds == 0;
        self.rounds += 1;
        if first {
            self.judge_first(&pairs, &measured);
        } else {
            self.judge_later(&pairs, measured);
        }
        self.conclude();
    }

    /// The answer, once there is one.
    pub fn finding(&self) -> Option<&Finding> {
        self.finding.as_ref()
    }

    /// How many nodes may be named bad.
    fn allowed(&self) -> usize {
        (self.rule.max_bad_fraction * self.size as f64).floor() as usize
    }

    /// The threshold a figure is held to, and which one it is.
    fn threshold(&self) -> (f64, &'static str) {
        let median = self.median.map_or(0.0, |m| m * self.rule.of_median);
        match self.rule.floor {
            Some(floor) if floor >= median => (floor, "floor"),
            _ => (median, "median"),
        }
    }

    fn judge_first(&mut self, pairs: &[(String, String)], measured: &[Measured]) {
        let mut values: Vec<f64> = measured.iter().filter_map(|m| m.value).collect();
        values.sort_by(f64::total_cmp);
        self.median = (!values.is_empty()).then(|| {
            let mid = values.len() / 2;
            if values.len().is_multiple_of(2) {
                (values[mid - 1] + values[mid]) / 2.0
            } else {
                values[mid]
            }
        });
        let (threshold, _) = self.threshold();
        let mut bad_pairs = 0;
        for ((a, b), m) in pairs.iter().zip(measured) {
            match m.value {
                Some(v) if v >= threshold => {
                    for n in [a, b] {
                        self.verdicts
                            .insert(n.clone(), Verdict::Healthy { value: v });
                        self.healthy.push(n.clone());
                    }
                }
                value => {
                    bad_pairs += usize::from(value.is_some());
                    // Either node may be the cause: each is tested again
                    // with a healthy one.
                    self.suspects.push_back(a.clone());
                    self.suspects.push_back(b.clone());
                }
            }
        }
        // Each bad pair holds at least one bad node.
        if bad_pairs > self.allowed() {
            self.finding = Some(Finding::TooMany {
                bad: Vec::new(),
                of: self.size,
                allowed: self.allowed(),
            });
        }
    }

    /// The next pair to try while no node is known healthy: the node no
    /// pair measured with a suspect it was not tried with yet.
    fn next_probe(&self) -> Option<(String, String)> {
        let out = self.unmeasured.as_ref()?;
        self.suspects
            .iter()
            .filter(|s| *s != out)
            .map(|s| (out.clone(), s.clone()))
            .find(|pair| !self.probed.contains(pair))
    }

    /// A tried pair's result: measured well, both nodes are healthy (and
    /// partners for the suspects); else neither is judged yet.
    fn judge_probe(&mut self, pair: (String, String), measured: Measured) {
        let (threshold, _) = self.threshold();
        match measured.value {
            Some(v) if v >= threshold => {
                for n in [&pair.0, &pair.1] {
                    self.suspects.retain(|s| s != n);
                    self.verdicts
                        .insert(n.clone(), Verdict::Healthy { value: v });
                    self.healthy.push(n.clone());
                }
                self.unmeasured = None;
            }
            _ => self.probed.push(pair),
        }
    }

    fn judge_later(&mut self, pairs: &[(String, String)], measured: Vec<Measured>) {
        if let Some(probe) = self.probe.take() {
            let measured = measured
                .into_iter()
                .next()
                .expect("one pair, one measurement");
            self.judge_probe(probe, measured);
            return;
        }
        let (threshold, against) = self.threshold();
        for ((suspect, partner), m) in pairs.iter().zip(measured) {
            let verdict = match m.value {
                None => Verdict::Unknown { line: m.line },
                Some(v) if v >= threshold => {
                    self.healthy.push(suspect.clone());
                    Verdict::Healthy { value: v }
                }
                Some(v) => Verdict::Bad(Evidence {
                    value: v,
                    threshold,
                    against,
                    partner: partner.clone(),
                    line: m.line,
                }),
            };
            self.verdicts.insert(suspect.clone(), verdict);
        }
    }

    fn conclude(&mut self) {
        if self.finding.is_some() {
            return;
        }
        let bad: Vec<String> = self
            .verdicts
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Bad(_)))
            .map(|(n, _)| n.clone())
            .collect();
        if bad.len() > self.allowed() {
            self.finding = Some(Finding::TooMany {
                bad,
                of: self.size,
                allowed: self.allowed(),
            });
        } else if self.suspects.is_empty() {
            self.finding = Some(Finding::Named {
                verdicts: std::mem::take(&mut self.verdicts),
                rounds: self.rounds,
            });
        } else if self.healthy.is_empty() && self.next_probe().is_none() {
            self.finding = Some(Finding::NoHealthyNode {
                rounds: self.rounds,
            });
        }
    }
}

#[cfg(test)]
#[path = "pairwise_tests.rs"]
mod tests;
