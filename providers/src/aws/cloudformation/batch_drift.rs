//! The Batch objects a stack declares, as Batch has them now: a compute
//! environment or job queue disabled in the console, or a compute
//! environment's vCPU limit changed, is drift CloudFormation does not see
//! (its stack stays `*_COMPLETE`) and does not undo on a stack update. Refresh
//! reads it here, and the stack's update puts it back from the template.

use std::collections::BTreeMap;

use aws_sdk_batch::types::{CeState, JqState};
use aws_sdk_cloudformation::Client;
use serde_json::{Value, json};

use super::spec::StackSpec;
use super::template::parse;
use crate::aws::{config, error};
use crate::contract::{Drift, OpContext, ProviderError, attribute_drift};

const COMPUTE_ENVIRONMENT: &str = "AWS::Batch::ComputeEnvironment";
const JOB_QUEUE: &str = "AWS::Batch::JobQueue";

/// One Batch object of the stack: its logical id, what the template says
/// and what Batch has.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BatchObject {
    kind: &'static str,
    logical: String,
    physical: String,
    wanted_state: String,
    wanted_max_vcpus: Option<i64>,
    state: String,
    status: String,
    max_vcpus: Option<i64>,
}

impl BatchObject {
    fn label(&self) -> String {
        format!("{} {}", self.kind, self.logical)
    }

    /// What differs from the template.
    fn drift(&self) -> Vec<Drift> {
        let mut out = Vec::new();
        out.extend(attribute_drift(
            &format!("{} state", self.label()),
            json!(self.wanted_state),
            json!(self.state),
        ));
        if self.status == "INVALID" {
            out.push(Drift::of_attribute(
                format!("{} status", self.label()),
                json!("VALID"),
                json!(self.status),
            ));
        }
        if let (Some(wanted), Some(real)) = (self.wanted_max_vcpus, self.max_vcpus) {
            out.extend(attribute_drift(
                &format!("{} maxvCpus", self.label()),
                json!(wanted),
                json!(real),
            ));
        }
        out
    }
}

/// The Batch objects stack `stack` declares in `spec`'s template, as Batch
/// has them, with a Batch client to change them; `None` when the template
/// declares none (no call is made then).
pub(super) async fn of_stack(
    ctx: &OpContext,
    cfn: &Client,
    stack: &str,
    spec: &StackSpec,
) -> Result<Option<(aws_sdk_batch::Client, Vec<BatchObject>)>, ProviderError> {
    if !spec.body.contains("AWS::Batch::") {
        return Ok(None);
    }
    let Ok(template) = parse(&spec.body) else {
        return Ok(None);
    };
    let batch = aws_sdk_batch::Client::new(&config::sdk_config(ctx).await?);
    let objects = batch_objects(cfn, &batch, stack, &template, &spec.params).await?;
    Ok(Some((batch, objects)))
}

/// The Batch compute environments and job queues of stack `stack`, with
/// what `template` (parameters `params`) says of them.
async fn batch_objects(
    cfn: &Client,
    batch: &aws_sdk_batch::Client,
    stack: &str,
    template: &Value,
    params: &BTreeMap<String, String>,
) -> Result<Vec<BatchObject>, ProviderError> {
    let mut found = Vec::new();
    for r in super::stack::resources(cfn, stack).await? {
        let kind = match r.resource_type() {
            Some(COMPUTE_ENVIRONMENT) => COMPUTE_ENVIRONMENT,
            Some(JOB_QUEUE) => JOB_QUEUE,
            _ => continue,
        };
        if let (Some(logical), Some(physical)) = (r.logical_resource_id(), r.physical_resource_id())
        {
            found.push((kind, logical.to_string(), physical.to_string()));
        }
    }
    let mut objects = Vec::new();
    for (kind, logical, physical) in found {
        let props = &template["Resources"][&logical]["Properties"];
        let wanted_state = props["State"].as_str().unwrap_or("ENABLED").to_string();
        let object = if kind == COMPUTE_ENVIRONMENT {
            let out = batch
                .describe_compute_environments()
                .compute_environments(&physical)
                .send()
                .await
                .map_err(|e| {
                    error::aws(&format!("describe compute environment `{physical}`"), e)
                })?;
            let Some(ce) = out.compute_environments().first() else {
                continue;
            };
            BatchObject {
                kind: "compute environment",
                logical,
                physical,
                wanted_state,
                wanted_max_vcpus: number(&props["ComputeResources"]["MaxvCpus"], template, params),
                state: ce
                    .state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                status: ce
                    .status()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                max_vcpus: ce
                    .compute_resources()
                    .and_then(|c| c.maxv_cpus())
                    .map(i64::from),
            }
        } else {
            let out = batch
                .describe_job_queues()
                .job_queues(&physical)
                .send()
                .await
                .map_err(|e| error::aws(&format!("describe job queue `{physical}`"), e))?;
            let Some(q) = out.job_queues().first() else {
                continue;
            };
            BatchObject {
                kind: "job queue",
                logical,
                physical,
                wanted_state,
                wanted_max_vcpus: None,
                state: q
                    .state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                status: q
                    .status()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                max_vcpus: None,
            }
        };
        objects.push(object);
    }
    Ok(objects)
}

/// What differs, over all of them.
pub(super) fn drift(objects: &[BatchObject]) -> Vec<Drift> {
    objects.iter().flat_map(BatchObject::drift).collect()
}

/// Puts state and vCPU limits back as the template says (CloudFormation
/// does not, when the template did not change); returns what it changed.
pub(super) async fn restore(
    batch: &aws_sdk_batch::Client,
    objects: &[BatchObject],
) -> Result<Vec<String>, ProviderError> {
    let mut done = Vec::new();
    for o in objects {
        let state_off = o.state != o.wanted_state;
        let vcpus_off = o.wanted_max_vcpus.is_some() && o.max_vcpus != o.wanted_max_vcpus;
        if !state_off && !vcpus_off {
            continue;
        }
        if o.kind == "compute environment" {
            let mut req = batch
                .update_compute_environment()
                .compute_environment(&o.physical)
                .state(CeState::from(o.wanted_state.as_str()));
            if let Some(max) = o.wanted_max_vcpus.filter(|_| vcpus_off) {
                req = req.compute_resources(
                    aws_sdk_batch::types::ComputeResourceUpdate::builder()
                        .maxv_cpus(max as i32)
                        .build(),
                );
            }
            req.send().await.map_err(|e| {
                error::aws(&format!("restore compute environment `{}`", o.logical), e)
            })?;
        } else {
            batch
                .update_job_queue()
                .job_queue(&o.physical)
                .state(JqState::from(o.wanted_state.as_str()))
                .send()
                .await
                .map_err(|e| error::aws(&format!("restore job queue `{}`", o.logical), e))?;
        }
        done.push(o.label());
    }
    Ok(done)
}

/// A number as the template gives it: literal, or a `Ref` to a parameter
/// (its value in the step, else its default).
fn number(v: &Value, template: &Value, params: &BTreeMap<String, String>) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        Value::Object(o) => {
            let name = o.get("Ref")?.as_str()?;
            match params.get(name) {
                Some(given) => given.parse().ok(),
                None => number(&template["Parameters"][name]["Default"], template, params),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ce(state: &str, status: &str, max: i64) -> BatchObject {
        BatchObject {
            kind: "compute environment",
            logical: "ComputeEnvironment".into(),
            physical: "arn:ce".into(),
            wanted_state: "ENABLED".into(),
            wanted_max_vcpus: Some(192),
            state: state.into(),
            status: status.into(),
            max_vcpus: Some(max),
        }
    }

    #[test]
    fn disabled_invalid_or_resized_environments_drift() {
        assert!(drift(&[ce("ENABLED", "VALID", 192)]).is_empty());
        let d = drift(&[ce("DISABLED", "INVALID", 16)]);
        let names: Vec<&str> = d.iter().map(|d| d.attribute.as_str()).collect();
        assert_eq!(
            names,
            [
                "compute environment ComputeEnvironment state",
                "compute environment ComputeEnvironment status",
                "compute environment ComputeEnvironment maxvCpus"
            ]
        );
    }

    #[test]
    fn numbers_come_from_literals_parameters_or_defaults() {
        let t = json!({"Parameters": {"Max": {"Default": 64}}});
        let none = BTreeMap::new();
        assert_eq!(number(&json!(192), &t, &none), Some(192));
        assert_eq!(number(&json!({"Ref": "Max"}), &t, &none), Some(64));
        let given = BTreeMap::from([("Max".to_string(), "8".to_string())]);
        assert_eq!(number(&json!({"Ref": "Max"}), &t, &given), Some(8));
        assert_eq!(number(&json!({"Ref": "Nope"}), &t, &none), None);
    }
}
