//! What a node check step does with its platform's jobs, the same on every
//! platform: the rounds of the pairwise search (each round's pairs run by
//! the caller, all at once), the check's and the pairs' verdicts put
//! together, and the step's end: too many bad nodes fails taking none out,
//! policy `fail` fails naming them, unknown nodes fail after the policy.

use std::collections::BTreeMap;
use std::future::Future;

use serde_json::{Value, json};

use super::report::{Ran, bad_pair, evidence, measure, record, verdict, with_status};
use super::spec::Platform;
use super::{Finding, Measured, Rule, Search, Verdict};
use crate::contract::{OpContext, ProviderError};

/// The nodes fit for the pairs: those the check did not find bad or could
/// not read (every node, without a check).
pub fn fit_for_pairs(names: &[String], verdicts: &BTreeMap<String, Value>) -> Vec<String> {
    names
        .iter()
        .filter(|n| verdicts.get(*n).is_none_or(|v| v["status"] == "healthy"))
        .cloned()
        .collect()
}

/// Runs the pairwise search over the nodes of `verdicts` fit for it
/// (`names` in order), each round's pairs through `run` (given the round's
/// number and its pairs, it answers what each pair's job came to, in
/// order), and puts each node's pairs verdict into `verdicts` (a healthy
/// one keeps its check's verdict under `check`). Returns the rounds run.
/// Too many bad nodes, or none healthy to compare with, fails, the checks'
/// verdicts sent to the run history first.
pub async fn pairs<F, Fut>(
    ctx: &OpContext,
    names: &[String],
    verdicts: &mut BTreeMap<String, Value>,
    rule: Rule,
    mut run: F,
) -> Result<u32, ProviderError>
where
    F: FnMut(u32, Vec<(String, String)>) -> Fut,
    Fut: Future<Output = Result<Vec<Ran>, ProviderError>>,
{
    let mut search = Search::new(fit_for_pairs(names, verdicts), rule);
    let mut round = 0;
    while let Some(pairs) = search.round() {
        round += 1;
        let ran = run(round, pairs.clone())
            .await
            .inspect_err(|_| record(ctx, verdicts))?;
        let measured: Vec<Measured> = ran.iter().map(measure).collect();
        let said: Vec<String> = pairs
            .iter()
            .zip(&measured)
            .map(|((a, b), m)| match m.value {
                Some(v) => format!("{a}+{b} {v}"),
                None => format!("{a}+{b} no figure"),
            })
            .collect();
        ctx.reporter
            .event(&format!("NCCL round {round}: {}", said.join(", ")));
        search.record(measured);
    }
    let finding = search
        .finding()
        .cloned()
        .expect("a search ends with a finding");
    let err = match finding {
        Finding::Named { verdicts: found, rounds } => {
            for (node, v) in found {
                let v = match v {
                    Verdict::Healthy { value } => verdict("healthy", "pairs", format!("busbw {value} GB/s"), json!({"value": value})),
                    Verdict::Unknown { line } => verdict("unknown", "pairs", "its NCCL test printed no bus bandwidth".into(), json!({"line": line})),
                    Verdict::Bad(e) => bad_pair(e),
                };
                let v = match verdicts.get(&node) {
                    Some(c) if v["status"] == "healthy" => {
                        let mut v = v;
                        v["check"] = c.clone();
                        v
                    }
                    _ => v,
                };
                verdicts.insert(node, v);
            }
            return Ok(rounds);
        }
        Finding::TooMany { bad, of, allowed } => ProviderError::fatal(format!(
            "the NCCL pairs found more bad nodes than max_bad_fraction allows ({} pair(s) or node(s) below the rule of {of}, at most {allowed}){}: no node was taken out",
            bad.len().max(allowed + 1),
            if bad.is_empty() { String::new() } else { format!(": {}", bad.join(", ")) }
        )).with_help("a fault this wide is the fabric's or the test's, not a node's: read the rounds in `flow logs FILE STEP`"),
        Finding::NoHealthyNode { rounds } => ProviderError::fatal(format!(
            "no NCCL pair measured well after {rounds} round(s): no node is known healthy to compare with, so none is named or taken out"
        )).with_help("read the pairs' output in `flow logs FILE STEP`; check `pairs.floor` against the instance type"),
    };
    record(ctx, verdicts);
    Err(err)
}

/// Every node's verdict, judged: what the step does next.
#[derive(Debug)]
pub struct Judged<'a> {
    /// The nodes checked, in order.
    pub names: &'a [String],
    /// Each node's verdict.
    pub verdicts: &'a BTreeMap<String, Value>,
    /// The nodes found bad.
    pub bad: Vec<String>,
    /// The nodes whose checks could not be read.
    pub unknown: Vec<String>,
}

impl<'a> Judged<'a> {
    /// Sends every verdict to the run history and logs each bad and unknown
    /// node with its evidence; then fails, taking none out, when more nodes
    /// are bad than `max_bad_fraction` of `names` allows.
    pub fn new(
        ctx: &OpContext,
        names: &'a [String],
        verdicts: &'a BTreeMap<String, Value>,
        max_bad_fraction: f64,
    ) -> Result<Judged<'a>, ProviderError> {
        let judged = Judged {
            names,
            verdicts,
            bad: with_status(verdicts, "bad"),
            unknown: with_status(verdicts, "unknown"),
        };
        record(ctx, verdicts);
        for (word, nodes) in [("bad", &judged.bad), ("unknown", &judged.unknown)] {
            for n in nodes {
                ctx.reporter.event(&format!(
                    "{word} node {}",
                    evidence(verdicts, std::slice::from_ref(n))
                ));
            }
        }
        let allowed = (max_bad_fraction * names.len() as f64).floor() as usize;
        if judged.bad.len() > allowed {
            return Err(ProviderError::fatal(format!(
                "{} of {} nodes are bad, more than max_bad_fraction {max_bad_fraction} allows ({allowed}): no node was taken out; {}",
                judged.bad.len(), names.len(), evidence(verdicts, &judged.bad)
            )).with_help("a fault this wide is rarely the nodes' own: look at the fabric and the checks before taking nodes out (raise max_bad_fraction to allow it)"));
        }
        Ok(judged)
    }

    /// `node: reason (line: …)` for `nodes`.
    pub fn evidence(&self, nodes: &[String]) -> String {
        evidence(self.verdicts, nodes)
    }

    /// Policy `fail` with bad nodes: the step's error naming each.
    pub fn failed(&self, platform: &Platform, take_out_does: &str) -> ProviderError {
        ProviderError::fatal(format!(
            "bad node(s) {}: {}",
            self.bad.join(", "),
            self.evidence(&self.bad)
        ))
        .with_help(format!(
            "policy `fail`: nothing was taken out; replace the nodes, or set `policy = \"{}\"` to {take_out_does}",
            platform.take_out
        ))
    }

    /// Fails when a node is unknown (not known healthy), naming the nodes
    /// taken out by the policy (`cordoned`, `drained`) too.
    pub fn unknown_fails(&self, taken_word: &str, taken: &[String]) -> Result<(), ProviderError> {
        if self.unknown.is_empty() {
            return Ok(());
        }
        Err(ProviderError::fatal(format!(
            "node(s) {} are unknown, not known healthy: {}{}",
            self.unknown.join(", "),
            self.evidence(&self.unknown),
            if taken.is_empty() { String::new() } else { format!(" ({taken_word}: {})", taken.join(", ")) }
        )).with_help("their checks printed nothing flow could read: read them in `flow logs FILE STEP`, then run `flow apply` again"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::op_context;

    /// What all_reduce_perf prints, its average bus bandwidth `v`.
    fn fig(v: f64) -> String {
        include_str!("../../../scripts/local-cloud/outputs/all_reduce_perf.txt")
            .lines()
            .map(|l| match l.contains("Avg bus bandwidth") {
                true => format!("# Avg bus bandwidth    : {v}\n"),
                false => format!("{l}\n"),
            })
            .collect()
    }

    fn ran(pairs: &[(String, String)], busbw: impl Fn(&str, &str) -> f64) -> Vec<Ran> {
        pairs
            .iter()
            .map(|(a, b)| Ran {
                label: format!("{a}+{b}"),
                failed: None,
                text: fig(busbw(a.as_str(), b.as_str())),
            })
            .collect()
    }

    /// Eight nodes, `n5` slow: round 1 makes n4 and n5 suspects, round 2
    /// names n5 against a healthy partner; a healthy node keeps its check.
    #[tokio::test]
    async fn the_rounds_name_the_slow_node_with_its_partner() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, reporter) = op_context(dir.path(), "fleet", "tok");
        let names: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
        let mut verdicts = BTreeMap::from([(
            "n0".to_string(),
            verdict("healthy", "check", "its check passed".into(), json!({})),
        )]);
        let mut seen = Vec::new();
        let rounds = pairs(
            &ctx,
            &names,
            &mut verdicts,
            Rule::default(),
            |round, pairs| {
                seen.push((round, pairs.len()));
                let slow = |a: &str, b: &str| if a == "n5" || b == "n5" { 4.5 } else { 17.9 };
                let out = ran(&pairs, slow);
                async move { Ok(out) }
            },
        )
        .await
        .unwrap();
        assert_eq!(rounds, 2);
        assert_eq!(seen, [(1, 4), (2, 2)]);
        assert_eq!(verdicts["n5"]["status"], "bad");
        assert_eq!(verdicts["n5"]["line"], "# Avg bus bandwidth    : 4.5");
        assert_eq!(verdicts["n4"]["status"], "healthy");
        assert_eq!(verdicts["n0"]["check"]["reason"], "its check passed");
        assert!(
            reporter.events().contains(
                &"NCCL round 1: n0+n1 17.9, n2+n3 17.9, n4+n5 4.5, n6+n7 17.9".to_string()
            )
        );
        let judged = Judged::new(&ctx, &names, &verdicts, 0.25).unwrap();
        assert_eq!(judged.bad, ["n5"]);
        assert!(
            reporter
                .events()
                .iter()
                .any(|e| e.starts_with("bad node n5: busbw 4.5 GB/s < "))
        );
        let too_many = Judged::new(&ctx, &names[..2], &verdicts, 0.25).unwrap_err();
        assert!(
            too_many.message.starts_with("1 of 2 nodes are bad, more than max_bad_fraction 0.25 allows (0): no node was taken out"),
            "{}",
            too_many.message
        );
    }

    /// A round whose jobs cannot run fails the search; so does a fleet whose
    /// every pair is below the floor (too many bad, none named).
    #[tokio::test]
    async fn a_round_that_cannot_run_or_a_fleet_all_below_the_floor_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "fleet", "tok");
        let names: Vec<String> = (0..4).map(|i| format!("n{i}")).collect();
        let mut verdicts = BTreeMap::new();
        let err = pairs(&ctx, &names, &mut verdicts, Rule::default(), |_, _| async {
            Err(ProviderError::fatal("sbatch refused"))
        })
        .await
        .unwrap_err();
        assert_eq!(err.message, "sbatch refused");
        let floor = Rule {
            floor: Some(10.0),
            ..Rule::default()
        };
        let err = pairs(&ctx, &names, &mut verdicts, floor, |_, pairs| {
            let out = ran(&pairs, |_, _| 1.0);
            async move { Ok(out) }
        })
        .await
        .unwrap_err();
        assert!(
            err.message
                .contains("more bad nodes than max_bad_fraction allows"),
            "{}",
            err.message
        );
        assert!(verdicts.is_empty());
    }
}
