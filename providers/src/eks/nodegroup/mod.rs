//! `eks.nodegroup`: an EKS managed node group. Scaling (min, desired, max)
//! and tags change in place; anything else replaces the group.
//!
//! With `efa = true` or a `capacity_reservation_id`, the group gets a launch
//! template (in the supporting stack `flow-eks-CLUSTER-ng-NAME`) carrying one
//! EFA interface per network card of the instance type (4 for p4d, 32 for
//! p5, 8 for p6-b200; providers/data/efa-instance-types.csv), the placement
//! group and the capacity reservation target; without a
//! `node_role_arn`, the same stack makes the node role.
//!
//! `spec` reads and checks the inputs; `lifecycle` makes, waits for,
//! changes and deletes the group; this module is the provider kind.

pub(crate) mod drain;
mod efa_check;
mod lifecycle;
pub(crate) mod reservation;
mod spec;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::shared_inputs::req_str;
use super::shared_tags::TOKEN;
use crate::contract::{
    Applied, DeclaredOutputs, InputSpec, InputType, InputValue, OpContext, Prior, Problem,
    Provider, ProviderError, ReadOutcome, Refreshed, Schema, StepKind, ValidateContext, Values,
    attribute_drift, input_drift,
};

pub use lifecycle::{create, delete, retag};
use lifecycle::{find, update_in_place, wait_active};
use spec::input;
pub use spec::{NodegroupSpec, TaintSpec};

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
                    InputSpec::optional(
                        input::PLACEMENT_GROUP,
                        String,
                        "Cluster placement group the nodes go in (its name); EFA nodes should have one",
                    )
                    .forces_new(),
                    InputSpec::optional(input::TAGS, Map(Box::new(String)), "AWS tags"),
                    InputSpec::optional(
                        input::DRAIN_TIMEOUT,
                        Duration,
                        "How long a replacement waits for the new nodes and drains the old (default 15m)",
                    ),
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

    fn uses_aws(&self) -> bool {
        true
    }

    /// The nodes it keeps running: `desired_size` (default 1) of the first
    /// instance type (EKS launches the first type that has capacity).
    fn capacity(
        &self,
        inputs: &Values,
        _ctx: &crate::contract::ValidateContext,
    ) -> Vec<crate::contract::Capacity> {
        let Some(Ok(spec)) = NodegroupSpec::for_checks(inputs) else {
            return Vec::new();
        };
        spec.capacity().into_iter().collect()
    }

    /// Every eks.nodegroup step outputs `lifecycle::OUTPUT_KEYS`, and
    /// `launch_template_id` when the group has one.
    fn declared_outputs(
        &self,
        _inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<DeclaredOutputs> {
        Some(
            DeclaredOutputs::fixed("eks.nodegroup", &lifecycle::OUTPUT_KEYS)
                .with_conditional(&lifecycle::SOMETIMES),
        )
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// As the default, but an empty `placement_group` (a workflow var's
    /// "none") is the same as none: a group applied before the input
    /// existed is not replaced for it.
    fn diff(&self, prior: &Values, desired: &Values) -> crate::contract::Change {
        let unset_empty = |v: &Values| {
            let mut v = v.clone();
            if v.get(input::PLACEMENT_GROUP) == Some(&json!("")) {
                v.remove(input::PLACEMENT_GROUP);
            }
            v
        };
        crate::contract::default_diff(&self.schema, &unset_empty(prior), &unset_empty(desired))
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
            Some(Err(e)) => {
                let problem = Problem::at(e.input, e.error.message);
                vec![match e.error.help {
                    Some(help) => problem.with_help(help),
                    None => problem,
                }]
            }
        }
    }

    /// The EFA rules' warnings (no placement group), offline.
    fn plan_lines(&self, inputs: &Values, _ctx: &ValidateContext) -> Vec<String> {
        match NodegroupSpec::for_checks(inputs) {
            Some(Ok(spec)) => spec.efa_warnings(),
            _ => Vec::new(),
        }
    }

    /// `lifecycle::create` judges the capacity reservation and the EFA
    /// rules again, with every input known, before anything is made.
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

    fn has_plan_detail(&self) -> bool {
        true
    }

    /// The group's `name` (EKS takes at most 63 characters).
    fn replacement_name(&self) -> Option<crate::contract::Rename> {
        Some(crate::contract::Rename {
            input: input::NAME,
            max_len: 63,
        })
    }

    /// Node capacity must not go away while the new group starts.
    fn creates_before_destroy(&self) -> bool {
        true
    }

    /// Waits for the new group's nodes, then cordons and drains the old
    /// group's (see `drain`).
    async fn retire(
        &self,
        ctx: &OpContext,
        old: Prior<'_>,
        new: Prior<'_>,
    ) -> Result<(), ProviderError> {
        drain::retire(ctx, &drain::Retirement::of(old, new)?).await
    }

    /// The reservation is judged on what is known: the cluster and the
    /// subnets often come from steps not applied yet.
    fn looks_before_inputs_are_known(&self) -> bool {
        true
    }

    /// Reads the group's capacity reservation, if it names one (the plan
    /// shows its window and refuses one that cannot take the group), and,
    /// once every input is known, asks EC2 for the EFA rules the inputs
    /// cannot show offline (instance types, subnets' zones, security
    /// groups' self rules); a broken rule is refused too.
    async fn plan_detail(
        &self,
        ctx: &OpContext,
        prior: Option<Prior<'_>>,
        desired: &Values,
    ) -> Result<crate::contract::PlanDetail, ProviderError> {
        // A replacement is made beside the old group (create before
        // destroy): it needs the reservation's free instances, as a new
        // group does.
        let creating = match prior {
            None => true,
            Some(p) => matches!(
                self.diff(p.inputs, desired),
                crate::contract::Change::Replace(_)
            ),
        };
        let mut detail = match reservation::ask_of(desired)? {
            Some(ask) => {
                let sdk = super::sdk_config(ctx).await?;
                let group = crate::inputs::opt_str(desired, spec::input::NAME)?;
                reservation::check(&sdk, ctx, group.as_deref(), &ask, creating).await?
            }
            None => crate::contract::PlanDetail::default(),
        };
        if let Ok(spec) = NodegroupSpec::from_values(desired) {
            let looked = efa_check::look(ctx, &spec).await?;
            detail.lines.extend(looked.lines(&spec));
            detail.refusals.extend(looked.refusals());
        }
        Ok(detail)
    }

    fn can_refresh(&self) -> bool {
        true
    }

    fn import_id(&self) -> Option<&'static str> {
        Some("`CLUSTER/NAME`, or the node group's name")
    }

    /// The node group of the step's cluster and name.
    async fn import(
        &self,
        ctx: &OpContext,
        id: &str,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        let spec = NodegroupSpec::from_values(inputs)?;
        let (cluster, name) = id.split_once('/').unwrap_or((&spec.cluster, id));
        if cluster != spec.cluster || name != spec.name {
            let wanted = format!("{}/{}", spec.cluster, spec.name);
            return Err(crate::contract::import_mismatch("node group", id, &wanted));
        }
        let eks = super::client(ctx).await?;
        let Some(ng) = find(&eks, &spec).await? else {
            return Err(crate::contract::import_missing("node group", id));
        };
        Ok(applied(&spec, lifecycle::outputs(&ng, &spec)))
    }

    /// Status, scaling (min, desired, max), instance types and the AMI
    /// release of the recorded node group.
    async fn refresh(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<Refreshed, ProviderError> {
        let spec = NodegroupSpec::from_values(prior.inputs)?;
        let eks = super::client(ctx).await?;
        let Some(ng) = find(&eks, &spec).await? else {
            return Ok(Refreshed::Gone);
        };
        let real = lifecycle::outputs(&ng, &spec);
        let mut drift = Vec::new();
        let recorded_status = prior
            .outputs
            .get("status")
            .cloned()
            .unwrap_or(json!("ACTIVE"));
        if real["status"] != "UPDATING" {
            drift.extend(attribute_drift(
                "status",
                recorded_status,
                real["status"].clone(),
            ));
        }
        if let Some(scaling) = ng.scaling_config() {
            for (name, value) in [
                (input::MIN_SIZE, scaling.min_size()),
                (input::DESIRED_SIZE, scaling.desired_size()),
                (input::MAX_SIZE, scaling.max_size()),
            ] {
                if let Some(v) = value {
                    drift.extend(input_drift(prior.inputs, name, json!(v)));
                }
            }
        }
        if !ng.instance_types().is_empty() {
            drift.extend(input_drift(
                prior.inputs,
                input::INSTANCE_TYPES,
                json!(ng.instance_types()),
            ));
        }
        if let (Some(was), Some(now)) = (
            prior.private.get("release_version").and_then(Value::as_str),
            ng.release_version(),
        ) {
            drift.extend(attribute_drift("AMI release", json!(was), json!(now)));
        }
        Ok(Refreshed::Present {
            drift,
            outputs: Some(real),
            private: None,
        })
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
                if ng.status() == Some(&aws_sdk_eks::types::NodegroupStatus::CreateFailed) {
                    return Ok(ReadOutcome::Failed {
                        id: ng.nodegroup_arn().map(str::to_string),
                        reason: format!("node group `{}` is CREATE_FAILED", spec.name),
                    });
                }
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
mod tests;
