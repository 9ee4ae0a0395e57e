//! What a fleet search judges by and what it concludes about each node.

use std::collections::BTreeMap;

/// What one test of two nodes measured, as read from its output.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The figure (an all_reduce's bus bandwidth, GB/s); `None` when the
    /// output held no figure the check could read.
    pub value: Option<f64>,
    /// The output line the figure came from (or the first line, when none).
    pub line: String,
}

/// When a test's figure is too low.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The instance type's floor: below it is bad whatever the fleet does.
    pub floor: Option<f64>,
    /// Below this fraction of the fleet's median (of round 1) is bad: a
    /// node slower than its peers, though above the floor. The median tells
    /// a slow node only while most pairs are healthy; the floor holds always.
    pub of_median: f64,
    /// The largest fraction of the fleet that may be named bad; more stops
    /// the search (a fabric-wide fault, not bad nodes).
    pub max_bad_fraction: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule {
            floor: None,
            of_median: 0.8,
            max_bad_fraction: 0.25,
        }
    }
}

/// Why a node was named bad.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    /// What its test measured.
    pub value: f64,
    /// The threshold it fell below.
    pub threshold: f64,
    /// Which threshold: `floor` (the instance type's) or `median` (the
    /// fleet's, times the rule's fraction).
    pub against: &'static str,
    /// The healthy node it was tested with.
    pub partner: String,
    /// The output line with the figure.
    pub line: String,
}

/// What the search concluded about one node.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Its tests measured at least the threshold.
    Healthy {
        /// The figure of its last test.
        value: f64,
    },
    /// Its test with a healthy node measured below the threshold.
    Bad(Evidence),
    /// Its test's output held no figure: not known to be healthy.
    Unknown {
        /// The output's line.
        line: String,
    },
}

/// The end of a search.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// Every node judged, after `rounds` rounds.
    Named {
        /// Each node's verdict.
        verdicts: BTreeMap<String, Verdict>,
        /// Rounds of tests run.
        rounds: u32,
    },
    /// More nodes bad than the rule allows: nothing is to be taken out.
    TooMany {
        /// The nodes found bad so far.
        bad: Vec<String>,
        /// The fleet's size.
        of: usize,
        /// The most the rule allows.
        allowed: usize,
    },
    /// No pair measured well enough to give a healthy partner: the fault
    /// is not one node's (or every node's), and pairs cannot tell.
    NoHealthyNode {
        /// Rounds of tests run.
        rounds: u32,
    },
}

impl Finding {
    /// The nodes named bad (none unless [`Finding::Named`]).
    pub fn bad(&self) -> Vec<&str> {
        match self {
            Finding::Named { verdicts, .. } => verdicts
                .iter()
                .filter(|(_, v)| matches!(v, Verdict::Bad(_)))
                .map(|(n, _)| n.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }
}
