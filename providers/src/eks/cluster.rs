//! `eks.cluster`: an EKS control plane, from inputs or from an eksctl
//! `ClusterConfig` file (then with the file's managed node groups, made and
//! deleted with the cluster, and `flow plan` listing what eksctl would
//! have done). Waits for `ACTIVE`; destroy deletes the node groups it made,
//! then the cluster, and waits until it is gone.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_eks::types::VpcConfigRequest;
use serde_json::{Value, json};

use super::eksctl::{self, EksctlConfig};
use super::nodegroup::{self, NodegroupSpec};
use super::shared_error as error;
use super::shared_inputs::{opt_str, str_list, str_map};
use super::shared_tags::{self as tags, TOKEN};
use super::stack;
use super::waiting;
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, PlanDetail, Prior, Problem, Provider,
    ProviderError, ReadOutcome, Schema, StepKind, ValidateContext, Values,
};

/// What the cluster is: inputs first, then the eksctl file.
#[derive(Debug, Clone, Default)]
pub struct ClusterSpec {
    /// The cluster's name.
    pub name: String,
    /// Kubernetes version (`1.33`); EKS's default when absent.
    pub version: Option<String>,
    /// The cluster service role; made in a supporting stack when absent.
    pub role_arn: Option<String>,
    /// Subnets.
    pub subnet_ids: Vec<String>,
    /// Extra security groups.
    pub security_group_ids: Vec<String>,
    /// Public endpoint on or off.
    pub public_access: Option<bool>,
    /// Private endpoint on or off.
    pub private_access: Option<bool>,
    /// CIDRs allowed to the public endpoint.
    pub public_access_cidrs: Vec<String>,
    /// AWS tags.
    pub tags: BTreeMap<String, String>,
    /// Whether to make the IAM OIDC provider (for IAM roles of service accounts).
    pub with_oidc: bool,
    /// Managed node groups from the eksctl file.
    pub nodegroups: Vec<NodegroupSpec>,
    /// The eksctl file's region, if it names one.
    pub config_region: Option<String>,
    /// Top-level keys of the eksctl file that flow does not act on.
    pub ignored: Vec<String>,
}

impl ClusterSpec {
    /// The spec from a step's inputs (reading `eksctl_config` in `workdir`).
    pub fn load(v: &Values, workdir: &std::path::Path) -> Result<Self, ProviderError> {
        let cfg = match opt_str(v, "eksctl_config")? {
            Some(path) => eksctl::load(workdir, &path).map_err(ProviderError::fatal)?,
            None => EksctlConfig::default(),
        };
        Self::merge(v, cfg)
    }

    /// Inputs over the eksctl file's values.
    fn merge(v: &Values, cfg: EksctlConfig) -> Result<Self, ProviderError> {
        let name = opt_str(v, "name")?.or(cfg.name.clone()).ok_or_else(|| {
            ProviderError::fatal("`name` is required (or `metadata.name` in the eksctl config)")
        })?;
        let list = |k: &str, fallback: &Vec<String>| -> Result<Vec<String>, ProviderError> {
            let l = str_list(v, k)?;
            Ok(if l.is_empty() { fallback.clone() } else { l })
        };
        let bool_opt = |k: &str| v.get(k).and_then(Value::as_bool);
        let mut tags = cfg.tags.clone();
        tags.extend(str_map(v, "tags")?);
        let mut nodegroups = cfg.nodegroups.clone();
        for ng in &mut nodegroups {
            ng.cluster = name.clone();
        }
        Ok(ClusterSpec {
            version: opt_str(v, "version")?.or(cfg.version),
            role_arn: opt_str(v, "role_arn")?.or(cfg.role_arn),
            subnet_ids: list("subnet_ids", &cfg.subnet_ids)?,
            security_group_ids: list("security_group_ids", &cfg.security_group_ids)?,
            public_access: bool_opt("endpoint_public_access").or(cfg.public_access),
            private_access: bool_opt("endpoint_private_access").or(cfg.private_access),
            public_access_cidrs: list("public_access_cidrs", &cfg.public_access_cidrs)?,
            tags,
            with_oidc: bool_opt("with_oidc").unwrap_or(cfg.with_oidc),
            nodegroups,
            config_region: cfg.region,
            ignored: cfg.ignored,
            name,
        })
    }

    fn role_stack(&self) -> String {
        stack::name(&self.name, "role")
    }

    fn oidc_stack(&self) -> String {
        stack::name(&self.name, "oidc")
    }

    fn vpc_config(&self) -> VpcConfigRequest {
        VpcConfigRequest::builder()
            .set_subnet_ids(Some(self.subnet_ids.clone()))
            .set_security_group_ids(
                (!self.security_group_ids.is_empty()).then(|| self.security_group_ids.clone()),
            )
            .set_endpoint_public_access(self.public_access)
            .set_endpoint_private_access(self.private_access)
            .set_public_access_cidrs(
                (!self.public_access_cidrs.is_empty()).then(|| self.public_access_cidrs.clone()),
            )
            .build()
    }

    /// What creating the cluster does, step by step, as eksctl would.
    pub fn creation_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.role_arn.is_none() {
            lines.push(format!(
                "+ stack {} (cluster IAM service role)",
                self.role_stack()
            ));
        }
        let endpoint = match (
            self.public_access.unwrap_or(true),
            self.private_access.unwrap_or(false),
        ) {
            (true, true) => "public and private endpoint",
            (true, false) => "public endpoint",
            (false, _) => "private endpoint",
        };
        lines.push(format!(
            "+ cluster {} (Kubernetes {}, subnets {}, {endpoint})",
            self.name,
            self.version.as_deref().unwrap_or("default"),
            self.subnet_ids.join(",")
        ));
        if self.with_oidc {
            lines.push(format!(
                "+ stack {} (IAM OIDC provider for the cluster's issuer)",
                self.oidc_stack()
            ));
        }
        for ng in &self.nodegroups {
            lines.push(format!("+ {}", ng.describe()));
        }
        for key in &self.ignored {
            lines.push(format!("  (eksctl config `{key}` is not acted on by flow)"));
        }
        lines
    }
}

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
                ],
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

/// The outputs of an `ACTIVE` cluster.
fn outputs(c: &aws_sdk_eks::types::Cluster, region: &str, spec: &ClusterSpec) -> Values {
    let endpoint = c.endpoint().unwrap_or_default();
    let ca = c
        .certificate_authority()
        .and_then(|a| a.data())
        .unwrap_or_default();
    let issuer = c
        .identity()
        .and_then(|i| i.oidc())
        .and_then(|o| o.issuer())
        .unwrap_or_default();
    let arn = c.arn().unwrap_or_default();
    let mut out = Values::new();
    out.insert("name".into(), json!(spec.name));
    out.insert("arn".into(), json!(arn));
    out.insert("endpoint".into(), json!(endpoint));
    out.insert("certificate_authority".into(), json!(ca));
    out.insert("oidc_issuer".into(), json!(issuer));
    out.insert("version".into(), json!(c.version().unwrap_or_default()));
    out.insert("role_arn".into(), json!(c.role_arn().unwrap_or_default()));
    if let Some(sg) = c
        .resources_vpc_config()
        .and_then(|v| v.cluster_security_group_id())
    {
        out.insert("security_group_id".into(), json!(sg));
    }
    if spec.with_oidc && !issuer.is_empty() {
        let account = arn.split(':').nth(4).unwrap_or_default();
        let partition = arn.split(':').nth(1).unwrap_or("aws");
        let host = issuer.trim_start_matches("https://");
        out.insert(
            "oidc_provider_arn".into(),
            json!(format!(
                "arn:{partition}:iam::{account}:oidc-provider/{host}"
            )),
        );
    }
    out.insert(
        "nodegroups".into(),
        json!(
            spec.nodegroups
                .iter()
                .map(|n| n.name.clone())
                .collect::<Vec<_>>()
        ),
    );
    out.insert(
        "connection".into(),
        json!({"name": spec.name, "endpoint": endpoint, "certificate_authority": ca, "region": region}),
    );
    out
}

/// Waits until the cluster is `ACTIVE`.
async fn wait_active(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    name: &str,
) -> Result<aws_sdk_eks::types::Cluster, ProviderError> {
    waiting::await_condition(
        ctx,
        &format!("cluster `{name}`"),
        || waiting::find_cluster(eks, name),
        waiting::cluster_active,
        "EKS gave up on the cluster: read its health issues above, fix the cause (the role, the subnets), \
         then `flow destroy --target STEP` and apply again",
    )
    .await
}

/// The OIDC provider stack's template for `issuer`.
fn oidc_template(issuer: &str) -> Value {
    json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "IAM OIDC provider made by flow (eks)",
        "Resources": {
            "OIDCProvider": {
                "Type": "AWS::IAM::OIDCProvider",
                "Properties": {"Url": issuer, "ClientIdList": ["sts.amazonaws.com"]}
            }
        }
    })
}

/// The region the step runs in, checked against the eksctl file's.
async fn region(ctx: &OpContext, spec: &ClusterSpec) -> Result<String, ProviderError> {
    let region = super::shared_config::region(&super::sdk_config(ctx).await?);
    if let Some(want) = &spec.config_region
        && *want != region
    {
        return Err(ProviderError::fatal(format!(
            "the eksctl config says region `{want}` but the step runs in `{region}`: set `region = \"{want}\"` on the step or the workflow"
        )));
    }
    Ok(region)
}

/// Makes what the cluster still lacks and waits for all of it: the role
/// stack, the cluster, the OIDC stack, the node groups.
async fn converge(ctx: &OpContext, spec: &ClusterSpec) -> Result<Applied, ProviderError> {
    let region = region(ctx, spec).await?;
    let eks = super::client(ctx).await?;
    let cfn = stack::client(ctx).await?;
    match waiting::find_cluster(&eks, &spec.name).await? {
        Some(c) => {
            let token = c.tags().and_then(|t| t.get(TOKEN));
            crate::ownership::ensure_own(
                &format!("cluster `{}`", spec.name),
                token.map(String::as_str),
                &ctx.token,
            )?;
        }
        None => {
            let role = match &spec.role_arn {
                Some(r) => r.clone(),
                None => stack::ensure(
                    ctx,
                    &cfn,
                    &spec.role_stack(),
                    &stack::role_template("eks.amazonaws.com", &["AmazonEKSClusterPolicy"]),
                )
                .await?
                .get("RoleArn")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| {
                    ProviderError::fatal("the cluster role stack gave no RoleArn").with_help(
                        "flow makes that stack from its own template, which outputs RoleArn: look at the stack's outputs \
                         in CloudFormation (a stack changed outside flow may have lost it), or set `role_arn` on the step",
                    )
                })?,
            };
            ctx.reporter
                .event(&format!("creating cluster {}", spec.name));
            let all: HashMap<String, String> = tags::with_token(&spec.tags, &ctx.token)
                .into_iter()
                .collect();
            eks.create_cluster()
                .name(&spec.name)
                .set_version(spec.version.clone())
                .role_arn(role)
                .resources_vpc_config(spec.vpc_config())
                .set_tags(Some(all))
                .client_request_token(super::request_token(&ctx.token, &spec.name))
                .send()
                .await
                .map_err(|e| error::aws(&format!("create cluster `{}`", spec.name), e))?;
        }
    }
    let cluster = wait_active(ctx, &eks, &spec.name).await?;
    if spec.with_oidc
        && let Some(issuer) = cluster
            .identity()
            .and_then(|i| i.oidc())
            .and_then(|o| o.issuer())
    {
        stack::ensure(ctx, &cfn, &spec.oidc_stack(), &oidc_template(issuer)).await?;
    }
    for ng in &spec.nodegroups {
        nodegroup::create(ctx, &eks, ng).await?;
    }
    Ok(applied(&cluster, &region, spec))
}

fn applied(c: &aws_sdk_eks::types::Cluster, region: &str, spec: &ClusterSpec) -> Applied {
    Applied {
        id: c.arn().map(str::to_string),
        outputs: outputs(c, region, spec),
        private: json!({
            "nodegroups": spec.nodegroups.iter().map(|n| json!({
                "name": n.name, "plan": n.describe(), "shape": shape(n),
                "scaling": [n.min_size, n.desired_size, n.max_size],
            })).collect::<Vec<_>>(),
            "role_stack": spec.role_arn.is_none(),
            "oidc": spec.with_oidc,
        }),
    }
}

/// What defines a node group apart from its scaling and tags (which
/// change in place): a change replaces it.
fn shape(ng: &NodegroupSpec) -> String {
    format!(
        "{:?}",
        NodegroupSpec {
            min_size: 0,
            desired_size: 0,
            max_size: 0,
            tags: BTreeMap::new(),
            ..ng.clone()
        }
    )
}

/// The node groups recorded in `private`: name, shape, scaling.
fn recorded_shapes(private: &Value) -> Vec<(String, String, [i32; 3])> {
    private
        .get("nodegroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|n| {
            let scaling: Vec<i32> = n
                .get("scaling")?
                .as_array()?
                .iter()
                .filter_map(|v| v.as_i64().map(|i| i as i32))
                .collect();
            Some((
                n.get("name")?.as_str()?.to_string(),
                n.get("shape")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                [*scaling.first()?, *scaling.get(1)?, *scaling.get(2)?],
            ))
        })
        .collect()
}

/// Whether the endpoint access the spec asks for differs from the cluster's.
fn access_differs(spec: &ClusterSpec, c: &aws_sdk_eks::types::Cluster) -> bool {
    let real = c.resources_vpc_config();
    let public = real.map(|r| r.endpoint_public_access());
    let private = real.map(|r| r.endpoint_private_access());
    let mut cidrs: Vec<String> = real
        .map(|r| r.public_access_cidrs().to_vec())
        .unwrap_or_default();
    cidrs.sort();
    let mut want = spec.public_access_cidrs.clone();
    want.sort();
    spec.public_access.is_some_and(|p| Some(p) != public)
        || spec.private_access.is_some_and(|p| Some(p) != private)
        || (!want.is_empty() && want != cidrs)
}

/// Names of the node groups recorded in `private`.
fn recorded_nodegroups(private: &Value) -> Vec<(String, String)> {
    private
        .get("nodegroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|n| {
            Some((
                n.get("name")?.as_str()?.to_string(),
                n.get("plan")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ))
        })
        .collect()
}

#[async_trait]
impl Provider for EksCluster {
    fn name(&self) -> &'static str {
        "eks.cluster"
    }

    fn content_digest(&self, inputs: &Values, ctx: &ValidateContext) -> Option<String> {
        crate::local_digest::of_input(inputs, "eksctl_config", &ctx.workdir)
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        let known = crate::contract::known_inputs(inputs);
        let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
        let mut out = Vec::new();
        let cfg = match known.get("eksctl_config").and_then(Value::as_str) {
            Some(path) => match eksctl::load(&ctx.workdir, path) {
                Ok(cfg) => Some(cfg),
                Err(e) => {
                    out.push(Problem::at("eksctl_config", e));
                    return out;
                }
            },
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
                    "`subnet_ids` is required (or an `eksctl_config` that lists vpc.subnets)",
                )
                .with_help("EKS needs subnets in at least two availability zones"),
            );
        }
        if let Some(cfg) = cfg {
            for ng in &cfg.nodegroups {
                for p in ng.problems() {
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
        let spec = ClusterSpec::load(inputs, &ctx.workdir)?;
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
        let after = ClusterSpec::load(inputs, &ctx.workdir)?;
        let region = region(ctx, &after).await?;
        let eks = super::client(ctx).await?;
        let cfn = stack::client(ctx).await?;
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
        let name = prior
            .outputs
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| opt_str(prior.inputs, "name").ok().flatten())
            .ok_or_else(|| ProviderError::fatal("no cluster name recorded"))?;
        let eks = super::client(ctx).await?;
        let cfn = stack::client(ctx).await?;
        for (ng, _) in recorded_nodegroups(prior.private) {
            nodegroup::delete(ctx, &eks, &name, &ng).await?;
        }
        stack::delete(ctx, &cfn, &stack::name(&name, "oidc")).await?;
        if waiting::find_cluster(&eks, &name).await?.is_some() {
            ctx.reporter.event(&format!("deleting cluster {name}"));
            match eks.delete_cluster().name(&name).send().await {
                Ok(_) => {}
                Err(e) if error::code(&e) == Some("ResourceNotFoundException") => {}
                Err(e) => return Err(error::aws(&format!("delete cluster `{name}`"), e)),
            }
            waiting::await_gone(
                ctx,
                &format!("cluster `{name}`"),
                || waiting::find_cluster(&eks, &name),
                |c| c.status().map(|s| s.as_str()),
            )
            .await?;
        }
        stack::delete(ctx, &cfn, &stack::name(&name, "role")).await
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
        match prior {
            None => detail.lines = spec.creation_lines(),
            Some(prior) => {
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
        Ok(detail)
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
                // Finish what the interrupted create started (OIDC, node groups).
                Ok(ReadOutcome::Present(converge(ctx, &spec).await?))
            }
            _ => Ok(ReadOutcome::Missing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;

    #[test]
    fn inputs_override_the_eksctl_file() {
        let cfg = eksctl::parse(eksctl::P4D).unwrap();
        let v = values(json!({"version": "1.34", "tags": {"team": "ml"}}));
        let spec = ClusterSpec::merge(&v, cfg).unwrap();
        assert_eq!(spec.name, "dlc-p4d");
        assert_eq!(spec.version.as_deref(), Some("1.34"));
        assert_eq!(spec.tags["team"], "ml");
        assert!(spec.with_oidc);
        let lines = spec.creation_lines();
        assert!(lines[0].contains("flow-eks-dlc-p4d-role"), "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("+ cluster dlc-p4d (Kubernetes 1.34")),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.contains("managed node group p4d: p4d.24xlarge × 2..4 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123")), "{lines:?}");
        assert!(
            lines.iter().any(|l| l.contains("`addons` is not acted on")),
            "{lines:?}"
        );
    }

    #[test]
    fn name_comes_from_inputs_or_the_file() {
        assert!(ClusterSpec::merge(&Values::new(), EksctlConfig::default()).is_err());
        let spec = ClusterSpec::merge(
            &values(json!({"name": "x", "subnet_ids": ["s"]})),
            EksctlConfig::default(),
        )
        .unwrap();
        assert_eq!(spec.name, "x");
        assert_eq!(
            oidc_template("https://oidc.eks")["Resources"]["OIDCProvider"]["Properties"]["Url"],
            "https://oidc.eks"
        );
    }
}
