//! The `parallelcluster.cluster` provider: a ParallelCluster 3 Slurm
//! cluster made, changed and deleted with the official `pcluster` CLI from
//! the configuration file the runbook gives (placeholders filled by
//! `substitute`). The copy pcluster gets carries the tag `flow:token`, so
//! a cluster of that name is known to be the step's own.

use async_trait::async_trait;
use serde_json::Value;

use super::cli::Pcluster;
use super::config;
use super::efa_rules;
use super::errors;
use super::ops::{fleet_starting, fleet_stopped, load, no_changes, rendered, settle};
use super::resize;
use super::wait;
use crate::contract::{
    Applied, Capacity, ErrorKind, InputSpec, InputType, InputValue, OpContext, PlanDetail, Prior,
    Problem, Provider, ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext,
    Values, attribute_drift, import_missing, known_inputs,
};
use crate::substitute::Substitutions;
use crate::{inputs, ownership};

/// The `parallelcluster.cluster` provider kind.
#[derive(Debug, Clone)]
pub struct ParallelCluster {
    schema: Schema,
}

impl ParallelCluster {
    /// The provider with its schema.
    pub fn new() -> Self {
        ParallelCluster {
            schema: Schema {
                kind: StepKind::Resource,
                description: "An AWS ParallelCluster 3 (Slurm) cluster, made with the pcluster CLI from its configuration file",
                inputs: vec![
                    InputSpec::required("cluster_name", InputType::String, "The cluster's name")
                        .forces_new(),
                    InputSpec::required(
                        "config",
                        InputType::LocalFile,
                        "The cluster configuration (YAML, as pcluster takes it), inside the workflow's folder",
                    ),
                    crate::substitute::input_spec(
                        "Placeholders in the configuration and their values, e.g. { PLACEHOLDER_FSX_ID = \"${steps.fsx.outputs.file_system_id}\" } (PLACEHOLDER_X, <x>, $X and ${X} forms)",
                    ),
                    crate::substitute::required_spec(),
                    InputSpec::optional(
                        "suppress_validators",
                        InputType::List(Box::new(InputType::String)),
                        "pcluster validators to skip (--suppress-validators), e.g. [\"type:InstanceTypeBaseAMICompatibleValidator\"] or [\"ALL\"]",
                    ),
                    InputSpec::optional(
                        "stop_compute_fleet",
                        InputType::Bool,
                        "Let flow stop the compute fleet for an update that needs it, and start it again after (default false: such an update fails, saying so)",
                    ),
                    InputSpec::optional(
                        "pcluster",
                        InputType::String,
                        "The pcluster command (default: FLOW_PCLUSTER, else pcluster on PATH)",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for ParallelCluster {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Provider for ParallelCluster {
    fn name(&self) -> &'static str {
        "parallelcluster.cluster"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// Every parallelcluster.cluster step outputs `wait::OUTPUT_KEYS`.
    fn declared_outputs(
        &self,
        _: &[(String, InputValue)],
        _: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(wait::declared())
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let known = known_inputs(inputs);
        let Some(path) = known.get("config").and_then(Value::as_str) else {
            return Vec::new();
        };
        if let Err(why) = ctx.workdir.resolve(path) {
            return vec![Problem::at("config", why)];
        }
        // Placeholders filled from values not known yet are checked at apply.
        let substitute = crate::substitute::known_in(inputs).and_then(Result::ok);
        let Ok(raw) = config::read(&ctx.workdir, path, &Substitutions::default()) else {
            return Vec::new();
        };
        let text = match substitute.clone().unwrap_or_default().apply_yaml(&raw) {
            Ok(text) => text,
            Err(m) => {
                return vec![Problem::at(
                    crate::substitute::INPUT,
                    format!("{path}:{}: {}", m.line, m.message),
                )];
            }
        };
        let mut problems = Vec::new();
        match config::parse(&text) {
            Err(why) => problems.push(Problem::at("config", format!("{path}: {why}"))),
            Ok(parsed) => {
                for f in efa_rules::check(path, &text, &parsed) {
                    if !f.warning {
                        problems.push(Problem::at("config", f.message).with_help(f.help));
                    }
                }
                let summary = config::summary(&parsed);
                if summary.scheduler != "slurm" {
                    problems.push(Problem::at(
                        "config",
                        format!(
                            "{path}: `Scheduling.Scheduler` is {:?}; flow drives Slurm clusters",
                            summary.scheduler
                        ),
                    ));
                }
            }
        }
        if let Some(substitute) = &substitute {
            problems.extend(crate::substitute::check_texts(
                "config",
                &[(path, raw.as_str())],
                substitute,
            ));
        }
        problems
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        crate::substitute::digest_of_input(inputs, "config", &ctx.workdir)
    }

    /// The head node and every compute resource from its `MinCount` to its
    /// `MaxCount`: the plan's cost says the least and the most.
    fn capacity(&self, inputs: &Values, ctx: &ValidateContext) -> Vec<Capacity> {
        load(&ctx.workdir, inputs)
            .map(|(_, _, parsed)| config::summary(&parsed).capacity(false))
            .unwrap_or_default()
    }

    /// As [`Provider::capacity`], with no compute node running while the
    /// recorded compute fleet is stopped (or stopping; `DISABLED` with AWS
    /// Batch as the scheduler).
    fn capacity_applied(
        &self,
        inputs: &Values,
        outputs: &Values,
        ctx: &ValidateContext,
    ) -> Vec<Capacity> {
        let stopped = outputs
            .get("compute_fleet_status")
            .and_then(Value::as_str)
            .is_some_and(|s| {
                matches!(
                    s,
                    "STOPPED" | "STOPPING" | "STOP_REQUESTED" | "DISABLED" | "DISABLING"
                )
            });
        load(&ctx.workdir, inputs)
            .map(|(_, _, parsed)| config::summary(&parsed).capacity(stopped))
            .unwrap_or_default()
    }

    /// The head node, each queue's compute resources with their counts,
    /// and the shared storage, read from the configuration; placeholders
    /// whose values are not known yet read "(known after apply)".
    fn plan_lines(&self, inputs: &Values, ctx: &ValidateContext) -> Vec<String> {
        let Ok((path, text, parsed)) = load(&ctx.workdir, inputs) else {
            return Vec::new();
        };
        let warnings = efa_rules::check(&path, &text, &parsed)
            .into_iter()
            .filter(|f| f.warning)
            .map(|f| format!("warning: {} ({})", f.message, f.help));
        config::summary(&parsed)
            .plan_lines()
            .into_iter()
            .chain(warnings)
            .map(|l| config::mask_placeholders(&l))
            .collect()
    }

    fn has_plan_detail(&self) -> bool {
        true
    }

    /// `pcluster update-cluster` changes queues, storage and settings, never
    /// the head node (its instance, addresses and user), the name, the
    /// region or the scheduler ("Using pcluster update-cluster",
    /// https://docs.aws.amazon.com/parallelcluster/latest/ug/using-pcluster-update-cluster-v3.html:
    /// a head node setting's update policy is "cannot be updated").
    fn outputs_kept_on_update(&self) -> &'static [&'static str] {
        &[
            "cluster_name",
            "region",
            "scheduler",
            "head_node_instance_id",
            "head_node_ip",
            "head_node_public_ip",
            "ssh_user",
        ]
    }

    /// For an update whose queues change: that pcluster allows it only with
    /// the compute fleet stopped, and who stops it.
    async fn plan_detail(
        &self,
        ctx: &OpContext,
        prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        let mut lines = Vec::new();
        let creating = prior.is_none();
        // The queues before: as the last apply kept them (the file itself
        // may have been edited since), else read with the recorded inputs.
        let before = prior.and_then(|p| {
            wait::recorded_queues(p.private).or_else(|| {
                load(&ctx.workdir, p.inputs)
                    .ok()
                    .map(|(_, _, b)| config::summary(&b).queues)
            })
        });
        let after = load(&ctx.workdir, desired)
            .ok()
            .map(|(_, _, after)| config::summary(&after).queues);
        if let (Some(before), Some(after)) = (before, after)
            && before != after
        {
            lines.push(if resize::grows_only(&before, &after) {
                "queues grow: pcluster takes it with the compute fleet running".into()
            } else if inputs::bool_or(desired, "stop_compute_fleet", false)? {
                "queues change: flow stops the compute fleet, updates, and starts it again".into()
            } else {
                "queues change: pcluster needs the compute fleet stopped first (set `stop_compute_fleet = true` to let flow do it)".into()
            });
        }
        // The queues' capacity reservations, when the file can be read
        // with what is known (its placeholders filled).
        // And the EFA rules only EC2 can answer (the queues' zones, the
        // groups that replace pcluster's).
        let (reserved, efa) = match load(&ctx.workdir, desired) {
            Ok((_, _, config)) => (
                super::reservations::check(ctx, &config, creating).await?,
                super::efa_online::check(ctx, &config).await?,
            ),
            Err(_) => (PlanDetail::default(), PlanDetail::default()),
        };
        lines.extend(reserved.lines);
        lines.extend(efa.lines);
        Ok(PlanDetail {
            lines,
            replace_because: None,
            refusals: reserved.refusals.into_iter().chain(efa.refusals).collect(),
        })
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "cluster_name")?;
        // The configuration is read before pcluster is run.
        let (path, text, parsed) =
            load(&ctx.workdir, values).map_err(ProviderError::before_acting)?;
        let pc = Pcluster::for_step(ctx, values)?;
        if let Some(cluster) = pc.describe(&name).await? {
            ownership::ensure_own(
                &format!("cluster `{name}`"),
                wait::tag(&cluster, crate::aws::tags::TOKEN),
                &ctx.token,
            )?;
            ctx.reporter.event(&format!(
                "cluster `{name}` was already created by this operation ({})",
                wait::status(&cluster)
            ));
            return settle(ctx, &pc, &name, &parsed).await;
        }
        let file = rendered(&parsed, &ctx.token)?;
        let answer = pc
            .create(
                &name,
                file.path(),
                &inputs::str_list(values, "suppress_validators")?,
            )
            .await?;
        if !answer.ok {
            return Err(match answer.json {
                Value::Null => pc.failed(&format!("create cluster `{name}`"), &answer.complaint),
                ref json => {
                    errors::refusal(&format!("create cluster `{name}`"), json, &path, &text)
                }
            });
        }
        ctx.reporter
            .event(&format!("cluster `{name}`: create started"));
        settle(ctx, &pc, &name, &parsed).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "cluster_name")?;
        // The configuration is read before pcluster is run.
        let (path, text, parsed) =
            load(&ctx.workdir, values).map_err(ProviderError::before_acting)?;
        let pc = Pcluster::for_step(ctx, values)?;
        let file = rendered(&parsed, &ctx.token)?;
        let suppress = inputs::str_list(values, "suppress_validators")?;
        let mut answer = pc.update(&name, file.path(), &suppress).await?;
        // A fleet that is stopped (flow stopped it, then was killed before
        // it started it again) is started once the update is through.
        let stop = inputs::bool_or(values, "stop_compute_fleet", false)?;
        let mut stopped = stop && fleet_stopped(&pc, &name).await?;
        if !answer.ok && no_changes(&answer) {
            // Already applied (a run killed after pcluster took it).
            ctx.reporter.event(&format!(
                "cluster `{name}`: pcluster already has this configuration"
            ));
            answer.ok = true;
        }
        if !answer.ok {
            let err = errors::refusal(
                &format!("update cluster `{name}`"),
                &answer.json,
                &path,
                &text,
            );
            let needs_stop = err
                .help
                .as_deref()
                .is_some_and(|h| h.contains("stop_compute_fleet"));
            if !(needs_stop && stop) {
                return Err(err);
            }
            ctx.reporter.event(&format!(
                "cluster `{name}`: stopping the compute fleet for the update"
            ));
            pc.set_fleet(&name, "STOP_REQUESTED").await?;
            wait::until_fleet(ctx, &pc, &name, "STOPPED").await?;
            stopped = true;
            answer = pc.update(&name, file.path(), &suppress).await?;
            if !answer.ok && no_changes(&answer) {
                answer.ok = true;
            }
            if !answer.ok {
                // flow stopped the fleet: something changed, and the next
                // apply starts it again.
                return Err(errors::refusal(
                    &format!("update cluster `{name}`"),
                    &answer.json,
                    &path,
                    &text,
                )
                .of_kind(ErrorKind::Failed));
            }
        }
        for change in answer
            .json
            .get("changeSet")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            ctx.reporter.event(&format!(
                "cluster `{name}`: {} {} → {}",
                change
                    .get("parameter")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                change.get("currentValue").unwrap_or(&Value::Null),
                change.get("requestedValue").unwrap_or(&Value::Null)
            ));
        }
        let mut applied = settle(ctx, &pc, &name, &parsed).await?;
        if stopped {
            ctx.reporter.event(&format!(
                "cluster `{name}`: starting the compute fleet again"
            ));
            pc.set_fleet(&name, "START_REQUESTED").await?;
        }
        // Started here, or by a run killed after it asked: the outputs say
        // what the fleet is once it runs, not what it was before.
        if stopped || (stop && fleet_starting(&pc, &name).await?) {
            wait::until_fleet(ctx, &pc, &name, "RUNNING").await?;
            applied = settle(ctx, &pc, &name, &parsed).await?;
        }
        Ok(applied)
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(name) = prior
            .id
            .map(str::to_string)
            .or_else(|| inputs::opt_str(prior.inputs, "cluster_name").ok().flatten())
        else {
            return Ok(());
        };
        let pc = Pcluster::for_step(ctx, prior.inputs)?;
        if pc.describe(&name).await?.is_none() {
            return Ok(());
        }
        pc.delete(&name).await?;
        ctx.reporter
            .event(&format!("cluster `{name}`: delete started"));
        wait::until_gone(ctx, &pc, &name).await
    }

    fn can_refresh(&self) -> bool {
        true
    }

    /// Whether the cluster still exists, and its status now.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let Some(name) = prior.id else {
            return Ok(Refreshed::unchanged());
        };
        let pc = Pcluster::for_step(ctx, prior.inputs)?;
        let Some(cluster) = pc.describe(name).await? else {
            return Ok(Refreshed::Gone);
        };
        let recorded = prior.outputs.get("status").cloned().unwrap_or(Value::Null);
        Ok(Refreshed::drifted(
            attribute_drift("status", recorded, Value::from(wait::status(&cluster)))
                .into_iter()
                .collect(),
        ))
    }

    /// The cluster this operation created (the step's name, with its
    /// token), waited for while in progress; a failed one reads as failed.
    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let name = inputs::req_str(values, "cluster_name")?;
        let pc = Pcluster::for_step(ctx, values)?;
        let Some(cluster) = pc.describe(&name).await? else {
            return Ok(ReadOutcome::Missing);
        };
        ownership::ensure_own(
            &format!("cluster `{name}`"),
            wait::tag(&cluster, crate::aws::tags::TOKEN),
            &ctx.token,
        )?;
        if wait::stage(wait::status(&cluster)) == wait::Stage::Failed {
            return Ok(ReadOutcome::Failed {
                id: Some(name),
                reason: wait::failure(&cluster),
            });
        }
        let (_, _, parsed) = load(&ctx.workdir, values)?;
        match settle(ctx, &pc, &name, &parsed).await {
            Ok(applied) => Ok(ReadOutcome::Present(applied)),
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => Ok(ReadOutcome::Failed {
                id: Some(name),
                reason: e.message,
            }),
        }
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("a cluster name")
    }

    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let name = inputs::req_str(values, "cluster_name")?;
        if id != name {
            return Err(crate::contract::import_mismatch("cluster", id, &name));
        }
        let pc = Pcluster::for_step(ctx, values)?;
        let cluster = pc
            .describe(id)
            .await?
            .ok_or_else(|| import_missing("cluster", id))?;
        let (_, _, parsed) = load(&ctx.workdir, values)?;
        Ok(wait::applied(id, &cluster, &config::summary(&parsed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(dir: &std::path::Path, config_text: &str, substitute: Value) -> Vec<Problem> {
        std::fs::write(dir.join("cluster.yaml"), config_text).unwrap();
        ParallelCluster::new().validate(
            &[
                ("cluster_name".into(), InputValue::Known("ml".into())),
                ("config".into(), InputValue::Known("cluster.yaml".into())),
                ("substitute".into(), InputValue::Known(substitute)),
            ],
            &ValidateContext {
                workdir: dir.into(),
            },
        )
    }

    #[test]
    fn placeholders_left_unfilled_are_named_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let config = "HeadNode:\n  InstanceType: m5.xlarge\n  Networking:\n    SubnetId: PLACEHOLDER_SUBNET\nScheduling:\n  Scheduler: slurm\n";
        let problems = validate(dir.path(), config, serde_json::json!({}));
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].message,
            "cluster.yaml:4:15: the placeholder `PLACEHOLDER_SUBNET` has no value"
        );
        assert_eq!(
            problems[0].help.as_deref(),
            Some("add it to the step's `substitute`: PLACEHOLDER_SUBNET = \"…\"")
        );
        // A misspelt key is named, and the placeholder it missed too.
        let problems = validate(
            dir.path(),
            config,
            serde_json::json!({"PLACEHOLDER_SUBNETS": "subnet-1"}),
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[1].path, ["substitute", "PLACEHOLDER_SUBNETS"]);
        assert_eq!(
            problems[1].message,
            "`PLACEHOLDER_SUBNETS` matches nothing in `cluster.yaml`"
        );
        assert!(
            validate(
                dir.path(),
                config,
                serde_json::json!({"PLACEHOLDER_SUBNET": "subnet-1"})
            )
            .is_empty()
        );
        let batch = config.replace("slurm", "awsbatch");
        let problems = validate(
            dir.path(),
            &batch,
            serde_json::json!({"PLACEHOLDER_SUBNET": "subnet-1"}),
        );
        assert!(problems[0].message.contains("flow drives Slurm clusters"));
    }
}
