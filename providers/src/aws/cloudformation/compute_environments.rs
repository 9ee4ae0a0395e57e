//! What a template's Batch compute environments launch into, judged at plan
//! and again before `CreateStack`, with what only AWS knows: the capacity
//! reservation (or capacity block) their launch template targets
//! (DescribeCapacityReservations: type, zone, platform, state, count,
//! window), and, for launch templates that attach EFA interfaces, the zones
//! of the subnets and the self rules of the security groups they take from
//! another stack's exports (DescribeSubnets, DescribeSecurityGroups). What
//! the template itself declares is judged offline by [`crate::efa::cfn`].

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use aws_sdk_cloudformation::Client;
use serde_json::Value;

use super::intrinsics::{Eval, Scope, text};
use super::spec::StackSpec;
use crate::aws::ec2::Ec2;
use crate::aws::efa_rules;
use crate::aws::error;
use crate::aws::reservation::{self, Ask};
use crate::contract::{OpContext, ProviderError, Refusal};

/// What one compute environment launches, as far as the template and the
/// stack's parameters tell before the stack exists.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Launch {
    /// The compute environment's logical name.
    pub name: String,
    /// Its instance types (empty when not known).
    pub instance_types: Vec<String>,
    /// Its subnets (`None` when not known).
    pub subnets: Option<Vec<String>>,
    /// The security groups its EFA interfaces and instances use, those
    /// known now (`None` when none is).
    pub groups: Option<Vec<String>>,
    /// Whether its launch template attaches EFA interfaces.
    pub efa: bool,
    /// The reservation its launch template targets, if any.
    pub reservation: Option<String>,
    /// Whether it launches as a capacity block (`None`: behind a condition
    /// only AWS can evaluate).
    pub capacity_block: Option<bool>,
}

/// The compute environments of `template` that target a reservation or
/// attach EFA, evaluated in `scope`.
pub(super) fn launches(scope: &Scope<'_>) -> Vec<Launch> {
    let Some(resources) = scope.template.get("Resources").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, res) in resources {
        if res.get("Type").and_then(Value::as_str) != Some("AWS::Batch::ComputeEnvironment") {
            continue;
        }
        if let Some(cond) = res.get("Condition").and_then(Value::as_str)
            && scope.condition(cond) == Some(false)
        {
            continue;
        }
        let Some(compute) = res.pointer("/Properties/ComputeResources") else {
            continue;
        };
        let lt_data = compute
            .pointer("/LaunchTemplate/LaunchTemplateId/Ref")
            .and_then(Value::as_str)
            .and_then(|lt| resources.get(lt))
            .and_then(|lt| lt.pointer("/Properties/LaunchTemplateData"));
        let known = |v: Option<&Value>| match v.map(|v| scope.eval(v)) {
            Some(Eval::Known(v)) => Some(v),
            _ => None,
        };
        let strings = |v: Option<&Value>| {
            known(v).and_then(|v| {
                v.as_array().map(|items| {
                    items
                        .iter()
                        .map(text)
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<String>>()
                })
            })
        };
        let reservation = known(lt_data.and_then(|d| d.get("CapacityReservationSpecification")))
            .and_then(|s| {
                s.pointer("/CapacityReservationTarget/CapacityReservationId")
                    .map(text)
            })
            .filter(|id| !id.is_empty());
        let capacity_block = match lt_data
            .and_then(|d| d.get("InstanceMarketOptions"))
            .map(|m| scope.eval(m))
        {
            None | Some(Eval::NoValue) => Some(false),
            Some(Eval::Known(m)) => {
                Some(m.get("MarketType").map(text).as_deref() == Some("capacity-block"))
            }
            Some(Eval::Unknown) => None,
        };
        let nics = lt_data
            .and_then(|d| d.get("NetworkInterfaces"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let efa_nics: Vec<&Value> = nics
            .iter()
            .filter(|n| {
                matches!(
                    n.get("InterfaceType").map(text).as_deref(),
                    Some("efa" | "efa-only")
                )
            })
            .collect();
        // The groups that can be known now: the EFA interfaces' own, and
        // the compute environment's (a list behind an unknown condition, or
        // an import not made yet, is left out).
        let mut known_groups: Vec<String> = efa_nics
            .iter()
            .filter_map(|nic| strings(nic.get("Groups")))
            .flatten()
            .chain(strings(compute.get("SecurityGroupIds")).unwrap_or_default())
            .collect();
        known_groups.sort();
        known_groups.dedup();
        let groups = (!known_groups.is_empty()).then_some(known_groups);
        if reservation.is_none() && efa_nics.is_empty() {
            continue;
        }
        out.push(Launch {
            name: name.clone(),
            instance_types: strings(compute.get("InstanceTypes")).unwrap_or_default(),
            subnets: strings(compute.get("Subnets")),
            groups,
            efa: !efa_nics.is_empty(),
            reservation,
            capacity_block,
        });
    }
    out
}

/// What the checks found: the plan's lines and the refusals.
#[derive(Debug, Default)]
pub(super) struct Judged {
    /// Reservation windows, and what could not be judged.
    pub lines: Vec<String>,
    /// Broken rules, each with its fix.
    pub refusals: Vec<Refusal>,
}

/// Judges the compute environments of `spec`'s template; `creating` when the
/// stack is made now (a reservation's available count must cover it). What
/// AWS does not answer becomes a "not judged" line: the checks never fail a
/// plan or a create on their own.
pub(super) async fn judge(
    ctx: &OpContext,
    client: &Client,
    spec: &StackSpec,
    creating: bool,
) -> Result<Judged, ProviderError> {
    let mut judged = Judged::default();
    let Ok(template) = super::template::parse(&spec.body) else {
        return Ok(judged);
    };
    let none = BTreeMap::new();
    let offline = Scope {
        template: &template,
        params: &spec.params,
        exports: &none,
    };
    if launches(&offline).is_empty() {
        return Ok(judged);
    }
    let exports = match exports(client).await {
        Ok(e) => e,
        Err(e) => {
            judged.lines.push(format!(
                "compute environments not judged: {} (the plan goes on without these checks)",
                e.message
            ));
            return Ok(judged);
        }
    };
    let scope = Scope {
        template: &template,
        params: &spec.params,
        exports: &exports,
    };
    let sdk = match crate::aws::config::sdk_config(ctx).await {
        Ok(sdk) => sdk,
        Err(e) => {
            judged
                .lines
                .push(format!("compute environments not judged: {}", e.message));
            return Ok(judged);
        }
    };
    for launch in launches(&scope) {
        if let Some(id) = &launch.reservation {
            let ask = Ask {
                id: id.clone(),
                // Families (`p5`) and `optimal` name no one type to match.
                instance_types: launch
                    .instance_types
                    .iter()
                    .filter(|t| t.contains('.'))
                    .cloned()
                    .collect(),
                subnets: launch.subnets.clone(),
                // Batch starts instances as jobs come: at least one must fit.
                count: 1,
                capacity_block: launch.capacity_block,
            };
            let (lines, refusals) =
                match reservation::check(&sdk, &ask, ctx.timeout, creating).await {
                    Ok(found) => found,
                    Err(e) => (
                        vec![format!(
                            "capacity reservation {id} not judged: {}",
                            e.message
                        )],
                        Vec::new(),
                    ),
                };
            judged
                .lines
                .extend(lines.into_iter().map(|l| format!("{}: {l}", launch.name)));
            judged
                .refusals
                .extend(refusals.into_iter().map(|r| Refusal {
                    message: format!("compute environment {}: {}", launch.name, r.message),
                    help: r.help,
                }));
        }
        if launch.efa {
            efa_online(&sdk, &launch, &mut judged).await;
        }
    }
    Ok(judged)
}

/// The EFA rules EC2 answers for: instance types with EFA, one zone among
/// the subnets, groups that let all traffic in from and out to themselves.
async fn efa_online(sdk: &SdkConfig, launch: &Launch, judged: &mut Judged) {
    let subnets = launch.subnets.clone().unwrap_or_default();
    if subnets.is_empty() {
        judged.lines.push(format!(
            "{}: EFA zones not judged: its subnets are known only once the stacks they come from exist",
            launch.name
        ));
    }
    let groups = launch.groups.clone().unwrap_or_default();
    let (broken, unjudged) =
        efa_rules::judge(&Ec2::new(sdk), &launch.instance_types, &subnets, &groups).await;
    judged.lines.extend(
        unjudged
            .into_iter()
            .map(|u| format!("{}: {u}", launch.name)),
    );
    judged.refusals.extend(broken.into_iter().map(|b| Refusal {
        message: format!("compute environment {}: EFA: {}", launch.name, b.message),
        help: b.fix,
    }));
}

/// The region's CloudFormation exports by name.
async fn exports(client: &Client) -> Result<BTreeMap<String, String>, ProviderError> {
    let mut out = BTreeMap::new();
    let mut next: Option<String> = None;
    loop {
        let page = client
            .list_exports()
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws("list the CloudFormation exports", e))?;
        for e in page.exports() {
            if let (Some(n), Some(v)) = (e.name(), e.value()) {
                out.insert(n.to_string(), v.to_string());
            }
        }
        match page.next_token() {
            Some(t) => next = Some(t.to_string()),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the seeds' Batch templates (workflows/templates/batch-p5.yaml).
    fn template() -> Value {
        super::super::template::parse(
            r#"
Parameters:
  VPCStackParameter: {Type: String}
  CapacityReservationId: {Type: String, Default: ''}
  CapacityBlock: {Type: String, Default: 'false'}
Conditions:
  HasCapacityReservation: !Not [!Equals [!Ref CapacityReservationId, '']]
  UseCapacityBlock: !And [{Condition: HasCapacityReservation}, !Equals [!Ref CapacityBlock, 'true']]
  OnlyKnownToAws: !Equals [!Ref 'AWS::AccountId', '123456789012']
Resources:
  LT:
    Type: AWS::EC2::LaunchTemplate
    Properties:
      LaunchTemplateData:
        InstanceMarketOptions: !If [UseCapacityBlock, {MarketType: capacity-block}, !Ref 'AWS::NoValue']
        CapacityReservationSpecification: !If
          - HasCapacityReservation
          - CapacityReservationTarget:
              CapacityReservationId: !Ref CapacityReservationId
          - !Ref 'AWS::NoValue'
        NetworkInterfaces:
          - {DeviceIndex: 0, InterfaceType: efa, Groups: [{'Fn::ImportValue': !Sub '${VPCStackParameter}-SecurityGroup'}]}
  CE:
    Type: AWS::Batch::ComputeEnvironment
    Properties:
      Type: MANAGED
      ComputeResources:
        Type: EC2
        InstanceTypes: [p5.48xlarge]
        Subnets: [{'Fn::ImportValue': !Sub '${VPCStackParameter}-PrivateSubnet'}]
        SecurityGroupIds: !If [OnlyKnownToAws, [sg-other], !Ref 'AWS::NoValue']
        LaunchTemplate:
          LaunchTemplateId: !Ref LT
"#,
        )
        .unwrap()
    }

    #[test]
    fn a_compute_environment_launches_into_the_reservation_its_parameters_name() {
        let t = template();
        let params = BTreeMap::from([
            ("VPCStackParameter".to_string(), "vpc".to_string()),
            ("CapacityReservationId".to_string(), "cr-0123".to_string()),
            ("CapacityBlock".to_string(), "true".to_string()),
        ]);
        let exports = BTreeMap::from([
            ("vpc-SecurityGroup".to_string(), "sg-1".to_string()),
            ("vpc-PrivateSubnet".to_string(), "subnet-1".to_string()),
        ]);
        let scope = Scope {
            template: &t,
            params: &params,
            exports: &exports,
        };
        assert_eq!(
            launches(&scope),
            [Launch {
                name: "CE".into(),
                instance_types: vec!["p5.48xlarge".into()],
                subnets: Some(vec!["subnet-1".into()]),
                groups: Some(vec!["sg-1".into()]),
                efa: true,
                reservation: Some("cr-0123".into()),
                capacity_block: Some(true),
            }]
        );
        // Before the VPC stack exists its exports are unknown; the
        // reservation is still judged.
        let none = BTreeMap::new();
        let early = Scope {
            template: &t,
            params: &params,
            exports: &none,
        };
        let l = &launches(&early)[0];
        assert_eq!((l.subnets.clone(), l.groups.clone()), (None, None));
        assert_eq!(l.reservation.as_deref(), Some("cr-0123"));
        // No reservation given: only the EFA rules are left to judge.
        let on_demand = BTreeMap::from([("VPCStackParameter".to_string(), "vpc".to_string())]);
        let s = Scope {
            template: &t,
            params: &on_demand,
            exports: &exports,
        };
        let l = &launches(&s)[0];
        assert_eq!(
            (l.reservation.clone(), l.capacity_block, l.efa),
            (None, Some(false), true)
        );
    }
}
