//! `eks.cluster`: an EKS control plane, from inputs or from an eksctl
//! `ClusterConfig` file (then with the file's managed node groups, made and
//! deleted with the cluster, and `flow plan` listing what eksctl would
//! have done). Waits for `ACTIVE`; destroy deletes the node groups it made,
//! then the cluster, and waits until it is gone.
//!
//! `spec` reads and checks the inputs and the eksctl file; `lifecycle`
//! makes, waits for and describes the cluster; this module is the provider
//! kind.

mod lifecycle;
mod refresh;
mod spec;
mod teardown;

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_eks::types::VpcConfigRequest;
use serde_json::Value;

use super::eksctl;
use super::nodegroup;
use super::shared_error as error;
use super::shared_tags::TOKEN;
use super::stack;
use super::waiting;
use crate::contract::{
    Applied, DeclaredOutputs, InputSpec, InputType, InputValue, OpContext, PlanDetail, Prior,
    Problem, Provider, ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext,
    Values,
};

use lifecycle::{
    access_differs, applied, converge, oidc_template, recorded_nodegroups, recorded_shapes, region,
    shape, wait_active, with_vpc,
};
pub use spec::ClusterSpec;

/// The `eks.cluster` provider kind.
#[derive(Debug, Clone)]
pub struct EksCluster {
    schema: Schema,
}

impl EksCluster {
    /// The provider with its schema.
    pub fn new() -> Self {
        use InputType::*;
        let list = || List(Box::new(String));
        EksCluster {
            schema: Schema {
                kind: StepKind::Resource,
                description: "An EKS cluster, from inputs or an eksctl ClusterConfig file (with its managed node groups)",
                inputs: vec![
                    InputSpec::optional(
                        "name",
                        String,
                        "The cluster's name (default: the eksctl config's metadata.name)",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "eksctl_config",
                        LocalFile,
                        "An eksctl ClusterConfig file: the cluster and its managed node groups",
                    ),
                    crate::substitute::input_spec(
                        "Placeholders in the eksctl config and their values, e.g. { PLACEHOLDER_AWS_REGION = \"${vars.region}\" } (PLACEHOLDER_X, <x>, $X and ${X} forms)",
                    ),
                    crate::substitute::required_spec(),
                    InputSpec::optional(
                        "version",
                        String,
                        "Kubernetes version, e.g. \"1.33\" (upgraded in place)",
                    ),
                    InputSpec::optional(
                        "role_arn",
                        String,
                        "The cluster's IAM service role; made for you when absent",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        "subnet_ids",
                        list(),
                        "Subnets of the control plane's interfaces",
                    )
                    .forces_new(),
                    InputSpec::optional("security_group_ids", list(), "Extra security groups")
                        .forces_new(),
                    InputSpec::optional(
                        "endpoint_public_access",
                        Bool,
                        "Public API endpoint (default true)",
                    ),
                    InputSpec::optional(
                        "endpoint_private_access",
                        Bool,
                        "Private API endpoint (default false)",
                    ),
                    InputSpec::optional(
                        "public_access_cidrs",
                        list(),
                        "CIDRs allowed to reach the public endpoint",
                    ),
                    InputSpec::optional(
                        "with_oidc",
                        Bool,
                        "Make the IAM OIDC provider (IAM roles for service accounts)",
                    ),
                    InputSpec::optional("tags", Map(Box::new(String)), "AWS tags"),
                ]
                .into_iter()
                .chain(crate::aws::leftovers::input_specs(true))
                .collect(),
                open_inputs: false,
            },
        }
    }
}

impl Default for EksCluster {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Provider for EksCluster {
    fn name(&self) -> &'static str {
        "eks.cluster"
    }

    fn uses_aws(&self) -> bool {
        true
    }

    /// The nodes of the eksctl file's node groups (the control plane's
    /// hourly fee is not priced).
    fn capacity(&self, inputs: &Values, ctx: &ValidateContext) -> Vec<crate::contract::Capacity> {
        ClusterSpec::load(inputs, &ctx.workdir)
            .map(|spec| {
                spec.nodegroups
                    .iter()
                    .filter_map(|ng| ng.capacity())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        crate::substitute::digest_of_input(inputs, "eksctl_config", &ctx.workdir)
    }

    /// Every eks.cluster step outputs `lifecycle::OUTPUT_KEYS`; the VPC
    /// made for it, its security group and OIDC provider only sometimes.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<DeclaredOutputs> {
        Some(
            DeclaredOutputs::fixed("eks.cluster", &lifecycle::OUTPUT_KEYS)
                .with_conditional(&lifecycle::SOMETIMES),
        )
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let known = crate::contract::known_inputs(inputs);
        let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
        let mut out = Vec::new();
        // Placeholders filled from values not known yet are checked at apply.
        let subs = match crate::substitute::known_in(inputs) {
            Some(Ok(subs)) => subs,
            Some(Err(e)) => return vec![Problem::at(crate::substitute::INPUT, e.message)],
            None if known.contains_key("eksctl_config") => return out,
            None => Default::default(),
        };
        let cfg = match known.get("eksctl_config").and_then(Value::as_str) {
            Some(path) => {
                out.extend(crate::substitute::check_files(
                    "eksctl_config",
                    &ctx.workdir,
                    &[path],
                    &subs,
                ));
                if !out.is_empty() {
                    return out;
                }
                match eksctl::load(&ctx.workdir, path, &subs) {
                    Ok(cfg) => Some(cfg),
                    Err(e) => {
                        out.push(Problem::at("eksctl_config", e.to_string()));
                        return out;
                    }
                }
            }
            None => None,
        };
        if !has("name") && cfg.as_ref().and_then(|c| c.name.as_ref()).is_none() {
            out.push(Problem::at_path(
                &[],
                "`name` is required (or an `eksctl_config` whose metadata names the cluster)",
            ));
        }
        if !has("subnet_ids") && cfg.is_none() {
            out.push(
                Problem::at_path(
                    &[],
                    "`subnet_ids` is required (or an `eksctl_config`, whose VPC flow makes as eksctl does when it lists no subnets)",
                )
                .with_help("EKS needs subnets in at least two availability zones"),
            );
        }
        if let Some(cfg) = cfg {
            let refused = match &cfg.network {
                _ if has("subnet_ids") => None,
                eksctl::Network::Unlisted { vpc_id } => {
                    let (message, help) = spec::unlisted_subnets(vpc_id);
                    // Where the file names the VPC, as a placeholder left is.
                    let message = match known.get("eksctl_config").and_then(Value::as_str) {
                        Some(path) => {
                            let place = eksctl::place_of(&ctx.workdir, path, &["vpc", "id"]);
                            format!("{place}: {message}")
                        }
                        None => message,
                    };
                    Some((message, help))
                }
                eksctl::Network::Unmakeable(why) => Some(spec::unmakeable_vpc(why)),
                _ => None,
            };
            if let Some((message, help)) = refused {
                out.push(Problem::at("eksctl_config", message).with_help(help));
            }
            // The EFA rules, at the file's line and column (the node
            // groups' own EFA problems would say the same without a place).
            if let Some(path) = known.get("eksctl_config").and_then(Value::as_str)
                && let Some(text) = ctx
                    .workdir
                    .resolve(path)
                    .ok()
                    .and_then(|full| std::fs::read_to_string(full).ok())
            {
                for (message, help) in eksctl::efa_rules::problems(path, &subs.apply(&text)) {
                    out.push(Problem::at("eksctl_config", message).with_help(help));
                }
            }
            for ng in &cfg.nodegroups {
                for p in ng.shape_problems() {
                    out.push(Problem::at(
                        "eksctl_config",
                        format!("node group `{}`: {}", ng.name, p.message),
                    ));
                }
            }
        }
        out
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        let spec = ClusterSpec::load(inputs, &ctx.workdir).map_err(ProviderError::before_acting)?;
        converge(ctx, &spec).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        // Compared with the real cluster and the recorded node groups, not
        // with the prior inputs: an eksctl file is read as it is now.
        let after =
            ClusterSpec::load(inputs, &ctx.workdir).map_err(ProviderError::before_acting)?;
        let region = region(ctx, &after).await?;
        let eks = super::client(ctx).await?;
        let cfn = stack::client(ctx).await?;
        let after = with_vpc(ctx, &cfn, &after, true).await?;
        let Some(cluster) = waiting::find_cluster(&eks, &after.name).await? else {
            return Err(ProviderError::fatal(format!(
                "cluster `{}` is gone; plan again to create it",
                after.name
            )));
        };
        if after.version.is_some() && after.version.as_deref() != cluster.version() {
            ctx.reporter.event(&format!(
                "upgrading cluster {} to {}",
                after.name,
                after.version.as_deref().unwrap_or_default()
            ));
            eks.update_cluster_version()
                .name(&after.name)
                .set_version(after.version.clone())
                .client_request_token(super::request_token(&ctx.token, "version"))
                .send()
                .await
                .map_err(|e| error::aws(&format!("upgrade cluster `{}`", after.name), e))?;
            wait_active(ctx, &eks, &after.name).await?;
        }
        if access_differs(&after, &cluster) {
            ctx.reporter.event(&format!(
                "changing the endpoint access of cluster {}",
                after.name
            ));
            eks.update_cluster_config()
                .name(&after.name)
                .resources_vpc_config(
                    VpcConfigRequest::builder()
                        .set_endpoint_public_access(after.public_access)
                        .set_endpoint_private_access(after.private_access)
                        .set_public_access_cidrs(
                            (!after.public_access_cidrs.is_empty())
                                .then(|| after.public_access_cidrs.clone()),
                        )
                        .build(),
                )
                .client_request_token(super::request_token(&ctx.token, "access"))
                .send()
                .await
                .map_err(|e| {
                    error::aws(
                        &format!("update cluster `{}` endpoint access", after.name),
                        e,
                    )
                })?;
            wait_active(ctx, &eks, &after.name).await?;
        }
        let real_tags: BTreeMap<String, String> = cluster
            .tags()
            .map(|t| {
                t.iter()
                    .filter(|(k, _)| k.as_str() != TOKEN)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if real_tags != after.tags
            && let Some(arn) = cluster.arn()
        {
            nodegroup::retag(&eks, arn, &real_tags, &after.tags).await?;
        }
        let had_oidc = prior
            .private
            .get("oidc")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if had_oidc && !after.with_oidc {
            stack::delete(ctx, &cfn, &after.oidc_stack()).await?;
        }
        if after.with_oidc
            && let Some(issuer) = cluster
                .identity()
                .and_then(|i| i.oidc())
                .and_then(|o| o.issuer())
        {
            stack::ensure(ctx, &cfn, &after.oidc_stack(), &oidc_template(issuer)).await?;
        }
        // Node groups of the eksctl file: drop the removed, replace the
        // reshaped, scale the rescaled in place, make the new.
        let recorded = recorded_shapes(prior.private);
        for (name, _, _) in &recorded {
            if !after.nodegroups.iter().any(|n| n.name == *name) {
                nodegroup::delete(ctx, &eks, &after.name, name).await?;
            }
        }
        for ng in &after.nodegroups {
            match recorded.iter().find(|(n, _, _)| *n == ng.name) {
                None => {
                    nodegroup::create(ctx, &eks, ng).await?;
                }
                Some((_, shape_was, _)) if !shape_was.is_empty() && *shape_was != shape(ng) => {
                    ctx.reporter
                        .event(&format!("replacing node group {} (changed)", ng.name));
                    nodegroup::delete(ctx, &eks, &after.name, &ng.name).await?;
                    nodegroup::create(ctx, &eks, ng).await?;
                }
                Some((_, _, scaling))
                    if *scaling != [ng.min_size, ng.desired_size, ng.max_size] =>
                {
                    ctx.reporter.event(&format!(
                        "scaling node group {} to {}..{} (desired {})",
                        ng.name, ng.min_size, ng.max_size, ng.desired_size
                    ));
                    eks.update_nodegroup_config()
                        .cluster_name(&after.name)
                        .nodegroup_name(&ng.name)
                        .scaling_config(
                            aws_sdk_eks::types::NodegroupScalingConfig::builder()
                                .min_size(ng.min_size)
                                .desired_size(ng.desired_size)
                                .max_size(ng.max_size)
                                .build(),
                        )
                        .client_request_token(super::request_token(
                            &ctx.token,
                            &format!("scale-{}", ng.name),
                        ))
                        .send()
                        .await
                        .map_err(|e| error::aws(&format!("scale node group `{}`", ng.name), e))?;
                }
                Some(_) => {}
            }
        }
        let cluster = wait_active(ctx, &eks, &after.name).await?;
        Ok(applied(&cluster, &region, &after))
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        teardown::delete(ctx, prior).await
    }

    /// The creation lines with the inputs known after apply shown as such
    /// (subnets from a VPC step), unless the file itself is not known yet.
    fn creation_lines(
        &self,
        known: &Values,
        unknown: &[String],
        ctx: &ValidateContext,
    ) -> Vec<String> {
        let later = serde_json::json!("(known after apply)");
        let mut inputs = known.clone();
        for key in unknown {
            match key.as_str() {
                "eksctl_config" | "substitute" | "name" => return Vec::new(),
                "subnet_ids" | "security_group_ids" | "public_access_cidrs" => {
                    inputs.insert(key.clone(), serde_json::json!([later]));
                }
                "version" | "role_arn" => {
                    inputs.insert(key.clone(), later.clone());
                }
                _ => {}
            }
        }
        ClusterSpec::load(&inputs, &ctx.workdir)
            .map(|spec| spec.creation_lines())
            .unwrap_or_default()
    }

    fn has_plan_detail(&self) -> bool {
        true
    }

    async fn plan_detail(
        &self,
        ctx: &OpContext,
        prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<PlanDetail, ProviderError> {
        let spec = ClusterSpec::load(desired, &ctx.workdir)?;
        let mut detail = PlanDetail::default();
        let creating = prior.is_none();
        match prior {
            None => detail.lines = spec.creation_lines(),
            Some(prior) => {
                let cfn = stack::client(ctx).await?;
                let spec = with_vpc(ctx, &cfn, &spec, false).await?;
                let old = recorded_nodegroups(prior.private);
                for ng in &spec.nodegroups {
                    match old.iter().find(|(n, _)| *n == ng.name) {
                        None => detail.lines.push(format!("+ {}", ng.describe())),
                        Some((_, plan)) if *plan != ng.describe() => detail
                            .lines
                            .push(format!("~ {} (was: {plan})", ng.describe())),
                        _ => {}
                    }
                }
                for (name, _) in &old {
                    if !spec.nodegroups.iter().any(|n| n.name == *name) {
                        detail.lines.push(format!("- managed node group {name}"));
                    }
                }
            }
        }
        // Each node group's reservation, read only for groups that name
        // one (most do not: no AWS call then).
        if spec
            .nodegroups
            .iter()
            .any(|ng| ng.capacity_reservation_id.is_some())
        {
            let sdk = super::sdk_config(ctx).await?;
            for ng in &spec.nodegroups {
                let Some(ask) = super::nodegroup::reservation::ask_of_spec(ng) else {
                    continue;
                };
                let found =
                    super::nodegroup::reservation::check(&sdk, ctx, Some(&ng.name), &ask, creating)
                        .await?;
                detail.lines.extend(found.lines);
                detail.refusals.extend(found.refusals);
            }
        }
        Ok(detail)
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("the cluster's name or ARN")
    }

    /// An active cluster of the step's name, with every node group its
    /// eksctl file declares.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        let spec = ClusterSpec::load(inputs, &ctx.workdir)?;
        let name = id.rsplit_once(":cluster/").map_or(id, |(_, n)| n);
        if name != spec.name {
            return Err(crate::contract::import_mismatch("cluster", id, &spec.name));
        }
        let eks = super::client(ctx).await?;
        let Some(c) = waiting::find_cluster(&eks, name).await? else {
            return Err(crate::contract::import_missing("cluster", id));
        };
        if !matches!(waiting::cluster_active(&c), waiting::Condition::Met) {
            return Err(ProviderError::invalid(format!(
                "cluster `{name}` is {}: only an active cluster can be imported",
                c.status()
                    .map(|s| s.as_str())
                    .unwrap_or("in an unknown state")
            )));
        }
        for ng in &spec.nodegroups {
            if waiting::find_nodegroup(&eks, name, &ng.name)
                .await?
                .is_none()
            {
                return Err(ProviderError::invalid(format!(
                    "the eksctl file declares node group `{}`, which cluster `{name}` does not have",
                    ng.name
                ))
                .with_help("create it by hand first, or take it out of the file and declare it as an `eks.nodegroup` step"));
            }
        }
        let region = lifecycle::region(ctx, &spec).await?;
        let cfn = stack::client(ctx).await?;
        let spec = with_vpc(ctx, &cfn, &spec, false).await?;
        Ok(lifecycle::applied(&c, &region, &spec))
    }

    /// Whether the cluster still exists, its status and Kubernetes version,
    /// and the node groups of its eksctl file (existence, scaling); node
    /// groups declared as steps of their own are read by those steps.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let spec = ClusterSpec::load(prior.inputs, &ctx.workdir)
            .or_else(|_| ClusterSpec::merge(prior.inputs, eksctl::EksctlConfig::default()))?;
        let eks = super::client(ctx).await?;
        match waiting::find_cluster(&eks, &spec.name).await? {
            Some(c) => refresh::refresh(&eks, &c, prior).await,
            None => Ok(Refreshed::Gone),
        }
    }

    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let spec = ClusterSpec::load(inputs, &ctx.workdir)?;
        let eks = super::client(ctx).await?;
        match waiting::find_cluster(&eks, &spec.name).await? {
            Some(c) if c.tags().and_then(|t| t.get(TOKEN)) == Some(&ctx.token) => {
                if let waiting::Condition::Failed(why) = waiting::cluster_active(&c) {
                    return Ok(ReadOutcome::Failed {
                        id: c.arn().map(str::to_string),
                        reason: format!("cluster `{}` is {why}", spec.name),
                    });
                }
                // Finish what the interrupted create started (OIDC, node groups).
                Ok(ReadOutcome::Present(converge(ctx, &spec).await?))
            }
            _ => Ok(ReadOutcome::Missing),
        }
    }
}

#[cfg(test)]
mod tests;
