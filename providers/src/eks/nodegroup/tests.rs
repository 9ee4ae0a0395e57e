//! The provider kind's offline behaviour: checks, diff, templates, costs.

use super::spec::{DEFAULT_DESIRED_SIZE, effect};
use super::*;
use crate::testing::values;
use aws_sdk_eks::types::TaintEffect;

fn spec(extra: Value) -> NodegroupSpec {
    let mut v = values(
        json!({"cluster": "dlc", "name": "gpu", "instance_types": ["p5.48xlarge"], "desired_size": 2}),
    );
    v.extend(values(extra));
    NodegroupSpec::from_values(&v).unwrap()
}

fn problems_of(inputs: Value) -> Vec<Problem> {
    let provider = EksNodegroup::new();
    let inputs: Vec<(std::string::String, InputValue)> = values(inputs)
        .into_iter()
        .map(|(k, v)| (k, InputValue::Known(v)))
        .collect();
    let ctx = ValidateContext {
        workdir: ".".into(),
    };
    provider.validate(&inputs, &ctx)
}

#[test]
fn each_problem_points_at_the_input_that_is_wrong() {
    let base = json!({"cluster": "c", "name": "g", "instance_types": ["p5.48xlarge"]});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let at = |p: &[Problem]| p.iter().map(|p| p.path.join(".")).collect::<Vec<_>>();
    assert_eq!(
        at(&problems_of(with("desired_size", json!("two")))),
        ["desired_size"]
    );
    assert_eq!(at(&problems_of(with("efa", json!("yes")))), ["efa"]);
    assert_eq!(at(&problems_of(with("labels", json!(["a"])))), ["labels"]);
    assert_eq!(
        at(&problems_of(with("taints", json!([{"value": "x"}])))),
        ["taints"]
    );
    assert_eq!(
        at(&problems_of(with("subnet_ids", json!("subnet-1")))),
        ["subnet_ids"]
    );
    assert!(problems_of(base.clone()).is_empty());
    // A cluster name known only after apply does not hide the checks.
    let mut unknown_cluster = base.clone();
    unknown_cluster.as_object_mut().unwrap().remove("cluster");
    unknown_cluster["max_size"] = json!(0);
    assert_eq!(at(&problems_of(unknown_cluster)), ["desired_size"]);
}

#[test]
fn capacity_uses_the_same_default_as_the_spec() {
    let provider = EksNodegroup::new();
    let caps = provider.capacity(
        &values(json!({"instance_types": ["p4d.24xlarge"]})),
        &crate::contract::ValidateContext {
            workdir: ".".into(),
        },
    );
    assert_eq!(
        caps,
        vec![crate::contract::Capacity::Instances {
            instance_type: "p4d.24xlarge".into(),
            count: DEFAULT_DESIRED_SIZE as u32
        }]
    );
    assert!(
        provider
            .capacity(
                &values(json!({"cluster": "c"})),
                &crate::contract::ValidateContext {
                    workdir: ".".into()
                },
            )
            .is_empty()
    );
}

#[test]
fn efa_template_has_one_interface_per_card_and_the_reservation() {
    let s = spec(
        json!({"efa": true, "capacity_reservation_id": "cr-1", "node_role_arn": "arn:role", "disk_size": 500}),
    );
    assert_eq!(s.efa_interfaces(), 32);
    let t = s.stack_template(Some("sg-cluster")).unwrap();
    let data = &t["Resources"]["LaunchTemplate"]["Properties"]["LaunchTemplateData"];
    assert_eq!(data["NetworkInterfaces"].as_array().unwrap().len(), 32);
    assert_eq!(data["NetworkInterfaces"][0]["Groups"][0], "sg-cluster");
    assert_eq!(
        data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"],
        "cr-1"
    );
    assert_eq!(data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"], 500);
    assert!(t["Resources"].get("Role").is_none());
    assert!(
        s.describe().contains("EFA: 32 interfaces per node"),
        "{}",
        s.describe()
    );
    let none =
        spec(json!({"efa": true, "capacity_reservation_id": "", "node_role_arn": "arn:role"}));
    let t = none.stack_template(None).unwrap();
    let data = &t["Resources"]["LaunchTemplate"]["Properties"]["LaunchTemplateData"];
    assert!(
        data.get("CapacityReservationSpecification").is_none(),
        "an empty id is no reservation: {data}"
    );
}

#[test]
fn an_empty_placement_group_is_no_change_from_none() {
    let p = EksNodegroup::new();
    let before = values(json!({"cluster": "c", "name": "g", "instance_types": ["p5.48xlarge"]}));
    let mut after = before.clone();
    after.insert("placement_group".into(), json!(""));
    assert_eq!(p.diff(&before, &after), crate::contract::Change::NoOp);
    after.insert("placement_group".into(), json!("pg"));
    assert_eq!(
        p.diff(&before, &after),
        crate::contract::Change::Replace(vec!["placement_group".into()])
    );
}

#[test]
fn an_efa_group_without_a_placement_group_is_warned_in_the_plan() {
    let ctx = crate::contract::ValidateContext {
        workdir: ".".into(),
    };
    let bare = values(json!({"instance_types": ["p5.48xlarge"], "efa": true}));
    let lines = EksNodegroup::new().plan_lines(&bare, &ctx);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("warning: EFA node group `?` has no placement group"));
    let placed =
        spec(json!({"efa": true, "placement_group": "pg-train", "node_role_arn": "arn:role"}));
    assert!(placed.efa_warnings().is_empty());
    let t = placed.stack_template(None).unwrap();
    assert_eq!(
        t["Resources"]["LaunchTemplate"]["Properties"]["LaunchTemplateData"]["Placement"]["GroupName"],
        "pg-train"
    );
    let no_efa = values(json!({"instance_types": ["c5.2xlarge"]}));
    assert!(EksNodegroup::new().plan_lines(&no_efa, &ctx).is_empty());
}

#[test]
fn role_only_stack_without_efa_and_none_with_a_role() {
    let s = spec(json!({}));
    let t = s.stack_template(None).unwrap();
    assert!(t["Resources"].get("Role").is_some());
    assert!(t["Resources"].get("LaunchTemplate").is_none());
    assert!(
        spec(json!({"node_role_arn": "arn:r"}))
            .stack_template(None)
            .is_none()
    );
}

#[test]
fn problems_are_found_offline() {
    let s = spec(
        json!({"instance_types": ["m5.large"], "efa": true, "min_size": 3,
                        "taints": [{"key": "k", "effect": "Sometimes"}]}),
    );
    let p = s.problems();
    assert!(p.iter().any(|p| p.path == ["desired_size"]), "{p:?}");
    assert!(
        p.iter()
            .any(|p| p.path == ["instance_types", "0"] && p.message.contains("m5.large")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|p| p.path == ["taints", "0", "effect"]),
        "{p:?}"
    );
    assert_eq!(effect("NoSchedule"), Some(TaintEffect::NoSchedule));
    assert_eq!(effect("NO_EXECUTE"), Some(TaintEffect::NoExecute));
}

#[test]
fn scaling_updates_in_place_the_rest_replaces() {
    use crate::contract::Change;
    let p = EksNodegroup::new();
    let a = values(
        json!({"cluster": "c", "name": "n", "instance_types": ["p4d.24xlarge"], "desired_size": 1}),
    );
    let mut b = a.clone();
    b.insert("desired_size".into(), json!(4));
    assert_eq!(p.diff(&a, &b), Change::Update(vec!["desired_size".into()]));
    b.insert("instance_types".into(), json!(["p5.48xlarge"]));
    assert_eq!(
        p.diff(&a, &b),
        Change::Replace(vec!["instance_types".into()])
    );
}

/// The keys `declared_outputs` gives are those `lifecycle::outputs` puts
/// in: every one for a group with a launch template, the fixed ones for a
/// bare answer.
#[test]
fn declared_outputs_are_the_outputs_a_group_has() {
    use aws_sdk_eks::types::{LaunchTemplateSpecification, Nodegroup};
    let keys = |v: &Values| v.keys().cloned().collect::<std::collections::BTreeSet<_>>();
    let declared = EksNodegroup::new()
        .declared_outputs(
            &[],
            &ValidateContext {
                workdir: ".".into(),
            },
        )
        .unwrap();
    let full = Nodegroup::builder()
        .launch_template(LaunchTemplateSpecification::builder().id("lt-1").build())
        .build();
    let all = lifecycle::outputs(&full, &spec(json!({})));
    assert_eq!(keys(&all), declared.keys.iter().cloned().collect());
    let bare = lifecycle::outputs(&Nodegroup::builder().build(), &spec(json!({})));
    let always: std::collections::BTreeSet<String> = declared
        .keys
        .iter()
        .filter(|k| !declared.conditional.contains(k))
        .cloned()
        .collect();
    assert_eq!(keys(&bare), always);
}
