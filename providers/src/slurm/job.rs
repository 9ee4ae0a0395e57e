//! The `slurm.job` provider: a task that submits a batch script with
//! `sbatch` and follows the job to its end.
//!
//! The job carries `--comment=flow:<token>`; its id is recorded into the
//! step's intent the moment sbatch prints it, before any waiting. A resumed
//! run reads the job by that id (or, when flow died between sbatch and the
//! record, by the comment) and follows it instead of submitting another.
//! Ctrl-C, and destroy of a job still running, cancel it with `scancel`.
//!
//! With `restarts`, `hang_after`, `checkpoint_dir`, `policy` or `check`
//! the job survives a node: see [`super::restart`].

use async_trait::async_trait;
use serde_json::Value;

use super::control;
use super::output::Output;
use super::output_path::OutputPattern;
use super::remote::Remote;
use super::restart::{self, Spec};
use super::run::{self, Seen};
use super::script;
use super::submission::{job_label, matchers, sbatch_args};
use crate::capture::Matchers;
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values, attribute_drift,
    known_inputs,
};
use crate::inputs;

/// The `slurm.job` provider kind.
#[derive(Debug, Clone)]
pub struct SlurmJob {
    schema: Schema,
}

impl SlurmJob {
    /// The provider with its schema.
    pub fn new() -> Self {
        let s = |name, text| InputSpec::optional(name, InputType::String, text);
        SlurmJob {
            schema: Schema {
                kind: StepKind::Task,
                description: "A Slurm batch job submitted with sbatch, here or on a login node over SSH, followed until it ends",
                inputs: vec![
                    InputSpec::required(
                        "script",
                        InputType::LocalFile,
                        "The batch script (its #SBATCH lines apply), inside the workflow's folder",
                    ),
                    s("job_name", "The job's name (--job-name; default: the script's, else the step's)"),
                    InputSpec::optional("nodes", InputType::Integer, "Nodes to run on (--nodes)"),
                    s("array", "Array indices (--array), e.g. \"0-15%4\""),
                    s("partition", "The partition (--partition)"),
                    s("time_limit", "The job's time limit (--time), e.g. \"2:00:00\""),
                    s("chdir", "The job's working folder on the cluster (--chdir; default: the workflow's folder here, the home folder over SSH)"),
                    s("output", "The output file pattern (--output), e.g. \"logs/%x_%j.out\""),
                    InputSpec::optional(
                        "sbatch_args",
                        InputType::List(Box::new(InputType::String)),
                        "Further sbatch options, e.g. [\"--exclusive\", \"--gpus-per-node=8\"] (they are on sbatch's command line: no secrets)",
                    ),
                    InputSpec::optional(
                        "args",
                        InputType::List(Box::new(InputType::String)),
                        "The script's arguments ($1, $2, …), as `sbatch SCRIPT ARGS` gives them",
                    ),
                    InputSpec::optional(
                        "environment",
                        InputType::Map(Box::new(InputType::String)),
                        "Variables exported at the top of the script, after its #SBATCH lines",
                    ),
                    s("host", "Submit over SSH on this login or head node (default: on this machine)"),
                    s("ssh_user", "The SSH user (default: ssh's)"),
                    InputSpec::optional("ssh_port", InputType::Integer, "The SSH port (default 22)"),
                    InputSpec::optional(
                        "ssh_private_key",
                        InputType::String,
                        "The SSH private key (OpenSSH format), e.g. a generated secret's value; default: ssh's own keys and agent",
                    )
                    .secret(),
                    s("ssh_host_key", "The node's SSH host public key (\"ssh-ed25519 AAAA…\"), pinned; default: accepted on first use"),
                    InputSpec::optional("restarts", InputType::Integer, "How many times flow submits the job again after a failed or hung attempt (default 0)"),
                    s("hang_after", "No new line in the job's output for this long (e.g. \"10m\") while it runs is a hang: flow cancels it and counts a failure"),
                    s("hang_without_loss", "No new loss (as `parse` reads losses, e.g. parse = \"torchrun\") for this long (e.g. \"30m\") while it runs is a hang, even while it prints other lines"),
                    s("checkpoint_dir", "The folder on the cluster the training writes checkpoints into: each restart is told its newest entry as FLOW_RESUME_FROM"),
                    s("policy", "What a node a failed attempt's check (or NODE_FAIL) finds bad gets: fail (the default: the step fails naming it), drain (scontrol update State=DRAIN; the next attempts exclude it), or, with hyperpod_cluster or pcluster_cluster, replace (drained, its instance replaced by the platform, the new node waited for before the next attempt)"),
                    s("hyperpod_cluster", "The SageMaker HyperPod cluster (name or ARN) whose instances the job's nodes are: policy `replace` replaces a bad node through it (BatchReplaceClusterNodes)"),
                    s("pcluster_cluster", "The ParallelCluster cluster (its name) whose static nodes the job's nodes are: policy `replace` sets a bad node DOWN and its clustermgtd replaces the node's instance under the same node name"),
                    InputSpec::optional("max_bad_fraction", InputType::Number, "Policy replace: more bad nodes than this fraction of a failed attempt's (one always may be replaced) fails the step, replacing none (0.25)"),
                    s("replace_timeout", "Policy replace: how long the platform may take to put each new node in service, e.g. \"30m\" (45m)"),
                    InputSpec::optional("check", InputType::Map(Box::new(InputType::Any)), "A batch script each suspect node of a failed attempt runs alone, as slurm.node_check's `check`: { script, args, environment, sbatch_args, success_pattern, capture, parse, expect, gpus }; $NODE is the node's name"),
                ]
                .into_iter()
                .chain(crate::capture::input_specs())
                .collect(),
                open_inputs: false,
            },
        }
    }
}

impl Default for SlurmJob {
    fn default() -> Self {
        Self::new()
    }
}

/// Follows job `id` to its end and judges it.
async fn follow(
    ctx: &OpContext,
    remote: &Remote,
    values: &Values,
    id: &str,
) -> Result<Applied, ProviderError> {
    let name = job_label(ctx, values);
    let matchers = matchers(values)?;
    // Where the job writes, for when only accounting still knows it (the
    // script as it is now: the one submitted, unless it was edited since).
    let script = inputs::req_str(values, "script")
        .and_then(|path| script::read(&ctx.workdir, &path))
        .unwrap_or_default();
    let pattern = OutputPattern::of(&sbatch_args(values, "")?, &script);
    let mut output = Output::default();
    let seen = run::run_to_end(ctx, remote, &mut output, &name, &pattern, id).await?;
    run::verdict(&name, &seen, &output, &matchers, ctx.reporter.as_ref())
}

/// The job this operation submitted: by its recorded id, else by the
/// token's comment, at the controller and then in accounting (a resume
/// after the controller forgot the job). A create's own retry asks the
/// controller only: the job it looks for was queued moments ago.
async fn find(
    ctx: &OpContext,
    remote: &Remote,
    id: Option<&str>,
) -> Result<Option<Seen>, ProviderError> {
    let comment = control::token_comment(&ctx.token);
    let id = match id {
        Some(id) => Some(id.to_string()),
        None if !ctx.token.is_empty() => match control::find_by_comment(remote, &comment).await? {
            Some(id) => Some(id),
            None => control::accounted_by_comment(remote, &comment).await?,
        },
        None => None,
    };
    match id {
        Some(id) => run::look(remote, &id).await,
        None => Ok(None),
    }
}

/// [`SlurmJob::read`] of a job with restarts: the attempt in flight (or,
/// for destroy, the last attempt as it stands) followed on; an id that
/// records every attempt ended failed is told as failed at once.
async fn read_restarting(
    ctx: &OpContext,
    remote: &Remote,
    values: &Values,
    spec: &Spec,
    id: Option<&str>,
) -> Result<ReadOutcome, ProviderError> {
    let known = match id {
        Some(id) => id.to_string(),
        None => match find(ctx, remote, None).await? {
            Some(seen) => seen.id,
            None => return Ok(ReadOutcome::Missing),
        },
    };
    let last = restart::last_job(&known);
    let seen = match &last {
        Some(l) => run::look(remote, l).await?,
        None => None,
    };
    if ctx.destroying {
        return Ok(match seen {
            Some(seen) => ReadOutcome::Present(run::applied(&seen, Values::new())),
            None => ReadOutcome::Missing,
        });
    }
    // Every attempt submitted (none pending) and the last one failed.
    let spent = restart::attempts_in(&known) > spec.restarts as usize && !restart::pending(&known);
    if spent && let Some(seen) = seen.filter(|s| s.finished() && !s.succeeded()) {
        return Ok(ReadOutcome::Failed {
            id: Some(known),
            reason: format!("its last attempt (job {}) ended {}", seen.id, seen.state()),
        });
    }
    match restart::drive(ctx, remote, values, spec, Some(&known)).await {
        Ok(applied) => Ok(ReadOutcome::Present(applied)),
        Err(e) if e.is_retryable() => Err(e),
        Err(e) => Ok(ReadOutcome::Failed {
            id: Some(known),
            reason: e.message,
        }),
    }
}

#[async_trait]
impl Provider for SlurmJob {
    fn name(&self) -> &'static str {
        "slurm.job"
    }

    /// The gates `expect` will check.
    /// And, with restarts, how many and from where.
    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        let mut lines = crate::capture::plan_lines(inputs);
        if let Ok(Some(spec)) = Spec::from_values(inputs) {
            lines.extend(spec.plan_lines());
        }
        lines
    }

    /// `job_id`, `state`, what the controller says of the job (`exit_code`,
    /// `nodes`, `output_file`), each `capture` name and what `parse` reads;
    /// with restarts, `attempts`.
    fn declared_outputs(
        &self,
        inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        let declared =
            crate::capture::job_outputs("slurm.job", &run::OUTPUT_KEYS, &run::SOMETIMES, inputs)?;
        let restarts = inputs
            .iter()
            .any(|(k, _)| restart::INPUTS.contains(&k.as_str()));
        Some(match restarts {
            true => declared.with_conditional(&[restart::ATTEMPTS]),
            false => declared,
        })
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (name, value) in inputs {
            let InputValue::Known(v) = value else {
                continue;
            };
            match name.as_str() {
                "script" => {
                    if let Some(path) = v.as_str()
                        && let Err(why) = ctx.workdir.resolve(path)
                    {
                        problems.push(Problem::at(name, why).with_help(
                            "copy the script into the workflow's folder (or a folder under it) and name it relative to the workflow file",
                        ));
                    }
                }
                "nodes" if v.as_i64().is_some_and(|n| n < 1) => {
                    problems.push(Problem::at(name, "`nodes` must be at least 1"));
                }
                "ssh_port" if v.as_i64().is_some_and(|p| !(1..=65535).contains(&p)) => {
                    problems.push(Problem::at(name, "`ssh_port` must be between 1 and 65535"));
                }
                "array" => {
                    if let Some(a) = v.as_str()
                        && (a.is_empty()
                            || !a
                                .bytes()
                                .all(|b| b.is_ascii_digit() || b",-:%".contains(&b)))
                    {
                        problems.push(
                            Problem::at(name, format!("`array` {a:?} is not a Slurm array spec"))
                                .with_help(
                                    "e.g. \"0-15\", \"1,3,5\", \"0-63%8\" (at most 8 at once)",
                                ),
                        );
                    }
                }
                "sbatch_args" => {
                    for arg in v.as_array().into_iter().flatten().filter_map(Value::as_str) {
                        if !arg.starts_with('-') {
                            problems.push(Problem::at(name, format!(
                                "{arg:?} is not an sbatch option (options start with `-`)"
                            )).with_help("the script is the step's `script`; give options as \"--name=value\""));
                        }
                    }
                }
                "environment" => {
                    for key in v.as_object().into_iter().flat_map(|m| m.keys()) {
                        if !script::is_env_name(key) {
                            problems.push(
                                Problem::at_path(
                                    &["environment", key],
                                    format!("`{key}` is not a shell variable name"),
                                )
                                .on_key(),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        problems.extend(Matchers::problems(&known_inputs(inputs)));
        problems.extend(restart::problems(inputs, &ctx.workdir));
        problems
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        let check = inputs
            .get("check")
            .and_then(|c| c.get("script"))
            .and_then(Value::as_str);
        match check {
            None => crate::local_digest::of_input(inputs, "script", &ctx.workdir),
            Some(c) => {
                let mut paths = crate::local_digest::paths_of(inputs, "script");
                paths.push(c);
                crate::local_digest::files_digest(&ctx.workdir, paths)
            }
        }
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let path = inputs::req_str(values, "script")?;
        let body = script::with_preamble(
            &script::read(&ctx.workdir, &path).map_err(ProviderError::before_acting)?,
            &inputs::str_map(values, "environment")?,
            &inputs::str_list(values, "args")?,
        );
        let args = sbatch_args(values, &ctx.token)?;
        matchers(values)?;
        let remote = Remote::from_inputs(values, &ctx.workdir)?;
        if let Some(spec) = Spec::from_values(values)? {
            return restart::drive(ctx, &remote, values, &spec, None).await;
        }
        if !ctx.token.is_empty()
            && let Some(id) =
                control::find_by_comment(&remote, &control::token_comment(&ctx.token)).await?
        {
            ctx.reporter.event(&format!(
                "job {id} was already submitted by this operation: following it"
            ));
            ctx.checkpoint.made(&id).await?;
            return follow(ctx, &remote, values, &id).await;
        }
        let id = control::submit(&remote, &args, &body).await?;
        ctx.reporter.event(&format!(
            "job `{}` ({id}): submitted on {}",
            job_label(ctx, values),
            remote.describe()
        ));
        ctx.checkpoint.made(&id).await?;
        follow(ctx, &remote, values, &id).await
    }

    /// Tasks re-run instead of updating; the engine replaces them. Kept for
    /// the contract: submits the job again.
    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        self.create(ctx, values).await
    }

    /// Cancels the job if it is still queued or running, and waits until
    /// Slurm says it ended; a finished job has nothing to delete.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        // A job with restarts keeps every attempt in its id: the last acts.
        let Some(last) = prior.id.and_then(restart::last_job) else {
            return Ok(());
        };
        let id = last.as_str();
        let remote = Remote::from_inputs(prior.inputs, &ctx.workdir)?;
        let Some(seen) = run::look(&remote, id).await? else {
            return Ok(());
        };
        if seen.finished() {
            return Ok(());
        }
        ctx.reporter
            .event(&format!("job {id} is {}: cancelling it", seen.state()));
        control::cancel(&remote, id).await?;
        for _ in 0..120 {
            match run::look(&remote, id).await? {
                Some(s) if !s.finished() => tokio::time::sleep(run::POLL).await,
                _ => return Ok(()),
            }
        }
        Err(ProviderError::retryable(format!(
            "job {id} was cancelled but Slurm still lists it as running after two minutes"
        ))
        .with_help("a node may be unresponsive: `scontrol show job ID` on the cluster tells"))
    }

    fn can_refresh(&self) -> bool {
        true
    }

    /// The job's state as Slurm reports it now; a job it has forgotten, or
    /// one reached with an SSH key state holds only sealed, is left as
    /// recorded (a task is judged by its run).
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let Some(last) = prior.id.and_then(restart::last_job) else {
            return Ok(Refreshed::unchanged());
        };
        let id = last.as_str();
        // A plan has no workflow values to unseal the SSH key with: the
        // job is left as recorded rather than read without it.
        if Remote::key_is_sealed(prior.inputs) {
            return Ok(Refreshed::unchanged());
        }
        let remote = Remote::from_inputs(prior.inputs, &ctx.workdir)?;
        let Some(seen) = run::look(&remote, id).await? else {
            return Ok(Refreshed::unchanged());
        };
        let recorded = prior.outputs.get("state").cloned().unwrap_or(Value::Null);
        Ok(Refreshed::drifted(
            attribute_drift("state", recorded, Value::from(seen.state()))
                .into_iter()
                .collect(),
        ))
    }

    /// The job this operation submitted, followed to its end (or, for
    /// destroy, reported as it stands); one that failed reads as failed.
    async fn read(
        &self,
        ctx: &OpContext,
        id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let remote = Remote::from_inputs(values, &ctx.workdir)?;
        if let Some(spec) = Spec::from_values(values)? {
            return read_restarting(ctx, &remote, values, &spec, id).await;
        }
        let Some(seen) = find(ctx, &remote, id).await? else {
            return Ok(ReadOutcome::Missing);
        };
        if ctx.destroying && !seen.finished() {
            return Ok(ReadOutcome::Present(run::applied(&seen, Values::new())));
        }
        if !seen.finished() {
            ctx.reporter.event(&format!(
                "job {} is still {}: following it instead of submitting again",
                seen.id,
                seen.state()
            ));
        }
        match follow(ctx, &remote, values, &seen.id).await {
            Ok(applied) => Ok(ReadOutcome::Present(applied)),
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => Ok(ReadOutcome::Failed {
                id: Some(seen.id),
                reason: e.message,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn inputs_become_sbatch_options_with_the_token_first() {
        let args = sbatch_args(
            &values(json!({"job_name": "nccl", "nodes": 2, "array": "0-3",
                "sbatch_args": ["--exclusive"], "output": "logs/%x_%j.out"})),
            "tok",
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--comment=flow:tok",
                "--job-name=nccl",
                "--array=0-3",
                "--output=logs/%x_%j.out",
                "--nodes=2",
                "--exclusive"
            ]
        );
    }

    #[test]
    fn restarts_declare_attempts_and_say_so_in_the_plan() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let k = |v: Value| InputValue::Known(v);
        let p = SlurmJob::new();
        let plain = p.declared_outputs(&[], &ctx).unwrap();
        assert!(!plain.keys.iter().any(|k| k == "attempts"));
        let with = p
            .declared_outputs(&[("restarts".into(), k(json!(2)))], &ctx)
            .unwrap();
        assert!(with.keys.iter().any(|k| k == "attempts"));
        assert!(with.conditional.iter().any(|k| k == "attempts"));
        let lines = p.plan_lines(
            &values(json!({"script": "t.sbatch", "restarts": 3, "checkpoint_dir": "/fsx/ckpt"})),
            &ctx,
        );
        assert!(
            lines.contains(
                &"up to 3 restarts, resuming from the newest checkpoint in /fsx/ckpt (FLOW_RESUME_FROM)"
                    .to_string()
            ),
            "{lines:?}"
        );
    }

    #[test]
    fn validate_refuses_scripts_outside_the_folder_and_bad_options() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ValidateContext {
            workdir: dir.path().into(),
        };
        let k = |v: Value| InputValue::Known(v);
        let problems = SlurmJob::new().validate(
            &[
                ("script".into(), k(json!("../nccl.sbatch"))),
                ("nodes".into(), k(json!(0))),
                ("array".into(), k(json!("a-b"))),
                (
                    "sbatch_args".into(),
                    k(json!(["--exclusive", "nccl.sbatch"])),
                ),
                ("environment".into(), k(json!({"OK": "1", "NOT-OK": "2"}))),
                ("ssh_port".into(), k(json!(70000))),
            ],
            &ctx,
        );
        let paths: Vec<String> = problems.iter().map(|p| p.path.join(".")).collect();
        assert_eq!(
            paths,
            [
                "script",
                "nodes",
                "array",
                "sbatch_args",
                "environment.NOT-OK",
                "ssh_port"
            ]
        );
        assert!(
            problems[0]
                .message
                .contains("is outside the workflow's folder")
        );
    }
}
