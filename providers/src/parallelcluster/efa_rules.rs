//! The EFA rules for a ParallelCluster configuration, read offline: every
//! compute resource with `Efa.Enabled: true` has an instance type with EFA
//! (an error), and its queue puts the nodes in a placement group (a
//! warning when not). Each names the file's line and column and the fix.
//!
//! pcluster makes the cluster's security groups itself, with the rules EFA
//! needs; groups given under `Networking.SecurityGroups` and the zones of
//! `SubnetIds` are known only to EC2, and are not judged here.

use serde_json::Value;

use crate::efa;
use crate::yaml_path::{self, Seg};

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// `file:line:col: what is wrong`.
    pub message: String,
    /// How to fix it.
    pub help: String,
    /// A warning rather than an error.
    pub warning: bool,
}

/// The findings for configuration `config` (parsed from `text`, the file
/// `file`).
pub(crate) fn check(file: &str, text: &str, config: &Value) -> Vec<Finding> {
    let place = |path: &[Seg]| {
        yaml_path::locate(text, path)
            .map_or_else(|| file.to_string(), |(l, c)| format!("{file}:{l}:{c}"))
    };
    let key = |k: &str| Seg::Key(k.into());
    let mut out = Vec::new();
    let queues = config
        .pointer("/Scheduling/SlurmQueues")
        .and_then(Value::as_array);
    for (q, queue) in queues.into_iter().flatten().enumerate() {
        let qname = queue.get("Name").and_then(Value::as_str).unwrap_or("?");
        let at_queue = |rest: &[Seg]| {
            let mut path = vec![key("Scheduling"), key("SlurmQueues"), Seg::Index(q)];
            path.extend_from_slice(rest);
            path
        };
        let mut efa_resources = Vec::new();
        let resources = queue.get("ComputeResources").and_then(Value::as_array);
        for (r, res) in resources.into_iter().flatten().enumerate() {
            if res.pointer("/Efa/Enabled").and_then(Value::as_bool) != Some(true) {
                continue;
            }
            let rname = res.get("Name").and_then(Value::as_str).unwrap_or("?");
            efa_resources.push(rname.to_string());
            let base = [key("ComputeResources"), Seg::Index(r)];
            let mut types: Vec<(Vec<Seg>, &str)> = Vec::new();
            if let Some(t) = res.get("InstanceType").and_then(Value::as_str) {
                types.push((vec![key("InstanceType")], t));
            }
            for (i, inst) in res
                .get("Instances")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if let Some(t) = inst.get("InstanceType").and_then(Value::as_str) {
                    types.push((
                        vec![key("Instances"), Seg::Index(i), key("InstanceType")],
                        t,
                    ));
                }
            }
            for (rest, t) in types {
                if let Some((message, help)) = efa::type_problem(t, false) {
                    let mut path = at_queue(&base);
                    path.extend(rest);
                    out.push(Finding {
                        message: format!(
                            "{}: compute resource `{rname}` of queue `{qname}` has Efa.Enabled, but {message}",
                            place(&path)
                        ),
                        help,
                        warning: false,
                    });
                }
            }
        }
        let placed = queue
            .pointer("/Networking/PlacementGroup/Enabled")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            || queue.pointer("/Networking/PlacementGroup/Id").is_some()
            || queue.pointer("/Networking/PlacementGroup/Name").is_some();
        if !efa_resources.is_empty() && !placed {
            out.push(Finding {
                message: format!(
                    "{}: queue `{qname}` has EFA compute resources ({}) but no placement group: its nodes may land far apart on the network",
                    place(&at_queue(&[key("Networking")])),
                    efa_resources.join(", ")
                ),
                help: "set Networking.PlacementGroup.Enabled: true on the queue".into(),
                warning: true,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "Scheduling:
  Scheduler: slurm
  SlurmQueues:
    - Name: train
      Networking:
        SubnetIds: [subnet-1]
        PLACEMENT
      ComputeResources:
        - Name: gpu
          InstanceType: TYPE
          Efa:
            Enabled: true
        - Name: cpu
          InstanceType: c5.large
";

    fn findings(instance: &str, placement: &str) -> Vec<Finding> {
        let text = CONFIG
            .replace("TYPE", instance)
            .replace("PLACEMENT", placement);
        let parsed: Value = serde_saphyr::from_str(&text).unwrap();
        check("c.yaml", &text, &parsed)
    }

    #[test]
    fn an_efa_type_in_a_placement_group_passes() {
        assert!(findings("p5.48xlarge", "PlacementGroup: {Enabled: true}").is_empty());
    }

    #[test]
    fn a_type_without_efa_is_an_error_at_its_key() {
        let f = findings("g5.xlarge", "PlacementGroup: {Enabled: true}");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].message,
            "c.yaml:10:11: compute resource `gpu` of queue `train` has Efa.Enabled, but instance type `g5.xlarge` has no EFA"
        );
        assert!(!f[0].warning);
    }

    #[test]
    fn no_placement_group_is_a_warning() {
        let f = findings("p5.48xlarge", "");
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].warning);
        assert!(
            f[0].message.starts_with("c.yaml:5:7: queue `train`"),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[0].help,
            "set Networking.PlacementGroup.Enabled: true on the queue"
        );
    }
}
