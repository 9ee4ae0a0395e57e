//! kube.manifest: apply in order, change one object, prune, drift, wait
//! for readiness by kind, fetch from URLs, check inputs offline.

use std::time::Duration;

use crate::support::kube::KubeServer;
use crate::support::{Project, finish, wait_until};
use crate::{fixture, log};

/// A CRD and a custom resource (in a namespace of the same manifests):
/// applied in order, waited for, then destroyed custom resource first,
/// namespace last.
#[test]
fn crd_and_custom_resource_then_destroy_removes_the_resource_first() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "widget-crd.yaml");
    fixture(&p, "widget.yaml");
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "crd"

[steps.widgets]
provider = "kube.manifest"
[steps.widgets.inputs]
kubeconfig = "{}"
files = ["widget.yaml", "widget-crd.yaml"]
values = {{ SIZE = "3" }}
wait_for = {{ Widget = "jsonpath={{.spec.size}}=3" }}
"#,
            k.kubeconfig_path()
        ),
    );
    p.run(&["validate", "wf.toml"]).expect(0);
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("1 created"), "{}", apply.all());
    let crd = k
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
        .expect("crd");
    assert_eq!(crd["metadata"]["managedFields"][0]["manager"], "flow");
    let w = k
        .get("/apis/example.com/v1/namespaces/ml/widgets/w1")
        .expect("widget");
    assert_eq!(w["spec"]["size"], 3);
    let out = p
        .run(&["output", "wf.toml", "widgets.objects", "--json"])
        .expect(0);
    assert!(
        out.stdout.contains(w["metadata"]["uid"].as_str().unwrap()),
        "{}",
        out.stdout
    );

    let d = p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(d.stdout.contains("1 deleted"), "{}", d.all());
    let lines: Vec<String> = log(&p, "widgets")
        .lines()
        .filter(|l| l.contains("deleting "))
        .map(String::from)
        .collect();
    let pos = |what: &str| {
        lines
            .iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what} not in {lines:#?}"))
    };
    assert!(
        pos("Widget ml/w1") < pos("CustomResourceDefinition widgets.example.com"),
        "{lines:#?}"
    );
    assert!(
        pos("CustomResourceDefinition") < pos("Namespace ml"),
        "{lines:#?}"
    );
    assert!(
        k.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
            .is_none()
    );
    assert!(k.get("/api/v1/namespaces/ml").is_none());
}

pub(crate) const WEB: &str = r#"
[workflow]
name = "web"

[vars.replicas]
default = 1

[steps.web]
provider = "kube.manifest"
[steps.web.inputs]
kubeconfig = "KUBECONFIG"
files = ["web.yaml"]
values = { REPLICAS = "${vars.replicas}" }
"#;

/// A Deployment and a Service; changing the replicas re-applies only the
/// Deployment (the Service is not written again) and waits for it.
#[test]
fn one_changed_field_reapplies_only_its_object() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "web.yaml");
    p.write("wf.toml", &WEB.replace("KUBECONFIG", &k.kubeconfig_path()));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let svc = "/api/v1/namespaces/default/services/web";
    let dep = "/apis/apps/v1/namespaces/default/deployments/web";
    let svc_version = k.get(svc).unwrap()["metadata"]["resourceVersion"].clone();
    let dep_uid = k.uid(dep).unwrap();
    assert_eq!(k.get(dep).unwrap()["spec"]["replicas"], 1);

    let plan = p
        .run(&[
            "plan",
            "wf.toml",
            "--var",
            "replicas=3",
            "--detailed-exitcode",
        ])
        .expect(2);
    assert!(plan.stdout.contains("~ web"), "{}", plan.stdout);
    p.run(&["apply", "wf.toml", "--var", "replicas=3", "--auto-approve"])
        .expect(0);
    let after = k.get(dep).unwrap();
    assert_eq!(after["spec"]["replicas"], 3);
    assert_eq!(
        after["status"]["availableReplicas"], 3,
        "the apply waited for the rollout"
    );
    assert_eq!(k.uid(dep).unwrap(), dep_uid, "updated in place");
    assert_eq!(
        k.get(svc).unwrap()["metadata"]["resourceVersion"],
        svc_version,
        "the Service was written again"
    );
    let l = log(&p, "web");
    assert!(l.contains("unchanged Service default/web"), "{l}");
    assert!(l.contains("configured Deployment default/web"), "{l}");
    p.run(&[
        "plan",
        "wf.toml",
        "--var",
        "replicas=3",
        "--detailed-exitcode",
    ])
    .expect(0);
}

/// A Deployment scaled and re-imaged by hand, and a Service deleted by hand:
/// the plan reads them and shows the fields flow owns that changed, and the
/// object that is gone; apply puts both back as the workflow says.
#[test]
fn objects_changed_by_hand_are_drift_and_apply_restores_them() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "web.yaml");
    p.write("wf.toml", &WEB.replace("KUBECONFIG", &k.kubeconfig_path()));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    let svc = "/api/v1/namespaces/default/services/web";
    let dep = "/apis/apps/v1/namespaces/default/deployments/web";
    k.merge_patch(dep, &serde_json::json!({"spec": {"replicas": 4}}));
    k.delete(svc);

    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    let out = &plan.stdout;
    assert!(out.contains("Changed outside flow:\n  ~ web"), "{out}");
    assert!(
        out.contains("Deployment default/web .spec.replicas : 1 → 4"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("Service default/web") && l.ends_with(": \"present\" → (none)")),
        "{out}"
    );
    assert!(out.contains("update — changed outside flow"), "{out}");

    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(k.get(dep).unwrap()["spec"]["replicas"], 1);
    assert!(k.get(svc).is_some(), "the Service is back");
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// An object dropped from an inline manifest is deleted on the next apply;
/// the others are left alone.
#[test]
fn dropped_object_is_pruned() {
    let k = KubeServer::start();
    let p = Project::new();
    let wf = |docs: &str| {
        format!(
            "[workflow]\nname = \"prune\"\n\n[steps.config]\nprovider = \"kube.manifest\"\n[steps.config.inputs]\nkubeconfig = \"{}\"\nnamespace = \"default\"\nmanifest = \"\"\"\n{docs}\"\"\"\n",
            k.kubeconfig_path()
        )
    };
    let a = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: \"1\"}\n";
    let b = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {y: \"2\"}\n";
    p.write("wf.toml", &wf(&format!("{a}---\n{b}")));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let a_uid = k.uid("/api/v1/namespaces/default/configmaps/a").expect("a");
    assert!(k.get("/api/v1/namespaces/default/configmaps/b").is_some());

    p.write("wf.toml", &wf(a));
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("1 updated"), "{}", apply.all());
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/b").is_none(),
        "b was not pruned"
    );
    assert_eq!(
        k.uid("/api/v1/namespaces/default/configmaps/a").unwrap(),
        a_uid
    );
    assert!(log(&p, "config").contains("pruning ConfigMap default/b"));
    let out = p.run(&["output", "wf.toml", "config.count"]).expect(0);
    assert_eq!(out.stdout.trim(), "1");
}

/// Readiness by kind: flow waits for a DaemonSet, a StatefulSet, a claim
/// bound to a static FSx volume, a Job, and (with `wait_for`) a custom
/// resource's condition; each wait ends only when the driver lets it.
#[test]
fn waits_for_readiness_by_kind() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "cluster-addons.yaml");
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "addons"

[steps.addons]
provider = "kube.manifest"
[steps.addons.inputs]
kubeconfig = "{kc}"
files = ["cluster-addons.yaml"]
values = {{ FSX_ID = "fs-0123456789abcdef0" }}

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

[steps.fsdp]
provider = "kube.manifest"
depends_on = ["operator"]
[steps.fsdp.inputs]
kubeconfig = "{kc}"
files = ["nccl-test.yaml"]
values = {{ NAME = "fsdp", OUTCOME = "Succeeded" }}
wait_for = "condition=Succeeded"
"#,
            kc = k.kubeconfig_path()
        ),
    );
    let held = [
        (
            "addons",
            "nvidia-device-plugin",
            "DaemonSet kube-system/nvidia-device-plugin",
        ),
        ("addons", "etcd", "StatefulSet default/etcd"),
        ("addons", "fsx-pvc", "PersistentVolumeClaim default/fsx-pvc"),
        ("addons", "nvidia-smi", "Job default/nvidia-smi"),
        ("fsdp", "fsdp", "PyTorchJob default/fsdp"),
    ];
    for (_, name, _) in held {
        k.driver().hold(name);
    }
    let mut child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    for (step, name, what) in held {
        wait_until(
            Duration::from_secs(60),
            &format!("flow to wait for {what}"),
            || log(&p, step).contains(&format!("waiting for {what}")),
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "apply ended before {what} was ready"
        );
        k.driver().release(name);
    }
    let run = finish(child).expect(0);
    assert!(run.stdout.contains("3 created"), "{}", run.all());
    let pv = k.get("/api/v1/persistentvolumes/fsx-pv").unwrap();
    assert_eq!(pv["spec"]["csi"]["volumeHandle"], "fs-0123456789abcdef0");
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        k.get("/api/v1/namespaces/default/persistentvolumeclaims/fsx-pvc")
            .is_none(),
        "the claim's deletion hung"
    );
    assert!(k.get("/api/v1/persistentvolumes/fsx-pv").is_none());
}

/// Offline checks of the four kinds, each pointing at its input, before
/// anything is contacted.
#[test]
fn bad_inputs_are_reported_before_anything_runs() {
    let p = Project::new();
    p.write(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {image: \"${vars.image}\"}\n",
    );
    p.write(
        "cluster.yaml",
        "kind: ClusterConfig\nmetadata: {name: x}\nvpc:\n  id: vpc-1\n",
    );
    p.write(
        "wf.toml",
        r#"
[steps.m]
provider = "kube.manifest"
[steps.m.inputs]
files = ["bad.yaml", "missing.yaml"]
wait_for = "ready"

[steps.j]
provider = "kube.job"
[steps.j.inputs]
manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
capture = { busbw = "([0-9" }

[steps.ng]
provider = "eks.nodegroup"
[steps.ng.inputs]
cluster = "c"
name = "n"
instance_types = ["m5.large"]
efa = true
min_size = 3

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
eksctl_config = "cluster.yaml"
"#,
    );
    let v = p
        .run_env(&["validate", "wf.toml"], &[("COLUMNS", "400")])
        .expect(1);
    let out = v.all();
    for expected in [
        "bad.yaml:4: `${vars.image}` is not resolved inside files: add `image = \"${vars.image}\"`",
        "could not read `missing.yaml`",
        "`ready`: write condition=TYPE or jsonpath={PATH}=VALUE",
        "kube.job runs one Job, PyTorchJob or MPIJob; apply ConfigMap x with a kube.manifest",
        "not a valid regex",
        "flow does not know whether instance type `m5.large` has EFA, nor how many interfaces",
        "scaling must have min ≤ desired ≤ max",
        "cluster.yaml:4:3: the eksctl config sets `vpc.id` (vpc-1) but lists no subnets",
    ] {
        assert!(out.contains(expected), "{expected} missing from\n{out}");
    }
    assert!(!p.path().join(".flow").exists());
}

/// A published manifest's own placeholders (`<account>`, `<region>`,
/// `$NUM_NODES`) are filled by `substitute` before the apiserver sees the
/// object; the manifest's `$PATH` stays; a new value is a change that
/// reaches the server.
#[test]
fn substitute_fills_a_published_manifest_unmodified() {
    let k = KubeServer::start();
    let p = Project::new();
    p.write(
        "nccl-settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nccl-settings\n  namespace: default\ndata:\n  image: <account>.dkr.ecr.<region>.amazonaws.com/nccl-tests:latest\n  nodes: \"$NUM_NODES\"\n  path: /opt/amazon/efa/bin:$PATH\n",
    );
    let workflow = |nodes: &str| {
        format!(
            r#"
[workflow]
name = "substitute"

[steps.settings]
provider = "kube.manifest"
[steps.settings.inputs]
kubeconfig = "{}"
files = ["nccl-settings.yaml"]
substitute = {{ "<account>" = "111122223333", "<region>" = "us-west-2", NUM_NODES = "{nodes}" }}
"#,
            k.kubeconfig_path()
        )
    };
    p.write("wf.toml", &workflow("2"));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let cm = k
        .get("/api/v1/namespaces/default/configmaps/nccl-settings")
        .expect("configmap");
    assert_eq!(
        cm["data"]["image"],
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:latest"
    );
    assert_eq!(cm["data"]["nodes"], "2");
    assert_eq!(cm["data"]["path"], "/opt/amazon/efa/bin:$PATH");
    // Nothing to do while nothing changes; a new value is an update.
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.stdout);
    p.write("wf.toml", &workflow("4"));
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("update"), "{}", plan.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let cm = k
        .get("/api/v1/namespaces/default/configmaps/nccl-settings")
        .expect("configmap");
    assert_eq!(cm["data"]["nodes"], "4");
}
