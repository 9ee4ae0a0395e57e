//! `eks.nodegroup`: an EKS managed node group. Scaling (min, desired, max)
//! and tags change in place; anything else replaces the group.
//!
//! With `efa = true` or a `capacity_reservation_id`, the group gets a launch
//! template (in the supporting stack `flow-eks-CLUSTER-ng-NAME`) carrying one
//! EFA interface per network card of the instance type (4 for p4d, 32 for
//! p5, 8 for p6-b200) and the capacity reservation target; without a
//! `node_role_arn`, the same stack makes the node role.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_eks::types::{
    AmiTypes, CapacityTypes, LaunchTemplateSpecification, NodegroupScalingConfig, Taint,
    TaintEffect,
};
use serde_json::{Value, json};

use super::shared_error as error;
use super::shared_inputs::{bool_or, opt_int, opt_str, req_str, str_list, str_map};
use super::shared_tags::{self as tags, TOKEN};
use super::{efa, stack, waiting};
use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Schema, StepKind, ValidateContext, Values,
};

/// Policies of the node role flow makes when none is given.
const NODE_POLICIES: [&str; 3] = [
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
];

/// The node group's input names, written once: the schema, the spec and
/// the cost estimate all use these.
mod input {
    pub const CLUSTER: &str = "cluster";
    pub const NAME: &str = "name";
    pub const INSTANCE_TYPES: &str = "instance_types";
    pub const SUBNET_IDS: &str = "subnet_ids";
    pub const MIN_SIZE: &str = "min_size";
    pub const DESIRED_SIZE: &str = "desired_size";
    pub const MAX_SIZE: &str = "max_size";
    pub const NODE_ROLE_ARN: &str = "node_role_arn";
    pub const AMI_TYPE: &str = "ami_type";
    pub const LABELS: &str = "labels";
    pub const TAINTS: &str = "taints";
    pub const CAPACITY_RESERVATION_ID: &str = "capacity_reservation_id";
    pub const CAPACITY_TYPE: &str = "capacity_type";
    pub const EFA: &str = "efa";
    pub const DISK_SIZE: &str = "disk_size";
    pub const SECURITY_GROUP_IDS: &str = "security_group_ids";
    pub const TAGS: &str = "tags";
}

/// Nodes wanted when `desired_size` is not set.
const DEFAULT_DESIRED_SIZE: i64 = 1;

/// An input the spec cannot be read from, and why.
#[derive(Debug)]
pub struct SpecError {
    /// The input.
    pub input: &'static str,
    /// Why.
    pub error: ProviderError,
}

impl From<SpecError> for ProviderError {
    fn from(e: SpecError) -> Self {
        e.error
    }
}

/// `result` of reading `input`, blamed on it when it fails.
fn at<T>(input: &'static str, result: Result<T, ProviderError>) -> Result<T, SpecError> {
    result.map_err(|error| SpecError { input, error })
}

/// One taint of a node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintSpec {
    /// The taint's key.
    pub key: String,
    /// Its value (may be empty).
    pub value: String,
    /// `NO_SCHEDULE`, `NO_EXECUTE` or `PREFER_NO_SCHEDULE` (Kubernetes spellings accepted).
    pub effect: String,
}

/// Everything that defines a managed node group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodegroupSpec {
    /// The cluster's name.
    pub cluster: String,
    /// The node group's name.
    pub name: String,
    /// The node role; made in the supporting stack when absent.
    pub node_role_arn: Option<String>,
    /// Subnets the nodes go in.
    pub subnet_ids: Vec<String>,
    /// Instance types.
    pub instance_types: Vec<String>,
    /// Scaling: minimum.
    pub min_size: i32,
    /// Scaling: desired.
    pub desired_size: i32,
    /// Scaling: maximum.
    pub max_size: i32,
    /// EKS AMI type (`AL2_x86_64_GPU`, `AL2023_x86_64_NVIDIA`, …).
    pub ami_type: Option<String>,
    /// Kubernetes labels of the nodes.
    pub labels: BTreeMap<String, String>,
    /// Kubernetes taints of the nodes.
    pub taints: Vec<TaintSpec>,
    /// An EC2 capacity reservation (ODCR or capacity block) to launch into.
    pub capacity_reservation_id: Option<String>,
    /// `ON_DEMAND`, `SPOT` or `CAPACITY_BLOCK`.
    pub capacity_type: Option<String>,
    /// Whether the nodes get EFA interfaces.
    pub efa: bool,
    /// Root volume size in GiB.
    pub disk_size: Option<i32>,
    /// Extra security groups for the EFA interfaces.
    pub security_group_ids: Vec<String>,
    /// AWS tags.
    pub tags: BTreeMap<String, String>,
}

impl NodegroupSpec {
    /// The spec from a step's inputs; a failure names the input it is about.
    pub fn from_values(v: &Values) -> Result<Self, SpecError> {
        use input::*;
        let int = |name: &'static str, default: i64| -> Result<i32, SpecError> {
            Ok(at(name, opt_int(v, name))?.unwrap_or(default) as i32)
        };
        let desired = int(DESIRED_SIZE, DEFAULT_DESIRED_SIZE)?;
        Ok(NodegroupSpec {
            cluster: at(CLUSTER, req_str(v, CLUSTER))?,
            name: at(NAME, req_str(v, NAME))?,
            node_role_arn: at(NODE_ROLE_ARN, opt_str(v, NODE_ROLE_ARN))?,
            subnet_ids: at(SUBNET_IDS, str_list(v, SUBNET_IDS))?,
            instance_types: at(INSTANCE_TYPES, str_list(v, INSTANCE_TYPES))?,
            min_size: int(MIN_SIZE, desired as i64)?,
            desired_size: desired,
            max_size: int(MAX_SIZE, desired as i64)?,
            ami_type: at(AMI_TYPE, opt_str(v, AMI_TYPE))?,
            labels: at(LABELS, str_map(v, LABELS))?,
            taints: at(TAINTS, taints(v.get(TAINTS)))?,
            // "" (a workflow var's "none" default) is no reservation.
            capacity_reservation_id: at(
                CAPACITY_RESERVATION_ID,
                opt_str(v, CAPACITY_RESERVATION_ID),
            )?
            .filter(|cr| !cr.is_empty()),
            capacity_type: at(CAPACITY_TYPE, opt_str(v, CAPACITY_TYPE))?,
            efa: at(EFA, bool_or(v, EFA, false))?,
            disk_size: at(DISK_SIZE, opt_int(v, DISK_SIZE))?.map(|d| d as i32),
            security_group_ids: at(SECURITY_GROUP_IDS, str_list(v, SECURITY_GROUP_IDS))?,
            tags: at(TAGS, str_map(v, TAGS))?,
        })
    }

    /// The spec as far as offline checks and the cost estimate can read it:
    /// inputs not known yet (a cluster name from another step) stand in as
    /// placeholders. `None` when the instance types are not known either.
    pub fn for_checks(known: &Values) -> Option<Result<Self, SpecError>> {
        if !known.contains_key(input::INSTANCE_TYPES) {
            return None;
        }
        let mut v = known.clone();
        v.entry(input::CLUSTER).or_insert(json!("?"));
        v.entry(input::NAME).or_insert(json!("?"));
        Some(Self::from_values(&v))
    }

    /// Offline problems, each at the input it concerns.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if !(self.min_size <= self.desired_size && self.desired_size <= self.max_size) {
            out.push(Problem::at(
                input::DESIRED_SIZE,
                format!(
                    "scaling must have min ≤ desired ≤ max, found {} ≤ {} ≤ {}",
                    self.min_size, self.desired_size, self.max_size
                ),
            ));
        }
        if self.instance_types.is_empty() {
            out.push(Problem::at(
                input::INSTANCE_TYPES,
                "a node group needs at least one instance type",
            ));
        }
        if self.efa {
            for t in &self.instance_types {
                if efa::interfaces(t).is_none() {
                    out.push(
                        Problem::at(
                            input::EFA,
                            format!("flow does not know how many EFA interfaces `{t}` has"),
                        )
                        .with_help(format!("known families: {}", efa::known_families())),
                    );
                }
            }
        }
        for (i, t) in self.taints.iter().enumerate() {
            if effect(&t.effect).is_none() {
                out.push(
                    Problem::at_path(
                        &[input::TAINTS, &i.to_string(), "effect"],
                        format!("unknown taint effect `{}`", t.effect),
                    )
                    .with_help("use NoSchedule, NoExecute or PreferNoSchedule"),
                );
            }
        }
        out
    }

    /// EFA interfaces per node (the first instance type's), 0 without EFA.
    pub fn efa_interfaces(&self) -> u32 {
        if !self.efa {
            return 0;
        }
        self.instance_types
            .first()
            .and_then(|t| efa::interfaces(t))
            .unwrap_or(0)
    }

    /// Whether the group needs a launch template.
    fn needs_launch_template(&self) -> bool {
        self.efa || self.capacity_reservation_id.is_some()
    }

    /// The supporting stack's name.
    pub fn stack_name(&self) -> String {
        stack::name(&self.cluster, &format!("ng-{}", self.name))
    }

    /// What the supporting stack holds, if the group needs one.
    pub fn stack_template(&self, cluster_sg: Option<&str>) -> Option<Value> {
        if self.node_role_arn.is_some() && !self.needs_launch_template() {
            return None;
        }
        let mut template = if self.node_role_arn.is_none() {
            stack::role_template("ec2.amazonaws.com", &NODE_POLICIES)
        } else {
            json!({"AWSTemplateFormatVersion": "2010-09-09", "Resources": {}, "Outputs": {}})
        };
        if self.needs_launch_template() {
            let mut data = json!({});
            if self.efa {
                let mut groups: Vec<String> = cluster_sg.map(str::to_string).into_iter().collect();
                groups.extend(self.security_group_ids.iter().cloned());
                data["NetworkInterfaces"] = efa::network_interfaces(self.efa_interfaces(), &groups);
            }
            if let Some(cr) = &self.capacity_reservation_id {
                data["CapacityReservationSpecification"] =
                    json!({"CapacityReservationTarget": {"CapacityReservationId": cr}});
            }
            if let Some(size) = self.disk_size {
                data["BlockDeviceMappings"] = json!([{
                    "DeviceName": "/dev/xvda",
                    "Ebs": {"VolumeSize": size, "VolumeType": "gp3", "DeleteOnTermination": true}
                }]);
            }
            template["Resources"]["LaunchTemplate"] = json!({
                "Type": "AWS::EC2::LaunchTemplate",
                "Properties": {
                    "LaunchTemplateName": format!("flow-eks-{}-{}", self.cluster, self.name),
                    "LaunchTemplateData": data
                }
            });
            template["Outputs"]["LaunchTemplateId"] = json!({"Value": {"Ref": "LaunchTemplate"}});
        }
        Some(template)
    }

    /// What creating the group does, for plans (`eksctl_config`, plan detail).
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "{} × {}..{} (desired {})",
            self.instance_types.join(","),
            self.min_size,
            self.max_size,
            self.desired_size
        )];
        if self.efa {
            parts.push(format!(
                "EFA: {} interfaces per node",
                self.efa_interfaces()
            ));
        }
        if let Some(cr) = &self.capacity_reservation_id {
            parts.push(format!("capacity reservation {cr}"));
        }
        if !self.subnet_ids.is_empty() {
            parts.push(format!("subnets {}", self.subnet_ids.join(",")));
        }
        if self.node_role_arn.is_none() {
            parts.push("node role created".into());
        }
        format!("managed node group {}: {}", self.name, parts.join("; "))
    }
}

/// Taints from an input: a list of `{ key, value, effect }` tables.
fn taints(v: Option<&Value>) -> Result<Vec<TaintSpec>, ProviderError> {
    let Some(Value::Array(items)) = v else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .map(|t| {
            let s = |k: &str| {
                t.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            if s("key").is_empty() {
                return Err(ProviderError::fatal("each taint needs a `key`"));
            }
            Ok(TaintSpec {
                key: s("key"),
                value: s("value"),
                effect: s("effect"),
            })
        })
        .collect()
}

/// The EKS taint effect for `name`, in either spelling.
fn effect(name: &str) -> Option<TaintEffect> {
    match name.to_ascii_lowercase().replace('_', "").as_str() {
        "noschedule" => Some(TaintEffect::NoSchedule),
        "noexecute" => Some(TaintEffect::NoExecute),
        "prefernoschedule" => Some(TaintEffect::PreferNoSchedule),
        _ => None,
    }
}

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
        .client_request_token(super::request_token(&ctx.token, &spec.name));
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
    req.send()
        .await
        .map_err(|e| error::aws(&format!("create node group `{}`", spec.name), e))?;
    wait_active(ctx, eks, spec).await
}

/// The node group `spec` describes, if it exists.
async fn find(
    eks: &aws_sdk_eks::Client,
    spec: &NodegroupSpec,
) -> Result<Option<aws_sdk_eks::types::Nodegroup>, ProviderError> {
    waiting::find_nodegroup(eks, &spec.cluster, &spec.name).await
}

/// The outputs of a node group as EKS describes it.
fn outputs(ng: &aws_sdk_eks::types::Nodegroup, spec: &NodegroupSpec) -> Values {
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
async fn wait_active(
    ctx: &OpContext,
    eks: &aws_sdk_eks::Client,
    spec: &NodegroupSpec,
) -> Result<Values, ProviderError> {
    let ng = waiting::await_condition(
        ctx,
        &format!("node group `{}`", spec.name),
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
            || waiting::find_nodegroup(eks, cluster, name),
            |ng| ng.status().map(|s| s.as_str()),
        )
        .await?;
    }
    let cfn = stack::client(ctx).await?;
    stack::delete(ctx, &cfn, &stack::name(cluster, &format!("ng-{name}"))).await
}

/// Changes scaling and tags in place.
async fn update_in_place(
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
            .client_request_token(super::request_token(&ctx.token, &after.name))
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

/// The `eks.nodegroup` provider kind.
#[derive(Debug, Clone)]
pub struct EksNodegroup {
    schema: Schema,
}

impl EksNodegroup {
    /// The provider with its schema.
    pub fn new() -> Self {
        use InputType::*;
        let list = || List(Box::new(String));
        EksNodegroup {
            schema: Schema {
                kind: StepKind::Resource,
                description: "An EKS managed node group, with EFA interfaces and capacity reservations",
                inputs: vec![
                    InputSpec::required(input::CLUSTER, String, "The cluster's name").forces_new(),
                    InputSpec::required(input::NAME, String, "The node group's name").forces_new(),
                    InputSpec::required(
                        input::INSTANCE_TYPES,
                        list(),
                        "Instance types, e.g. [\"p4d.24xlarge\"]",
                    )
                    .forces_new(),
                    InputSpec::optional(input::SUBNET_IDS, list(), "Subnets the nodes go in")
                        .forces_new(),
                    InputSpec::optional(
                        input::MIN_SIZE,
                        Integer,
                        "Fewest nodes (default: desired_size)",
                    ),
                    InputSpec::optional(
                        input::DESIRED_SIZE,
                        Integer,
                        "Nodes wanted now (default 1)",
                    ),
                    InputSpec::optional(
                        input::MAX_SIZE,
                        Integer,
                        "Most nodes (default: desired_size)",
                    ),
                    InputSpec::optional(
                        input::NODE_ROLE_ARN,
                        String,
                        "The nodes' IAM role; made for you when absent",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        input::AMI_TYPE,
                        String,
                        "EKS AMI type, e.g. AL2_x86_64_GPU",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        input::LABELS,
                        Map(Box::new(String)),
                        "Kubernetes labels of the nodes",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        input::TAINTS,
                        List(Box::new(Any)),
                        "Taints: a list of { key, value, effect }",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        input::CAPACITY_RESERVATION_ID,
                        String,
                        "EC2 capacity reservation to launch into (cr-…)",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        input::CAPACITY_TYPE,
                        String,
                        "ON_DEMAND, SPOT or CAPACITY_BLOCK",
                    )
                    .forces_new(),
                    InputSpec::optional(
                        input::EFA,
                        Bool,
                        "Attach one EFA interface per network card (p4d: 4, p5: 32, p6-b200: 8)",
                    )
                    .forces_new(),
                    InputSpec::optional(input::DISK_SIZE, Integer, "Root volume size in GiB")
                        .forces_new(),
                    InputSpec::optional(
                        input::SECURITY_GROUP_IDS,
                        list(),
                        "Extra security groups for the EFA interfaces",
                    )
                    .forces_new(),
                    InputSpec::optional(input::TAGS, Map(Box::new(String)), "AWS tags"),
                ],
                open_inputs: false,
            },
        }
    }
}

impl Default for EksNodegroup {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Provider for EksNodegroup {
    fn name(&self) -> &'static str {
        "eks.nodegroup"
    }

    /// The nodes it keeps running: `desired_size` (default 1) of the first
    /// instance type (EKS launches the first type that has capacity).
    fn capacity(&self, inputs: &Values) -> Vec<crate::contract::Capacity> {
        let Some(Ok(spec)) = NodegroupSpec::for_checks(inputs) else {
            return Vec::new();
        };
        let Some(instance_type) = spec.instance_types.first() else {
            return Vec::new();
        };
        vec![crate::contract::Capacity::Instances {
            instance_type: instance_type.clone(),
            count: spec.desired_size.max(0) as u32,
        }]
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(
        &self,
        inputs: &[(std::string::String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Vec<Problem> {
        // Unknown values must not trip the checks: they are left out, and
        // `for_checks` stands in for the names.
        match NodegroupSpec::for_checks(&crate::contract::known_inputs(inputs)) {
            None => Vec::new(),
            Some(Ok(spec)) => spec.problems(),
            Some(Err(e)) => vec![Problem::at(e.input, e.error.message)],
        }
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        let spec = NodegroupSpec::from_values(inputs)?;
        let eks = super::client(ctx).await?;
        let outputs = create(ctx, &eks, &spec).await?;
        Ok(applied(&spec, outputs))
    }

    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        let before = NodegroupSpec::from_values(prior.inputs)?;
        let after = NodegroupSpec::from_values(inputs)?;
        let eks = super::client(ctx).await?;
        let outputs = update_in_place(ctx, &eks, &before, &after).await?;
        Ok(applied(&after, outputs))
    }

    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        let cluster = req_str(prior.inputs, "cluster")?;
        let name = req_str(prior.inputs, "name")?;
        let eks = super::client(ctx).await?;
        delete(ctx, &eks, &cluster, &name).await
    }

    async fn read(
        &self,
        ctx: &OpContext,
        _id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        let spec = NodegroupSpec::from_values(inputs)?;
        let eks = super::client(ctx).await?;
        match find(&eks, &spec).await? {
            Some(ng) if ng.tags().and_then(|t| t.get(TOKEN)) == Some(&ctx.token) => {
                let outputs = wait_active(ctx, &eks, &spec).await?;
                Ok(ReadOutcome::Present(applied(&spec, outputs)))
            }
            _ => Ok(ReadOutcome::Missing),
        }
    }
}

/// The step's result from the group's outputs.
fn applied(spec: &NodegroupSpec, outputs: Values) -> Applied {
    Applied {
        id: outputs
            .get("arn")
            .and_then(Value::as_str)
            .map(str::to_string),
        outputs,
        private: json!({"stack": spec.stack_name()}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;

    fn spec(extra: Value) -> NodegroupSpec {
        let mut v = values(
            json!({"cluster": "dlc", "name": "gpu", "instance_types": ["p5.48xlarge"], "desired_size": 2}),
        );
        v.extend(values(extra));
        NodegroupSpec::from_values(&v).unwrap()
    }

    fn problems_of(inputs: Value) -> Vec<Problem> {
        let provider = EksNodegroup::new();
        let inputs: Vec<(std::string::String, InputValue)> = values(inputs)
            .into_iter()
            .map(|(k, v)| (k, InputValue::Known(v)))
            .collect();
        let ctx = ValidateContext {
            workdir: std::path::PathBuf::from("."),
        };
        provider.validate(&inputs, &ctx)
    }

    #[test]
    fn each_problem_points_at_the_input_that_is_wrong() {
        let base = json!({"cluster": "c", "name": "g", "instance_types": ["p5.48xlarge"]});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        let at = |p: &[Problem]| p.iter().map(|p| p.path.join(".")).collect::<Vec<_>>();
        assert_eq!(
            at(&problems_of(with("desired_size", json!("two")))),
            ["desired_size"]
        );
        assert_eq!(at(&problems_of(with("efa", json!("yes")))), ["efa"]);
        assert_eq!(at(&problems_of(with("labels", json!(["a"])))), ["labels"]);
        assert_eq!(
            at(&problems_of(with("taints", json!([{"value": "x"}])))),
            ["taints"]
        );
        assert_eq!(
            at(&problems_of(with("subnet_ids", json!("subnet-1")))),
            ["subnet_ids"]
        );
        assert!(problems_of(base.clone()).is_empty());
        // A cluster name known only after apply does not hide the checks.
        let mut unknown_cluster = base.clone();
        unknown_cluster.as_object_mut().unwrap().remove("cluster");
        unknown_cluster["max_size"] = json!(0);
        assert_eq!(at(&problems_of(unknown_cluster)), ["desired_size"]);
    }

    #[test]
    fn capacity_uses_the_same_default_as_the_spec() {
        let provider = EksNodegroup::new();
        let caps = provider.capacity(&values(json!({"instance_types": ["p4d.24xlarge"]})));
        assert_eq!(
            caps,
            vec![crate::contract::Capacity::Instances {
                instance_type: "p4d.24xlarge".into(),
                count: DEFAULT_DESIRED_SIZE as u32
            }]
        );
        assert!(
            provider
                .capacity(&values(json!({"cluster": "c"})))
                .is_empty()
        );
    }

    #[test]
    fn efa_template_has_one_interface_per_card_and_the_reservation() {
        let s = spec(
            json!({"efa": true, "capacity_reservation_id": "cr-1", "node_role_arn": "arn:role", "disk_size": 500}),
        );
        assert_eq!(s.efa_interfaces(), 32);
        let t = s.stack_template(Some("sg-cluster")).unwrap();
        let data = &t["Resources"]["LaunchTemplate"]["Properties"]["LaunchTemplateData"];
        assert_eq!(data["NetworkInterfaces"].as_array().unwrap().len(), 32);
        assert_eq!(data["NetworkInterfaces"][0]["Groups"][0], "sg-cluster");
        assert_eq!(
            data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"],
            "cr-1"
        );
        assert_eq!(data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"], 500);
        assert!(t["Resources"].get("Role").is_none());
        assert!(
            s.describe().contains("EFA: 32 interfaces per node"),
            "{}",
            s.describe()
        );
        let none =
            spec(json!({"efa": true, "capacity_reservation_id": "", "node_role_arn": "arn:role"}));
        let t = none.stack_template(None).unwrap();
        let data = &t["Resources"]["LaunchTemplate"]["Properties"]["LaunchTemplateData"];
        assert!(
            data.get("CapacityReservationSpecification").is_none(),
            "an empty id is no reservation: {data}"
        );
    }

    #[test]
    fn role_only_stack_without_efa_and_none_with_a_role() {
        let s = spec(json!({}));
        let t = s.stack_template(None).unwrap();
        assert!(t["Resources"].get("Role").is_some());
        assert!(t["Resources"].get("LaunchTemplate").is_none());
        assert!(
            spec(json!({"node_role_arn": "arn:r"}))
                .stack_template(None)
                .is_none()
        );
    }

    #[test]
    fn problems_are_found_offline() {
        let s = spec(
            json!({"instance_types": ["m5.large"], "efa": true, "min_size": 3,
                            "taints": [{"key": "k", "effect": "Sometimes"}]}),
        );
        let p = s.problems();
        assert!(p.iter().any(|p| p.path == ["desired_size"]), "{p:?}");
        assert!(
            p.iter()
                .any(|p| p.path == ["efa"] && p.message.contains("m5.large")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|p| p.path == ["taints", "0", "effect"]),
            "{p:?}"
        );
        assert_eq!(effect("NoSchedule"), Some(TaintEffect::NoSchedule));
        assert_eq!(effect("NO_EXECUTE"), Some(TaintEffect::NoExecute));
    }

    #[test]
    fn scaling_updates_in_place_the_rest_replaces() {
        use crate::contract::Change;
        let p = EksNodegroup::new();
        let a = values(
            json!({"cluster": "c", "name": "n", "instance_types": ["p4d.24xlarge"], "desired_size": 1}),
        );
        let mut b = a.clone();
        b.insert("desired_size".into(), json!(4));
        assert_eq!(p.diff(&a, &b), Change::Update(vec!["desired_size".into()]));
        b.insert("instance_types".into(), json!(["p5.48xlarge"]));
        assert_eq!(
            p.diff(&a, &b),
            Change::Replace(vec!["instance_types".into()])
        );
    }
}
