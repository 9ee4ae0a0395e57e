//! eksctl `ClusterConfig` files (`apiVersion: eksctl.io/v1alpha5`), read into
//! what `eks.cluster` makes: the cluster and its managed node groups.
//!
//! Understood: `metadata` (name, region, version, tags), `availabilityZones`,
//! `iam` (withOIDC, serviceRoleARN), `vpc` (subnets private/public by zone,
//! securityGroup, clusterEndpoints, publicAccessCIDRs) and
//! `managedNodeGroups` (name, instanceType/instanceTypes, minSize,
//! desiredCapacity, maxSize, volumeSize, efaEnabled, privateNetworking,
//! availabilityZones, capacityReservation, spot, amiFamily, labels, taints,
//! tags, iam.instanceRoleARN). flow does not create VPCs: the file must list
//! its subnets (a `cloudformation.stack` step makes the VPC, as in the
//! runbooks). Anything else in the file is reported as ignored by `plan`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::nodegroup::{NodegroupSpec, TaintSpec};

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
    /// It names no subnets.
    #[error(
        "`vpc.subnets` lists no subnets: flow does not create VPCs from eksctl configs; make the VPC with a cloudformation.stack step and list its subnets under vpc.subnets.private/public (or set `subnet_ids` on the step)"
    )]
    NoSubnets,
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

/// Subnets of one kind (private or public) by availability zone.
type Subnets = Vec<(String, String)>;

/// Reads the eksctl config at `path` (relative to `workdir`, inside it),
/// its placeholders filled from `subs`.
pub fn load(
    workdir: &Path,
    path: &str,
    subs: &crate::substitute::Substitutions,
) -> Result<EksctlConfig, EksctlError> {
    let full = crate::file_input::inside_workdir(workdir, path).map_err(|why| {
        EksctlError::Unreadable {
            path: workdir.join(path),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
        }
    })?;
    let text = std::fs::read_to_string(&full).map_err(|source| EksctlError::Unreadable {
        path: full.clone(),
        source,
    })?;
    parse(&subs.apply(&text)).map_err(|problem| EksctlError::Invalid {
        file: path.to_string(),
        problem,
    })
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
    if private.is_empty() && public.is_empty() {
        return Err(ConfigProblem::NoSubnets);
    }
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
        cfg.nodegroups
            .push(nodegroup(&cluster, i, ng, &private, &public)?);
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

/// One managed node group of the file.
fn nodegroup(
    cluster: &str,
    index: usize,
    ng: &Value,
    private: &Subnets,
    public: &Subnets,
) -> Result<NodegroupSpec, ConfigProblem> {
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
    let zones = strings(ng.get("availabilityZones"));
    let pool = if private_networking || public.is_empty() {
        private
    } else {
        public
    };
    let subnet_ids = pool
        .iter()
        .filter(|(az, _)| zones.is_empty() || zones.contains(az))
        .map(|(_, id)| id.clone())
        .collect::<Vec<_>>();
    if subnet_ids.is_empty() {
        return Err(problem(format!(
            "no subnet of the VPC is in zones {zones:?}"
        )));
    }
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
    Ok(NodegroupSpec {
        cluster: cluster.to_string(),
        name,
        node_role_arn: ng
            .pointer("/iam/instanceRoleARN")
            .and_then(Value::as_str)
            .map(str::to_string),
        subnet_ids,
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
        capacity_type: ng
            .get("spot")
            .and_then(Value::as_bool)
            .filter(|s| *s)
            .map(|_| "SPOT".to_string()),
        efa,
        disk_size: int("volumeSize"),
        security_group_ids: Vec::new(),
        tags: string_map(ng.get("tags")),
    })
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

/// The runbook's `eks-p4d-odcr.yaml`, with an existing VPC (for tests).
#[cfg(test)]
pub(super) const P4D: &str = r#"
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: dlc-p4d
  region: us-west-2
  version: "1.33"
availabilityZones: [us-west-2a, us-west-2b]
iam:
  withOIDC: true
vpc:
  subnets:
    private:
      us-west-2a: { id: subnet-a }
      us-west-2b: { id: subnet-b }
    public:
      us-west-2a: { id: subnet-pa }
  clusterEndpoints: { publicAccess: true, privateAccess: true }
managedNodeGroups:
  - name: sys
    instanceType: c5.2xlarge
    desiredCapacity: 1
  - name: p4d
    instanceType: p4d.24xlarge
    minSize: 2
    desiredCapacity: 2
    maxSize: 4
    volumeSize: 500
    efaEnabled: true
    privateNetworking: true
    availabilityZones: [us-west-2b]
    capacityReservation:
      capacityReservationTarget:
        capacityReservationID: cr-0123
addons:
  - name: vpc-cni
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cluster_and_its_node_groups() {
        let c = parse(P4D).unwrap();
        assert_eq!(c.name.as_deref(), Some("dlc-p4d"));
        assert_eq!(c.region.as_deref(), Some("us-west-2"));
        assert_eq!(c.version.as_deref(), Some("1.33"));
        assert_eq!(c.subnet_ids, ["subnet-a", "subnet-b", "subnet-pa"]);
        assert!(c.with_oidc);
        assert_eq!(c.public_access, Some(true));
        assert_eq!(c.ignored, ["addons"]);
        let sys = &c.nodegroups[0];
        assert_eq!((sys.min_size, sys.desired_size, sys.max_size), (1, 1, 1));
        assert_eq!(sys.subnet_ids, ["subnet-pa"]);
        assert_eq!(sys.ami_type, None);
        let p4d = &c.nodegroups[1];
        assert_eq!(p4d.cluster, "dlc-p4d");
        assert_eq!(p4d.subnet_ids, ["subnet-b"]);
        assert_eq!((p4d.min_size, p4d.desired_size, p4d.max_size), (2, 2, 4));
        assert_eq!(p4d.efa_interfaces(), 4);
        assert_eq!(p4d.capacity_reservation_id.as_deref(), Some("cr-0123"));
        assert_eq!(p4d.disk_size, Some(500));
        assert_eq!(p4d.ami_type.as_deref(), Some("AL2_x86_64_GPU"));
    }

    #[test]
    fn refuses_configs_it_cannot_carry_out() {
        assert!(matches!(
            parse("kind: Other").unwrap_err(),
            ConfigProblem::NotClusterConfig
        ));
        let no_vpc = "kind: ClusterConfig\nmetadata: {name: x}\n";
        let e = parse(no_vpc).unwrap_err();
        assert!(matches!(e, ConfigProblem::NoSubnets));
        assert!(e.to_string().contains("does not create VPCs"));
        let bad_zone = P4D.replace("[us-west-2b]", "[eu-west-1a]");
        let e = parse(&bad_zone).unwrap_err();
        assert!(
            matches!(&e, ConfigProblem::Nodegroup { index: 1, .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("managedNodeGroups[1]: node group `"),
            "{e}"
        );
    }
}
