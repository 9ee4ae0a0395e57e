use super::*;

/// A Batch template after the runbook's: an EFA launch template, a compute
/// environment launching it, and the group's self rules; `{..}` marks
/// what each test changes.
fn template(types: &str, subnets: &str, egress: bool, placement: bool) -> String {
    let mut t = format!(
        "Resources:
  SubnetA:
    Type: AWS::EC2::Subnet
    Properties:
      AvailabilityZone: !Select [0, !GetAZs '']
  SubnetB:
    Type: AWS::EC2::Subnet
    Properties:
      AvailabilityZone: !Select [1, !GetAZs '']
  Efa:
    Type: AWS::EC2::SecurityGroup
    Properties:
      GroupDescription: efa
  EfaIn:
    Type: AWS::EC2::SecurityGroupIngress
    Properties:
      GroupId: !Ref Efa
      IpProtocol: '-1'
      SourceSecurityGroupId: !GetAtt Efa.GroupId
  Pg:
    Type: AWS::EC2::PlacementGroup
    Properties:
      Strategy: cluster
  Lt:
    Type: AWS::EC2::LaunchTemplate
    Properties:
      LaunchTemplateData:
        NetworkInterfaces:
          - {{NetworkCardIndex: 0, DeviceIndex: 0, InterfaceType: efa, Groups: [!Ref Efa]}}
          - {{NetworkCardIndex: 1, DeviceIndex: 1, InterfaceType: efa, Groups: [!Ref Efa]}}
          - {{NetworkCardIndex: 2, DeviceIndex: 1, InterfaceType: efa, Groups: [!Ref Efa]}}
          - {{NetworkCardIndex: 3, DeviceIndex: 1, InterfaceType: efa, Groups: [!Ref Efa]}}
  Ce:
    Type: AWS::Batch::ComputeEnvironment
    Properties:
      Type: MANAGED
      ComputeResources:
        Type: EC2
        InstanceTypes: {types}
        Subnets: {subnets}
        LaunchTemplate:
          LaunchTemplateId: !Ref Lt
"
    );
    if placement {
        t.push_str("        PlacementGroup: !Ref Pg\n");
    }
    if egress {
        t.push_str(
            "  EfaOut:
    Type: AWS::EC2::SecurityGroupEgress
    Properties:
      GroupId: !Ref Efa
      IpProtocol: -1
      DestinationSecurityGroupId: !Ref Efa
",
        );
    }
    t
}

fn findings(text: &str) -> Vec<Finding> {
    let value: Value = serde_saphyr_tags(text);
    check("t.yaml", text, &value)
}

/// The template as the CloudFormation reader gives it (short tags in long
/// form), without depending on the aws module: only the tags used above.
fn serde_saphyr_tags(text: &str) -> Value {
    let long = text
        .replace(
            "!Select [0, !GetAZs '']",
            "{'Fn::Select': [0, {'Fn::GetAZs': ''}]}",
        )
        .replace(
            "!Select [1, !GetAZs '']",
            "{'Fn::Select': [1, {'Fn::GetAZs': ''}]}",
        )
        .replace("!GetAtt Efa.GroupId", "{'Fn::GetAtt': [Efa, GroupId]}");
    let long = regex_ref(&long);
    serde_saphyr::from_str(&long).unwrap()
}

/// `!Ref X` → `{Ref: X}`.
fn regex_ref(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("!Ref ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 5..];
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        out.push_str(&format!("{{Ref: {}}}", &after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_runbook_shape_passes() {
    let f = findings(&template("[p4d.24xlarge]", "[!Ref SubnetA]", true, true));
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn two_zones_are_an_error_at_the_subnets() {
    let f = findings(&template(
        "[p4d.24xlarge]",
        "[!Ref SubnetA, !Ref SubnetB]",
        true,
        true,
    ));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].place, "t.yaml:40:9");
    assert!(f[0].message.contains("spans 2 Availability Zones (`SubnetA` in the region's zone #0, `SubnetB` in the region's zone #1)"), "{}", f[0].message);
    assert_eq!(
        f[0].help,
        "list subnets of one zone only, e.g. Subnets: [!Ref SubnetA]"
    );
    assert!(!f[0].warning);
}

#[test]
fn a_missing_self_egress_names_the_rule_to_add() {
    let f = findings(&template("[p4d.24xlarge]", "[!Ref SubnetA]", false, true));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].place, "t.yaml:10:3");
    assert!(
        f[0].message
            .starts_with("security group `Efa` does not allow all traffic out to itself"),
        "{}",
        f[0].message
    );
    assert_eq!(
        f[0].help,
        "add a resource: Type: AWS::EC2::SecurityGroupEgress, Properties: {GroupId: !Ref Efa, IpProtocol: '-1', DestinationSecurityGroupId: !Ref Efa}"
    );
}

#[test]
fn a_type_without_efa_or_too_few_interfaces_is_an_error() {
    let f = findings(&template(
        "[g5.2xlarge, p5.4xlarge]",
        "[!Ref SubnetA]",
        true,
        true,
    ));
    assert_eq!(f.len(), 2, "{f:#?}");
    assert_eq!(f[0].place, "t.yaml:39:25");
    assert!(
        f[0].message
            .starts_with("instance type `g5.2xlarge` has no EFA")
    );
    assert!(
        f[1].message
            .contains("attaches 4 EFA interfaces, but `p5.4xlarge` takes at most 1"),
        "{}",
        f[1].message
    );
}

#[test]
fn no_placement_group_is_a_warning() {
    let f = findings(&template("[p4d.24xlarge]", "[!Ref SubnetA]", true, false));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(f[0].warning);
    assert!(f[0].message.contains("no placement group"));
}

#[test]
fn a_group_that_lets_itself_in_needs_the_egress_too() {
    let text = "Resources:\n  G:\n    Type: AWS::EC2::SecurityGroup\n  In:\n    Type: AWS::EC2::SecurityGroupIngress\n    Properties: {GroupId: {Ref: G}, IpProtocol: '-1', SourceSecurityGroupId: {Ref: G}}\n";
    let f = findings(text);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(f[0].message.contains("out to itself"));
    assert!(
        f[0].message
            .contains("it lets all traffic in from itself, so it is an EFA group"),
        "{}",
        f[0].message
    );
}

#[test]
fn a_group_that_only_lets_all_traffic_out_to_the_world_is_no_efa_group() {
    // The runbook's 1.vpc-multi-az.yaml: Batch's group, egress to 0.0.0.0/0.
    let text = "Resources:\n  G:\n    Type: AWS::EC2::SecurityGroup\n    Properties:\n      SecurityGroupEgress:\n        - {IpProtocol: -1, FromPort: -1, ToPort: -1, CidrIp: 0.0.0.0/0}\n";
    assert!(findings(text).is_empty());
    // Out to itself but not in from itself is half an EFA group.
    let out_only = "Resources:\n  G:\n    Type: AWS::EC2::SecurityGroup\n  Out:\n    Type: AWS::EC2::SecurityGroupEgress\n    Properties: {GroupId: {Ref: G}, IpProtocol: '-1', DestinationSecurityGroupId: {Ref: G}}\n";
    let f = findings(out_only);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(f[0].message.contains("in from itself"), "{}", f[0].message);
    assert!(
        f[0].message.contains("lets all traffic out to itself, so"),
        "{}",
        f[0].message
    );
}
