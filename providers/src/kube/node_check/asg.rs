//! The AWS side of replacing a bad EKS node: its EC2 instance (from the
//! Node's `spec.providerID`, `aws:///ZONE/INSTANCE-ID`, as the AWS cloud
//! provider sets it), the Auto Scaling group that launched it (the
//! instance's `aws:autoscaling:groupName` tag, which Amazon EC2 Auto
//! Scaling puts on every instance it launches:
//! <https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-tagging.html>),
//! and its termination through the group without lowering the desired
//! count, so that the group launches a replacement
//! (`TerminateInstanceInAutoScalingGroup` with
//! `ShouldDecrementDesiredCapacity=false`:
//! <https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_TerminateInstanceInAutoScalingGroup.html>).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use crate::aws::config::sdk_config;
use crate::aws::error;
use crate::contract::{OpContext, ProviderError};

/// The most values one EC2 filter takes (DescribeInstances' `Filter`:
/// "You can specify up to 200 values", taken with room to spare).
const FILTER_VALUES: usize = 100;

/// The tag Amazon EC2 Auto Scaling puts on the instances it launches.
pub(super) const GROUP_TAG: &str = "aws:autoscaling:groupName";

/// The instance id of a Node's `spec.providerID` (`aws:///us-east-1a/i-0abc`).
pub(super) fn instance_of(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    (id.starts_with("i-") && id.len() > 2).then_some(id)
}

/// One instance of a group, as Auto Scaling says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Member {
    /// `i-…`.
    pub instance: String,
    /// `InService`, `Pending`, `Terminating`, …
    pub lifecycle: String,
}

impl Member {
    /// On its way out (`Terminating`, `Terminating:Wait`, `Terminated`, …).
    pub fn leaving(&self) -> bool {
        self.lifecycle.starts_with("Terminat")
            || self.lifecycle.starts_with("Detach")
            || self.lifecycle.starts_with("Standby")
    }
}

/// An Auto Scaling group: how many instances it wants, and those it has.
#[derive(Debug, Clone)]
pub(super) struct Group {
    /// Its desired count.
    pub desired: usize,
    /// Its instances.
    pub members: Vec<Member>,
}

/// EC2 and Auto Scaling in the step's region.
pub(super) struct Aws {
    ec2: aws_sdk_ec2::Client,
    scaling: aws_sdk_autoscaling::Client,
}

impl Aws {
    /// The clients for `ctx`'s region and profile.
    pub async fn new(ctx: &OpContext) -> Result<Aws, ProviderError> {
        let config = sdk_config(ctx).await?;
        Ok(Aws {
            ec2: aws_sdk_ec2::Client::new(&config),
            scaling: aws_sdk_autoscaling::Client::new(&config),
        })
    }

    /// The Auto Scaling group of each of `instances` that EC2 knows (by its
    /// `aws:autoscaling:groupName` tag); an instance without the tag maps
    /// to `None`, one EC2 does not know is left out.
    pub async fn groups_of(
        &self,
        instances: &[String],
    ) -> Result<BTreeMap<String, Option<String>>, ProviderError> {
        let mut out = BTreeMap::new();
        // A filter takes at most 200 values.
        for chunk in instances.chunks(FILTER_VALUES) {
            self.groups_of_chunk(chunk, &mut out).await?;
        }
        Ok(out)
    }

    /// [`Aws::groups_of`] for one filter's worth of instances.
    async fn groups_of_chunk(
        &self,
        instances: &[String],
        out: &mut BTreeMap<String, Option<String>>,
    ) -> Result<(), ProviderError> {
        let mut pages = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("instance-id")
                    .set_values(Some(instances.to_vec()))
                    .build(),
            )
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| error::aws("describe the nodes' instances", e))?;
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                let Some(id) = i.instance_id() else { continue };
                let group = i
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some(GROUP_TAG))
                    .and_then(|t| t.value())
                    .map(str::to_string);
                out.insert(id.to_string(), group);
            }
        }
        Ok(())
    }

    /// Whether `instance` is still in service in an Auto Scaling group (not
    /// yet on its way out): what says whether an earlier run's termination
    /// was sent.
    pub async fn in_service(&self, instance: &str) -> Result<bool, ProviderError> {
        let out = self
            .scaling
            .describe_auto_scaling_instances()
            .instance_ids(instance)
            .send()
            .await
            .map_err(|e| error::aws(&format!("describe instance {instance} in its group"), e))?;
        Ok(out.auto_scaling_instances().iter().any(|i| {
            let m = Member {
                instance: instance.into(),
                lifecycle: i.lifecycle_state().unwrap_or_default().to_string(),
            };
            i.instance_id() == Some(instance) && !m.leaving()
        }))
    }

    /// Terminates `instance` through its Auto Scaling group, the desired
    /// count kept (the group launches another); the activity's description.
    pub async fn terminate(&self, instance: &str) -> Result<String, ProviderError> {
        let out = self
            .scaling
            .terminate_instance_in_auto_scaling_group()
            .instance_id(instance)
            .should_decrement_desired_capacity(false)
            .send()
            .await
            .map_err(|e| {
                error::aws(
                    &format!("terminate instance {instance} through its Auto Scaling group"),
                    e,
                )
            })?;
        Ok(out
            .activity()
            .and_then(|a| a.description())
            .unwrap_or("terminating")
            .to_string())
    }

    /// The Auto Scaling group `name`.
    pub async fn group(&self, name: &str) -> Result<Group, ProviderError> {
        let out = self
            .scaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name)
            .send()
            .await
            .map_err(|e| error::aws(&format!("describe Auto Scaling group {name}"), e))?;
        let g = out
            .auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(name))
            .ok_or_else(|| {
                ProviderError::fatal(format!(
                    "Auto Scaling group {name} is gone: nothing will replace its nodes"
                ))
            })?;
        Ok(Group {
            desired: g.desired_capacity().unwrap_or_default().max(0) as usize,
            members: g
                .instances()
                .iter()
                .map(|i| Member {
                    instance: i.instance_id().unwrap_or_default().to_string(),
                    lifecycle: i
                        .lifecycle_state()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_name_the_instance() {
        assert_eq!(
            instance_of("aws:///us-east-1a/i-0abc123"),
            Some("i-0abc123")
        );
        assert_eq!(instance_of("aws:///i-0abc123"), Some("i-0abc123"));
        assert_eq!(instance_of("gce://project/zone/vm-1"), None);
        assert_eq!(instance_of("aws:///us-east-1a/"), None);
        assert_eq!(instance_of("kind://docker/kind/node"), None);
    }

    #[test]
    fn members_on_their_way_out_are_leaving() {
        let m = |l: &str| Member {
            instance: "i-1".into(),
            lifecycle: l.into(),
        };
        assert!(m("Terminating").leaving());
        assert!(m("Terminating:Wait").leaving());
        assert!(m("Terminated").leaving());
        assert!(!m("InService").leaving());
        assert!(!m("Pending").leaving());
    }
}
