//! A cluster's spec: its inputs first, then the eksctl `ClusterConfig`
//! file they may name, read and checked offline.

use std::collections::BTreeMap;

use aws_sdk_eks::types::VpcConfigRequest;
use serde_json::Value;

use super::super::eksctl::{self, EksctlConfig};
use super::super::nodegroup::NodegroupSpec;
use super::super::shared_inputs::{opt_str, str_list, str_map};
use super::super::stack;
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
    /// The eksctl file's region, if it names one.
    pub config_region: Option<String>,
    /// Top-level keys of the eksctl file that flow does not act on.
    pub ignored: Vec<String>,
}

impl ClusterSpec {
    /// The spec from a step's inputs (reading `eksctl_config` in `workdir`).
    pub fn load(v: &Values, workdir: &std::path::Path) -> Result<Self, ProviderError> {
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

    pub(super) fn role_stack(&self) -> String {
        stack::name(&self.name, "role")
    }

    pub(super) fn oidc_stack(&self) -> String {
        stack::name(&self.name, "oidc")
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
