use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// A fleet whose pair tests run at the slower node's speed, as an
/// all_reduce between two nodes does; nodes in `silent` print no figure.
struct Fleet {
    speed: BTreeMap<String, f64>,
    silent: BTreeSet<String>,
    /// Every pair tested, round by round.
    tested: Vec<Vec<(String, String)>>,
}

impl Fleet {
    fn new(n: usize, planted: &[(usize, f64)]) -> Fleet {
        let mut speed: BTreeMap<String, f64> = (0..n).map(|i| (name(i), 180.0)).collect();
        for (i, s) in planted {
            speed.insert(name(*i), *s);
        }
        Fleet {
            speed,
            silent: BTreeSet::new(),
            tested: Vec::new(),
        }
    }

    fn nodes(&self) -> Vec<String> {
        self.speed.keys().cloned().collect()
    }

    /// Runs the search to its end.
    fn search(&mut self, rule: Rule) -> Finding {
        let mut search = Search::new(self.nodes(), rule);
        while let Some(pairs) = search.round() {
            let measured = pairs
                .iter()
                .map(|(a, b)| {
                    if self.silent.contains(a) || self.silent.contains(b) {
                        return Measured {
                            value: None,
                            line: "# nThread 1 nGpus 8".into(),
                        };
                    }
                    let v = self.speed[a].min(self.speed[b]);
                    Measured {
                        value: Some(v),
                        line: format!("# Avg bus bandwidth    : {v}"),
                    }
                })
                .collect();
            self.tested.push(pairs);
            search.record(measured);
        }
        search
            .finding()
            .expect("a search ends with a finding")
            .clone()
    }
}

fn name(i: usize) -> String {
    format!("node-{i:04}")
}

fn rounds(f: &Finding) -> u32 {
    match f {
        Finding::Named { rounds, .. } | Finding::NoHealthyNode { rounds } => *rounds,
        Finding::TooMany { .. } => panic!("{f:?}"),
    }
}

#[test]
fn one_slow_node_among_512_is_named_in_two_rounds_with_its_evidence() {
    let mut fleet = Fleet::new(512, &[(301, 45.0)]);
    let found = fleet.search(Rule::default());
    assert_eq!(found.bad(), vec!["node-0301"]);
    assert_eq!(rounds(&found), 2);
    assert!(rounds(&found) as f64 <= 2.0 + 512f64.log2());
    // Round 1: 256 disjoint pairs; round 2: the bad pair's two nodes, each
    // with a healthy partner.
    assert_eq!(fleet.tested[0].len(), 256);
    assert_eq!(fleet.tested[1].len(), 2);
    let Finding::Named { verdicts, .. } = &found else {
        unreachable!()
    };
    let Verdict::Bad(e) = &verdicts["node-0301"] else {
        panic!("{verdicts:?}")
    };
    assert_eq!(e.value, 45.0);
    assert_eq!(e.against, "median");
    assert_eq!(e.threshold, 180.0 * 0.8);
    assert_eq!(e.line, "# Avg bus bandwidth    : 45");
    assert_ne!(
        e.partner, "node-0300",
        "its partner is a node of a good pair"
    );
    // Its round-1 partner is cleared by its own test with a healthy node.
    assert_eq!(verdicts["node-0300"], Verdict::Healthy { value: 180.0 });
    assert_eq!(verdicts.len(), 512);
}

#[test]
fn every_fleet_size_names_its_one_bad_node_within_two_plus_log2_n_rounds() {
    let rule = Rule {
        floor: Some(100.0),
        ..Rule::default()
    };
    for n in [4, 5, 16, 17, 100, 1000] {
        for bad in [0, n / 2, n - 1] {
            let mut fleet = Fleet::new(n, &[(bad, 60.0)]);
            let found = fleet.search(rule.clone());
            assert_eq!(found.bad(), vec![name(bad).as_str()], "n={n} bad={bad}");
            assert!(
                rounds(&found) as f64 <= 2.0 + (n as f64).log2(),
                "n={n}: {found:?}"
            );
        }
    }
}

#[test]
fn two_nodes_one_slow_cannot_tell_which() {
    let rule = Rule {
        floor: Some(100.0),
        max_bad_fraction: 0.5,
        ..Rule::default()
    };
    let mut fleet = Fleet::new(2, &[(1, 60.0)]);
    assert_eq!(fleet.search(rule), Finding::NoHealthyNode { rounds: 1 });
}

#[test]
fn the_median_tells_a_slow_node_only_while_most_pairs_are_healthy() {
    // Without a floor, a fleet mostly slow looks normal to its own median:
    // the floor is what holds then.
    let slow: Vec<(usize, f64)> = [0, 2, 4].iter().map(|i| (*i, 60.0)).collect();
    let mut fleet = Fleet::new(6, &slow);
    assert!(fleet.search(Rule::default()).bad().is_empty());
}

#[test]
fn both_nodes_of_one_pair_bad_are_each_named() {
    let mut fleet = Fleet::new(16, &[(4, 50.0), (5, 90.0)]);
    let found = fleet.search(Rule::default());
    assert_eq!(found.bad(), vec!["node-0004", "node-0005"]);
    assert_eq!(rounds(&found), 2);
}

#[test]
fn a_node_under_the_floor_is_bad_even_when_the_fleet_is_all_slow_alike() {
    // Every node at 150, one at 140: within the median's 80 %, under a floor of 145.
    let mut fleet = Fleet::new(
        8,
        &[
            (0, 150.0),
            (1, 150.0),
            (2, 150.0),
            (3, 140.0),
            (4, 150.0),
            (5, 150.0),
            (6, 150.0),
            (7, 150.0),
        ],
    );
    let rule = Rule {
        floor: Some(145.0),
        ..Rule::default()
    };
    let found = fleet.search(rule);
    assert_eq!(found.bad(), vec!["node-0003"]);
    let Finding::Named { verdicts, .. } = &found else {
        unreachable!()
    };
    let Verdict::Bad(e) = &verdicts["node-0003"] else {
        panic!()
    };
    assert_eq!((e.against, e.threshold), ("floor", 145.0));
}

#[test]
fn a_node_whose_output_has_no_figure_is_unknown_not_healthy() {
    let mut fleet = Fleet::new(8, &[]);
    fleet.silent.insert(name(6));
    let found = fleet.search(Rule::default());
    let Finding::Named { verdicts, .. } = &found else {
        panic!("{found:?}")
    };
    assert!(
        matches!(&verdicts["node-0006"], Verdict::Unknown { line } if line.contains("nThread")),
        "{verdicts:?}"
    );
    // Its round-1 partner is cleared by a second test.
    assert_eq!(verdicts["node-0007"], Verdict::Healthy { value: 180.0 });
    assert!(found.bad().is_empty());
}

#[test]
fn more_bad_nodes_than_the_rule_allows_stops_without_naming_half_the_fleet() {
    // 5 of 16 slow in distinct pairs: more bad pairs than 25 % of 16 allows.
    let planted: Vec<(usize, f64)> = [0, 2, 4, 6, 8].iter().map(|i| (*i, 40.0)).collect();
    let mut fleet = Fleet::new(16, &planted);
    let found = fleet.search(Rule {
        floor: Some(100.0),
        ..Rule::default()
    });
    assert_eq!(
        found,
        Finding::TooMany {
            bad: Vec::new(),
            of: 16,
            allowed: 4
        }
    );
    assert_eq!(fleet.tested.len(), 1, "stopped after the pairs showed it");
}

#[test]
fn the_node_an_odd_count_leaves_out_finds_a_healthy_partner_when_the_only_pair_is_slow() {
    // 3 nodes: round 1 pairs (0,1), slow; node 2 was left out. It is tried
    // with 0, then (0 the slow one) with 1; the healthy pair found is the
    // partner that names the slow node with its evidence.
    let rule = Rule {
        floor: Some(100.0),
        max_bad_fraction: 0.5,
        ..Rule::default()
    };
    for slow in [0, 1] {
        let mut fleet = Fleet::new(3, &[(slow, 45.0)]);
        let found = fleet.search(rule.clone());
        assert_eq!(found.bad(), vec![name(slow)], "{found:?}");
        let Finding::Named { verdicts, .. } = &found else {
            panic!("{found:?}")
        };
        let Verdict::Bad(evidence) = &verdicts[&name(slow)] else {
            panic!("{verdicts:?}")
        };
        assert_eq!((evidence.value, evidence.threshold), (45.0, 100.0));
        assert!(matches!(verdicts[&name(2)], Verdict::Healthy { .. }));
        assert_eq!(fleet.tested[0], vec![(name(0), name(1))]);
        assert_eq!(fleet.tested[1], vec![(name(2), name(0))]);
        if slow == 0 {
            // 2 with the slow 0 measures badly: 2 is tried with 1 next.
            assert_eq!(fleet.tested[2], vec![(name(2), name(1))]);
        }
        assert_eq!(
            fleet.tested.len(),
            if slow == 0 { 4 } else { 3 },
            "{:?}",
            fleet.tested
        );
    }
    // Node 2 slow too: no pair measures well, nothing is named.
    let mut fleet = Fleet::new(3, &[(0, 45.0), (2, 45.0)]);
    assert_eq!(
        fleet.search(rule.clone()),
        Finding::NoHealthyNode { rounds: 3 }
    );
    // An even count leaves no node out: nothing to try.
    let mut fleet = Fleet::new(2, &[(1, 60.0)]);
    assert_eq!(fleet.search(rule), Finding::NoHealthyNode { rounds: 1 });
}

#[test]
fn a_fabric_fault_on_every_node_finds_no_healthy_partner() {
    let rule = Rule {
        floor: Some(100.0),
        max_bad_fraction: 1.0,
        ..Rule::default()
    };
    let mut fleet = Fleet::new(6, &(0..6).map(|i| (i, 45.0)).collect::<Vec<_>>());
    assert_eq!(fleet.search(rule), Finding::NoHealthyNode { rounds: 1 });
}

#[test]
fn suspects_wait_for_healthy_partners_when_there_are_fewer() {
    // 10 nodes: pairs (0,1) (2,3) (4,5) (6,7) (8,9); 0, 2, 4 slow → 6
    // suspects, 4 healthy partners: two later rounds.
    let rule = Rule {
        floor: Some(100.0),
        max_bad_fraction: 0.5,
        ..Rule::default()
    };
    let mut fleet = Fleet::new(10, &[(0, 40.0), (2, 40.0), (4, 40.0)]);
    let found = fleet.search(rule);
    assert_eq!(found.bad(), vec!["node-0000", "node-0002", "node-0004"]);
    assert_eq!(rounds(&found), 3);
    // No node is ever tested with two partners in one round.
    for round in &fleet.tested {
        let mut seen = BTreeSet::new();
        for (a, b) in round {
            assert!(seen.insert(a) && seen.insert(b), "{round:?}");
        }
    }
}
