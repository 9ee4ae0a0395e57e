//! EC2's XML answers, read into what the EFA rules need. Elements are
//! matched by local name (EC2 answers in its own namespace); a list is the
//! `item` children of its element, as the Query API writes lists.

use roxmltree::{Document, Node};

use crate::contract::ProviderError;

/// What an instance type has of EFA (DescribeInstanceTypes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstanceTypeEfa {
    /// The type.
    pub instance_type: String,
    /// `NetworkInfo.EfaSupported`.
    pub supported: bool,
    /// `NetworkInfo.EfaInfo.MaximumEfaInterfaces`, when given.
    pub max_interfaces: Option<u32>,
}

/// A security group's all-traffic rules naming the group itself
/// (DescribeSecurityGroups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelfRules {
    /// The group's id.
    pub group_id: String,
    /// An ingress rule, protocol `-1`, from the group itself.
    pub ingress: bool,
    /// An egress rule, protocol `-1`, to the group itself or to 0.0.0.0/0.
    pub egress: bool,
}

fn parse(xml: &str) -> Result<Document<'_>, ProviderError> {
    Document::parse(xml)
        .map_err(|e| ProviderError::retryable(format!("EC2 answered XML flow cannot read: {e}")))
}

/// The first child element of `node` named `name`.
fn child<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    node.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

/// The text of `node`'s child `name`.
fn text<'a>(node: Node<'a, '_>, name: &str) -> Option<&'a str> {
    child(node, name).and_then(|c| c.text())
}

/// The `item`s of `node`'s child list `name`.
fn items<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Vec<Node<'a, 'i>> {
    child(node, name)
        .map(|l| {
            l.children()
                .filter(|c| c.is_element() && c.tag_name().name() == "item")
                .collect()
        })
        .unwrap_or_default()
}

/// DescribeInstanceTypes' answer.
pub(crate) fn instance_types(xml: &str) -> Result<Vec<InstanceTypeEfa>, ProviderError> {
    let doc = parse(xml)?;
    Ok(items(doc.root_element(), "instanceTypeSet")
        .into_iter()
        .map(|t| {
            let net = child(t, "networkInfo");
            InstanceTypeEfa {
                instance_type: text(t, "instanceType").unwrap_or_default().to_string(),
                supported: net.and_then(|n| text(n, "efaSupported")) == Some("true"),
                max_interfaces: net
                    .and_then(|n| child(n, "efaInfo"))
                    .and_then(|e| text(e, "maximumEfaInterfaces"))
                    .and_then(|n| n.parse().ok()),
            }
        })
        .collect())
}

/// DescribeSubnets' answer: each subnet and its zone.
pub(crate) fn subnet_zones(xml: &str) -> Result<Vec<(String, String)>, ProviderError> {
    let doc = parse(xml)?;
    Ok(items(doc.root_element(), "subnetSet")
        .into_iter()
        .map(|s| {
            (
                text(s, "subnetId").unwrap_or_default().to_string(),
                text(s, "availabilityZone").unwrap_or_default().to_string(),
            )
        })
        .collect())
}

/// DescribeSecurityGroups' answer: each group's self rules.
pub(crate) fn security_groups(xml: &str) -> Result<Vec<SelfRules>, ProviderError> {
    let doc = parse(xml)?;
    Ok(items(doc.root_element(), "securityGroupInfo")
        .into_iter()
        .map(|g| {
            let id = text(g, "groupId").unwrap_or_default().to_string();
            let all = |list: &str, world_counts: bool| {
                items(g, list).into_iter().any(|p| {
                    text(p, "ipProtocol") == Some("-1")
                        && (items(p, "groups")
                            .into_iter()
                            .any(|pair| text(pair, "groupId") == Some(id.as_str()))
                            || (world_counts
                                && items(p, "ipRanges")
                                    .into_iter()
                                    .any(|r| text(r, "cidrIp") == Some("0.0.0.0/0"))))
                })
            };
            SelfRules {
                ingress: all("ipPermissions", false),
                egress: all("ipPermissionsEgress", true),
                group_id: id,
            }
        })
        .collect())
}

/// The code and message of an error answer.
pub(crate) fn error(xml: &str) -> (String, String) {
    let Ok(doc) = Document::parse(xml) else {
        return ("Error".into(), xml.trim().chars().take(200).collect());
    };
    let find = |name: &str| {
        doc.descendants()
            .find(|n| n.is_element() && n.tag_name().name() == name)
            .and_then(|n| n.text())
            .unwrap_or_default()
            .to_string()
    };
    (find("Code"), find("Message"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shapes as the EC2 API Reference's examples write them (namespaced,
    // lists as `item`s), cut to the fields read.
    const TYPES: &str = r#"<DescribeInstanceTypesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>r</requestId>
  <instanceTypeSet>
    <item><instanceType>p5.48xlarge</instanceType>
      <networkInfo><efaSupported>true</efaSupported><efaInfo><maximumEfaInterfaces>32</maximumEfaInterfaces></efaInfo></networkInfo></item>
    <item><instanceType>g5.2xlarge</instanceType>
      <networkInfo><efaSupported>false</efaSupported></networkInfo></item>
  </instanceTypeSet>
</DescribeInstanceTypesResponse>"#;

    const GROUPS: &str = r#"<DescribeSecurityGroupsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <securityGroupInfo>
    <item><groupId>sg-1</groupId>
      <ipPermissions><item><ipProtocol>-1</ipProtocol>
        <groups><item><userId>123456789012</userId><groupId>sg-1</groupId></item></groups><ipRanges/></item></ipPermissions>
      <ipPermissionsEgress><item><ipProtocol>-1</ipProtocol><groups/>
        <ipRanges><item><cidrIp>0.0.0.0/0</cidrIp></item></ipRanges></item></ipPermissionsEgress></item>
    <item><groupId>sg-2</groupId>
      <ipPermissions><item><ipProtocol>tcp</ipProtocol>
        <groups><item><groupId>sg-2</groupId></item></groups></item></ipPermissions>
      <ipPermissionsEgress/></item>
  </securityGroupInfo>
</DescribeSecurityGroupsResponse>"#;

    #[test]
    fn reads_efa_support_and_interface_counts() {
        let t = instance_types(TYPES).unwrap();
        assert_eq!(
            t,
            [
                InstanceTypeEfa {
                    instance_type: "p5.48xlarge".into(),
                    supported: true,
                    max_interfaces: Some(32)
                },
                InstanceTypeEfa {
                    instance_type: "g5.2xlarge".into(),
                    supported: false,
                    max_interfaces: None
                },
            ]
        );
    }

    #[test]
    fn reads_self_rules_and_zones() {
        let g = security_groups(GROUPS).unwrap();
        assert!(g[0].ingress && g[0].egress, "{g:?}");
        assert!(!g[1].ingress && !g[1].egress, "tcp only, no egress: {g:?}");
        let xml = r#"<DescribeSubnetsResponse><subnetSet><item><subnetId>subnet-1</subnetId><availabilityZone>us-east-1b</availabilityZone></item></subnetSet></DescribeSubnetsResponse>"#;
        assert_eq!(
            subnet_zones(xml).unwrap(),
            [("subnet-1".to_string(), "us-east-1b".to_string())]
        );
        let e = r#"<Response><Errors><Error><Code>InvalidGroup.NotFound</Code><Message>no sg-9</Message></Error></Errors></Response>"#;
        assert_eq!(error(e), ("InvalidGroup.NotFound".into(), "no sg-9".into()));
    }
}
