//! `kube.node_check` (a task): every node of a group checked, the bad ones
//! named with their evidence and taken out by the step's policy.
//!
//! The nodes are those a label selector picks when the step runs
//! (`eks.amazonaws.com/nodegroup=gpu`). `check` is a job each node runs
//! alone (pinned by a nodeSelector on its hostname), judged by
//! `success_pattern`/`capture`/`parse`/`expect` and, with `gpus`, the GPUs
//! its `nvidia-smi` lists against its instance type's. `pairs` is an NCCL
//! test each pair of nodes runs (both pods held to the pair by a required
//! node affinity), driven by the pairwise search of [`crate::fleet`]: all
//! pairs of a round at once, each result's bus bandwidth read as
//! `parse = "nccl-tests"` reads it. A node whose output cannot be read is
//! `unknown`, never healthy. `policy` says what a bad node gets: `fail`
//! the step, `cordon` (cordoned, tainted, drained), or `replace` (that,
//! then its instance terminated through its Auto Scaling group and the new
//! node checked: [`replace`]); more bad nodes than `max_bad_fraction` of
//! the group fails without touching any.

mod asg;
pub(super) mod for_job;
mod jobs;
mod policy;
mod replace;
mod resume;
mod spec;

use std::collections::{BTreeMap, BTreeSet};

use ::kube::api::{Api, ListParams};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use crate::capture::Matchers;
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Schema, StepKind, ValidateContext, Values,
};
use crate::fleet::report::{self, OUTPUT_KEYS, evidence};
use crate::fleet::spec::Policy;
use crate::fleet::step::{self, Judged};
use crate::fleet::{self, Rule};

use asg::Aws;
use jobs::{Batch, HOSTNAME, Pinned};
pub use policy::TAINT;
use spec::{KUBE, Spec};

/// The `kube.node_check` provider kind.
#[derive(Debug, Clone)]
pub struct KubeNodeCheck {
    schema: Schema,
}

impl Default for KubeNodeCheck {
    fn default() -> Self {
        Self::new()
    }
}

impl KubeNodeCheck {
    /// The provider with its schema.
    pub fn new() -> Self {
        let mut inputs = super::connection_inputs();
        inputs.extend([
            InputSpec::required("nodes", InputType::String, "A label selector of the nodes to check, e.g. \"eks.amazonaws.com/nodegroup=gpu\" (the nodes are listed when the step runs)"),
            InputSpec::optional("check", InputType::Map(Box::new(InputType::Any)), "A job each node runs alone: { files or manifest, values, success_pattern, capture, parse, expect, gpus = \"instance-type\" or a count }; ${NODE} is the node's name"),
            InputSpec::optional("pairs", InputType::Map(Box::new(InputType::Any)), "An NCCL test each pair of nodes runs, searched pairwise: { files or manifest, values, floor (GB/s), of_median (0.8) }; ${NODE_A} and ${NODE_B} are the pair's names"),
            InputSpec::optional("policy", InputType::String, "What a bad node gets: fail (the default: the step fails naming it), cordon (cordoned, tainted flow.dev/unhealthy:NoSchedule, drained) or replace (that, then its instance terminated through its Auto Scaling group with the desired count kept, the new node waited for and checked)"),
            InputSpec::optional("max_bad_fraction", InputType::Number, "More bad nodes than this fraction of the group fails the step and takes none out (0.25)"),
            InputSpec::optional("drain_timeout", InputType::String, "How long draining the bad nodes may take (15m)"),
            InputSpec::optional("replace_timeout", InputType::String, "Policy replace: how long the new nodes may take to be Ready (20m)"),
            InputSpec::optional("namespace", InputType::String, "Namespace of the jobs (default: the context's, else default)"),
        ]);
        KubeNodeCheck {
            schema: Schema {
                kind: StepKind::Task,
                description: "Every node of a group checked alone and in NCCL pairs; bad nodes named with their evidence, failed on, cordoned or replaced",
                inputs,
                open_inputs: false,
            },
        }
    }
}

/// A node to check.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    host: String,
    instance_type: Option<String>,
    /// `spec.providerID` (`aws:///us-east-1a/i-0abc`).
    provider_id: Option<String>,
}

impl Member {
    /// The node as the check sees it.
    fn of(n: &Node) -> Member {
        let name = n.metadata.name.clone().unwrap_or_default();
        let labels = n.metadata.labels.clone().unwrap_or_default();
        Member {
            host: labels
                .get(HOSTNAME)
                .cloned()
                .unwrap_or_else(|| name.clone()),
            instance_type: labels.get("node.kubernetes.io/instance-type").cloned(),
            provider_id: n.spec.as_ref().and_then(|s| s.provider_id.clone()),
            name,
        }
    }
}

/// One run of the step.
struct Run<'a> {
    ctx: &'a OpContext,
    spec: Spec,
    batch: Batch<'a>,
    members: Vec<Member>,
    /// Before each job's suffix: `""` for the fleet, `"new-"` for the
    /// nodes that replaced bad ones, `"aN-"` for the suspects of a kube.job
    /// attempt N (a job name is never reused in a run).
    prefix: String,
}

impl Run<'_> {
    fn host(&self, node: &str) -> String {
        self.members
            .iter()
            .find(|m| m.name == node)
            .map_or_else(|| node.to_string(), |m| m.host.clone())
    }

    /// Each node's check, all at once.
    async fn check(
        &self,
        table: &Values,
        out: &mut BTreeMap<String, Value>,
    ) -> Result<(), ProviderError> {
        let pinned: Vec<Pinned> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| Pinned {
                suffix: format!("{}node-{i}", self.prefix),
                hosts: vec![m.host.clone()],
                values: vec![("NODE".into(), m.name.clone())],
            })
            .collect();
        let matchers = Matchers::from_values(table)
            .map_err(|p| ProviderError::invalid(format!("check: {}", p.message)))?;
        let ran = self.batch.run(table, &pinned).await?;
        for (m, r) in self.members.iter().zip(ran) {
            let v = self.judge_check(m, &matchers, &r);
            self.ctx.reporter.log(&format!(
                "check {}: {}",
                m.name,
                v["reason"].as_str().unwrap_or_default()
            ));
            out.insert(m.name.clone(), v);
        }
        Ok(())
    }

    fn judge_check(&self, m: &Member, matchers: &Matchers, r: &report::Ran) -> Value {
        let want = fleet::check::Wanted::of(
            &self.spec.common.rules(),
            m.instance_type
                .as_deref()
                .ok_or("no node.kubernetes.io/instance-type label"),
        );
        fleet::check::judge(r, &want, matchers)
    }

    /// Round `round`'s pairs, all at once, each job's pods held to its two nodes.
    async fn pair_round(
        &self,
        table: &Values,
        round: u32,
        pairs: Vec<(String, String)>,
    ) -> Result<Vec<report::Ran>, ProviderError> {
        let pinned: Vec<Pinned> = pairs
            .iter()
            .enumerate()
            .map(|(i, (a, b))| Pinned {
                suffix: format!("{}r{round}-p{i}", self.prefix),
                hosts: vec![self.host(a), self.host(b)],
                values: vec![("NODE_A".into(), a.clone()), ("NODE_B".into(), b.clone())],
            })
            .collect();
        self.batch.run(table, &pinned).await
    }
}

impl Run<'_> {
    /// Every member's check, then the pairs over those fit for them, into
    /// `verdicts`; the rounds of pairs run.
    async fn checks(&self, verdicts: &mut BTreeMap<String, Value>) -> Result<u32, ProviderError> {
        if let Some(table) = &self.spec.common.check {
            self.check(table, verdicts).await?;
        }
        self.checks_pairs_only(verdicts).await
    }

    /// The pairwise search over the members fit for it (those `verdicts`
    /// does not find bad or unknown), into `verdicts`; the rounds run.
    async fn checks_pairs_only(
        &self,
        verdicts: &mut BTreeMap<String, Value>,
    ) -> Result<u32, ProviderError> {
        let Some(table) = &self.spec.common.pairs else {
            return Ok(0);
        };
        let c = &self.spec.common;
        let rule = Rule {
            floor: c.floor,
            of_median: c.of_median,
            max_bad_fraction: c.max_bad_fraction,
        };
        let names: Vec<String> = self.members.iter().map(|m| m.name.clone()).collect();
        // Nodes the check already found bad or could not read sit out.
        step::pairs(self.ctx, &names, verdicts, rule, |round, pairs| {
            self.pair_round(table, round, pairs)
        })
        .await
    }
}

/// The nodes `selector` picks, sorted by name.
async fn list_nodes(client: &::kube::Client, selector: &str) -> Result<Vec<Node>, ProviderError> {
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| super::errors::kube(&format!("list the nodes of {selector}"), e))?
        .items;
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(nodes)
}

/// The EC2 instances the `spec.providerID`s of `members` name.
fn instances(members: &[&Member]) -> Vec<String> {
    members
        .iter()
        .filter_map(|m| asg::instance_of(m.provider_id.as_deref()?))
        .map(str::to_string)
        .collect()
}

/// Checks the nodes and applies the policy; `kept`: the replacement an
/// interrupted run of the operation kept as its id, taken up first.
async fn apply(
    ctx: &OpContext,
    inputs: &Values,
    kept: Option<resume::Pending>,
) -> Result<Applied, ProviderError> {
    let spec = Spec::from_values(inputs)?;
    let conn = super::connection::Connection::new(ctx, inputs)?;
    let client = conn.client().await?;
    let namespace = match inputs.get("namespace").and_then(Value::as_str) {
        Some(ns) => ns.to_string(),
        None => conn
            .context_namespace()
            .await?
            .unwrap_or_else(|| "default".into()),
    };
    let mut listed = list_nodes(&client, &spec.nodes).await?;
    // Policy replace: what earlier runs left under way is taken up first.
    let aws = match spec.common.replace {
        true => Some(Aws::new(ctx).await?),
        false => None,
    };
    let mut earlier = Vec::new();
    // The new nodes of the kept replacement: checked as new ones below.
    let mut kept_new = BTreeSet::new();
    if let Some(aws) = &aws {
        // A group whose old node is gone already (its replacement not yet
        // Ready) is waited for; one whose old node is still marked, or that
        // the kept replacement names, is taken up below, its new node
        // checked as a new one.
        let marked = replace::in_flight(&listed);
        let kept_groups = kept
            .as_ref()
            .map(|k| k.replacement.groups())
            .unwrap_or_default();
        let all: Vec<Member> = listed.iter().map(Member::of).collect();
        let groups = aws
            .groups_of(&instances(&all.iter().collect::<Vec<_>>()))
            .await?;
        let groups: BTreeSet<String> = groups
            .into_values()
            .flatten()
            .filter(|g| !marked.iter().any(|r| r.group == *g) && !kept_groups.contains(g.as_str()))
            .collect();
        let known = replace::Known::nodes(all.iter().map(|m| m.name.clone()).collect());
        replace::wait_for_strength(ctx, &client, aws, &groups, &known, spec.replace_timeout)
            .await?;
        listed = list_nodes(&client, &spec.nodes).await?;
        earlier = replace::in_flight(&listed);
        if let Some(k) = &kept {
            (earlier, kept_new) = resume::take_up(aws, k, &listed, earlier).await?;
        }
    }
    let members: Vec<Member> = listed
        .iter()
        .map(Member::of)
        .filter(|m| !earlier.iter().any(|r| r.node == m.name) && !kept_new.contains(&m.name))
        .collect();
    if members.is_empty() && earlier.is_empty() {
        return Err(ProviderError::fatal(format!("no node matches `{}`: nothing to check", spec.nodes))
            .with_help("check the selector against `kubectl get nodes --show-labels`; a node group's nodes carry eks.amazonaws.com/nodegroup=NAME"));
    }
    let mut names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    ctx.reporter.event(&format!(
        "checking {} nodes of {}: {}",
        names.len(),
        spec.nodes,
        names.join(", ")
    ));
    let run = Run {
        ctx,
        batch: Batch {
            ctx,
            client: client.clone(),
            namespace,
        },
        members,
        spec,
        prefix: String::new(),
    };
    let mut verdicts = BTreeMap::new();
    let mut rounds = run.checks(&mut verdicts).await?;
    // A node an earlier run was replacing keeps the verdict it was taken out for.
    for r in &earlier {
        let kept_verdict = kept.as_ref().and_then(|k| k.verdicts.get(&r.node).cloned());
        let v = kept_verdict.unwrap_or_else(|| replace::earlier_verdict(&listed, r));
        verdicts.insert(r.node.clone(), v);
        names.push(r.node.clone());
    }
    let judged = Judged::new(ctx, &names, &verdicts, run.spec.common.max_bad_fraction)?;
    if run.spec.common.policy == Policy::Fail && !judged.bad.is_empty() {
        return Err(judged.failed(&KUBE, "cordon and drain them"));
    }
    let (bad, unknown) = (judged.bad.clone(), judged.unknown.clone());
    let mut cordoned = Vec::new();
    let mut replaced = Vec::new();
    match (run.spec.common.policy, &aws) {
        (Policy::Fail, _) => {}
        (Policy::TakeOut, None) => {
            for n in &bad {
                cordon_one(ctx, &client, n, &verdicts).await?;
                cordoned.push(n.clone());
            }
            if !cordoned.is_empty() {
                policy::drain(ctx, &client, &cordoned, run.spec.drain_timeout).await?;
            }
        }
        (Policy::TakeOut, Some(aws)) => {
            let bad: Vec<&Member> = run
                .members
                .iter()
                .filter(|m| bad.contains(&m.name))
                .collect();
            let fresh = replace::locate(&bad, &aws.groups_of(&instances(&bad)).await?)?;
            let fresh_bad: Vec<String> = fresh.iter().map(|r| r.node.clone()).collect();
            for r in &fresh {
                cordon_one(ctx, &client, &r.node, &verdicts).await?;
                replace::mark(&client, r).await?;
                cordoned.push(r.node.clone());
            }
            let all: Vec<replace::Replacing> = earlier.iter().chain(&fresh).cloned().collect();
            let olds: Vec<String> = all.iter().map(|r| r.node.clone()).collect();
            if !olds.is_empty() {
                policy::drain(ctx, &client, &olds, run.spec.drain_timeout).await?;
            }
            let mut new = Vec::new();
            if !all.is_empty() {
                let pending = resume::Pending {
                    replacement: resume::Replacement::of(
                        aws,
                        all,
                        kept.as_ref().map(|k| &k.replacement),
                    )
                    .await?,
                    verdicts: olds
                        .iter()
                        .filter_map(|n| Some((n.clone(), verdicts.get(n)?.clone())))
                        .collect(),
                };
                // Durable before any instance is terminated: the Node, and
                // the mark on it, goes with its instance.
                ctx.checkpoint.made(&pending.encode()).await?;
                let found = resume::carry_out(
                    ctx,
                    &client,
                    aws,
                    &pending.replacement,
                    run.spec.replace_timeout,
                )
                .await?;
                replaced = found.0;
                new = found.1.into_iter().map(|(m, _)| m).collect();
            }
            rounds += replace::check_new(&run, &new, &mut verdicts).await?;
            names.extend(new.iter().map(|m| m.name.clone()));
            replace::note_replaced(&mut verdicts, &replaced);
            report::record(ctx, &verdicts);
            if let Err(e) = replace::new_ones_fail(&verdicts, &new, &fresh_bad) {
                // Done with: the next apply checks the fleet afresh.
                ctx.checkpoint.made("").await?;
                return Err(e);
            }
        }
    }
    let judged = Judged {
        names: &names,
        verdicts: &verdicts,
        bad,
        unknown,
    };
    judged.unknown_fails("cordoned", &cordoned)?;
    let mut outputs = report::outputs(&names, &verdicts, rounds, "cordoned", &cordoned);
    outputs.insert("replaced".into(), json!(replaced));
    Ok(Applied {
        id: None,
        outputs,
        private: json!({}),
    })
}

/// Cordons and taints `node` with its verdict's reason.
async fn cordon_one(
    ctx: &OpContext,
    client: &::kube::Client,
    node: &str,
    verdicts: &BTreeMap<String, Value>,
) -> Result<(), ProviderError> {
    let v = &verdicts[node];
    policy::cordon(
        ctx,
        client,
        node,
        v["short"].as_str().unwrap_or("unhealthy"),
        &evidence(verdicts, &[node.to_string()]),
    )
    .await
}

#[async_trait]
impl Provider for KubeNodeCheck {
    fn name(&self) -> &'static str {
        "kube.node_check"
    }

    /// Every kube.node_check step outputs the fleet's keys, `cordoned` and
    /// `replaced`.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        let keys: Vec<&str> = OUTPUT_KEYS
            .iter()
            .copied()
            .chain(["cordoned", "replaced"])
            .collect();
        Some(crate::contract::DeclaredOutputs::fixed(
            "kube.node_check",
            &keys,
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        let mut out = super::connection::Target::problems(inputs);
        out.extend(spec::problems(inputs));
        out
    }

    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        let Ok(spec) = Spec::from_values(inputs) else {
            return Vec::new();
        };
        let mut lines = vec![format!(
            "checks each node of `{}` (the nodes are known after apply)",
            spec.nodes
        )];
        if spec.common.check.is_some() {
            lines.push(format!(
                "each node alone: the `check` job pinned to it{}",
                spec.common.rules().plan_text()
            ));
        }
        if spec.common.pairs.is_some() {
            let floor = spec
                .common
                .floor
                .map_or(String::new(), |f| format!("the floor {f} GB/s or "));
            lines.push(format!("NCCL in pairs, all of a round at once, suspects paired again with healthy nodes: bad below {floor}{} × the fleet's median", spec.common.of_median));
        }
        lines.push(match spec.common.policy {
            Policy::Fail => "a bad node fails the step".into(),
            Policy::TakeOut if spec.common.replace => format!(
                "a bad node is replaced: cordoned, tainted {TAINT}:NoSchedule and drained, its EC2 instance terminated through its Auto Scaling group (TerminateInstanceInAutoScalingGroup, desired count kept), the group's new node waited for (up to {}) and checked as above; a node outside an Auto Scaling group fails the step untouched",
                humantime::format_duration(spec.replace_timeout)
            ),
            Policy::TakeOut => {
                format!("a bad node is cordoned, tainted {TAINT}:NoSchedule and drained")
            }
        });
        lines.push(format!("more than {} % of the nodes bad fails without taking any out; an unreadable check leaves its node unknown and fails the step", spec.common.max_bad_fraction * 100.0));
        lines
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        apply(ctx, inputs, None).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        apply(ctx, inputs, None).await
    }

    /// The jobs are deleted as soon as they are read, and a cordoned node
    /// stays as it is: nothing to delete.
    async fn delete(&self, _ctx: &OpContext, _prior: Prior<'_>) -> Result<(), ProviderError> {
        Ok(())
    }

    /// An interrupted check is run again (cordoning twice changes nothing).
    /// A replacement under way is taken up from what the id kept of it
    /// ([`resume`]) and from the nodes' marks, never terminating an
    /// instance twice: this read runs the check again with it, and an
    /// error leaves the id for the next apply to take up.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        match id.and_then(resume::Pending::decode) {
            Some(kept) if !ctx.destroying => apply(ctx, inputs, Some(kept))
                .await
                .map(ReadOutcome::Present),
            _ => Ok(ReadOutcome::Missing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys validate expects are those `apply` puts in.
    #[test]
    fn declared_outputs_are_the_outputs_a_check_has() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let declared = KubeNodeCheck::new().declared_outputs(&[], &ctx).unwrap();
        let verdicts = BTreeMap::from([(
            "n1".to_string(),
            report::verdict("healthy", "check", "ok".into(), json!({})),
        )]);
        let mut out = report::outputs(&["n1".to_string()], &verdicts, 1, "cordoned", &[]);
        out.insert("replaced".into(), json!([]));
        let mut keys = declared.keys.clone();
        keys.sort();
        assert_eq!(out.keys().cloned().collect::<Vec<_>>(), keys);
        assert!(declared.conditional.is_empty());
    }
}
