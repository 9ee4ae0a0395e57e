//! The EFA rules for the `efaEnabled` managed node groups of an eksctl
//! config, each reported at the file's line and column with its fix: the
//! group's nodes sit in one Availability Zone, and every instance type has
//! EFA (flow writes the launch template's interfaces from the type, so a
//! type flow does not know is refused too).

use serde_json::Value;

use super::{strings, subnets};
use crate::efa;
use crate::yaml_path::{self, Seg};

/// One broken rule: `file:line:col: message`, and the fix.
pub type Finding = (String, String);

/// The findings for the eksctl config `text` (the file `file`, its
/// placeholders already filled).
pub fn problems(file: &str, text: &str) -> Vec<Finding> {
    let Ok(doc) = serde_saphyr::from_str::<Value>(text) else {
        return Vec::new();
    };
    let place = |path: Vec<Seg>| {
        yaml_path::locate(text, &path)
            .map_or_else(|| file.to_string(), |(l, c)| format!("{file}:{l}:{c}"))
    };
    let mut out = Vec::new();
    let groups = doc.get("managedNodeGroups").and_then(Value::as_array);
    for (i, ng) in groups.into_iter().flatten().enumerate() {
        if ng.get("efaEnabled").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let name = ng.get("name").and_then(Value::as_str).unwrap_or("?");
        let at = |keys: &[&str]| {
            let mut path = vec![Seg::Key("managedNodeGroups".into()), Seg::Index(i)];
            for k in keys {
                path.push(match k.parse() {
                    Ok(j) => Seg::Index(j),
                    Err(_) => Seg::Key((*k).into()),
                });
            }
            place(path)
        };
        // A targeted capacity reservation (or block) launches only in its
        // own zone, whatever the subnets: the group is in one zone then.
        let reserved = ng
            .pointer("/capacityReservation/capacityReservationTarget/capacityReservationID")
            .is_some();
        let zones = zones_of(&doc, ng);
        if zones.len() > 1 && !reserved {
            let key = if ng.get("availabilityZones").is_some() {
                "availabilityZones"
            } else {
                "efaEnabled"
            };
            out.push((
                format!(
                    "{}: node group `{name}` has efaEnabled but its nodes span {} Availability Zones ({}); EFA traffic does not cross zones",
                    at(&[key]),
                    zones.len(),
                    zones.join(", ")
                ),
                format!(
                    "give the node group one zone: availabilityZones: [{}] (the zone of your capacity, if you have a reservation)",
                    zones[0]
                ),
            ));
        }
        let mut types: Vec<(Vec<String>, String)> = Vec::new();
        if let Some(t) = ng.get("instanceType").and_then(Value::as_str) {
            types.push((vec!["instanceType".into()], t.to_string()));
        }
        for (j, t) in strings(ng.get("instanceTypes")).into_iter().enumerate() {
            types.push((vec!["instanceTypes".into(), j.to_string()], t));
        }
        for (keys, t) in types {
            if let Some((message, help)) = efa::type_problem(&t, true) {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                out.push((
                    format!(
                        "{}: node group `{name}` has efaEnabled, but {message}",
                        at(&keys)
                    ),
                    help,
                ));
            }
        }
    }
    out
}

/// The zones a node group's nodes may land in, as far as the file tells:
/// its `availabilityZones`; else the zones of the listed subnets it takes;
/// else, when eksctl makes the VPC, the config's `availabilityZones`.
fn zones_of(doc: &Value, ng: &Value) -> Vec<String> {
    let own = strings(ng.get("availabilityZones"));
    if !own.is_empty() {
        return own;
    }
    let vpc = doc.get("vpc").cloned().unwrap_or(Value::Null);
    let private = subnets(vpc.pointer("/subnets/private"));
    let public = subnets(vpc.pointer("/subnets/public"));
    let mut zones: Vec<String> = Vec::new();
    if !(private.is_empty() && public.is_empty()) {
        let private_networking = ng.get("privateNetworking").and_then(Value::as_bool) == Some(true);
        let pool = if private_networking || public.is_empty() {
            private
        } else {
            public
        };
        for (az, _) in pool {
            // A subnet keyed by a name (`private-one`) without `az` is in a
            // zone only EC2 knows: the group's zones are not known offline.
            if !looks_like_zone(&az) {
                return Vec::new();
            }
            if !zones.contains(&az) {
                zones.push(az);
            }
        }
        return zones;
    }
    if vpc.get("id").is_none() {
        return strings(doc.get("availabilityZones"));
    }
    zones
}

/// Whether `name` is written like an Availability Zone (`us-east-1a`,
/// `ap-northeast-1c`): letters and dashes, then a digit, then a letter.
fn looks_like_zone(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 4
        && b[b.len() - 1].is_ascii_lowercase()
        && b[b.len() - 2].is_ascii_digit()
        && b[b.len() - 3] == b'-'
        && name[..name.len() - 3]
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {name: c, region: us-east-1}
availabilityZones: [us-east-1a, us-east-1b]
managedNodeGroups:
  - name: cpu
    instanceType: c5.2xlarge
  - name: gpu
    instanceType: INSTANCE
    efaEnabled: true
    ZONES
";

    fn findings(instance: &str, zones: &str) -> Vec<Finding> {
        let text = CONFIG.replace("INSTANCE", instance).replace("ZONES", zones);
        problems("c.yaml", &text)
    }

    #[test]
    fn one_zone_and_an_efa_type_pass() {
        assert!(findings("p4d.24xlarge", "availabilityZones: [us-east-1b]").is_empty());
    }

    #[test]
    fn two_zones_are_named_at_the_groups_zones() {
        let f = findings(
            "p4d.24xlarge",
            "availabilityZones: [us-east-1a, us-east-1b]",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].0
                .starts_with("c.yaml:11:5: node group `gpu` has efaEnabled but its nodes span 2"),
            "{}",
            f[0].0
        );
        assert_eq!(
            f[0].1,
            "give the node group one zone: availabilityZones: [us-east-1a] (the zone of your capacity, if you have a reservation)"
        );
    }

    #[test]
    fn a_group_without_zones_takes_the_clusters_zones() {
        let f = findings("p4d.24xlarge", "");
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].0.starts_with("c.yaml:10:5:"), "{}", f[0].0);
        assert!(f[0].0.contains("(us-east-1a, us-east-1b)"));
    }

    #[test]
    fn a_reserved_group_or_subnets_of_unknown_zones_pass() {
        // A capacity block launches in its own zone only.
        let reserved = "availabilityZones: [us-east-1a, us-east-1b]
    capacityReservation:
      capacityReservationTarget:
        capacityReservationID: cr-0123";
        assert!(findings("p5.48xlarge", reserved).is_empty());
        // The runbook's eks-p5-capacity-block.yaml keys its subnets by name.
        let named = "apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
vpc:
  id: vpc-1
  subnets:
    private:
      private-one: {id: subnet-1}
      private-two: {id: subnet-2}
managedNodeGroups:
  - name: p5
    instanceType: p5.48xlarge
    privateNetworking: true
    efaEnabled: true
";
        assert!(problems("c.yaml", named).is_empty());
        let zoned = named
            .replace("private-one", "us-west-2a")
            .replace("private-two", "us-west-2b");
        assert_eq!(problems("c.yaml", &zoned).len(), 1);
        assert!(looks_like_zone("ap-northeast-1c") && !looks_like_zone("private-one"));
    }

    #[test]
    fn a_type_without_efa_is_named_at_its_key() {
        let f = findings("g5.2xlarge", "availabilityZones: [us-east-1b]");
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].0,
            "c.yaml:9:5: node group `gpu` has efaEnabled, but instance type `g5.2xlarge` has no EFA"
        );
        assert!(f[0].1.contains("g5.48xlarge (1)"));
    }
}
