//! The EFA rules, read offline from a CloudFormation template: for each
//! launch template that attaches EFA interfaces and each Batch compute
//! environment that launches it, the instance types have EFA (and enough
//! interfaces), the subnets sit in one Availability Zone, a cluster
//! placement group is set (a warning when not), and the security groups let
//! all traffic in from and out to themselves. Every finding names the
//! template's file, line and column, and the fix.
//!
//! Only what the template itself declares is judged: a subnet or security
//! group imported from another stack (`Fn::ImportValue`) is not seen here.

use serde_json::{Map, Value};

use super::types;
use crate::yaml_path::{self, Seg};

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `file:line:col` of the key it is about (just `file` if not found).
    pub place: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: String,
    /// A warning (worth fixing, not fatal) rather than an error.
    pub warning: bool,
}

/// A template's resources and where they are, for one check.
struct Template<'a> {
    file: &'a str,
    text: &'a str,
    resources: &'a Map<String, Value>,
}

/// The findings of the EFA rules in `template` (parsed from `text`, the
/// file `file`).
pub fn check(file: &str, text: &str, template: &Value) -> Vec<Finding> {
    let Some(resources) = template.get("Resources").and_then(Value::as_object) else {
        return Vec::new();
    };
    let t = Template {
        file,
        text,
        resources,
    };
    let mut out = Vec::new();
    for (name, res) in resources {
        match kind(res) {
            "AWS::EC2::LaunchTemplate" if efa_interfaces(res) > 0 => {
                t.launch_template(name, res, &mut out)
            }
            "AWS::Batch::ComputeEnvironment" => t.compute_environment(name, res, &mut out),
            _ => {}
        }
    }
    // After the groups' users, so that a group an EFA interface uses is
    // reported for that use.
    for (name, res) in resources {
        if kind(res) == "AWS::EC2::SecurityGroup" {
            t.half_made_group(name, &mut out);
        }
    }
    // A group both used by EFA and found half made is reported once.
    let mut seen = Vec::new();
    out.retain(|f| {
        let key = (
            f.place.clone(),
            f.message.split(" itself").next().map(str::to_string),
        );
        let new = !seen.contains(&key);
        seen.push(key);
        new
    });
    out
}

/// A resource's `Type`.
fn kind(res: &Value) -> &str {
    res.get("Type").and_then(Value::as_str).unwrap_or_default()
}

/// The EFA interfaces a launch template attaches.
fn efa_interfaces(res: &Value) -> usize {
    res.pointer("/Properties/LaunchTemplateData/NetworkInterfaces")
        .and_then(Value::as_array)
        .map_or(0, |nics| {
            nics.iter()
                .filter(|n| {
                    matches!(
                        n.get("InterfaceType").and_then(Value::as_str),
                        Some("efa" | "efa-only")
                    )
                })
                .count()
        })
}

/// The resource names `v` refers to (`Ref`, `Fn::GetAtt`), inside
/// conditions and lists too.
fn referenced(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("Ref") {
                out.push(r.clone());
            } else if let Some(first) = m.get("Fn::GetAtt").and_then(|a| {
                a.get(0)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| {
                        a.as_str()
                            .and_then(|s| s.split('.').next())
                            .map(str::to_string)
                    })
            }) {
                out.push(first);
            } else {
                m.values().for_each(|x| referenced(x, out));
            }
        }
        Value::Array(items) => items.iter().for_each(|x| referenced(x, out)),
        _ => {}
    }
}

/// Whether `v` refers to the resource `name`.
fn refers_to(v: Option<&Value>, name: &str) -> bool {
    let mut names = Vec::new();
    if let Some(v) = v {
        referenced(v, &mut names);
    }
    names.iter().any(|n| n == name)
}

/// Whether an `IpProtocol` value means all traffic.
fn all_traffic(v: Option<&Value>) -> bool {
    match v {
        Some(Value::String(s)) => s == "-1",
        Some(Value::Number(n)) => n.as_i64() == Some(-1),
        _ => false,
    }
}

/// A path under `Resources.NAME.Properties`.
fn under(name: &str, keys: &[&str]) -> Vec<Seg> {
    let mut path = vec![
        Seg::Key("Resources".into()),
        Seg::Key(name.into()),
        Seg::Key("Properties".into()),
    ];
    for k in keys {
        path.push(match k.parse::<usize>() {
            Ok(i) => Seg::Index(i),
            Err(_) => Seg::Key((*k).into()),
        });
    }
    path
}

impl Template<'_> {
    /// `file:line:col` of `path`.
    fn place(&self, path: &[Seg]) -> String {
        yaml_path::locate(self.text, path).map_or_else(
            || self.file.to_string(),
            |(l, c)| format!("{}:{l}:{c}", self.file),
        )
    }

    /// An error at `path`.
    fn error(&self, path: &[Seg], message: String, help: String) -> Finding {
        Finding {
            place: self.place(path),
            message,
            help,
            warning: false,
        }
    }

    /// The resource `name` if it is of type `ty`.
    fn resource(&self, name: &str, ty: &str) -> Option<&Value> {
        self.resources.get(name).filter(|r| kind(r) == ty)
    }

    /// An EFA launch template's own instance type, and its security groups.
    fn launch_template(&self, name: &str, res: &Value, out: &mut Vec<Finding>) {
        let count = efa_interfaces(res);
        if let Some(t) = res
            .pointer("/Properties/LaunchTemplateData/InstanceType")
            .and_then(Value::as_str)
        {
            self.instance_type(
                &under(name, &["LaunchTemplateData", "InstanceType"]),
                name,
                t,
                count,
                out,
            );
        }
        let mut groups = Vec::new();
        if let Some(nics) = res.pointer("/Properties/LaunchTemplateData/NetworkInterfaces") {
            for nic in nics.as_array().into_iter().flatten() {
                if let Some(g) = nic.get("Groups") {
                    referenced(g, &mut groups);
                }
            }
        }
        self.groups(name, &groups, out);
    }

    /// A compute environment that launches an EFA launch template: its
    /// instance types, zones, placement group and security groups.
    fn compute_environment(&self, name: &str, res: &Value, out: &mut Vec<Finding>) {
        let Some(cr) = res.pointer("/Properties/ComputeResources") else {
            return;
        };
        let mut lts = Vec::new();
        if let Some(lt) = cr.get("LaunchTemplate") {
            referenced(lt, &mut lts);
        }
        let Some((lt_name, lt)) = lts.iter().find_map(|n| {
            self.resource(n, "AWS::EC2::LaunchTemplate")
                .filter(|r| efa_interfaces(r) > 0)
                .map(|r| (n.as_str(), r))
        }) else {
            return;
        };
        let count = efa_interfaces(lt);
        for (i, t) in cr
            .get("InstanceTypes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(t) = t.as_str() {
                let at = under(name, &["ComputeResources", "InstanceTypes", &i.to_string()]);
                self.instance_type(&at, lt_name, t, count, out);
            }
        }
        self.one_zone(name, cr, out);
        let placed = cr.get("PlacementGroup").is_some()
            || lt
                .pointer("/Properties/LaunchTemplateData/Placement/GroupName")
                .is_some();
        if !placed {
            out.push(Finding {
                place: self.place(&under(name, &["ComputeResources"])),
                message: format!(
                    "EFA compute environment `{name}` has no placement group: its nodes may land far apart on the network"
                ),
                help: "add an AWS::EC2::PlacementGroup with Strategy: cluster and set ComputeResources.PlacementGroup: !Ref it".into(),
                warning: true,
            });
        }
        let mut groups = Vec::new();
        if let Some(g) = cr.get("SecurityGroupIds") {
            referenced(g, &mut groups);
        }
        self.groups(name, &groups, out);
    }

    /// `instance_type` at `at` has EFA, with at least the `count`
    /// interfaces of launch template `lt`.
    fn instance_type(
        &self,
        at: &[Seg],
        lt: &str,
        instance_type: &str,
        count: usize,
        out: &mut Vec<Finding>,
    ) {
        if let Some((message, help)) = types::type_problem(instance_type, false) {
            out.push(self.error(
                at,
                format!("{message}, but launch template `{lt}` attaches EFA interfaces"),
                help,
            ));
        } else if let Some(max) = types::interfaces(instance_type)
            && count > max as usize
        {
            out.push(self.error(
                at,
                format!("launch template `{lt}` attaches {count} EFA interfaces, but `{instance_type}` takes at most {max}"),
                format!("attach {max} (one per network card, NetworkCardIndex 0 to {}), or choose a type with more", max - 1),
            ));
        }
    }

    /// The subnets of compute resources `cr` that this template declares
    /// sit in one Availability Zone.
    fn one_zone(&self, name: &str, cr: &Value, out: &mut Vec<Finding>) {
        let mut subnets = Vec::new();
        if let Some(s) = cr.get("Subnets") {
            referenced(s, &mut subnets);
        }
        let mut zones: Vec<(String, String)> = Vec::new();
        for s in &subnets {
            let Some(az) = self
                .resource(s, "AWS::EC2::Subnet")
                .and_then(|r| r.pointer("/Properties/AvailabilityZone"))
                .and_then(zone)
            else {
                continue;
            };
            if !zones.iter().any(|(_, z)| *z == az) {
                zones.push((s.clone(), az));
            }
        }
        if zones.len() > 1 {
            let listed: Vec<String> = zones.iter().map(|(s, z)| format!("`{s}` in {z}")).collect();
            out.push(self.error(
                &under(name, &["ComputeResources", "Subnets"]),
                format!(
                    "EFA compute environment `{name}` spans {} Availability Zones ({}); EFA traffic does not cross zones",
                    zones.len(),
                    listed.join(", ")
                ),
                format!("list subnets of one zone only, e.g. Subnets: [!Ref {}]", zones[0].0),
            ));
        }
    }

    /// Each security group in `names` that this template declares lets all
    /// traffic in from and out to itself.
    fn groups(&self, user: &str, names: &[String], out: &mut Vec<Finding>) {
        let mut seen = Vec::new();
        for g in names {
            if seen.contains(g) || self.resource(g, "AWS::EC2::SecurityGroup").is_none() {
                continue;
            }
            seen.push(g.clone());
            let rules = self.self_rules(g);
            for (has, dir, ty, peer) in [
                (
                    rules.ingress,
                    "in from",
                    "AWS::EC2::SecurityGroupIngress",
                    "SourceSecurityGroupId",
                ),
                (
                    rules.egress_ok(),
                    "out to",
                    "AWS::EC2::SecurityGroupEgress",
                    "DestinationSecurityGroupId",
                ),
            ] {
                if !has {
                    out.push(self.missing_rule(g, user, dir, ty, peer));
                }
            }
        }
    }

    /// A group with one self rule but not the other: an EFA group half
    /// made (a group that only lets all traffic out to the world is not one).
    fn half_made_group(&self, g: &str, out: &mut Vec<Finding>) {
        let rules = self.self_rules(g);
        if rules.ingress && !rules.egress_ok() {
            out.push(self.missing_rule(
                g,
                g,
                "out to",
                "AWS::EC2::SecurityGroupEgress",
                "DestinationSecurityGroupId",
            ));
        } else if rules.egress_to_self && !rules.ingress {
            out.push(self.missing_rule(
                g,
                g,
                "in from",
                "AWS::EC2::SecurityGroupIngress",
                "SourceSecurityGroupId",
            ));
        }
    }

    /// The error for group `g` (used by `user`) lacking a self rule.
    fn missing_rule(&self, g: &str, user: &str, dir: &str, ty: &str, peer: &str) -> Finding {
        let why = if user == g {
            let other = if dir == "out to" { "in from" } else { "out to" };
            format!("it lets all traffic {other} itself, so it is an EFA group")
        } else {
            format!("`{user}` puts EFA interfaces in it")
        };
        self.error(
            &[Seg::Key("Resources".into()), Seg::Key(g.into())],
            format!("security group `{g}` does not allow all traffic {dir} itself, which EFA needs ({why})"),
            format!("add a resource: Type: {ty}, Properties: {{GroupId: !Ref {g}, IpProtocol: '-1', {peer}: !Ref {g}}}"),
        )
    }

    /// The all-traffic rules of group `g` that EFA cares about.
    fn self_rules(&self, g: &str) -> Rules {
        let rule = |ty: &str, peer: &str| {
            self.resources.values().any(|r| {
                kind(r) == ty
                    && r.get("Properties").is_some_and(|p| {
                        refers_to(p.get("GroupId"), g)
                            && refers_to(p.get(peer), g)
                            && all_traffic(p.get("IpProtocol"))
                    })
            })
        };
        let inline_egress = |to: &dyn Fn(&Value) -> bool| {
            self.resources
                .get(g)
                .and_then(|r| r.pointer("/Properties/SecurityGroupEgress"))
                .and_then(Value::as_array)
                .is_some_and(|rules| {
                    rules
                        .iter()
                        .any(|r| all_traffic(r.get("IpProtocol")) && to(r))
                })
        };
        Rules {
            ingress: rule("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
            egress_to_self: rule(
                "AWS::EC2::SecurityGroupEgress",
                "DestinationSecurityGroupId",
            ) || inline_egress(&|r| {
                refers_to(r.get("DestinationSecurityGroupId"), g)
            }),
            egress_to_all: inline_egress(&|r| {
                r.get("CidrIp").and_then(Value::as_str) == Some("0.0.0.0/0")
            }),
        }
    }
}

/// A security group's all-traffic rules, as EFA needs them.
struct Rules {
    /// In from the group itself.
    ingress: bool,
    /// Out to the group itself.
    egress_to_self: bool,
    /// Out to everywhere (`0.0.0.0/0`), which lets it out to itself too.
    egress_to_all: bool,
}

impl Rules {
    /// Whether traffic may leave for the group itself.
    fn egress_ok(&self) -> bool {
        self.egress_to_self || self.egress_to_all
    }
}

/// A subnet's zone as far as it can be told offline: a literal name, or
/// the Nth zone of the region (`!Select [N, !GetAZs '']`); `None` for a
/// parameter or anything else known only at deploy.
fn zone(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(format!("`{s}`")),
        Value::Object(m) => {
            let sel = m.get("Fn::Select")?.as_array()?;
            let n = match sel.first()? {
                Value::Number(n) => n.as_u64()?,
                Value::String(s) => s.parse().ok()?,
                _ => return None,
            };
            sel.get(1)?.get("Fn::GetAZs")?;
            Some(format!("the region's zone #{n}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
