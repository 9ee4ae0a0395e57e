//! A failed or hung attempt of a [`Driver`]: its suspect nodes named,
//! checked and taken out by the policy; with policy replace, the
//! replacement kept in the step's id ([`Pending`]) before any instance is
//! terminated, and carried out from there by this run or a resumed one.

use std::collections::BTreeMap;

use super::record::{Attempt, HungLog, Pending};
use super::{Driver, nodes_of, suspects};
use crate::contract::ProviderError;
use crate::fleet::spec::Policy;
use crate::kube::job::{Ended, JobState, failed};
use crate::kube::node_check::for_job::{self, Bad};
use crate::kube::objects::Record;

impl Driver<'_, '_> {
    /// Attempt `n` failed or hung (`ended`): its suspects named, checked
    /// and dealt with by the policy.
    pub(super) async fn fault(
        &mut self,
        n: u32,
        record: &Record,
        ended: &Ended,
    ) -> Result<(Attempt, Vec<String>, bool), ProviderError> {
        let ctx = self.run.ctx;
        let mut attempt = Attempt {
            number: n,
            job: record.name.clone(),
            state: if ended.hung.is_some() {
                "Hung"
            } else {
                "Failed"
            }
            .into(),
            nodes: nodes_of(&ended.pods),
            ..Attempt::default()
        };
        attempt.cause = Some(match (&ended.hung, &ended.state) {
            (Some(h), _) => format!("hung: {h}"),
            (None, JobState::Failed(why)) => failed(record, why, &ended.pods).message,
            (None, _) => "ended".into(),
        });
        // The cause of a hung attempt starts with `hung:` already.
        ctx.reporter.event(&match &ended.hung {
            Some(h) => format!("attempt {n} ({}) hung: {h}", record.label()),
            None => format!(
                "attempt {n} ({}) failed: {}",
                record.label(),
                attempt.cause.as_deref().unwrap_or_default()
            ),
        });
        let at = (n - 1) as usize;
        if let Some(pending) = self.recorded[at].pending.clone() {
            ctx.reporter.event(&format!(
                "attempt {n}: an earlier run of this operation was replacing {}: taking it up",
                pending.attempt.cordoned.join(", ")
            ));
            return self.replace_pending(pending).await;
        }
        if ended.hung.is_some() && self.recorded[at].hung_on.is_none() {
            // Its pods stop before its nodes are checked; its nodes are
            // recorded first, for a resume to check them.
            self.recorded[at].hung_on = Some(attempt.nodes.clone());
            self.recorded[at].hung_log = ended.hung.as_ref().map(|why| HungLog {
                why: why.clone(),
                lines: suspects::naming_lines(&ended.text, &attempt.nodes),
            });
            self.record().await?;
            self.run.delete_job(&mut self.kinds, record).await?;
        }
        if let Some(nodes) = &self.recorded[at].hung_on {
            attempt.nodes = nodes.clone();
        }
        let found = suspects::find(&self.client, &ended.pods, &attempt.nodes, &ended.text).await?;
        let mut said = found.said();
        let checkable: Vec<_> = found
            .suspect_nodes()
            .iter()
            .filter(|n| !found.is_bad(n))
            .filter_map(|n| found.listed.get(n).cloned())
            .collect();
        let verdicts = match (&self.spec.common.check, checkable.is_empty()) {
            (Some(_), false) => {
                for_job::check(
                    ctx,
                    &self.client,
                    record.namespace.as_deref().unwrap_or("default"),
                    &self.spec.common,
                    &checkable,
                    format!("a{n}-"),
                )
                .await?
            }
            _ => BTreeMap::new(),
        };
        let mut bad: Vec<Bad> = found
            .bad
            .iter()
            .map(|(name, why, short)| Bad {
                node: found.listed.get(name).cloned(),
                name: name.clone(),
                short: short.clone(),
                reason: why.clone(),
            })
            .collect();
        for (node, v) in &verdicts {
            let status = v["status"].as_str().unwrap_or("unknown");
            let reason = v["reason"].as_str().unwrap_or_default();
            said.push_str(&format!("; check {node}: {status} ({reason})"));
            if status == "bad" {
                bad.push(Bad {
                    node: found.listed.get(node).cloned(),
                    name: node.clone(),
                    short: v["short"].as_str().unwrap_or("check-failed").into(),
                    reason: reason.into(),
                });
            }
        }
        attempt.suspects = said;
        attempt.suspect_nodes = found.suspect_nodes();
        ctx.reporter
            .event(&format!("attempt {n}: {}", attempt.suspects));
        let bad_names: Vec<String> = bad.iter().map(|b| b.name.clone()).collect();
        // More bad nodes than the set fraction of the attempt's: none is
        // taken out (a partition, not a fleet gone bad at once).
        let too_many = !attempt.nodes.is_empty()
            && bad.len() as f64 > self.spec.common.max_bad_fraction * attempt.nodes.len() as f64;
        if self.spec.common.policy == Policy::TakeOut && !bad.is_empty() && !too_many {
            let taken = for_job::take_out(
                ctx,
                &self.client,
                &bad,
                self.spec.common.replace,
                self.spec.drain_timeout,
            )
            .await?;
            attempt.cordoned = taken.cordoned;
            if let Some(replacement) = taken.replacement {
                attempt.resumed_from = self.recorded[at].resumed_from.clone();
                let pending = Pending {
                    attempt,
                    replacement,
                };
                // Durable before any instance is terminated: the Node, and
                // the mark on it, goes with its instance.
                self.recorded[at].pending = Some(pending.clone());
                self.record().await?;
                return self.replace_pending(pending).await;
            }
        }
        Ok((attempt, bad_names, too_many))
    }

    /// Carries out the replacement `pending` keeps for its attempt (its
    /// instances terminated unless Auto Scaling no longer has them in
    /// service, never twice; the new nodes waited for and named) and
    /// returns the attempt with it, as [`Driver::fault`] does.
    async fn replace_pending(
        &mut self,
        pending: Pending,
    ) -> Result<(Attempt, Vec<String>, bool), ProviderError> {
        let mut attempt = pending.attempt;
        attempt.replaced = for_job::replace(
            self.run.ctx,
            &self.client,
            &pending.replacement,
            self.spec.replace_timeout,
        )
        .await?;
        let bad = attempt.cordoned.clone();
        Ok((attempt, bad, false))
    }
}
