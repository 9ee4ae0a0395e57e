//! A cluster's spec: its inputs first, then the eksctl `ClusterConfig`
//! file they may name, read and checked offline.

use std::collections::BTreeMap;

use aws_sdk_eks::types::VpcConfigRequest;
use serde_json::Value;

use super::super::eksctl::{self, EksctlConfig, Network, Placement};
use super::super::nodegroup::NodegroupSpec;
use super::super::shared_inputs::{opt_str, str_list, str_map};
use super::super::stack;
use super::super::vpc::{MadeVpc, VpcRequest};
use crate::contract::{ProviderError, Values};

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
    /// Where each node group goes (as `nodegroups`), for a VPC made here.
    pub placements: Vec<Placement>,
    /// The VPC to make as eksctl would (an eksctl file without subnets and
    /// no `subnet_ids` on the step).
    pub vpc: Option<VpcRequest>,
    /// What the VPC stack made, once it is read.
    pub made_vpc: Option<MadeVpc>,
    /// What the plan should say about how the file was read.
    pub notes: Vec<String>,
    /// The eksctl file's region, if it names one.
    pub config_region: Option<String>,
    /// Top-level keys of the eksctl file that flow does not act on.
    pub ignored: Vec<String>,
}

/// What is wrong with an eksctl file that names a VPC but none of its
/// subnets (and a step without `subnet_ids`), and what to add.
pub(super) fn unlisted_subnets(vpc_id: &str) -> (String, &'static str) {
    (
        format!(
            "the eksctl config sets `vpc.id` ({vpc_id}) but lists no subnets: eksctl would not make a VPC then, it would use that VPC's subnets, which flow does not look up"
        ),
        "list them under vpc.subnets.private and vpc.subnets.public, one per zone (`us-west-2a: { id: subnet-… }`), or set `subnet_ids` on the step",
    )
}

/// What is wrong with the VPC an eksctl file without subnets asks for,
/// and what to do.
pub(super) fn unmakeable_vpc(why: &str) -> (String, &'static str) {
    (
        format!("the eksctl config lists no subnets, so eksctl would make the VPC, but {why}"),
        "fix the config, or give the cluster's subnets in `subnet_ids` (or under vpc.subnets)",
    )
}

impl ClusterSpec {
    /// The spec from a step's inputs (reading `eksctl_config` in `workdir`).
    pub fn load(v: &Values, workdir: &crate::Workdir) -> Result<Self, ProviderError> {
        let cfg = match opt_str(v, "eksctl_config")? {
            Some(path) => {
                let subs = crate::substitute::Substitutions::from_values(v)?;
                eksctl::load(workdir, &path, &subs)
                    .map_err(|e| ProviderError::bad_input(e.to_string()))?
            }
            None => EksctlConfig::default(),
        };
        Self::merge(v, cfg)
    }

    /// Inputs over the eksctl file's values.
    pub(super) fn merge(v: &Values, cfg: EksctlConfig) -> Result<Self, ProviderError> {
        let name = opt_str(v, "name")?.or(cfg.name.clone()).ok_or_else(|| {
            ProviderError::bad_input("`name` is required (or `metadata.name` in the eksctl config)")
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
        let given = str_list(v, "subnet_ids")?;
        let mut vpc = None;
        let mut notes = Vec::new();
        match &cfg.network {
            // The step's subnets win; node groups the file placed keep
            // their subnets, the others take the step's.
            _ if !given.is_empty() => {
                for (ng, placement) in nodegroups.iter_mut().zip(&cfg.placements) {
                    if ng.subnet_ids.is_empty() {
                        ng.subnet_ids = given.clone();
                        if !placement.zones.is_empty() {
                            notes.push(format!(
                                "node group {} takes every subnet of `subnet_ids`: flow cannot tell their zones, so its availabilityZones {:?} are not applied (list the subnets under vpc.subnets by zone to place it)",
                                ng.name, placement.zones
                            ));
                        }
                    }
                }
            }
            Network::Unlisted { vpc_id } => {
                let (message, help) = unlisted_subnets(vpc_id);
                return Err(ProviderError::bad_input(message).with_help(help));
            }
            Network::Made(request) => vpc = Some(request.clone()),
            Network::Unmakeable(why) => {
                let (message, help) = unmakeable_vpc(why);
                return Err(ProviderError::bad_input(message).with_help(help));
            }
            Network::Listed | Network::None => {}
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
            placements: cfg.placements,
            vpc,
            made_vpc: None,
            notes,
            config_region: cfg.region,
            ignored: cfg.ignored,
            name,
        })
    }

    pub(super) fn role_stack(&self) -> String {
        stack::name(&self.name, "role")
    }

    pub(super) fn oidc_stack(&self) -> String {
        stack::name(&self.name, "oidc")
    }

    /// The stack of the VPC made for the cluster.
    pub(super) fn vpc_stack(&self) -> String {
        stack::name(&self.name, "vpc")
    }

    /// Takes the subnets and security group of the VPC stack's `outputs`:
    /// the cluster gets every subnet (private first, as eksctl gives them),
    /// each node group those of its zones and kind.
    pub(super) fn attach_vpc(
        &mut self,
        outputs: &crate::contract::Values,
    ) -> Result<(), ProviderError> {
        let Some(request) = &self.vpc else {
            return Ok(());
        };
        let stack = self.vpc_stack();
        let made = MadeVpc::from_outputs(outputs).map_err(|missing| {
            ProviderError::fatal(format!("the VPC stack {stack} has no output `{missing}`"))
                .with_help("flow makes that stack from its own template, which has it: a stack changed outside flow may have lost it; delete the stack and apply again")
        })?;
        let zones = request.zone_names();
        let by_zone = |ids: &[String]| -> eksctl::Subnets {
            zones.iter().cloned().zip(ids.iter().cloned()).collect()
        };
        let (private, public) = (by_zone(&made.private), by_zone(&made.public));
        for (ng, placement) in self.nodegroups.iter_mut().zip(&self.placements) {
            ng.subnet_ids = placement
                .subnets(&private, &public)
                .map_err(|why| ProviderError::fatal(format!("node group `{}`: {why}", ng.name)))?;
        }
        self.subnet_ids = made.private.iter().chain(&made.public).cloned().collect();
        if !self.security_group_ids.contains(&made.security_group) {
            self.security_group_ids.push(made.security_group.clone());
        }
        self.made_vpc = Some(made);
        Ok(())
    }

    pub(super) fn vpc_config(&self) -> VpcConfigRequest {
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
        if let Some(vpc) = &self.vpc {
            lines.push(format!("+ stack {} ({})", self.vpc_stack(), vpc.describe()));
        }
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
        let subnets = if self.subnet_ids.is_empty() && self.vpc.is_some() {
            "the VPC stack's subnets".to_string()
        } else {
            format!("subnets {}", self.subnet_ids.join(","))
        };
        lines.push(format!(
            "+ cluster {} (Kubernetes {}, {subnets}, {endpoint})",
            self.name,
            self.version.as_deref().unwrap_or("default"),
        ));
        if self.with_oidc {
            lines.push(format!(
                "+ stack {} (IAM OIDC provider for the cluster's issuer)",
                self.oidc_stack()
            ));
        }
        for (i, ng) in self.nodegroups.iter().enumerate() {
            match self.placements.get(i) {
                Some(placement) if ng.subnet_ids.is_empty() && self.vpc.is_some() => {
                    lines.push(format!("+ {}; in {}", ng.describe(), placement.describe()));
                }
                _ => lines.push(format!("+ {}", ng.describe())),
            }
            lines.extend(ng.efa_warnings().into_iter().map(|w| format!("  {w}")));
        }
        for note in &self.notes {
            lines.push(format!("  ({note})"));
        }
        for key in &self.ignored {
            lines.push(format!("  (eksctl config `{key}` is not acted on by flow)"));
        }
        lines
    }
}
