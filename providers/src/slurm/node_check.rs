//! `slurm.node_check` (a task): every node of a Slurm cluster's fleet
//! checked, the bad ones named with their evidence and drained by the
//! step's policy, as `kube.node_check` does on EKS.
//!
//! The nodes are those a hostlist (`compute-[1-16]`) or a partition names
//! when the step runs, reached as `slurm.job` reaches the cluster (here, or
//! over SSH on a head node). `check` is a batch script each node runs alone
//! (`--nodelist=NODE --nodes=1`), judged by
//! `success_pattern`/`capture`/`parse`/`expect` and, with `gpus`, the GPUs
//! its `nvidia-smi` lists against its instance type's (the node's
//! features). `pairs` is an NCCL script each pair runs
//! (`--nodelist=A,B --nodes=2`), driven by the pairwise search of
//! [`crate::fleet`]. `policy` says what a bad node gets: `fail` the step,
//! or `drain` (`scontrol update State=DRAIN Reason="flow: …"`); more bad
//! nodes than `max_bad_fraction` fails without touching any. Destroy
//! resumes the nodes flow drained whose reason is still flow's. Where the
//! cluster is SageMaker HyperPod (`hyperpod_cluster`) or ParallelCluster
//! (`pcluster_cluster`), policy `replace` drains a bad node, then has the
//! platform replace its instance and checks the new node
//! ([`crate::slurm::replacement`]).

pub(super) mod jobs;
mod new_pairs;
mod replace;
mod replaced;
mod spec;

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::capture::Matchers;
use crate::contract::{
    Applied, DeclaredOutputs, InputSpec, InputType, InputValue, OpContext, Prior, Problem,
    Provider, ProviderError, ReadOutcome, Schema, StepKind, ValidateContext, Values,
};
use crate::fleet::report::{self, OUTPUT_KEYS};
use crate::fleet::spec::Policy;
use crate::fleet::step::{self, Judged};
use crate::fleet::{self, Rule};

use super::nodes::{self, SlurmNode};
use super::remote::Remote;
use super::replacement;
use jobs::{Batch, Pinned, values_for};
use new_pairs::Partners;
use replaced::{replaced_and_checked, replacements_healthy, resume_replacing};
use spec::{SLURM, Spec};

/// The outputs only this kind has: the nodes drained, those not checked
/// because Slurm would run no job there, and the nodes replaced (policy
/// `replace`: each with the node in its place and that node's verdict).
const OWN_OUTPUTS: [&str; 3] = ["drained", "skipped", "replaced"];

/// The `slurm.node_check` provider kind.
#[derive(Debug, Clone)]
pub struct SlurmNodeCheck {
    schema: Schema,
}

impl Default for SlurmNodeCheck {
    fn default() -> Self {
        Self::new()
    }
}

impl SlurmNodeCheck {
    /// The provider with its schema.
    pub fn new() -> Self {
        let s = |name, text| InputSpec::optional(name, InputType::String, text);
        let table = || InputType::Map(Box::new(InputType::Any));
        SlurmNodeCheck {
            schema: Schema {
                kind: StepKind::Task,
                description: "Every node of a Slurm cluster checked alone and in NCCL pairs; bad nodes named with their evidence, failed on or drained",
                inputs: vec![
                    s("nodes", "The nodes to check, a Slurm hostlist, e.g. \"compute-[1-16]\" (expanded when the step runs)"),
                    s("partition", "The partition whose nodes are checked (all of them, without `nodes`) and the jobs run in"),
                    InputSpec::optional("check", table(), "A batch script each node runs alone: { script, args, environment, sbatch_args, success_pattern, capture, parse, expect, gpus = \"instance-type\" or a count }; $NODE is the node's name"),
                    InputSpec::optional("pairs", table(), "An NCCL batch script each pair of nodes runs, searched pairwise: { script, args, environment, sbatch_args, floor (GB/s), of_median (0.8) }; $NODE_A and $NODE_B are the pair's names"),
                    s("policy", "What a bad node gets: fail (the default: the step fails naming it), drain (scontrol update State=DRAIN Reason=\"flow: …\"), or, with hyperpod_cluster or pcluster_cluster, replace (drained, then its instance replaced by the platform and the new node checked)"),
                    s("hyperpod_cluster", "The SageMaker HyperPod cluster (name or ARN) whose instances the nodes are: policy `replace` replaces a bad node through it (BatchReplaceClusterNodes)"),
                    s("pcluster_cluster", "The ParallelCluster cluster (its name) whose static nodes the nodes are: policy `replace` sets a bad node DOWN and its clustermgtd replaces the node's instance under the same node name"),
                    s("replace_timeout", "Policy replace: how long the platform may take to put each new node in service, e.g. \"30m\" (45m)"),
                    InputSpec::optional("max_bad_fraction", InputType::Number, "More bad nodes than this fraction of the nodes fails the step and takes none out (0.25)"),
                    s("host", "Run Slurm's commands over SSH on this login or head node (default: on this machine)"),
                    s("ssh_user", "The SSH user (default: ssh's)"),
                    InputSpec::optional("ssh_port", InputType::Integer, "The SSH port (default 22)"),
                    InputSpec::optional("ssh_private_key", InputType::String, "The SSH private key (OpenSSH format), e.g. a generated secret's value; default: ssh's own keys and agent").secret(),
                    s("ssh_host_key", "The node's SSH host public key (\"ssh-ed25519 AAAA…\"), pinned; default: accepted on first use"),
                ],
                open_inputs: false,
            },
        }
    }
}

/// One run of the step.
struct Run<'a> {
    ctx: &'a OpContext,
    spec: Spec,
    batch: Batch<'a>,
    members: Vec<SlurmNode>,
}

impl Run<'_> {
    /// The check of each of `members`, all at once.
    async fn check(
        &self,
        table: &Values,
        members: &[SlurmNode],
        out: &mut BTreeMap<String, Value>,
    ) -> Result<(), ProviderError> {
        let pinned: Vec<Pinned> = members
            .iter()
            .map(|m| Pinned {
                suffix: m.name.clone(),
                nodes: vec![m.name.clone()],
                values: values_for(std::slice::from_ref(&m.name)),
            })
            .collect();
        let matchers = Matchers::from_values(table)
            .map_err(|p| ProviderError::invalid(format!("check: {}", p.message)))?;
        let ran = self.batch.run(table, &pinned).await?;
        for (m, r) in members.iter().zip(ran) {
            let want = fleet::check::Wanted::of(
                &self.spec.common.rules(),
                m.instance_type()
                    .ok_or("no feature of the node names an instance type, as ParallelCluster's static,p4d.24xlarge,… do"),
            );
            let v = fleet::check::judge(&r, &want, &matchers);
            self.ctx.reporter.log(&format!(
                "check {}: {}",
                m.name,
                v["reason"].as_str().unwrap_or_default()
            ));
            out.insert(m.name.clone(), v);
        }
        Ok(())
    }

    /// Round `round`'s pairs, all at once.
    async fn pair_round(
        &self,
        table: &Values,
        round: u32,
        pairs: Vec<(String, String)>,
    ) -> Result<Vec<report::Ran>, ProviderError> {
        let pinned: Vec<Pinned> = pairs
            .iter()
            .map(|(a, b)| {
                let nodes = vec![a.clone(), b.clone()];
                Pinned {
                    suffix: format!("r{round}-{a}-{b}"),
                    values: values_for(&nodes),
                    nodes,
                }
            })
            .collect();
        self.batch.run(table, &pinned).await
    }
}

/// The nodes the step names, as Slurm lists them now.
async fn members(remote: &Remote, spec: &Spec) -> Result<Vec<SlurmNode>, ProviderError> {
    let listed = nodes::list(remote, spec.partition.as_deref()).await?;
    let Some(hostlist) = &spec.nodes else {
        return Ok(listed);
    };
    let names = nodes::expand(remote, hostlist).await?;
    let unknown: Vec<&String> = names
        .iter()
        .filter(|n| !listed.iter().any(|l| &l.name == *n))
        .collect();
    if !unknown.is_empty() {
        let names: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
        return Err(ProviderError::fatal(format!(
            "Slurm lists no node {}{}",
            names.join(", "),
            spec.partition
                .as_ref()
                .map_or(String::new(), |p| format!(" in partition `{p}`"))
        ))
        .with_help("check `nodes` against `sinfo -N` on the cluster"));
    }
    Ok(listed
        .into_iter()
        .filter(|l| names.contains(&l.name))
        .collect())
}

async fn apply(ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
    let spec = Spec::from_values(inputs)?;
    let remote = Remote::from_inputs(inputs, &ctx.workdir)?;
    jobs::cancel_leftovers(ctx, &remote).await?;
    let mut listed = members(&remote, &spec).await?;
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let (members, skipped): (Vec<SlurmNode>, Vec<SlurmNode>) =
        listed.into_iter().partition(SlurmNode::usable);
    for s in &skipped {
        ctx.reporter.event(&format!(
            "not checking node {}: it is {}{}",
            s.name,
            s.state,
            s.reason
                .as_ref()
                .map_or(String::new(), |r| format!(" ({r})"))
        ));
    }
    if members.is_empty() {
        return Err(ProviderError::fatal(format!(
            "no node of {} can run a job now: nothing to check",
            spec.what()
        ))
        .with_help("`sinfo -N` on the cluster shows each node's state; resume drained nodes with `scontrol update NodeName=… State=RESUME`"));
    }
    let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    ctx.reporter.event(&format!(
        "checking {} nodes of {}: {}",
        names.len(),
        spec.what(),
        names.join(", ")
    ));
    let run = Run {
        ctx,
        batch: Batch {
            ctx,
            remote: &remote,
            partition: spec.partition.clone(),
        },
        members,
        spec,
    };
    let mut verdicts = BTreeMap::new();
    if let Some(table) = &run.spec.common.check {
        run.check(table, &run.members, &mut verdicts).await?;
    }
    let mut rounds = 0;
    if let Some(table) = &run.spec.common.pairs {
        let rule = Rule {
            floor: run.spec.common.floor,
            of_median: run.spec.common.of_median,
            max_bad_fraction: run.spec.common.max_bad_fraction,
        };
        let run = &run;
        rounds = step::pairs(ctx, &names, &mut verdicts, rule, |round, pairs| {
            run.pair_round(table, round, pairs)
        })
        .await?;
    }
    let judged = Judged::new(ctx, &names, &verdicts, run.spec.common.max_bad_fraction)?;
    // Policy `replace`: each bad node's instance, found before any node is
    // touched (a node the cluster does not have fails the step here).
    let replacing = match &run.spec.replace_through {
        Some(through) if !judged.bad.is_empty() => {
            // What a resumed run reports of each: `by: reason`.
            let reason_of = |n: &str| {
                format!(
                    "{}: {}",
                    verdicts[n]["by"].as_str().unwrap_or("check"),
                    verdicts[n]["reason"].as_str().unwrap_or_default()
                )
            };
            replacement::instances_of(ctx, &remote, through, &judged.bad, reason_of, None).await?
        }
        _ => Vec::new(),
    };
    let mut drained = Vec::new();
    match run.spec.common.policy {
        Policy::Fail if !judged.bad.is_empty() => {
            return Err(judged.failed(&SLURM, "drain them (scontrol update State=DRAIN)"));
        }
        Policy::Fail => {}
        Policy::TakeOut => {
            for n in &judged.bad {
                let why = nodes::reason(verdicts[n]["reason"].as_str().unwrap_or("unhealthy"));
                nodes::drain(&remote, n, &why).await?;
                ctx.reporter.event(&format!("drained node {n}: {why}"));
                drained.push(n.clone());
            }
        }
    }
    // What destroy resumes: the nodes this run drained and those an earlier
    // run left drained (skipped now), recorded before the step can fail.
    let mut held: Vec<String> = drained.clone();
    held.extend(
        skipped
            .iter()
            .filter(|s| s.drained_by_flow())
            .map(|s| s.name.clone()),
    );
    held.sort();
    let mut id = (!held.is_empty()).then(|| held.join(","));
    if let Some(id) = &id {
        ctx.checkpoint.made(id).await?;
    }
    let mut replaced = Vec::new();
    let mut new_verdicts = BTreeMap::new();
    if let Some(through) = &run.spec.replace_through
        && !replacing.is_empty()
    {
        let partners = Partners::of_run(&verdicts, rounds);
        let done =
            replaced_and_checked(ctx, &remote, &run.spec, through, &held, replacing, partners)
                .await?;
        id = Some(done.id);
        new_verdicts = done.verdicts;
        replaced = done.replaced;
    }
    judged.unknown_fails("drained", &drained)?;
    if !new_verdicts.is_empty() {
        // The history keeps a run's last measure: every verdict, the new
        // nodes' among them.
        verdicts.extend(new_verdicts);
        report::record(ctx, &verdicts);
    }
    let mut outputs = report::outputs(&names, &verdicts, rounds, "drained", &drained);
    let skipped: Vec<&str> = skipped.iter().map(|s| s.name.as_str()).collect();
    outputs.insert("skipped".into(), json!(skipped));
    outputs.insert("replaced".into(), json!(replaced));
    replacements_healthy(&replaced)?;
    Ok(Applied {
        id,
        outputs,
        private: json!({}),
    })
}

/// Resumes the nodes of `id` (a comma-joined list) that are still drained
/// with flow's reason; a node drained since for another reason, or resumed
/// already, is left as it is.
async fn resume(ctx: &OpContext, remote: &Remote, id: &str) -> Result<(), ProviderError> {
    let listed = nodes::list(remote, None).await?;
    let (held, _) = replace::decode(id);
    for name in held.iter().map(String::as_str) {
        match listed.iter().find(|l| l.name == name) {
            Some(n) if n.drained_by_flow() => {
                nodes::resume(remote, name).await?;
                ctx.reporter.event(&format!(
                    "resumed node {name} (drained by flow: {})",
                    n.reason.as_deref().unwrap_or_default()
                ));
            }
            Some(n) => ctx.reporter.event(&format!(
                "node {name} left as it is: it is {}{}, not drained by flow now",
                n.state,
                n.reason
                    .as_ref()
                    .map_or(String::new(), |r| format!(" ({r})"))
            )),
            None => ctx.reporter.event(&format!(
                "node {name} left as it is: Slurm no longer lists it"
            )),
        }
    }
    Ok(())
}

#[async_trait]
impl Provider for SlurmNodeCheck {
    fn name(&self) -> &'static str {
        "slurm.node_check"
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Every slurm.node_check step outputs the fleet's keys, `drained`
    /// and `skipped`.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<DeclaredOutputs> {
        let keys: Vec<&str> = OUTPUT_KEYS.iter().chain(&OWN_OUTPUTS).copied().collect();
        Some(DeclaredOutputs::fixed("slurm.node_check", &keys))
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        spec::problems(inputs, &ctx.workdir)
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        let scripts = ["check", "pairs"]
            .iter()
            .filter_map(|t| inputs.get(*t)?.get("script")?.as_str());
        crate::local_digest::files_digest(&ctx.workdir, scripts)
    }

    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        let Ok(spec) = Spec::from_values(inputs) else {
            return Vec::new();
        };
        let c = &spec.common;
        let mut lines = vec![format!(
            "checks each node of {} (the nodes are known after apply)",
            spec.what()
        )];
        if let Some(table) = &c.check {
            lines.push(format!(
                "each node alone: `{}` with --nodelist=NODE --nodes=1{}",
                jobs::script_of(table),
                c.rules().plan_text()
            ));
        }
        if let Some(table) = &c.pairs {
            let floor = c
                .floor
                .map_or(String::new(), |f| format!("the floor {f} GB/s or "));
            lines.push(format!(
                "NCCL in pairs (`{}` with --nodelist=A,B --nodes=2), all of a round at once, suspects paired again with healthy nodes: bad below {floor}{} × the fleet's median",
                jobs::script_of(table),
                c.of_median
            ));
        }
        lines.push(match c.policy {
            Policy::Fail => "a bad node fails the step".into(),
            Policy::TakeOut => match &spec.replace_through {
                Some(through) => format!(
                    "a bad node is drained (scontrol update State=DRAIN Reason=\"flow: <its verdict>\"), then {} and checked: a bad new node fails the step",
                    through.plan_text(spec.replace_timeout)
                ),
                None => "a bad node is drained: scontrol update State=DRAIN Reason=\"flow: <its verdict>\" (destroy resumes it)".into(),
            },
        });
        lines.push(format!("more than {} % of the nodes bad fails without taking any out; an unreadable check leaves its node unknown and fails the step", c.max_bad_fraction * 100.0));
        lines
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        apply(ctx, inputs).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        apply(ctx, inputs).await
    }

    /// Resumes the nodes the step drained, each only while its reason is
    /// still flow's.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(id) = prior.id else { return Ok(()) };
        let remote = Remote::from_inputs(prior.inputs, &ctx.workdir)?;
        resume(ctx, &remote, id).await
    }

    /// An interrupted or failed check runs again; for destroy, one that had
    /// drained nodes before it failed is handed over, so that its delete
    /// resumes them.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        match id {
            Some(id) if ctx.destroying => Ok(ReadOutcome::Failed {
                id: Some(id.to_string()),
                reason: format!(
                    "the check failed after draining {}",
                    replace::decode(id).0.join(",")
                ),
            }),
            // A replacement in flight is taken up; its errors fail this
            // apply and keep the intent (never Failed: the engine would
            // resume the drained nodes and check the fleet anew while
            // HyperPod replaces them).
            Some(id) if !replace::decode(id).1.is_empty() => resume_replacing(ctx, inputs, id)
                .await
                .map(ReadOutcome::Present),
            _ => Ok(ReadOutcome::Missing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;

    #[test]
    fn the_plan_says_what_is_checked_and_what_a_bad_node_gets() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let lines = SlurmNodeCheck::new().plan_lines(
            &values(json!({"nodes": "c[1-8]", "policy": "drain",
                "check": {"script": "smi.sbatch", "gpus": "instance-type"},
                "pairs": {"script": "nccl.sbatch", "floor": 10}})),
            &ctx,
        );
        assert_eq!(
            lines[0],
            "checks each node of `c[1-8]` (the nodes are known after apply)"
        );
        assert_eq!(
            lines[1],
            "each node alone: `smi.sbatch` with --nodelist=NODE --nodes=1, nvidia-smi listing its instance type's GPUs"
        );
        assert!(
            lines[2].contains("bad below the floor 10 GB/s or 0.8 × the fleet's median"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("a bad node is drained: scontrol update State=DRAIN"),
            "{}",
            lines[3]
        );
        assert!(
            lines[4].starts_with("more than 25 % of the nodes bad"),
            "{}",
            lines[4]
        );
    }

    #[test]
    fn declared_outputs_are_the_fleets_and_its_own() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let d = SlurmNodeCheck::new().declared_outputs(&[], &ctx).unwrap();
        let mut keys = d.keys.clone();
        keys.sort();
        let mut want: Vec<String> = report::outputs(&[], &BTreeMap::new(), 0, "drained", &[])
            .keys()
            .cloned()
            .collect();
        want.push("skipped".into());
        want.push("replaced".into());
        want.sort();
        assert_eq!(keys, want);
    }

    #[tokio::test]
    async fn destroy_hands_over_a_failed_run_that_drained_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ctx, _) = crate::testing::op_context(dir.path(), "fleet", "tok");
        let p = SlurmNodeCheck::new();
        assert_eq!(
            p.read(&ctx, Some("c3"), &Values::new()).await.unwrap(),
            ReadOutcome::Missing
        );
        ctx.destroying = true;
        let found = p.read(&ctx, Some("c3,c7"), &Values::new()).await.unwrap();
        assert!(
            matches!(found, ReadOutcome::Failed { id: Some(ref id), .. } if id == "c3,c7"),
            "{found:?}"
        );
        assert_eq!(
            p.read(&ctx, None, &Values::new()).await.unwrap(),
            ReadOutcome::Missing
        );
    }
}
