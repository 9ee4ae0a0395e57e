//! The nodes of a finished multi-node parallel job: each node's own job
//! (`JOBID#N`), the EC2 instance it ran on (found by its network
//! interface's address), and what its container printed (its own
//! CloudWatch Logs stream), judged by the fleet's check.
//!
//! AWS Batch runs one container per node of an MNP job, each a job of its
//! own whose DescribeJobs answer names its `nodeDetails.nodeIndex`, its
//! log stream and its network interface's private address (MNP jobs run in
//! `awsvpc` mode: the interface is attached to the node's instance).

use std::collections::BTreeMap;

use aws_sdk_batch::types::JobDetail;
use aws_sdk_ec2::types::Filter;
use aws_types::SdkConfig;
use serde_json::{Value, json};

use super::super::super::batch_logs::JobLogs;
use super::super::super::error;
use crate::capture::Matchers;
use crate::contract::{OpContext, ProviderError};
use crate::fleet::check::{Wanted, judge};
use crate::fleet::report::Ran;
use crate::fleet::spec::Rules;

/// One node of the job, as Batch and EC2 describe it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(in crate::aws::batch) struct Node {
    /// Its index in the job.
    pub index: i32,
    /// Its own job (`JOBID#N`), as DescribeJobs answers it.
    pub job: Option<JobDetail>,
    /// Its network interface's private IPv4 address.
    pub address: Option<String>,
    /// The EC2 instance it ran on, and that instance's type.
    pub instance: Option<(String, String)>,
}

impl Node {
    /// Its own job's id.
    pub fn job_id(&self, parent: &str) -> String {
        format!("{parent}#{}", self.index)
    }

    /// What the fleet's rules take as its instance type, or why there is none.
    fn instance_type(&self) -> Result<&str, String> {
        match (&self.instance, &self.address) {
            (Some((_, t)), _) => Ok(t),
            (None, Some(a)) => Err(format!("EC2 lists no instance at its address {a}")),
            (None, None) => Err("Batch names no network interface for it".into()),
        }
    }
}

/// Each node of job `parent` (of `count` nodes), with its instance.
pub(in crate::aws::batch) async fn describe(
    config: &SdkConfig,
    batch: &aws_sdk_batch::Client,
    parent: &str,
    count: i32,
) -> Result<Vec<Node>, ProviderError> {
    let mut nodes: Vec<Node> = (0..count)
        .map(|index| Node {
            index,
            ..Node::default()
        })
        .collect();
    let ids: Vec<String> = nodes.iter().map(|n| n.job_id(parent)).collect();
    for chunk in ids.chunks(100) {
        let out = batch
            .describe_jobs()
            .set_jobs(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| error::aws(&format!("describe the nodes of job `{parent}`"), e))?;
        for job in out.jobs() {
            let Some(index) = job.node_details().and_then(|d| d.node_index()) else {
                continue;
            };
            if let Some(node) = nodes.get_mut(index as usize) {
                node.address = address_of(job);
                node.job = Some(job.clone());
            }
        }
    }
    let addresses: Vec<String> = nodes.iter().filter_map(|n| n.address.clone()).collect();
    let instances = instances_at(config, &addresses).await?;
    for node in &mut nodes {
        node.instance = node
            .address
            .as_ref()
            .and_then(|a| instances.get(a).cloned());
    }
    Ok(nodes)
}

/// The private IPv4 address of a node's network interface.
fn address_of(job: &JobDetail) -> Option<String> {
    job.container()?
        .network_interfaces()
        .iter()
        .find_map(|i| i.private_ipv4_address())
        .filter(|a| !a.is_empty())
        .map(str::to_string)
}

/// The instance (id, type) each address's network interface is attached
/// to, as EC2 lists them now.
async fn instances_at(
    config: &SdkConfig,
    addresses: &[String],
) -> Result<BTreeMap<String, (String, String)>, ProviderError> {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let mut attached: BTreeMap<String, String> = BTreeMap::new();
    for chunk in addresses.chunks(200) {
        let out = ec2
            .describe_network_interfaces()
            .filters(
                Filter::builder()
                    .name("addresses.private-ip-address")
                    .set_values(Some(chunk.to_vec()))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| error::aws("find the nodes' network interfaces", e))?;
        for eni in out.network_interfaces() {
            let Some(instance) = eni.attachment().and_then(|a| a.instance_id()) else {
                continue;
            };
            for a in eni
                .private_ip_addresses()
                .iter()
                .filter_map(|p| p.private_ip_address())
                .chain(eni.private_ip_address())
            {
                attached.insert(a.to_string(), instance.to_string());
            }
        }
    }
    let ids: Vec<String> = {
        let mut ids: Vec<String> = attached.values().cloned().collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    for chunk in ids.chunks(100) {
        let out = ec2
            .describe_instances()
            .set_instance_ids(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| error::aws("describe the nodes' instances", e))?;
        for i in out.reservations().iter().flat_map(|r| r.instances()) {
            if let (Some(id), Some(t)) = (i.instance_id(), i.instance_type()) {
                types.insert(id.to_string(), t.as_str().to_string());
            }
        }
    }
    Ok(attached
        .into_iter()
        .filter_map(|(a, id)| types.get(&id).map(|t| (a, (id.clone(), t.clone()))))
        .collect())
}

/// Each node's name in the verdicts: its instance, where EC2 names one
/// (the machine a bad verdict is about), else its own job `JOBID#N`; a
/// second node on an instance already named keeps its job's name.
pub(super) fn names(parent: &str, nodes: &[Node]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in nodes {
        let name = match &n.instance {
            Some((id, _)) if !out.contains(id) => id.clone(),
            _ => n.job_id(parent),
        };
        out.push(name);
    }
    out
}

/// Reads and judges the nodes of one finished job.
pub(super) struct Reader<'a> {
    /// The operation.
    pub ctx: &'a OpContext,
    /// The SDK's configuration (for CloudWatch Logs).
    pub config: &'a SdkConfig,
    /// Batch.
    pub batch: &'a aws_sdk_batch::Client,
    /// The log group the job definition logs to.
    pub group: &'a str,
    /// The job's id.
    pub parent: &'a str,
}

impl Reader<'_> {
    /// The verdict of each node: its stream read (until the rules can read
    /// it, or the logs' wait ends) and judged, with where it ran.
    pub async fn judge_all(
        &self,
        nodes: &[Node],
        rules: &Rules,
        matchers: &Matchers,
    ) -> Vec<Value> {
        let each = nodes.iter().map(|n| async move {
            let kind = n.instance_type();
            let want = Wanted::of(
                rules,
                match &kind {
                    Ok(t) => Ok(*t),
                    Err(why) => Err(why.as_str()),
                },
            );
            let ran = self.read(n, &want, matchers).await;
            let mut v = judge(&ran, &want, matchers);
            let extra = json!({
                "node_index": n.index,
                "job": n.job_id(self.parent),
                "address": n.address,
                "instance": n.instance.as_ref().map(|(id, _)| id),
                "instance_type": n.instance.as_ref().map(|(_, t)| t),
            });
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v
        });
        futures::future::join_all(each).await
    }

    /// What node `n`'s container printed, and whether its job failed.
    async fn read(&self, n: &Node, want: &Wanted, matchers: &Matchers) -> Ran {
        let label = format!("node {}", n.job_id(self.parent));
        let Some(job) = &n.job else {
            return Ran {
                label,
                failed: Some("Batch does not describe it".into()),
                text: String::new(),
            };
        };
        let status = job.status().map_or("UNKNOWN", |s| s.as_str());
        let failed = (status != "SUCCEEDED").then(|| {
            let exit = job
                .container()
                .and_then(|c| c.exit_code())
                .map_or(String::new(), |c| format!(", exit code {c}"));
            let reason = job
                .status_reason()
                .filter(|r| !r.is_empty())
                .map_or(String::new(), |r| format!(": {r}"));
            format!("ended {status}{exit}{reason}")
        });
        let mut logs = JobLogs::new(self.config, self.group.to_string());
        // Enough once the check's rules read the output as something other
        // than unknown (a healthy node's whole output, a fault's line).
        let done = |text: &str| {
            let probe = Ran {
                label: label.clone(),
                failed: None,
                text: text.to_string(),
            };
            !text.is_empty() && judge(&probe, want, matchers)["status"] != "unknown"
        };
        let ctx = self.ctx;
        if let Err(e) = logs
            .settle_until(self.batch, job, done, ctx.reporter.as_ref(), &ctx.cancel)
            .await
        {
            ctx.reporter
                .log(&format!("{label}: logs not read: {}", e.message));
        }
        Ran {
            label,
            failed,
            text: logs.text().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_batch::types::{ContainerDetail, NetworkInterface};

    fn node(index: i32, instance: Option<&str>) -> Node {
        Node {
            index,
            address: Some(format!("10.0.1.{}", index + 4)),
            instance: instance.map(|i| (i.to_string(), "p4d.24xlarge".to_string())),
            job: None,
        }
    }

    #[test]
    fn a_node_is_named_by_its_instance_else_by_its_own_job() {
        let nodes = [node(0, Some("i-a")), node(1, None), node(2, Some("i-a"))];
        assert_eq!(names("j", &nodes), ["i-a", "j#1", "j#2"]);
        assert_eq!(
            nodes[1].instance_type().unwrap_err(),
            "EC2 lists no instance at its address 10.0.1.5"
        );
        let none = Node::default();
        assert_eq!(
            none.instance_type().unwrap_err(),
            "Batch names no network interface for it"
        );
    }

    #[test]
    fn a_node_s_address_is_its_interface_s() {
        let job = JobDetail::builder()
            .container(
                ContainerDetail::builder()
                    .network_interfaces(
                        NetworkInterface::builder()
                            .private_ipv4_address("10.0.1.6")
                            .build(),
                    )
                    .build(),
            )
            .build();
        assert_eq!(address_of(&job).as_deref(), Some("10.0.1.6"));
        assert_eq!(address_of(&JobDetail::builder().build()), None);
    }
}
