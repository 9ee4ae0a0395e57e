//! `batch.node_check` (a task): every node of an AWS Batch multi-node
//! parallel job checked, each on its own instance, the bad ones named with
//! their evidence, as `kube.node_check` and `slurm.node_check` do.
//!
//! One MNP job of `num_nodes` nodes runs the `check` command on every node
//! (Batch runs one container per node, each its own job `JOBID#N` with its
//! own log stream). Once it ends, each node's job names its network
//! interface's address, EC2 the instance that interface is attached to and
//! its type, and the node's stream is read and judged by the fleet's rules
//! ([`crate::fleet::check`]: `success_pattern`/`capture`/`parse`/`expect`,
//! `gpus`, `efa`, `dcgm`). A node is named by its instance. Batch places
//! and scales its compute environment's instances itself, so the only
//! policy is `fail`; `cordon`, `drain` and `replace` are refused at
//! validate ([`spec::policy_problem`]).

pub(super) mod nodes;
mod spec;

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_batch::types::{JobTimeout, NodeOverrides, NodePropertyOverride};
use serde_json::{Value, json};

use super::super::batch_logs::{self, JobLogs};
use super::super::{config, inputs};
use super::run::{
    client, container_overrides, describe, find_by_token, finished, read_outcome, run_to_end,
    status, submit_once, terminate, timeout_secs,
};
use crate::capture::Matchers;
use crate::contract::{
    Applied, DeclaredOutputs, InputSpec, InputType, InputValue, OpContext, Prior, Problem,
    Provider, ProviderError, ReadOutcome, Schema, StepKind, ValidateContext, Values,
};
use crate::fleet::report::{self, OUTPUT_KEYS};
use crate::fleet::step::Judged;
use spec::Spec;

/// The output only this kind has: the job that ran the checks.
const OWN_OUTPUTS: [&str; 1] = ["job_id"];

/// The `batch.node_check` provider kind.
#[derive(Debug, Clone)]
pub struct BatchNodeCheck {
    schema: Schema,
}

impl Default for BatchNodeCheck {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchNodeCheck {
    /// The provider with its schema.
    pub fn new() -> Self {
        let s = |name, text| InputSpec::optional(name, InputType::String, text);
        BatchNodeCheck {
            schema: Schema {
                kind: StepKind::Task,
                description: "Every node of an AWS Batch multi-node job checked on its own instance; bad nodes named with their evidence, failing the step",
                inputs: vec![
                    InputSpec::required(
                        "job_queue",
                        InputType::String,
                        "The job queue's name or ARN",
                    ),
                    InputSpec::required(
                        "job_definition",
                        InputType::String,
                        "A multi-node parallel job definition (name, name:revision or ARN)",
                    ),
                    InputSpec::required(
                        "num_nodes",
                        InputType::Integer,
                        "The nodes of the job: each runs the check on its own instance",
                    ),
                    InputSpec::optional(
                        "check",
                        InputType::Map(Box::new(InputType::Any)),
                        "What each node runs and how its output is judged: { command, environment, success_pattern, capture, parse, expect, gpus = \"instance-type\" or a count, efa, dcgm }",
                    ),
                    s("job_name", "The job's name (default: STEP-node-check)"),
                    s(
                        "policy",
                        "What a bad node gets: fail (the default and the only one on Batch: the step fails naming it)",
                    ),
                    InputSpec::optional(
                        "max_bad_fraction",
                        InputType::Number,
                        "More bad nodes than this fraction of the nodes says so in the step's error (0.25)",
                    ),
                    InputSpec::optional(
                        "timeout",
                        InputType::Duration,
                        "How long the job's attempt may run before Batch stops it (at least 60s)",
                    ),
                    s(
                        "log_group",
                        "The CloudWatch log group the job definition logs to (default /aws/batch/job)",
                    ),
                    InputSpec::optional(
                        "pairs",
                        InputType::Map(Box::new(InputType::Any)),
                        "Refused: Batch cannot hold a job to two chosen nodes",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

/// Submits the check's MNP job (or finds the one this operation submitted
/// before an interruption) and follows it to its end.
async fn run_job(
    ctx: &OpContext,
    client: &aws_sdk_batch::Client,
    logs: &mut JobLogs,
    spec: &Spec,
    inputs: &Values,
) -> Result<aws_sdk_batch::types::JobDetail, ProviderError> {
    let name = &spec.job_name;
    // SubmitJob has no idempotency token: a retry after a lost answer
    // follows the job this operation's token tags instead of submitting a
    // second (a failed check is never retried under its token: `read`
    // answers it failed, and the engine starts over under a new one).
    if !ctx.token.is_empty()
        && let Some(job) = find_by_token(client, &spec.job_queue, name, &ctx.token).await?
    {
        let id = job.job_id().unwrap_or_default().to_string();
        ctx.reporter.event(&format!(
            "job `{name}` ({id}) was already submitted by this operation"
        ));
        return run_to_end(ctx, client, logs, name, &id).await;
    }
    let mut nodes = NodeOverrides::builder().num_nodes(spec.num_nodes);
    if let Some(o) = container_overrides(&spec.check)? {
        nodes = nodes.node_property_overrides(
            NodePropertyOverride::builder()
                .target_nodes("0:")
                .container_overrides(o)
                .build(),
        );
    }
    let mut request = client
        .submit_job()
        .job_name(name)
        .job_queue(&spec.job_queue)
        .job_definition(&spec.job_definition)
        .node_overrides(nodes.build());
    if let Some(secs) = timeout_secs(inputs)? {
        request = request.timeout(JobTimeout::builder().attempt_duration_seconds(secs).build());
    }
    let id = submit_once(
        request,
        &ctx.token,
        &format!("submit job `{name}` to queue `{}`", spec.job_queue),
    )
    .await?;
    ctx.reporter.event(&format!(
        "job `{name}` ({id}): submitted, {} nodes checking",
        spec.num_nodes
    ));
    // Recorded before the wait: a run killed from here on is taken up by
    // `read`, which judges this job instead of submitting another.
    ctx.checkpoint.made(&id).await?;
    run_to_end(ctx, client, logs, name, &id).await
}

/// The log group the job definition logs to.
fn group_of(inputs: &Values) -> Result<String, ProviderError> {
    Ok(inputs::opt_str(inputs, "log_group")?
        .unwrap_or_else(|| batch_logs::DEFAULT_GROUP.to_string()))
}

async fn apply(ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
    let spec = Spec::from_values(inputs, &ctx.step)?;
    let sdk = config::sdk_config(ctx).await?;
    let batch = client(ctx).await?;
    let mut main_logs = JobLogs::new(&sdk, group_of(inputs)?);
    let job = run_job(ctx, &batch, &mut main_logs, &spec, inputs).await?;
    judge_job(ctx, inputs, &spec, &job).await
}

/// Each node of the finished `job` found and judged: the step's outputs,
/// or its failure naming the bad and unknown nodes (their verdicts sent to
/// the run history first).
async fn judge_job(
    ctx: &OpContext,
    inputs: &Values,
    spec: &Spec,
    job: &aws_sdk_batch::types::JobDetail,
) -> Result<Applied, ProviderError> {
    let matchers = Matchers::from_values(&spec.check)
        .map_err(|p| ProviderError::invalid(format!("check: {}", p.message)))?;
    let sdk = config::sdk_config(ctx).await?;
    let batch = client(ctx).await?;
    let group = group_of(inputs)?;
    let id = job.job_id().unwrap_or_default().to_string();
    let nodes = nodes::describe(&sdk, &batch, &id, spec.num_nodes).await?;
    let names = nodes::names(&id, &nodes);
    ctx.reporter.event(&format!(
        "job `{}` ({id}) {}: checking its {} nodes: {}",
        spec.job_name,
        status(job),
        names.len(),
        names.join(", ")
    ));
    let reader = nodes::Reader {
        ctx,
        config: &sdk,
        batch: &batch,
        group: &group,
        parent: &id,
    };
    let judged = reader
        .judge_all(&nodes, &spec.common.rules(), &matchers)
        .await;
    let mut verdicts = BTreeMap::new();
    for (name, v) in names.iter().zip(judged) {
        ctx.reporter.log(&format!(
            "check {name} ({}): {}",
            v["job"].as_str().unwrap_or_default(),
            v["reason"].as_str().unwrap_or_default()
        ));
        verdicts.insert(name.clone(), v);
    }
    let judged = Judged::new(ctx, &names, &verdicts, spec.common.max_bad_fraction)?;
    if !judged.bad.is_empty() {
        return Err(ProviderError::fatal(format!(
            "bad node(s) {}: {}",
            judged.bad.join(", "),
            judged.evidence(&judged.bad)
        ))
        .with_help("policy `fail`: nothing was taken out (Batch places a job's instances itself); take a bad instance out of the compute environment by hand (terminate it: a managed environment launches another), then run `flow apply` again"));
    }
    judged.unknown_fails("", &[])?;
    // The shared outputs, with the job in the key a take-out policy's nodes
    // have on other platforms (none is taken out on Batch).
    let mut outputs = report::outputs(&names, &verdicts, 0, "job_id", &[]);
    outputs.insert("job_id".into(), json!(id));
    Ok(Applied {
        id: Some(id),
        outputs,
        private: json!({}),
    })
}

#[async_trait]
impl Provider for BatchNodeCheck {
    fn name(&self) -> &'static str {
        "batch.node_check"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Every batch.node_check step outputs the fleet's keys and `job_id`.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<DeclaredOutputs> {
        let keys: Vec<&str> = OUTPUT_KEYS.iter().chain(&OWN_OUTPUTS).copied().collect();
        Some(DeclaredOutputs::fixed("batch.node_check", &keys))
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        spec::problems(inputs)
    }

    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        let Ok(spec) = Spec::from_values(inputs, "STEP") else {
            return Vec::new();
        };
        let command = spec
            .check
            .get("command")
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        vec![
            format!(
                "checks each node of a {}-node job of `{}` in queue `{}` (its instances are known after apply)",
                spec.num_nodes, spec.job_definition, spec.job_queue
            ),
            format!(
                "each node alone, on its own instance: `{command}`{}",
                spec.common.rules().plan_text()
            ),
            "a bad node fails the step, named by its instance with its evidence (Batch places its instances itself: none is taken out); an unreadable check leaves its node unknown and fails the step".into(),
        ]
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

    /// Terminates the check's job if it is still running.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(id) = prior.id else { return Ok(()) };
        let client = client(ctx).await?;
        match describe(&client, id).await? {
            Some(job) if !finished(status(&job)) => {
                ctx.reporter
                    .event(&format!("job {id} is {}: terminating it", status(&job)));
                terminate(&client, id, "destroyed from flow").await
            }
            _ => Ok(()),
        }
    }

    /// The job an interrupted run submitted (by its recorded id, else by
    /// its token), followed to its end if it still runs, and its nodes
    /// judged: the step's outputs, or `Failed` with why (the engine then
    /// checks anew under a new token). For destroy, a job is handed over at
    /// once, so that delete stops one still running.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let spec = Spec::from_values(inputs, &ctx.step)?;
        let batch = client(ctx).await?;
        let found = match id {
            Some(id) => describe(&batch, id).await?,
            None if !ctx.token.is_empty() => {
                find_by_token(&batch, &spec.job_queue, &spec.job_name, &ctx.token).await?
            }
            None => None,
        };
        let Some(job) = found else {
            return Ok(ReadOutcome::Missing);
        };
        let id = job.job_id().unwrap_or_default().to_string();
        if ctx.destroying {
            return Ok(ReadOutcome::Failed {
                reason: format!("the check's job {id} is {}", status(&job)),
                id: Some(id),
            });
        }
        let job = if finished(status(&job)) {
            job
        } else {
            ctx.reporter.event(&format!(
                "job `{}` ({id}) is still {}: waiting for it",
                spec.job_name,
                status(&job)
            ));
            let sdk = config::sdk_config(ctx).await?;
            let mut logs = JobLogs::new(&sdk, group_of(inputs)?);
            run_to_end(ctx, &batch, &mut logs, &spec.job_name, &id).await?
        };
        read_outcome(&id, judge_job(ctx, inputs, &spec, &job).await)
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
        let declared = BatchNodeCheck::new().declared_outputs(&[], &ctx).unwrap();
        let mut out = report::outputs(&[], &BTreeMap::new(), 0, "job_id", &[]);
        out.insert("job_id".into(), json!("j"));
        let mut keys = declared.keys.clone();
        keys.sort();
        assert_eq!(keys, out.keys().cloned().collect::<Vec<_>>());
    }

    #[test]
    fn the_plan_says_what_each_node_runs_and_that_a_bad_node_fails() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let inputs: Values = serde_json::from_value(json!({
            "job_queue": "q", "job_definition": "health", "num_nodes": 16,
            "check": {"command": ["sh", "-c", "nvidia-smi"], "gpus": "instance-type"},
        }))
        .unwrap();
        let lines = BatchNodeCheck::new().plan_lines(&inputs, &ctx);
        assert_eq!(
            lines[0],
            "checks each node of a 16-node job of `health` in queue `q` (its instances are known after apply)"
        );
        assert_eq!(
            lines[1],
            "each node alone, on its own instance: `sh -c nvidia-smi`, nvidia-smi listing its instance type's GPUs"
        );
        assert!(
            lines[2].starts_with("a bad node fails the step"),
            "{}",
            lines[2]
        );
    }
}
