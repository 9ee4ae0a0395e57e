//! A node group's life on EKS: create (with its supporting stack), wait
//! until it is active, change scaling and tags in place, delete.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_eks::types::{
    AmiTypes, CapacityTypes, LaunchTemplateSpecification, NodegroupScalingConfig, Taint,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::shared_error as error;
use super::super::shared_pacing::expected;
use super::super::shared_tags::{self as tags, TOKEN};
use super::super::{stack, waiting};
use super::spec::{NodegroupSpec, effect};
use crate::contract::{OpContext, ProviderError, Values};

/// The cluster's own security group, if EKS reports one.
async fn cluster_security_group(
    eks: &aws_sdk_eks::Client,
    cluster: &str,
) -> Result<Option<String>, ProviderError> {
    let out = eks
        .describe_cluster()
        .name(cluster)
        .send()
        .await
        .map_err(|e| error::aws(&format!("describe cluster `{cluster}`"), e))?;
    Ok(out
        .cluster()
        .and_then(|c| c.resources_vpc_config())
        .and_then(|v| v.cluster_security_group_id())
        .map(str::to_string))
}

/// Creates the node group of `spec` (and its supporting stack) and waits
/// until it is `ACTIVE`; adopts one this operation already started.
pub async fn create(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    spec: &NodegroupSpec,
) -> Result<Values, ProviderError> {
    if let Some(existing) = find(eks, spec).await? {
        let token = existing.tags().and_then(|t| t.get(TOKEN));
        crate::ownership::ensure_own(
            &format!("node group `{}` in cluster `{}`", spec.name, spec.cluster),
            token.map(String::as_str),
            &ctx.token,
        )?;
        return wait_active(ctx, eks, spec).await;
    }
    // The capacity reservation, judged now that the subnets' zones are
    // known, and the EFA rules EC2 can judge, before anything is made (for
    // an eks.nodegroup step and an eksctl file's groups alike); the launch
    // template takes the interface count EC2 gives.
    if let Some(ask) = super::reservation::ask_of_spec(spec) {
        let sdk = super::super::sdk_config(ctx).await?;
        let found = super::reservation::check(&sdk, ctx, Some(&spec.name), &ask, true).await?;
        if !found.refusals.is_empty() {
            return Err(super::reservation::refused(&found.refusals));
        }
    }
    let looked = super::efa_check::look(ctx, spec).await?;
    if let Some(refusal) = looked.refusal(spec) {
        return Err(refusal);
    }
    for u in &looked.unjudged {
        ctx.reporter.event(&format!(
            "node group {}: EFA rules not judged: {u}",
            spec.name
        ));
    }
    let mut spec = spec.clone();
    spec.efa_count = looked.interfaces.or(spec.efa_count);
    let spec = &spec;
    let mut role = spec.node_role_arn.clone();
    let mut launch_template = None;
    let cluster_sg = if spec.efa {
        cluster_security_group(eks, &spec.cluster).await?
    } else {
        None
    };
    if let Some(template) = spec.stack_template(cluster_sg.as_deref()) {
        let cfn = stack::client(ctx).await?;
        let outs = stack::ensure(ctx, &cfn, &spec.stack_name(), &template).await?;
        if role.is_none() {
            role = outs
                .get("RoleArn")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        launch_template = outs
            .get("LaunchTemplateId")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    let role = role.ok_or_else(|| {
        ProviderError::fatal("the node role stack gave no RoleArn").with_help(
            "flow makes that stack from its own template, which outputs RoleArn: look at the stack's outputs \
             in CloudFormation (a stack changed outside flow may have lost it), or set `node_role_arn` on the step",
        )
    })?;
    ctx.reporter.event(&format!("creating {}", spec.describe()));
    let scaling = NodegroupScalingConfig::builder()
        .min_size(spec.min_size)
        .desired_size(spec.desired_size)
        .max_size(spec.max_size)
        .build();
    let all_tags: HashMap<String, String> = tags::with_token(&spec.tags, &ctx.token)
        .into_iter()
        .collect();
    let mut req = eks
        .create_nodegroup()
        .cluster_name(&spec.cluster)
        .nodegroup_name(&spec.name)
        .node_role(role)
        .set_subnets(Some(spec.subnet_ids.clone()))
        .set_instance_types(Some(spec.instance_types.clone()))
        .scaling_config(scaling)
        .set_labels((!spec.labels.is_empty()).then(|| spec.labels.clone().into_iter().collect()))
        .set_tags(Some(all_tags))
        .client_request_token(super::super::request_token(&ctx.token, &spec.name));
    for t in &spec.taints {
        req = req.taints(
            Taint::builder()
                .key(&t.key)
                .value(&t.value)
                .set_effect(effect(&t.effect))
                .build(),
        );
    }
    if let Some(ami) = &spec.ami_type {
        req = req.ami_type(AmiTypes::from(ami.as_str()));
    }
    if let Some(ct) = &spec.capacity_type {
        req = req.capacity_type(CapacityTypes::from(ct.as_str()));
    }
    match &launch_template {
        Some(id) => {
            req = req.launch_template(LaunchTemplateSpecification::builder().id(id).build());
        }
        None => req = req.set_disk_size(spec.disk_size),
    }
    let sent = Instant::now();
    req.send()
        .await
        .map_err(|e| error::refused(&format!("create node group `{}`", spec.name), e))?;
    wait_active_since(ctx, eks, spec, Some(sent)).await
}

/// The node group `spec` describes, if it exists.
pub(super) async fn find(
    eks: &aws_sdk_eks::Client,
    spec: &NodegroupSpec,
) -> Result<Option<aws_sdk_eks::types::Nodegroup>, ProviderError> {
    waiting::find_nodegroup(eks, &spec.cluster, &spec.name).await
}

/// The outputs every node group has ([`outputs`] puts each in).
pub(super) const OUTPUT_KEYS: [&str; 7] = [
    "name",
    "arn",
    "cluster",
    "node_role_arn",
    "status",
    "efa_interfaces",
    "autoscaling_groups",
];

/// The output a node group has only when EKS names its launch template.
pub(super) const SOMETIMES: [&str; 1] = ["launch_template_id"];

/// The outputs of a node group as EKS describes it.
pub(super) fn outputs(ng: &aws_sdk_eks::types::Nodegroup, spec: &NodegroupSpec) -> Values {
    let mut out = Values::new();
    out.insert(
        "name".into(),
        json!(ng.nodegroup_name().unwrap_or(&spec.name)),
    );
    out.insert("arn".into(), json!(ng.nodegroup_arn().unwrap_or_default()));
    out.insert("cluster".into(), json!(spec.cluster));
    out.insert(
        "node_role_arn".into(),
        json!(ng.node_role().unwrap_or_default()),
    );
    out.insert(
        "status".into(),
        json!(ng.status().map(|s| s.as_str()).unwrap_or_default()),
    );
    out.insert("efa_interfaces".into(), json!(spec.efa_interfaces()));
    if let Some(lt) = ng.launch_template().and_then(|l| l.id()) {
        out.insert("launch_template_id".into(), json!(lt));
    }
    let asgs: Vec<&str> = ng
        .resources()
        .map(|r| {
            r.auto_scaling_groups()
                .iter()
                .filter_map(|a| a.name())
                .collect()
        })
        .unwrap_or_default();
    out.insert("autoscaling_groups".into(), json!(asgs));
    out
}

/// Waits until the node group is `ACTIVE`; its outputs then.
pub(super) async fn wait_active(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    spec: &NodegroupSpec,
) -> Result<Values, ProviderError> {
    wait_active_since(ctx, eks, spec, None).await
}

/// Waits until the node group is `ACTIVE`, its create sent at `sent` (if
/// this call sent it); its outputs then.
async fn wait_active_since(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    spec: &NodegroupSpec,
    sent: Option<Instant>,
) -> Result<Values, ProviderError> {
    let ng = waiting::await_condition(
        ctx,
        &format!("node group `{}`", spec.name),
        (expected::EKS_NODEGROUP, sent),
        || find(eks, spec),
        waiting::nodegroup_active,
        "EKS gave up on the node group: read its health issues above (capacity, the subnets, the \
         launch template, the node role), fix the cause, then `flow apply --replace STEP`",
    )
    .await?;
    Ok(outputs(&ng, spec))
}

/// Deletes node group `name` of `cluster` and its supporting stack, waiting
/// until both are gone.
pub async fn delete(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    cluster: &str,
    name: &str,
) -> Result<(), ProviderError> {
    if waiting::find_nodegroup(eks, cluster, name).await?.is_some() {
        ctx.reporter.event(&format!("deleting node group {name}"));
        match eks
            .delete_nodegroup()
            .cluster_name(cluster)
            .nodegroup_name(name)
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) if error::code(&e) == Some("ResourceNotFoundException") => {}
            Err(e) => return Err(error::aws(&format!("delete node group `{name}`"), e)),
        }
        waiting::await_gone(
            ctx,
            &format!("node group `{name}`"),
            expected::EKS_NODEGROUP_DELETE,
            || waiting::find_nodegroup(eks, cluster, name),
            |ng| ng.status().map(|s| s.as_str()),
        )
        .await?;
    }
    let cfn = stack::client(ctx).await?;
    stack::delete(ctx, &cfn, &stack::name(cluster, &format!("ng-{name}"))).await
}

/// Changes scaling and tags in place.
pub(super) async fn update_in_place(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    before: &NodegroupSpec,
    after: &NodegroupSpec,
) -> Result<Values, ProviderError> {
    let Some(ng) = find(eks, after).await? else {
        return Err(ProviderError::fatal(format!(
            "node group `{}` of cluster `{}` is gone; plan again to create it",
            after.name, after.cluster
        )));
    };
    let scaling = (after.min_size, after.desired_size, after.max_size);
    if scaling != (before.min_size, before.desired_size, before.max_size) {
        ctx.reporter.event(&format!(
            "scaling node group {} to {}..{} (desired {})",
            after.name, after.min_size, after.max_size, after.desired_size
        ));
        eks.update_nodegroup_config()
            .cluster_name(&after.cluster)
            .nodegroup_name(&after.name)
            .scaling_config(
                NodegroupScalingConfig::builder()
                    .min_size(after.min_size)
                    .desired_size(after.desired_size)
                    .max_size(after.max_size)
                    .build(),
            )
            .client_request_token(super::super::request_token(&ctx.token, &after.name))
            .send()
            .await
            .map_err(|e| error::aws(&format!("scale node group `{}`", after.name), e))?;
    }
    if before.tags != after.tags
        && let Some(arn) = ng.nodegroup_arn()
    {
        retag(eks, arn, &before.tags, &after.tags).await?;
    }
    wait_active(ctx, eks, after).await
}

/// Adds and removes tags to go from `before` to `after`.
pub async fn retag(
    eks: &aws_sdk_eks::Client,
    arn: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Result<(), ProviderError> {
    let (add, remove) = tags::changes(before, after);
    if !add.is_empty() {
        eks.tag_resource()
            .resource_arn(arn)
            .set_tags(Some(add.into_iter().collect()))
            .send()
            .await
            .map_err(|e| error::aws(&format!("tag `{arn}`"), e))?;
    }
    if !remove.is_empty() {
        eks.untag_resource()
            .resource_arn(arn)
            .set_tag_keys(Some(remove))
            .send()
            .await
            .map_err(|e| error::aws(&format!("untag `{arn}`"), e))?;
    }
    Ok(())
}
