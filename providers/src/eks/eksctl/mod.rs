//! eksctl `ClusterConfig` files (`apiVersion: eksctl.io/v1alpha5`), read into
//! what `eks.cluster` makes: the cluster and its managed node groups.
//!
//! Understood: `metadata` (name, region, version, tags), `availabilityZones`,
//! `iam` (withOIDC, serviceRoleARN), `vpc` (subnets private/public by zone,
//! securityGroup, clusterEndpoints, publicAccessCIDRs) and
//! `managedNodeGroups` (name, instanceType/instanceTypes, minSize,
//! desiredCapacity, maxSize, volumeSize, efaEnabled, privateNetworking,
//! availabilityZones, capacityReservation, spot, amiFamily, labels, taints,
//! tags, iam.instanceRoleARN, instanceMarketOptions.marketType). A file
//! whose `vpc` lists no subnets gets the VPC eksctl would make (see
//! [`super::vpc`]), unless the step gives `subnet_ids`. Anything else in the
//! file is reported as ignored by `plan`.

use std::collections::BTreeMap;

use serde_json::Value;

pub mod efa_rules;
mod network;

use super::nodegroup::{NodegroupSpec, TaintSpec};
use super::vpc::VpcRequest;
use crate::Workdir;
pub use network::{Network, Placement};

/// What an eksctl config file asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EksctlConfig {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.region`.
    pub region: Option<String>,
    /// `metadata.version`.
    pub version: Option<String>,
    /// `metadata.tags`.
    pub tags: BTreeMap<String, String>,
    /// Every subnet of `vpc.subnets` (private first), for the cluster.
    pub subnet_ids: Vec<String>,
    /// Where the subnets come from.
    pub network: Network,
    /// Each node group's zones and subnet kind (as `nodegroups`).
    pub placements: Vec<Placement>,
    /// `vpc.securityGroup`.
    pub security_group_ids: Vec<String>,
    /// `vpc.clusterEndpoints.publicAccess`.
    pub public_access: Option<bool>,
    /// `vpc.clusterEndpoints.privateAccess`.
    pub private_access: Option<bool>,
    /// `vpc.publicAccessCIDRs`.
    pub public_access_cidrs: Vec<String>,
    /// `iam.withOIDC`.
    pub with_oidc: bool,
    /// `iam.serviceRoleARN`.
    pub role_arn: Option<String>,
    /// `managedNodeGroups`.
    pub nodegroups: Vec<NodegroupSpec>,
    /// Top-level keys flow does not act on (`addons`, `nodeGroups`, …).
    pub ignored: Vec<String>,
}

/// An eksctl config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EksctlError {
    /// The file cannot be read.
    #[error("could not read eksctl config {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A `substitute` value that cannot enter the YAML where its token is.
    #[error("{file}:{line}: {message}")]
    Misplaced {
        /// The file.
        file: String,
        /// The token's line.
        line: usize,
        /// What is wrong and what to do.
        message: String,
    },
    /// The file is outside the folders the workflow may read.
    #[error("{0}")]
    Outside(String),
    /// The file says something flow cannot act on.
    #[error("{file}: {problem}")]
    Invalid {
        /// The file as the step names it.
        file: String,
        /// What is wrong.
        problem: ConfigProblem,
    },
}

/// What is wrong with an eksctl config's content.
#[derive(Debug, thiserror::Error)]
pub enum ConfigProblem {
    /// It is not YAML.
    #[error("not valid YAML: {0}")]
    NotYaml(String),
    /// It is YAML but not a `ClusterConfig`.
    #[error("not an eksctl ClusterConfig (`kind: ClusterConfig` missing)")]
    NotClusterConfig,
    /// A managed node group has no name.
    #[error("managedNodeGroups[{0}]: a managed node group needs a `name`")]
    NodegroupWithoutName(usize),
    /// A managed node group cannot be made as written.
    #[error("managedNodeGroups[{index}]: node group `{name}`: {why}")]
    Nodegroup {
        /// Its place in `managedNodeGroups`.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        why: String,
    },
}

/// Subnets of one kind (private or public): zone and id.
pub type Subnets = Vec<(String, String)>;

/// Reads the eksctl config at `path` (relative to `workdir`, inside it),
/// its placeholders filled from `subs`.
pub fn load(
    workdir: &Workdir,
    path: &str,
    subs: &crate::substitute::Substitutions,
) -> Result<EksctlConfig, EksctlError> {
    let full = workdir.resolve(path).map_err(EksctlError::Outside)?;
    let text = std::fs::read_to_string(&full).map_err(|source| EksctlError::Unreadable {
        path: full.clone(),
        source,
    })?;
    let text = subs.apply_yaml(&text).map_err(|m| EksctlError::Misplaced {
        file: path.to_string(),
        line: m.line,
        message: m.message,
    })?;
    parse(&text).map_err(|problem| EksctlError::Invalid {
        file: path.to_string(),
        problem,
    })
}

/// `path:line:column` of `keys` (`["vpc", "id"]`) in the eksctl file at
/// `path`, for an error about that field; just `path` when the file cannot
/// be read or the field is not found.
pub fn place_of(workdir: &Workdir, path: &str, keys: &[&str]) -> String {
    let segs: Vec<crate::yaml_path::Seg> = keys
        .iter()
        .map(|k| crate::yaml_path::Seg::Key(k.to_string()))
        .collect();
    workdir
        .resolve(path)
        .ok()
        .and_then(|full| std::fs::read_to_string(full).ok())
        .and_then(|text| crate::yaml_path::locate(&text, &segs))
        .map_or_else(|| path.to_string(), |(l, c)| format!("{path}:{l}:{c}"))
}

/// Parses an eksctl config's text.
pub fn parse(text: &str) -> Result<EksctlConfig, ConfigProblem> {
    let doc: Value =
        serde_saphyr::from_str(text).map_err(|e| ConfigProblem::NotYaml(e.to_string()))?;
    if doc.get("kind").and_then(Value::as_str) != Some("ClusterConfig") {
        return Err(ConfigProblem::NotClusterConfig);
    }
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let meta = doc.get("metadata").cloned().unwrap_or(Value::Null);
    let vpc = doc.get("vpc").cloned().unwrap_or(Value::Null);
    let private = subnets(vpc.pointer("/subnets/private"));
    let public = subnets(vpc.pointer("/subnets/public"));
    let network = match s(&vpc, "id") {
        _ if !(private.is_empty() && public.is_empty()) => Network::Listed,
        Some(vpc_id) => Network::Unlisted { vpc_id },
        None => match VpcRequest::from_config(&vpc, strings(doc.get("availabilityZones"))) {
            Ok(request) => Network::Made(request),
            Err(problem) => Network::Unmakeable(problem.to_string()),
        },
    };
    let mut cfg = EksctlConfig {
        name: s(&meta, "name"),
        region: s(&meta, "region"),
        version: meta.get("version").and_then(scalar),
        tags: string_map(meta.get("tags")),
        subnet_ids: private
            .iter()
            .chain(public.iter())
            .map(|(_, id)| id.clone())
            .collect(),
        network,
        placements: Vec::new(),
        security_group_ids: s(&vpc, "securityGroup").into_iter().collect(),
        public_access: vpc
            .pointer("/clusterEndpoints/publicAccess")
            .and_then(Value::as_bool),
        private_access: vpc
            .pointer("/clusterEndpoints/privateAccess")
            .and_then(Value::as_bool),
        public_access_cidrs: strings(vpc.get("publicAccessCIDRs")),
        with_oidc: doc
            .pointer("/iam/withOIDC")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        role_arn: doc
            .pointer("/iam/serviceRoleARN")
            .and_then(Value::as_str)
            .map(str::to_string),
        nodegroups: Vec::new(),
        ignored: Vec::new(),
    };
    let cluster = cfg.name.clone().unwrap_or_default();
    for (i, ng) in doc
        .get("managedNodeGroups")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (mut spec, placement) = nodegroup(&cluster, i, ng)?;
        if cfg.network == Network::Listed {
            spec.subnet_ids =
                placement
                    .subnets(&private, &public)
                    .map_err(|why| ConfigProblem::Nodegroup {
                        index: i,
                        name: spec.name.clone(),
                        why,
                    })?;
        } else if let Network::Made(vpc) = &cfg.network
            && let Some(zone) = placement.zones.iter().find(|z| !vpc.zones.contains(z))
        {
            let why = if vpc.zones.is_empty() {
                format!(
                    "lists availabilityZones ({zone}) but the config's `availabilityZones` is not set: list the cluster's zones there, as eksctl needs"
                )
            } else {
                format!(
                    "zone {zone} is not one of the config's availabilityZones {:?}",
                    vpc.zones
                )
            };
            cfg.network = Network::Unmakeable(
                ConfigProblem::Nodegroup {
                    index: i,
                    name: spec.name.clone(),
                    why,
                }
                .to_string(),
            );
        }
        cfg.nodegroups.push(spec);
        cfg.placements.push(placement);
    }
    const KNOWN: [&str; 7] = [
        "apiVersion",
        "kind",
        "metadata",
        "vpc",
        "iam",
        "managedNodeGroups",
        "availabilityZones",
    ];
    if let Some(map) = doc.as_object() {
        cfg.ignored = map
            .keys()
            .filter(|k| !KNOWN.contains(&k.as_str()))
            .cloned()
            .collect();
    }
    Ok(cfg)
}

/// One managed node group of the file (without subnets) and where it goes.
fn nodegroup(
    cluster: &str,
    index: usize,
    ng: &Value,
) -> Result<(NodegroupSpec, Placement), ConfigProblem> {
    let name = ng
        .get("name")
        .and_then(Value::as_str)
        .ok_or(ConfigProblem::NodegroupWithoutName(index))?
        .to_string();
    let problem = |why: String| ConfigProblem::Nodegroup {
        index,
        name: name.clone(),
        why,
    };
    let mut instance_types = strings(ng.get("instanceTypes"));
    if let Some(t) = ng.get("instanceType").and_then(Value::as_str) {
        instance_types.insert(0, t.to_string());
    }
    if instance_types.is_empty() {
        return Err(problem("needs instanceType or instanceTypes".into()));
    }
    let int = |k: &str| ng.get(k).and_then(Value::as_i64).map(|n| n as i32);
    let desired = int("desiredCapacity").or(int("minSize")).unwrap_or(1);
    let private_networking = ng
        .get("privateNetworking")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let placement = Placement {
        zones: strings(ng.get("availabilityZones")),
        private_networking,
    };
    let efa = ng
        .get("efaEnabled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let gpu = instance_types
        .iter()
        .any(|t| t.starts_with('p') || t.starts_with('g'));
    let ami_type = match ng
        .get("amiFamily")
        .and_then(Value::as_str)
        .unwrap_or("AmazonLinux2")
    {
        "AmazonLinux2" if gpu => Some("AL2_x86_64_GPU"),
        "AmazonLinux2" => None,
        "AmazonLinux2023" if gpu => Some("AL2023_x86_64_NVIDIA"),
        "AmazonLinux2023" => Some("AL2023_x86_64_STANDARD"),
        "Bottlerocket" if gpu => Some("BOTTLEROCKET_x86_64_NVIDIA"),
        "Bottlerocket" => Some("BOTTLEROCKET_x86_64"),
        other => {
            return Err(problem(format!(
                "amiFamily `{other}` is not supported for managed node groups by flow"
            )));
        }
    };
    let taints = ng
        .get("taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| TaintSpec {
            key: t
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            value: t.get("value").and_then(scalar).unwrap_or_default(),
            effect: t
                .get("effect")
                .and_then(Value::as_str)
                .unwrap_or("NoSchedule")
                .into(),
        })
        .collect();
    let capacity_type = match ng
        .pointer("/instanceMarketOptions/marketType")
        .and_then(Value::as_str)
    {
        Some("capacity-block") => Some("CAPACITY_BLOCK".to_string()),
        Some(other) => {
            return Err(problem(format!(
                "instanceMarketOptions.marketType `{other}` is not one eksctl knows (capacity-block)"
            )));
        }
        None => ng
            .get("spot")
            .and_then(Value::as_bool)
            .filter(|s| *s)
            .map(|_| "SPOT".to_string()),
    };
    Ok((
        NodegroupSpec {
            cluster: cluster.to_string(),
            name,
            node_role_arn: ng
                .pointer("/iam/instanceRoleARN")
                .and_then(Value::as_str)
                .map(str::to_string),
            subnet_ids: Vec::new(),
            instance_types,
            min_size: int("minSize").unwrap_or(desired),
            desired_size: desired,
            max_size: int("maxSize").unwrap_or(desired),
            ami_type: ami_type.map(str::to_string),
            labels: string_map(ng.get("labels")),
            taints,
            capacity_reservation_id: ng
                .pointer("/capacityReservation/capacityReservationTarget/capacityReservationID")
                .and_then(Value::as_str)
                .map(str::to_string),
            capacity_type,
            efa,
            disk_size: int("volumeSize"),
            security_group_ids: Vec::new(),
            placement_group: None,
            efa_count: None,
            tags: string_map(ng.get("tags")),
            drain_timeout: None,
        },
        placement,
    ))
}

/// `vpc.subnets.private` (or public): zone (or the entry's `az`) and id.
fn subnets(v: Option<&Value>) -> Subnets {
    let Some(Value::Object(map)) = v else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(key, entry)| {
            let id = entry.get("id").and_then(Value::as_str)?;
            let az = entry.get("az").and_then(Value::as_str).unwrap_or(key);
            Some((az.to_string(), id.to_string()))
        })
        .collect()
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(scalar).collect())
        .unwrap_or_default()
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), scalar(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(super) use tests::{ODCR, P4D};
