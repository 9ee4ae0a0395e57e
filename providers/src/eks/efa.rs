//! EFA: how many Elastic Fabric Adapter interfaces an instance type takes,
//! and the launch-template network interfaces that attach them (one per
//! network card: the first is the primary interface, the others device 1).

use serde_json::{Value, json};

/// Instance families and their EFA interface count (one per network card).
const EFA_INTERFACES: [(&str, u32); 6] = [
    ("p4d", 4),
    ("p4de", 4),
    ("p5", 32),
    ("p5e", 32),
    ("p5en", 16),
    ("p6-b200", 8),
];

/// The number of EFA interfaces for `instance_type` (`p5.48xlarge` → 32),
/// if flow knows the family.
pub fn interfaces(instance_type: &str) -> Option<u32> {
    let family = instance_type.split('.').next()?;
    EFA_INTERFACES
        .iter()
        .find(|(f, _)| *f == family)
        .map(|(_, n)| *n)
}

/// The families flow knows, for error messages.
pub fn known_families() -> String {
    EFA_INTERFACES
        .iter()
        .map(|(f, n)| format!("{f} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `NetworkInterfaces` of a launch template with `count` EFA interfaces
/// in `groups` (security group ids).
pub fn network_interfaces(count: u32, groups: &[String]) -> Value {
    let items: Vec<Value> = (0..count)
        .map(|card| {
            let mut nic = json!({
                "DeviceIndex": if card == 0 { 0 } else { 1 },
                "NetworkCardIndex": card,
                "InterfaceType": "efa",
                "DeleteOnTermination": true,
            });
            if !groups.is_empty() {
                nic["Groups"] = json!(groups);
            }
            nic
        })
        .collect();
    Value::Array(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_family() {
        assert_eq!(interfaces("p4d.24xlarge"), Some(4));
        assert_eq!(interfaces("p5.48xlarge"), Some(32));
        assert_eq!(interfaces("p6-b200.48xlarge"), Some(8));
        assert_eq!(interfaces("c5.2xlarge"), None);
        assert!(known_families().contains("p5 (32)"));
    }

    #[test]
    fn one_interface_per_network_card() {
        let nics = network_interfaces(4, &["sg-1".into()]);
        let nics = nics.as_array().unwrap();
        assert_eq!(nics.len(), 4);
        assert_eq!(nics[0]["DeviceIndex"], 0);
        assert_eq!(nics[3]["DeviceIndex"], 1);
        assert_eq!(nics[3]["NetworkCardIndex"], 3);
        assert!(
            nics.iter()
                .all(|n| n["InterfaceType"] == "efa" && n["Groups"][0] == "sg-1")
        );
        assert!(network_interfaces(1, &[])[0].get("Groups").is_none());
    }
}
