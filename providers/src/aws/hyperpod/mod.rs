//! The `sagemaker.hyperpod` provider: a SageMaker HyperPod cluster (Slurm,
//! or orchestrated by an EKS cluster) made through the SageMaker API with
//! the AWS SDK: CreateCluster with its instance groups and lifecycle
//! scripts in S3, waited for until `InService`, its nodes listed; instance
//! groups changed in place with UpdateCluster; DeleteCluster on destroy.
//! The cluster carries the tag `flow:token`: a cluster of that name without
//! it is someone else's.

mod lifecycle;
pub(crate) mod nodes;
mod spec;
mod update;

use async_trait::async_trait;
use serde_json::Value;

use crate::contract::{
    Applied, Capacity, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider,
    ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values,
    attribute_drift, import_mismatch, import_missing, known_inputs,
};
use crate::{inputs, ownership};
use spec::Spec;

/// The `sagemaker.hyperpod` provider kind.
#[derive(Debug, Clone)]
pub struct HyperPodCluster {
    schema: Schema,
}

impl HyperPodCluster {
    /// The provider with its schema.
    pub fn new() -> Self {
        let strings = || InputType::List(Box::new(InputType::String));
        HyperPodCluster {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A SageMaker HyperPod cluster (Slurm or EKS-orchestrated), through the SageMaker API",
                inputs: vec![
                    InputSpec::required("cluster_name", InputType::String, "The cluster's name")
                        .forces_new(),
                    InputSpec::required(
                        "instance_groups",
                        InputType::List(Box::new(InputType::Any)),
                        "Instance groups: [{ name, instance_type (ml.*), count, lifecycle_s3_uri, on_create (default on_create.sh), execution_role, threads_per_core (1 or 2) }]",
                    ),
                    InputSpec::optional(
                        "orchestrator",
                        InputType::String,
                        "\"slurm\" (default) or \"eks\"",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "eks_cluster_arn",
                        InputType::String,
                        "The EKS cluster's ARN, for an EKS orchestrator",
                    )
                    .forces_new(),
                    InputSpec::optional("subnet_ids", strings(), "Subnets of the nodes")
                        .forces_new(),
                    InputSpec::optional(
                        "security_group_ids",
                        strings(),
                        "Security groups of the nodes (with subnet_ids)",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "node_recovery",
                        InputType::String,
                        "\"Automatic\" (replace faulty nodes) or \"None\"",
                    ),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for HyperPodCluster {
    fn default() -> Self {
        Self::new()
    }
}

/// The cluster in service, with its nodes, as state keeps it.
async fn in_service(
    ctx: &OpContext,
    client: &aws_sdk_sagemaker::Client,
    name: &str,
) -> Result<Applied, ProviderError> {
    let cluster = lifecycle::until_in_service(ctx, client, name).await?;
    with_nodes(ctx, client, name, &cluster).await
}

/// `cluster` with its nodes listed, as state keeps it.
async fn with_nodes(
    ctx: &OpContext,
    client: &aws_sdk_sagemaker::Client,
    name: &str,
    cluster: &aws_sdk_sagemaker::operation::describe_cluster::DescribeClusterOutput,
) -> Result<Applied, ProviderError> {
    let nodes = lifecycle::nodes(client, name).await?;
    ctx.reporter.event(&format!(
        "HyperPod cluster `{name}`: {} node(s) {}",
        nodes.len(),
        nodes
            .iter()
            .map(|n| format!("{} ({}, {})", n.0, n.1, n.2))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(lifecycle::applied(cluster, &nodes))
}

#[async_trait]
impl Provider for HyperPodCluster {
    fn name(&self) -> &'static str {
        "sagemaker.hyperpod"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// Every sagemaker.hyperpod step outputs `lifecycle::OUTPUT_KEYS`.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<crate::contract::DeclaredOutputs> {
        Some(crate::contract::DeclaredOutputs::fixed(
            "sagemaker.hyperpod",
            &lifecycle::OUTPUT_KEYS,
        ))
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        // An EKS cluster's ARN that another step gives is known at apply.
        let arn_later = inputs
            .iter()
            .any(|(k, v)| k == "eks_cluster_arn" && matches!(v, InputValue::Unknown));
        Spec::problems(&known_inputs(inputs))
            .into_iter()
            .filter(|p| !(arn_later && p.path == ["eks_cluster_arn"]))
            .collect()
    }

    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        spec::plan_lines(inputs)
    }

    fn capacity(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<Capacity> {
        spec::capacity(inputs)
    }

    async fn create(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let spec = Spec::from_values(values)?;
        let client = lifecycle::client(ctx).await?;
        if let Some(found) = lifecycle::describe(&client, &spec.name).await? {
            let token =
                lifecycle::token_of(&client, found.cluster_arn().unwrap_or_default()).await?;
            ownership::ensure_own(
                &format!("HyperPod cluster `{}`", spec.name),
                token.as_deref(),
                &ctx.token,
            )?;
            ctx.reporter.event(&format!(
                "HyperPod cluster `{}` was already created by this operation ({})",
                spec.name,
                lifecycle::status(&found)
            ));
        } else {
            let arn = lifecycle::create(&client, &spec, &ctx.token).await?;
            ctx.reporter.event(&format!(
                "HyperPod cluster `{}`: creating ({arn})",
                spec.name
            ));
        }
        in_service(ctx, &client, &spec.name).await
    }

    /// Instance groups (counts, new groups, lifecycle scripts, groups the
    /// step no longer has) change in place with UpdateCluster, sent only
    /// if the cluster is not already so (a resumed update sends none),
    /// then waited for until every group has its count of nodes; the rest
    /// replaces the cluster.
    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        values: &Values,
    ) -> Result<Applied, ProviderError> {
        let spec = Spec::from_values(values)?;
        let client = lifecycle::client(ctx).await?;
        let prior_groups = update::group_names(prior.inputs);
        let cluster = update::carry_out(ctx, &client, &spec, &prior_groups).await?;
        with_nodes(ctx, &client, &spec.name, &cluster).await
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let Some(name) = inputs::opt_str(prior.inputs, "cluster_name")? else {
            return Ok(());
        };
        let client = lifecycle::client(ctx).await?;
        ctx.reporter
            .event(&format!("HyperPod cluster `{name}`: deleting"));
        lifecycle::delete(ctx, &client, &name).await
    }

    fn can_refresh(&self) -> bool {
        true
    }

    /// Whether the cluster still exists, its status and its groups' counts.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let Some(name) = inputs::opt_str(prior.inputs, "cluster_name")? else {
            return Ok(Refreshed::unchanged());
        };
        let client = lifecycle::client(ctx).await?;
        let Some(cluster) = lifecycle::describe(&client, &name).await? else {
            return Ok(Refreshed::Gone);
        };
        let now = lifecycle::applied(&cluster, &[]);
        let mut drift = Vec::new();
        for key in ["status", "instance_counts"] {
            let recorded = prior.outputs.get(key).cloned().unwrap_or(Value::Null);
            drift.extend(attribute_drift(key, recorded, now.outputs[key].clone()));
        }
        Ok(Refreshed::drifted(drift))
    }

    /// The cluster this operation created (by name, with its token's tag),
    /// waited for while it is being made; a failed one reads as failed.
    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        values: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let name = inputs::req_str(values, "cluster_name")?;
        let client = lifecycle::client(ctx).await?;
        let Some(found) = lifecycle::describe(&client, &name).await? else {
            return Ok(ReadOutcome::Missing);
        };
        let token = lifecycle::token_of(&client, found.cluster_arn().unwrap_or_default()).await?;
        ownership::ensure_own(
            &format!("HyperPod cluster `{name}`"),
            token.as_deref(),
            &ctx.token,
        )?;
        match in_service(ctx, &client, &name).await {
            Ok(applied) => Ok(ReadOutcome::Present(applied)),
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => Ok(ReadOutcome::Failed {
                id: found.cluster_arn().map(str::to_string),
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
            return Err(import_mismatch("HyperPod cluster", id, &name));
        }
        let client = lifecycle::client(ctx).await?;
        let cluster = lifecycle::describe(&client, id)
            .await?
            .ok_or_else(|| import_missing("HyperPod cluster", id))?;
        let nodes = lifecycle::nodes(&client, id).await?;
        Ok(lifecycle::applied(&cluster, &nodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_eks_cluster_arn_known_only_at_apply_is_not_missing() {
        let p = HyperPodCluster::new();
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let with = |arn: InputValue| {
            vec![
                ("cluster_name".to_string(), InputValue::Known(json!("c"))),
                ("orchestrator".to_string(), InputValue::Known(json!("eks"))),
                ("eks_cluster_arn".to_string(), arn),
            ]
        };
        assert!(p.validate(&with(InputValue::Unknown), &ctx).is_empty());
        let wrong = p.validate(&with(InputValue::Known(json!("not-an-arn"))), &ctx);
        assert_eq!(wrong[0].path, ["eks_cluster_arn"]);
    }

    /// The keys `declared_outputs` gives are those `lifecycle::applied` puts in.
    #[test]
    fn declared_outputs_are_the_outputs_a_cluster_has() {
        use aws_sdk_sagemaker::operation::describe_cluster::DescribeClusterOutput;
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let declared = HyperPodCluster::new().declared_outputs(&[], &ctx).unwrap();
        let applied = lifecycle::applied(&DescribeClusterOutput::builder().build(), &[]);
        let keys: std::collections::BTreeSet<&String> = applied.outputs.keys().collect();
        assert_eq!(keys, declared.keys.iter().collect());
        assert!(declared.conditional.is_empty());
    }
}
