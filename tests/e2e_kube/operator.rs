//! The training operator as published: the vendored kustomize overlay
//! (six CRDs with their full schemas, the webhook with `failurePolicy:
//! Fail`) applied unchanged, and a PyTorchJob with a misspelt field named
//! by the plan and refused at apply.

use crate::support::kube::KubeServer;
use crate::support::{Project, copy_dir, workspace_root};

const OPERATOR: &str = r#"
[workflow]
name = "wf"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "KUBECONFIG"
files = ["training-operator/overlays/standalone"]
# No kubelet runs in the tests: the Deployment never gets a pod.
wait = false
"#;

const JOB: &str = r#"
[steps.nccl]
provider = "kube.manifest"
depends_on = ["operator"]
[steps.nccl.inputs]
kubeconfig = "KUBECONFIG"
files = ["pytorchjob.yaml"]
wait = false
"#;

fn pytorchjob(template_key: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: nccl\n  namespace: default\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      restartPolicy: OnFailure\n      {template_key}:\n        spec:\n          containers:\n            - name: pytorch\n              image: nccl-tests:latest\n"
    )
}

#[test]
fn published_training_operator_applies_unchanged_and_a_misspelt_job_is_refused() {
    let k = KubeServer::start();
    let p = Project::new();
    copy_dir(
        &workspace_root().join("workflows/manifests/training-operator"),
        &p.path().join("training-operator"),
    );
    let kubeconfig = k.kubeconfig_path();
    let operator = OPERATOR.replace("KUBECONFIG", &kubeconfig);
    p.write("wf.toml", &operator);
    p.run(&["validate", "wf.toml"]).expect(0);
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    // Kubernetes 1.20 predates CEL rules: the CRDs go in without them, said.
    assert!(
        apply
            .all()
            .contains("rule(s) of CustomResourceDefinition pytorchjobs.kubeflow.org were left out"),
        "{}",
        apply.all()
    );

    // The CRDs the server keeps without their CEL rules are not drift.
    let again = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(again.stdout.contains("No changes"), "{}", again.all());

    // Unchanged: the full schemas, the real webhook, the pinned image.
    let crd = k
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org")
        .expect("the PyTorchJob CRD");
    let replica = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/pytorchReplicaSpecs/additionalProperties/properties";
    assert!(
        crd.pointer(&format!(
            "{replica}/template/properties/spec/properties/containers"
        ))
        .is_some(),
        "the pod template's full schema"
    );
    for plural in ["tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"] {
        assert!(
            k.get(&format!(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.kubeflow.org"
            ))
            .is_some(),
            "{plural}"
        );
    }
    let webhook = k
        .get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/validator.training-operator.kubeflow.org")
        .expect("the webhook");
    assert_eq!(webhook["webhooks"][2]["failurePolicy"], "Fail");
    assert_eq!(
        webhook["webhooks"][2]["clientConfig"]["service"]["namespace"],
        "kubeflow"
    );
    let deploy = k
        .get("/apis/apps/v1/namespaces/kubeflow/deployments/training-operator")
        .expect("the operator");
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "kubeflow/training-operator:v1-5170a36"
    );

    // A misspelt field: the plan names it (a dry run against the served
    // schema), the apply refuses it and sends nothing.
    p.write("pytorchjob.yaml", &pytorchjob("tmplate"));
    p.write(
        "wf.toml",
        &format!("{operator}{}", JOB.replace("KUBECONFIG", &kubeconfig)),
    );
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains(
            "unknown field `spec.pytorchReplicaSpecs.Worker.tmplate` (did you mean `template`?)"
        ),
        "{}",
        plan.all()
    );
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]);
    assert_ne!(apply.code, 0, "{}", apply.all());
    assert!(
        apply
            .all()
            .contains("`spec.pytorchReplicaSpecs.Worker.tmplate`"),
        "{}",
        apply.all()
    );
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/nccl")
            .is_none(),
        "nothing was sent"
    );

    // Spelt right, it passes the schema and reaches admission, where the
    // published webhook (failurePolicy: Fail, and no operator pod serving
    // it here) answers: the manifests went in as written.
    p.write("pytorchjob.yaml", &pytorchjob("template"));
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(!plan.stdout.contains("unknown field"), "{}", plan.stdout);
    assert!(
        plan.stdout
            .contains("validator.pytorchjob.training-operator.kubeflow.org"),
        "{}",
        plan.all()
    );

    let d = p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(d.stdout.contains("deleted"), "{}", d.all());
    assert!(
        k.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org")
            .is_none()
    );
}
