//! A cluster's life on EKS: converge (role stack, cluster, OIDC stack, the
//! eksctl file's node groups), wait until it is active, and what state
//! keeps of it (outputs, the node groups' shapes).

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::nodegroup::{self, NodegroupSpec};
use super::super::shared_error as error;
use super::super::shared_pacing::expected;
use super::super::shared_tags::{self as tags, TOKEN};
use super::super::stack;
use super::super::waiting;
use super::spec::ClusterSpec;
use crate::contract::{Applied, OpContext, ProviderError, Values};

/// The outputs every cluster has ([`outputs`] puts each in).
pub(super) const OUTPUT_KEYS: [&str; 10] = [
    "name",
    "arn",
    "endpoint",
    "certificate_authority",
    "oidc_issuer",
    "version",
    "role_arn",
    "subnet_ids",
    "nodegroups",
    "connection",
];

/// The outputs a cluster has only for some inputs or answers: the VPC flow
/// made for it, the security group EKS names, the OIDC provider.
pub(super) const SOMETIMES: [&str; 6] = [
    "vpc_id",
    "private_subnet_ids",
    "public_subnet_ids",
    "shared_node_security_group_id",
    "security_group_id",
    "oidc_provider_arn",
];

/// The outputs of an `ACTIVE` cluster.
pub(super) fn outputs(c: &aws_sdk_eks::types::Cluster, region: &str, spec: &ClusterSpec) -> Values {
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
    out.insert("subnet_ids".into(), json!(spec.subnet_ids));
    if let Some(vpc) = &spec.made_vpc {
        out.insert("vpc_id".into(), json!(vpc.vpc_id));
        out.insert("private_subnet_ids".into(), json!(vpc.private));
        out.insert("public_subnet_ids".into(), json!(vpc.public));
        out.insert(
            "shared_node_security_group_id".into(),
            json!(vpc.shared_node_security_group),
        );
    }
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
pub(super) async fn wait_active(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    name: &str,
) -> Result<aws_sdk_eks::types::Cluster, ProviderError> {
    wait_active_since(ctx, eks, name, None).await
}

/// Waits until the cluster is `ACTIVE`, its create sent at `sent` (if this
/// call sent it).
async fn wait_active_since(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    name: &str,
    sent: Option<Instant>,
) -> Result<aws_sdk_eks::types::Cluster, ProviderError> {
    waiting::await_condition(
        ctx,
        &format!("cluster `{name}`"),
        (expected::EKS_CLUSTER, sent),
        || waiting::find_cluster(eks, name),
        waiting::cluster_active,
        "EKS gave up on the cluster: read its health issues above, fix the cause (the role, the subnets), \
         then `flow destroy --target STEP` and apply again",
    )
    .await
}

/// The OIDC provider stack's template for `issuer`.
pub(super) fn oidc_template(issuer: &str) -> Value {
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
pub(super) async fn region(ctx: &OpContext, spec: &ClusterSpec) -> Result<String, ProviderError> {
    let region = super::super::shared_config::region(&super::super::sdk_config(ctx).await?);
    if let Some(want) = &spec.config_region
        && *want != region
    {
        return Err(ProviderError::fatal(format!(
            "the eksctl config says region `{want}` but the step runs in `{region}`: set `region = \"{want}\"` on the step or the workflow"
        )));
    }
    Ok(region)
}

/// The spec with the subnets of the VPC made for it, when it has one:
/// the VPC stack is made (or waited for) when `make`, else only read (a
/// plan), and left as it is when it does not exist yet.
pub(super) async fn with_vpc(
    ctx: &OpContext,
    cfn: &aws_sdk_cloudformation::Client,
    spec: &ClusterSpec,
    make: bool,
) -> Result<ClusterSpec, ProviderError> {
    let mut spec = spec.clone();
    let Some(request) = &spec.vpc else {
        return Ok(spec);
    };
    let outputs = if make {
        Some(stack::ensure(ctx, cfn, &spec.vpc_stack(), &request.template(&spec.name)).await?)
    } else {
        stack::outputs_of(cfn, &spec.vpc_stack()).await?
    };
    if let Some(outputs) = outputs {
        spec.attach_vpc(&outputs)?;
    }
    Ok(spec)
}

/// Makes what the cluster still lacks and waits for all of it: the VPC
/// stack, the role stack, the cluster, the OIDC stack, the node groups.
pub(super) async fn converge(
    ctx: &OpContext,
    spec: &ClusterSpec,
) -> Result<Applied, ProviderError> {
    let region = region(ctx, spec).await?;
    let eks = super::super::client(ctx).await?;
    let cfn = stack::client(ctx).await?;
    let spec = &with_vpc(ctx, &cfn, spec, true).await?;
    let mut sent = None;
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
            sent = Some(Instant::now());
            eks.create_cluster()
                .name(&spec.name)
                .set_version(spec.version.clone())
                .role_arn(role)
                .resources_vpc_config(spec.vpc_config())
                .set_tags(Some(all))
                .client_request_token(super::super::request_token(&ctx.token, &spec.name))
                .send()
                .await
                .map_err(|e| error::refused(&format!("create cluster `{}`", spec.name), e))?;
        }
    }
    let cluster = wait_active_since(ctx, &eks, &spec.name, sent).await?;
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

pub(super) fn applied(
    c: &aws_sdk_eks::types::Cluster,
    region: &str,
    spec: &ClusterSpec,
) -> Applied {
    Applied {
        id: c.arn().map(str::to_string),
        outputs: outputs(c, region, spec),
        private: json!({
            "nodegroups": spec.nodegroups.iter().map(|n| json!({
                "name": n.name, "plan": n.describe(), "shape": shape(n),
                "scaling": [n.min_size, n.desired_size, n.max_size],
            })).collect::<Vec<_>>(),
            "role_stack": spec.role_arn.is_none(),
            "vpc_stack": spec.vpc.is_some(),
            "oidc": spec.with_oidc,
        }),
    }
}

/// What defines a node group apart from its scaling and tags (which
/// change in place): a change replaces it.
pub(super) fn shape(ng: &NodegroupSpec) -> String {
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
pub(super) fn recorded_shapes(private: &Value) -> Vec<(String, String, [i32; 3])> {
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
pub(super) fn access_differs(spec: &ClusterSpec, c: &aws_sdk_eks::types::Cluster) -> bool {
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
pub(super) fn recorded_nodegroups(private: &Value) -> Vec<(String, String)> {
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
