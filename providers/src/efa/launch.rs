//! The launch-template network interfaces that attach EFA (one per network
//! card: the first is the primary interface, the others device 1).

use serde_json::{Value, json};

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
