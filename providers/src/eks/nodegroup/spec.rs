//! A node group's spec: its inputs (names written once), read and checked
//! offline, and what it makes: the supporting stack's template (node role,
//! EFA launch template, capacity reservation) and the plan's description.

use std::collections::BTreeMap;

use aws_sdk_eks::types::TaintEffect;
use serde_json::{Value, json};

use super::super::shared_inputs::{bool_or, opt_int, opt_str, req_str, str_list, str_map};
use super::super::stack;
use crate::contract::{Problem, ProviderError, Values};
use crate::efa;

/// Policies of the node role flow makes when none is given.
const NODE_POLICIES: [&str; 3] = [
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
];

/// The node group's input names, written once: the schema, the spec and
/// the cost estimate all use these.
pub(super) mod input {
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
    pub const PLACEMENT_GROUP: &str = "placement_group";
    pub const TAGS: &str = "tags";
    pub const DRAIN_TIMEOUT: &str = "drain_timeout";
}

/// Nodes wanted when `desired_size` is not set.
pub(super) const DEFAULT_DESIRED_SIZE: i64 = 1;

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
    /// The cluster placement group the nodes go in (its name).
    pub placement_group: Option<String>,
    /// EFA interfaces per node as EC2 reported them (DescribeInstanceTypes'
    /// `EfaInfo.MaximumEfaInterfaces`); `None`: the offline table's.
    pub efa_count: Option<u32>,
    /// AWS tags.
    pub tags: BTreeMap<String, String>,
    /// How long retiring the group after a replacement may wait for the new
    /// nodes and the drain (`None`: [`super::drain::DEFAULT_DRAIN_TIMEOUT`]).
    pub drain_timeout: Option<std::time::Duration>,
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
            placement_group: at(PLACEMENT_GROUP, opt_str(v, PLACEMENT_GROUP))?
                .filter(|g| !g.is_empty()),
            efa_count: None,
            tags: at(TAGS, str_map(v, TAGS))?,
            drain_timeout: at(DRAIN_TIMEOUT, duration(v, DRAIN_TIMEOUT))?,
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
        let mut out = self.shape_problems();
        out.extend(self.efa_problems());
        out
    }

    /// The EFA rules flow can judge offline: with `efa`, every instance
    /// type has EFA and flow knows its interface count (it writes the
    /// launch template's interfaces itself).
    pub fn efa_problems(&self) -> Vec<Problem> {
        if !self.efa {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, t) in self.instance_types.iter().enumerate() {
            if let Some((message, help)) = efa::type_problem(t, true) {
                out.push(
                    Problem::at_path(&[input::INSTANCE_TYPES, &i.to_string()], message)
                        .with_help(help),
                );
            }
        }
        out
    }

    /// Problems of everything but EFA: scaling, capacity blocks, types
    /// given at all, taints.
    pub fn shape_problems(&self) -> Vec<Problem> {
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
        if self.on_capacity_block() && self.capacity_reservation_id.is_none() {
            out.push(
                Problem::at(
                    input::CAPACITY_RESERVATION_ID,
                    "nodes on a capacity block need the block's reservation id",
                )
                .with_help("set capacity_reservation_id (in an eksctl config: capacityReservation.capacityReservationTarget.capacityReservationID) to the block's cr-… id"),
            );
        }
        if self.instance_types.is_empty() {
            out.push(Problem::at(
                input::INSTANCE_TYPES,
                "a node group needs at least one instance type",
            ));
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

    /// EFA interfaces per node (the first instance type's: as EC2 reported
    /// it, else from the offline table), 0 without EFA.
    pub fn efa_interfaces(&self) -> u32 {
        if !self.efa {
            return 0;
        }
        if let Some(n) = self.efa_count {
            return n;
        }
        self.instance_types
            .first()
            .and_then(|t| efa::interfaces(t))
            .unwrap_or(0)
    }

    /// The nodes it keeps running: `desired_size` of the first instance
    /// type (EKS launches the first type that has capacity).
    pub fn capacity(&self) -> Option<crate::contract::Capacity> {
        Some(crate::contract::Capacity::Instances {
            instance_type: self.instance_types.first()?.clone(),
            count: self.desired_size.max(0) as u32,
        })
    }

    /// Whether the nodes run on an EC2 capacity block (`CAPACITY_BLOCK`).
    pub fn on_capacity_block(&self) -> bool {
        self.capacity_type.as_deref() == Some("CAPACITY_BLOCK")
    }

    /// Whether the group needs a launch template.
    fn needs_launch_template(&self) -> bool {
        self.efa
            || self.capacity_reservation_id.is_some()
            || self.on_capacity_block()
            || self.placement_group.is_some()
    }

    /// The EFA rules' warnings for the plan: an EFA group without a
    /// placement group.
    pub fn efa_warnings(&self) -> Vec<String> {
        if !self.efa || self.placement_group.is_some() {
            return Vec::new();
        }
        vec![format!(
            "warning: EFA node group `{}` has no placement group: its nodes may land far apart on the network (set `placement_group` to a cluster placement group's name: aws ec2 create-placement-group --strategy cluster --group-name NAME)",
            self.name
        )]
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
            if let Some(group) = &self.placement_group {
                data["Placement"] = json!({"GroupName": group});
            }
            if let Some(cr) = &self.capacity_reservation_id {
                data["CapacityReservationSpecification"] =
                    json!({"CapacityReservationTarget": {"CapacityReservationId": cr}});
            }
            if self.on_capacity_block() {
                // What eksctl writes for `instanceMarketOptions.marketType:
                // capacity-block`; EKS takes CAPACITY_BLOCK only with it.
                data["InstanceMarketOptions"] = json!({"MarketType": "capacity-block"});
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
        match (&self.capacity_reservation_id, self.on_capacity_block()) {
            (Some(cr), true) => parts.push(format!("capacity block {cr}")),
            (None, true) => parts.push("capacity block".into()),
            (Some(cr), false) => parts.push(format!("capacity reservation {cr}")),
            (None, false) => {}
        }
        if self.capacity_type.as_deref() == Some("SPOT") {
            parts.push("spot".into());
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

/// A duration input (`"15m"`), if set.
fn duration(v: &Values, name: &str) -> Result<Option<std::time::Duration>, ProviderError> {
    let Some(text) = opt_str(v, name)? else {
        return Ok(None);
    };
    humantime::parse_duration(&text).map(Some).map_err(|e| {
        ProviderError::bad_input(format!("`{name}` {text:?} is not a duration: {e}"))
            .with_help("write a duration such as \"15m\", \"1h\" or \"90s\"")
    })
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
                return Err(ProviderError::bad_input("each taint needs a `key`"));
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
pub(super) fn effect(name: &str) -> Option<TaintEffect> {
    match name.to_ascii_lowercase().replace('_', "").as_str() {
        "noschedule" => Some(TaintEffect::NoSchedule),
        "noexecute" => Some(TaintEffect::NoExecute),
        "prefernoschedule" => Some(TaintEffect::PreferNoSchedule),
        _ => None,
    }
}
