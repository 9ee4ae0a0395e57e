//! Unit tests of `kube.job`.

use super::*;

#[test]
fn job_states_from_conditions() {
    let c = |t: &str, s: &str| json!({"status": {"conditions": [{"type": "Created", "status": "True"}, {"type": t, "status": s, "reason": "R", "message": "M"}]}});
    assert_eq!(job_state(&c("Succeeded", "True")), JobState::Succeeded);
    assert_eq!(job_state(&c("Complete", "True")), JobState::Succeeded);
    assert_eq!(
        job_state(&c("Failed", "True")),
        JobState::Failed("R: M".into())
    );
    assert_eq!(
        job_state(&c("Running", "True")),
        JobState::Running("Running".into())
    );
    assert_eq!(job_state(&json!({})), JobState::Running("Pending".into()));
}

/// The keys validate expects are those `outputs` puts in.
#[test]
fn declared_outputs_are_the_outputs_a_job_has() {
    let ctx = ValidateContext {
        workdir: ".".into(),
    };
    let capture = json!({"loss": "loss=([0-9.]+)"});
    let inputs = [("capture".to_string(), InputValue::Known(capture))];
    let declared = KubeJob::new().declared_outputs(&inputs, &ctx).unwrap();
    let record = Record {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: None,
        name: "train".into(),
        uid: "u".into(),
        digest: String::new(),
    };
    let captured: Values = [("loss".to_string(), json!(1.5))].into_iter().collect();
    let out = outputs(&record, &[Pod::default()], captured);
    let keys: std::collections::BTreeSet<&String> = out.keys().collect();
    assert_eq!(keys, declared.keys.iter().collect());
}

#[test]
fn one_job_per_step_and_its_pods() {
    let d = |api: &str, kind: &str| Doc {
        source: "j#1".into(),
        object: json!({"apiVersion": api, "kind": kind, "metadata": {"name": "n"}}),
    };
    assert!(single_job(&[d("kubeflow.org/v1", "PyTorchJob")]).is_ok());
    assert!(
        single_job(&[d("v1", "Service"), d("batch/v1", "Job")])
            .unwrap_err()
            .contains("kube.manifest")
    );
    assert!(single_job(&[]).is_err());
    let rec = |api: &str, kind: &str| Record {
        api_version: api.into(),
        kind: kind.into(),
        namespace: None,
        name: "fsdp".into(),
        uid: String::new(),
        digest: String::new(),
    };
    assert_eq!(pod_selector(&rec("batch/v1", "Job")), "job-name=fsdp");
    assert_eq!(
        pod_selector(&rec("kubeflow.org/v1", "PyTorchJob")),
        "training.kubeflow.org/job-name=fsdp"
    );
}
