//! The kind's offline behaviour: wait rules, outputs, what validate
//! knows of them.

use super::*;

fn rec(api: &str, kind: &str, name: &str) -> Record {
    Record {
        api_version: api.into(),
        kind: kind.into(),
        namespace: None,
        name: name.into(),
        uid: String::new(),
        digest: String::new(),
    }
}

#[test]
fn wait_rules_by_kind_name_or_every_custom_resource() {
    let all = WaitRules::from_value(Some(&json!("condition=Succeeded"))).unwrap();
    assert!(
        all.for_record(&rec("kubeflow.org/v1", "PyTorchJob", "fsdp"))
            .is_some()
    );
    assert!(
        all.for_record(&rec("apps/v1", "Deployment", "web"))
            .is_none()
    );
    assert!(all.for_record(&rec("v1", "ConfigMap", "c")).is_none());
    let by = WaitRules::from_value(Some(
        &json!({"Widget/a": "jsonpath={.status.phase}=Ready", "Gadget": "condition=Ready"}),
    ))
    .unwrap();
    assert!(by.for_record(&rec("x.io/v1", "Widget", "a")).is_some());
    assert!(by.for_record(&rec("x.io/v1", "Widget", "b")).is_none());
    assert!(by.for_record(&rec("x.io/v1", "Gadget", "z")).is_some());
    assert!(WaitRules::from_value(Some(&json!(3))).is_err());
    assert!(
        WaitRules::from_value(Some(&json!({"X": "nope"})))
            .unwrap_err()
            .contains("wait_for.X")
    );
}

#[test]
fn outputs_list_the_objects_private_keeps_digests() {
    let mut r = rec("v1", "ConfigMap", "c");
    r.digest = "abc".into();
    let a = applied(std::slice::from_ref(&r));
    assert_eq!(a.outputs["count"], 1);
    assert!(a.outputs["objects"][0].get("digest").is_none());
    assert_eq!(recorded(&a.private), vec![r]);
}

/// The keys validate expects are those `applied` puts in.
#[test]
fn declared_outputs_are_the_outputs_a_manifest_step_has() {
    let ctx = ValidateContext {
        workdir: ".".into(),
    };
    let declared = KubeManifest::new().declared_outputs(&[], &ctx).unwrap();
    let a = applied(&[rec("v1", "ConfigMap", "c")]);
    let keys: std::collections::BTreeSet<&String> = a.outputs.keys().collect();
    assert_eq!(keys, declared.keys.iter().collect());
}
