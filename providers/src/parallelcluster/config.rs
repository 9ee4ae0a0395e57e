//! A ParallelCluster 3 cluster configuration, read offline: the file the
//! step names (inside the workflow's folder) with its placeholders filled
//! from `substitute`, what the plan shows of it (queues, instance types,
//! min and max counts, EFA, placement groups, reservations, shared
//! storage), what it costs at most, and the copy handed to `pcluster`
//! (the same settings plus the `flow:token` tag, as JSON, which is YAML).

use serde_json::{Value, json};

use crate::Workdir;
use crate::contract::{Capacity, ProviderError};
use crate::substitute::Substitutions;

/// pcluster's default `MaxCount` of a compute resource.
const DEFAULT_MAX_COUNT: u64 = 10;

/// One compute resource of a Slurm queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ComputeResource {
    /// Its name.
    pub name: String,
    /// Its instance types (`InstanceType`, or each of `Instances`).
    pub instance_types: Vec<String>,
    /// `MinCount` (default 0): nodes kept running.
    pub min: u64,
    /// `MaxCount` (default 10): nodes at most.
    pub max: u64,
    /// `Efa.Enabled`.
    pub efa: bool,
    /// The capacity reservation or group it launches into, if any.
    pub reservation: Option<String>,
}

/// One Slurm queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Queue {
    /// Its name (the Slurm partition's).
    pub name: String,
    /// `CapacityType`: ONDEMAND, SPOT or CAPACITY_BLOCK.
    pub capacity_type: String,
    /// Whether its nodes go into a cluster placement group.
    pub placement_group: bool,
    /// `Networking.SubnetIds`.
    pub subnets: Vec<String>,
    /// Its own `Image.CustomAmi`, if any: its nodes' image, which pcluster
    /// updates only with the compute fleet stopped (or a
    /// `QueueUpdateStrategy`). A record written before it was kept reads
    /// as none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Its compute resources.
    pub resources: Vec<ComputeResource>,
}

/// What the plan and the outputs need of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The head node's instance type.
    pub head_node_type: String,
    /// `Image.Os`.
    pub os: String,
    /// The scheduler (`slurm`, `awsbatch`).
    pub scheduler: String,
    /// The Slurm queues.
    pub queues: Vec<Queue>,
    /// Shared storage: `(type, mount dir, existing file system id or "new")`.
    pub storage: Vec<(String, String, String)>,
}

/// The file's text with every `substitute` placeholder filled, read
/// from inside `workdir`.
pub(crate) fn read(
    workdir: &Workdir,
    path: &str,
    substitute: &Substitutions,
) -> Result<String, ProviderError> {
    let full = workdir.resolve(path).map_err(ProviderError::bad_input)?;
    let text = std::fs::read_to_string(&full).map_err(|e| {
        ProviderError::bad_input(format!(
            "cannot read the cluster configuration `{path}`: {e}"
        ))
    })?;
    substitute.apply_yaml(&text).map_err(|m| {
        ProviderError::bad_input(format!(
            "the cluster configuration `{path}`:{}: {}",
            m.line, m.message
        ))
    })
}

/// The configuration as JSON, or why it is not a cluster configuration.
pub(crate) fn parse(text: &str) -> Result<Value, String> {
    let value: Value = serde_saphyr::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
    if !value.is_object() || value.get("HeadNode").is_none() || value.get("Scheduling").is_none() {
        return Err(
            "not a ParallelCluster 3 cluster configuration: it needs `HeadNode` and `Scheduling`"
                .into(),
        );
    }
    Ok(value)
}

/// `line` with each `PLACEHOLDER_…` word shown as "(known after apply)":
/// for plans made before the values that fill them are known.
pub(crate) fn mask_placeholders(line: &str) -> String {
    let mut out = line.to_string();
    for p in crate::substitute::leftovers(line, &[]) {
        out = out.replace(&p.token, "(known after apply)");
    }
    out
}

/// A string at `pointer`, if there is one.
fn text_at(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer).and_then(|x| match x {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// A whole number at `key`, `default` when absent.
fn count(v: &Value, key: &str, default: u64) -> u64 {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(default),
        Some(Value::String(s)) => s.parse().unwrap_or(default),
        _ => default,
    }
}

/// The summary of a parsed configuration.
pub(crate) fn summary(config: &Value) -> Summary {
    let empty = Vec::new();
    let queues = config
        .pointer("/Scheduling/SlurmQueues")
        .and_then(Value::as_array)
        .unwrap_or(&empty)
        .iter()
        .map(|q| {
            let queue_reservation = reservation(q.get("CapacityReservationTarget"));
            Queue {
                name: text_at(q, "/Name").unwrap_or_default(),
                capacity_type: text_at(q, "/CapacityType").unwrap_or_else(|| "ONDEMAND".into()),
                placement_group: q
                    .pointer("/Networking/PlacementGroup/Enabled")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                    || q.pointer("/Networking/PlacementGroup/Id").is_some()
                    || q.pointer("/Networking/PlacementGroup/Name").is_some(),
                subnets: q
                    .pointer("/Networking/SubnetIds")
                    .and_then(Value::as_array)
                    .unwrap_or(&empty)
                    .iter()
                    .filter_map(|s| text_at(s, ""))
                    .collect(),
                image: text_at(q, "/Image/CustomAmi"),
                resources: q
                    .get("ComputeResources")
                    .and_then(Value::as_array)
                    .unwrap_or(&empty)
                    .iter()
                    .map(|r| ComputeResource {
                        name: text_at(r, "/Name").unwrap_or_default(),
                        instance_types: match text_at(r, "/InstanceType") {
                            Some(t) => vec![t],
                            None => r
                                .get("Instances")
                                .and_then(Value::as_array)
                                .unwrap_or(&empty)
                                .iter()
                                .filter_map(|i| text_at(i, "/InstanceType"))
                                .collect(),
                        },
                        min: count(r, "MinCount", 0),
                        max: count(r, "MaxCount", DEFAULT_MAX_COUNT),
                        efa: r
                            .pointer("/Efa/Enabled")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                        reservation: reservation(r.get("CapacityReservationTarget"))
                            .or(queue_reservation.clone()),
                    })
                    .collect(),
            }
        })
        .collect();
    let storage = config
        .get("SharedStorage")
        .and_then(Value::as_array)
        .unwrap_or(&empty)
        .iter()
        .map(|s| {
            let kind = text_at(s, "/StorageType").unwrap_or_default();
            let id = [
                "FsxLustreSettings",
                "EfsSettings",
                "EbsSettings",
                "FsxOntapSettings",
                "FsxOpenZfsSettings",
            ]
            .iter()
            .find_map(|k| {
                text_at(s, &format!("/{k}/FileSystemId"))
                    .or_else(|| text_at(s, &format!("/{k}/VolumeId")))
            })
            .unwrap_or_else(|| "new".into());
            (kind, text_at(s, "/MountDir").unwrap_or_default(), id)
        })
        .collect();
    Summary {
        head_node_type: text_at(config, "/HeadNode/InstanceType").unwrap_or_default(),
        os: text_at(config, "/Image/Os").unwrap_or_default(),
        scheduler: text_at(config, "/Scheduling/Scheduler").unwrap_or_default(),
        queues,
        storage,
    }
}

/// A `CapacityReservationTarget`'s reservation or group.
fn reservation(target: Option<&Value>) -> Option<String> {
    let t = target?;
    text_at(t, "/CapacityReservationId")
        .or_else(|| text_at(t, "/CapacityReservationResourceGroupArn"))
}

impl Summary {
    /// The plan's lines: the head node, each compute resource with its
    /// counts, and the shared storage.
    pub fn plan_lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "head node: {} ({}, {})",
            self.head_node_type, self.os, self.scheduler
        )];
        for q in &self.queues {
            for r in &q.resources {
                let mut extras = vec![q.capacity_type.clone()];
                if r.efa {
                    extras.push("EFA".into());
                }
                if q.placement_group {
                    extras.push("placement group".into());
                }
                if let Some(res) = &r.reservation {
                    extras.push(format!("reservation {res}"));
                }
                lines.push(format!(
                    "queue {}: {} {} × {}–{} ({})",
                    q.name,
                    r.name,
                    r.instance_types.join("|"),
                    r.min,
                    r.max,
                    extras.join(", ")
                ));
            }
        }
        for (kind, dir, id) in &self.storage {
            lines.push(format!("shared storage: {kind} at {dir} ({id})"));
        }
        lines
    }

    /// What runs: the head node, and every compute resource (its first
    /// instance type) from its `MinCount` to its `MaxCount`, none while the
    /// compute fleet is `stopped`.
    pub fn capacity(&self, stopped: bool) -> Vec<Capacity> {
        let mut out = Vec::new();
        if !self.head_node_type.is_empty() {
            out.push(Capacity::Instances {
                instance_type: self.head_node_type.clone(),
                count: 1,
            });
        }
        let count = |n: u64| n.min(u64::from(u32::MAX)) as u32;
        for r in self.queues.iter().flat_map(|q| &q.resources) {
            if let Some(t) = r.instance_types.first() {
                out.push(if r.min == r.max && !stopped {
                    Capacity::Instances {
                        instance_type: t.clone(),
                        count: count(r.max),
                    }
                } else {
                    Capacity::Scaled {
                        instance_type: t.clone(),
                        min: count(r.min.min(r.max)),
                        max: count(r.max),
                        stopped,
                    }
                });
            }
        }
        out
    }

    /// The user pcluster's images log in as, for SSH.
    pub fn ssh_user(&self) -> &'static str {
        match self.os.as_str() {
            o if o.starts_with("ubuntu") => "ubuntu",
            o if o.starts_with("rocky") => "rocky",
            _ => "ec2-user",
        }
    }
}

/// `config` with the tag `flow:token` = `token` added to its `Tags`.
pub(crate) fn with_token_tag(config: &Value, token: &str) -> Value {
    let mut out = config.clone();
    if token.is_empty() {
        return out;
    }
    let tags = out
        .as_object_mut()
        .expect("a cluster configuration is a mapping")
        .entry("Tags")
        .or_insert_with(|| json!([]));
    if let Some(list) = tags.as_array_mut() {
        list.retain(|t| t.get("Key").and_then(Value::as_str) != Some(crate::aws::tags::TOKEN));
        list.push(json!({"Key": crate::aws::tags::TOKEN, "Value": token}));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The shape of the reference's 2.aws-parallelcluster p5 template.
    pub(crate) const P5: &str = "\
Imds:
  ImdsSupport: v2.0
Image:
  Os: alinux2023
HeadNode:
  InstanceType: m5.8xlarge
  Networking:
    SubnetId: PLACEHOLDER_PUBLIC_SUBNET
Scheduling:
  Scheduler: slurm
  SlurmQueues:
    - Name: compute-gpu
      CapacityType: ONDEMAND
      Networking:
        SubnetIds:
          - PLACEHOLDER_PRIVATE_SUBNET
        PlacementGroup:
          Enabled: true
      ComputeResources:
        - Name: distributed-ml
          InstanceType: p5.48xlarge
          MinCount: 2
          MaxCount: 4
          Efa:
            Enabled: true
          CapacityReservationTarget:
            CapacityReservationId: PLACEHOLDER_CAPACITY_RESERVATION_ID
SharedStorage:
  - MountDir: /fsx
    Name: fsx
    StorageType: FsxLustre
    FsxLustreSettings:
      FileSystemId: PLACEHOLDER_FSX_ID
";

    #[test]
    fn the_plan_shows_queues_counts_and_storage() {
        let filled = Substitutions::from_map(BTreeMap::from([
            (
                "PLACEHOLDER_CAPACITY_RESERVATION_ID".into(),
                "cr-0123".into(),
            ),
            ("PLACEHOLDER_FSX_ID".into(), "fs-0123456789abcdef0".into()),
        ]))
        .apply(P5);
        let left: Vec<String> = crate::substitute::leftovers(&filled, &[])
            .into_iter()
            .map(|l| l.token)
            .collect();
        assert_eq!(
            left,
            ["PLACEHOLDER_PUBLIC_SUBNET", "PLACEHOLDER_PRIVATE_SUBNET"]
        );
        let s = summary(&parse(&filled).unwrap());
        assert_eq!(
            s.plan_lines(),
            [
                "head node: m5.8xlarge (alinux2023, slurm)",
                "queue compute-gpu: distributed-ml p5.48xlarge × 2–4 (ONDEMAND, EFA, placement group, reservation cr-0123)",
                "shared storage: FsxLustre at /fsx (fs-0123456789abcdef0)",
            ]
        );
        let head = Capacity::Instances {
            instance_type: "m5.8xlarge".into(),
            count: 1,
        };
        let queue = |stopped| Capacity::Scaled {
            instance_type: "p5.48xlarge".into(),
            min: 2,
            max: 4,
            stopped,
        };
        assert_eq!(s.capacity(false), [head.clone(), queue(false)]);
        assert_eq!(s.capacity(true), [head, queue(true)]);
        assert_eq!(s.ssh_user(), "ec2-user");
    }

    #[test]
    fn a_queues_own_image_is_read_and_an_older_record_without_it_reads_as_none() {
        let text = "HeadNode:\n  InstanceType: t3.medium\nScheduling:\n  Scheduler: slurm\n  SlurmQueues:\n  - Name: cpu\n    Image:\n      CustomAmi: ami-0123\n    ComputeResources:\n    - Name: c5\n      InstanceType: c5.large\n  - Name: gpu\n    ComputeResources:\n    - Name: p5\n      InstanceType: p5.48xlarge\n";
        let queues = summary(&parse(text).unwrap()).queues;
        assert_eq!(queues[0].image.as_deref(), Some("ami-0123"));
        assert_eq!(queues[1].image, None);
        // Recorded as before: no `image` key.
        let recorded = serde_json::to_value(&queues[1]).unwrap();
        assert!(recorded.get("image").is_none(), "{recorded}");
        let read: Queue = serde_json::from_value(recorded).unwrap();
        assert_eq!(read, queues[1]);
    }

    #[test]
    fn the_token_tag_is_added_once() {
        let v = parse(P5).unwrap();
        let tagged = with_token_tag(&with_token_tag(&v, "t1"), "t2");
        assert_eq!(
            tagged["Tags"],
            json!([{"Key": "flow:token", "Value": "t2"}])
        );
        assert!(parse("a: 1").unwrap_err().contains("HeadNode"));
    }
}
