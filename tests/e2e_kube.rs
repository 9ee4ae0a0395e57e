//! End-to-end: the `flow` binary's Kubernetes and EKS providers against a
//! real kube-apiserver (tests/support/kube.rs) and the moto server.
//!
//! `FLOW_SKIP_KUBE=1` skips the API-server tests on machines that cannot
//! build it (each prints why); CI builds it with `scripts/kube-apiserver`.

mod support;

use std::time::Duration;

use support::kube::KubeServer;
use support::moto::Moto;
use support::{Project, finish, wait_until};

/// Copies tests/fixtures/kube/NAME into the project.
fn fixture(p: &Project, name: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kube")
        .join(name);
    p.write(name, &std::fs::read_to_string(&path).expect("fixture"));
}

/// A step's log.
fn log(p: &Project, step: &str) -> String {
    p.read(&format!(".flow/wf/logs/{step}.log"))
}

/// A CRD and a custom resource (in a namespace of the same manifests):
/// applied in order, waited for, then destroyed custom resource first,
/// namespace last.
#[test]
fn crd_and_custom_resource_then_destroy_removes_the_resource_first() {
    let Some(k) = KubeServer::start() else { return };
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

const WEB: &str = r#"
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
    let Some(k) = KubeServer::start() else { return };
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
    let Some(k) = KubeServer::start() else { return };
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
    let Some(k) = KubeServer::start() else { return };
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

/// The operator's CRD through kube.manifest, an NCCL test as a PyTorchJob
/// through kube.job: followed to Succeeded, its logs in the step log, the
/// bus bandwidth captured as an output that a later step uses.
fn nccl_workflow(k: &KubeServer, name: &str, outcome: &str) -> String {
    format!(
        r#"
[workflow]
name = "nccl"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

[steps.nccl]
provider = "kube.job"
depends_on = ["operator"]
[steps.nccl.inputs]
kubeconfig = "{kc}"
files = ["nccl-test.yaml"]
values = {{ NAME = "{name}", OUTCOME = "{outcome}" }}
success_pattern = "Out of bounds values : 0 OK"
capture = {{ busbw = "Avg bus bandwidth\\s*:\\s*([0-9.]+)" }}

[steps.report]
provider = "exec"
[steps.report.inputs]
run = "echo busbw=$BUSBW >> $FLOW_OUTPUT"
env = {{ BUSBW = "${{steps.nccl.outputs.busbw}}" }}
"#,
        kc = k.kubeconfig_path()
    )
}

#[test]
fn pytorchjob_succeeds_and_its_bandwidth_is_an_output() {
    let Some(k) = KubeServer::start() else { return };
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("wf.toml", &nccl_workflow(&k, "nccl", "Succeeded"));
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    let out = p.run(&["output", "wf.toml", "nccl.busbw"]).expect(0);
    assert_eq!(out.stdout.trim(), "186.437");
    assert_eq!(
        p.run(&["output", "wf.toml", "report.busbw"])
            .expect(0)
            .stdout
            .trim(),
        "186.437"
    );
    let l = log(&p, "nccl");
    assert!(
        l.contains("[nccl-master-0] # Avg bus bandwidth    : 186.437"),
        "{l}"
    );
    assert!(l.contains("[nccl-worker-1] nccl-worker-1 done"), "{l}");
    assert!(l.contains("pod nccl-master-0: Succeeded"), "{l}");
    let job = k
        .get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/nccl")
        .expect("job");
    assert_eq!(job["metadata"]["annotations"]["flow.dev/step"], "nccl");

    // Destroy deletes the job and its pods.
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/nccl")
            .is_none()
    );
    assert!(
        k.get("/api/v1/namespaces/default/pods/nccl-worker-0")
            .is_none()
    );
}

#[test]
fn pytorchjob_failure_names_the_failing_pod() {
    let Some(k) = KubeServer::start() else { return };
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("wf.toml", &nccl_workflow(&k, "broken", "Failed"));
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let all = apply.all();
    assert!(
        all.contains("PyTorchJob default/broken failed: PyTorchJobFailed"),
        "{all}"
    );
    assert!(
        all.contains("pod broken-worker-1: container pytorch exited with code 1 (Error)"),
        "{all}"
    );
    assert!(
        all.contains("Avg bus bandwidth"),
        "the failing pod's last lines are shown: {all}"
    );
    // The next apply runs the job again (a new one, the failed one deleted).
    let uid = k
        .uid("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/broken")
        .unwrap();
    // The failure kept the intent: the next apply reads the job by its
    // token first, finds it ended in failure, and only then starts anew.
    let show = p.run(&["state", "show", "wf.toml", "nccl"]).expect(0);
    assert!(show.stdout.contains("\"in_flight\": {"), "{}", show.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(
        log(&p, "nccl").contains("the interrupted create had failed"),
        "{}",
        log(&p, "nccl")
    );
    assert_ne!(
        k.uid("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/broken")
            .unwrap(),
        uid
    );
}

/// `kill -9` while flow waits for a Deployment and a PyTorchJob; the next
/// apply adopts both (same uids) and finishes the wait.
#[test]
fn kill_during_waits_then_resume_recreates_nothing() {
    let Some(k) = KubeServer::start() else { return };
    let p = Project::new();
    fixture(&p, "web.yaml");
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    let wf = format!(
        "{}\n{}",
        WEB.replace("KUBECONFIG", &k.kubeconfig_path()),
        nccl_workflow(&k, "held", "Succeeded").replace("[workflow]\nname = \"nccl\"\n", "")
    );
    p.write("wf.toml", &wf);
    k.driver().hold("web");
    k.driver().hold("held");
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let dep = "/apis/apps/v1/namespaces/default/deployments/web";
    let job = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/held";
    wait_until(
        Duration::from_secs(60),
        "the deployment and the job to exist",
        || {
            k.get(dep).is_some()
                && k.get("/api/v1/namespaces/default/pods/held-worker-1")
                    .is_some()
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    support::signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "{}", killed.all());
    let (dep_uid, job_uid) = (k.uid(dep).unwrap(), k.uid(job).unwrap());

    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("token"),
        "the plan names the interrupted operations: {}",
        plan.stdout
    );
    k.driver().release("web");
    k.driver().release("held");
    let resumed = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(resumed.all().contains("reconcil"), "{}", resumed.all());
    assert_eq!(
        k.uid(dep).unwrap(),
        dep_uid,
        "the Deployment was made again"
    );
    assert_eq!(
        k.uid(job).unwrap(),
        job_uid,
        "the PyTorchJob was started again"
    );
    assert_eq!(
        p.run(&["output", "wf.toml", "nccl.busbw"])
            .expect(0)
            .stdout
            .trim(),
        "186.437"
    );
    assert!(log(&p, "nccl").contains("from the interrupted run exists: following it"));
}

/// An eksctl ClusterConfig becomes a cluster plus its managed node groups
/// on moto; plan shows what eksctl would have done; a separate
/// eks.nodegroup gets a p5 EFA launch template with 32 interfaces; destroy
/// removes node groups before the cluster.
#[test]
fn eksctl_config_becomes_a_cluster_with_node_groups() {
    let moto = Moto::start();
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let p = Project::new();
    fixture(&p, "cluster.yaml");
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "eks"
region = "us-east-1"

[steps.cluster]
provider = "eks.cluster"
[steps.cluster.inputs]
eksctl_config = "cluster.yaml"

[steps.p5]
provider = "eks.nodegroup"
[steps.p5.inputs]
cluster = "${steps.cluster.outputs.name}"
name = "p5"
instance_types = ["p5.48xlarge"]
subnet_ids = ["subnet-0b"]
desired_size = 1
max_size = 2
efa = true
node_role_arn = "arn:aws:iam::123456789012:role/nodes"
"#,
    );
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    for line in [
        "+ stack flow-eks-dlc-p4d-role (cluster IAM service role)",
        "+ cluster dlc-p4d (Kubernetes 1.33, subnets subnet-0a,subnet-0b, public and private endpoint)",
        "+ stack flow-eks-dlc-p4d-oidc (IAM OIDC provider",
        "+ managed node group p4d: p4d.24xlarge × 2..4 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123456789abcdef0",
        "`addons` is not acted on",
    ] {
        assert!(
            plan.stdout.contains(line),
            "{line} missing from\n{}",
            plan.stdout
        );
    }
    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(apply.stdout.contains("2 created"), "{}", apply.all());
    let (status, body) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups", "");
    assert_eq!(status, 200, "{body}");
    for ng in ["sys", "p4d", "p5"] {
        assert!(body.contains(&format!("\"{ng}\"")), "{ng} missing: {body}");
    }
    let (_, p4d) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p4d", "");
    let p4d: serde_json::Value = serde_json::from_str(&p4d).unwrap();
    assert_eq!(p4d["nodegroup"]["scalingConfig"]["desiredSize"], 2);
    assert_eq!(
        p4d["nodegroup"]["subnets"],
        serde_json::json!(["subnet-0b"])
    );
    let lt = p4d["nodegroup"]["launchTemplate"]["id"]
        .as_str()
        .expect("launch template")
        .to_string();
    let xml = moto.query_call(
        "ec2",
        &format!("Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateId={lt}"),
    );
    assert_eq!(
        xml.matches("<interfaceType>efa</interfaceType>").count(),
        4,
        "{xml}"
    );
    assert!(xml.contains("cr-0123456789abcdef0"), "{xml}");
    let p5_lt = p
        .run_env(&["output", "wf.toml", "p5.launch_template_id"], &env)
        .expect(0)
        .stdout
        .trim()
        .to_string();
    let xml = moto.query_call(
        "ec2",
        &format!(
            "Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateId={p5_lt}"
        ),
    );
    assert_eq!(
        xml.matches("<interfaceType>efa</interfaceType>").count(),
        32
    );
    assert_eq!(
        p.run_env(&["output", "wf.toml", "p5.efa_interfaces"], &env)
            .expect(0)
            .stdout
            .trim(),
        "32"
    );
    let conn = p
        .run_env(&["output", "wf.toml", "cluster.connection", "--json"], &env)
        .expect(0);
    assert!(conn.stdout.contains("\"endpoint\""), "{}", conn.stdout);
    assert!(
        moto.stacks().contains(&"flow-eks-dlc-p4d-role".to_string()),
        "{:?}",
        moto.stacks()
    );

    // Scaling the separate node group is an in-place update.
    let plan = p
        .run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.stdout);

    // A node group of the eksctl file scaled in the console is drift of the
    // cluster step; apply scales it back to the file.
    let (status, body) = moto.rest_call(
        "eks",
        "POST",
        "/clusters/dlc-p4d/node-groups/p4d/update-config",
        r#"{"scalingConfig": {"minSize": 2, "desiredSize": 3, "maxSize": 4}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let plan = p
        .run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(2);
    assert!(
        plan.stdout
            .contains("node group p4d scaling (min, desired, max) : [2,2,4] → [2,3,4]"),
        "{}",
        plan.stdout
    );
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let (_, p4d) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p4d", "");
    let p4d: serde_json::Value = serde_json::from_str(&p4d).unwrap();
    assert_eq!(p4d["nodegroup"]["scalingConfig"]["desiredSize"], 2);
    p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    let wf = p
        .read("wf.toml")
        .replace("desired_size = 1", "desired_size = 2");
    p.write("wf.toml", &wf);
    let up = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(up.stdout.contains("1 updated"), "{}", up.all());
    let (_, p5) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p5", "");
    assert!(
        p5.contains("\"desiredSize\": 2") || p5.contains("\"desiredSize\":2"),
        "{p5}"
    );

    // The eksctl file changed (p4d scaled, sys dropped) with an input
    // change that makes the engine plan an update: the cluster step reads
    // the file as it is now.
    let cfg = p
        .read("cluster.yaml")
        .replace("    desiredCapacity: 2\n", "    desiredCapacity: 3\n");
    let cfg = cfg.replace(
        "  - name: sys\n    instanceType: c5.2xlarge\n    desiredCapacity: 1\n    privateNetworking: true\n",
        "",
    );
    p.write("cluster.yaml", &cfg);
    let wf = p.read("wf.toml").replace(
        "eksctl_config = \"cluster.yaml\"",
        "eksctl_config = \"cluster.yaml\"\ntags = { env = \"test\" }",
    );
    p.write("wf.toml", &wf);
    let up = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(up.stdout.contains("1 updated"), "{}", up.all());
    let (_, groups) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups", "");
    assert!(!groups.contains("\"sys\""), "sys was not removed: {groups}");
    let (_, p4d) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p4d", "");
    let p4d: serde_json::Value = serde_json::from_str(&p4d).unwrap();
    assert_eq!(p4d["nodegroup"]["scalingConfig"]["desiredSize"], 3);
    assert_eq!(
        p4d["nodegroup"]["launchTemplate"]["id"].as_str(),
        Some(lt.as_str()),
        "scaling replaced the node group"
    );
    let (_, cluster) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d", "");
    assert!(
        cluster.contains("\"env\": \"test\"") || cluster.contains("\"env\":\"test\""),
        "{cluster}"
    );

    let d = p
        .run_env(&["destroy", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(d.stdout.contains("2 deleted"), "{}", d.all());
    let (status, _) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d", "");
    assert_eq!(status, 404);
    assert!(
        moto.stacks().iter().all(|s| !s.starts_with("flow-eks-")),
        "{:?}",
        moto.stacks()
    );
}

/// Readiness by kind: flow waits for a DaemonSet, a StatefulSet, a claim
/// bound to a static FSx volume, a Job, and (with `wait_for`) a custom
/// resource's condition; each wait ends only when the driver lets it.
#[test]
fn waits_for_readiness_by_kind() {
    let Some(k) = KubeServer::start() else { return };
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

/// Ctrl-C while a job runs: flow deletes the job and its pods.
#[test]
fn interrupt_deletes_the_running_job() {
    let Some(k) = KubeServer::start() else { return };
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("wf.toml", &nccl_workflow(&k, "long", "Succeeded"));
    k.driver().hold("long");
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "the job's pods", || {
        k.get("/api/v1/namespaces/default/pods/long-worker-1")
            .is_some()
            && log(&p, "nccl").contains("pod long-worker-1")
    });
    support::signal(&child, libc::SIGINT);
    let run = finish(child);
    assert_ne!(run.code, 0, "{}", run.all());
    assert!(
        run.all()
            .contains("interrupted: PyTorchJob default/long and its pods were deleted"),
        "{}",
        run.all()
    );
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/long")
            .is_none()
    );
    assert!(
        k.get("/api/v1/namespaces/default/pods/long-master-0")
            .is_none()
    );
}

/// Manifests fetched from a URL (as the device plugins are published).
#[test]
fn manifests_from_a_url() {
    let Some(k) = KubeServer::start() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-url}\ndata: {a: b}\n";
        for stream in listener.incoming().take(4) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let reply = if head.starts_with("GET /old.yaml") {
                "HTTP/1.1 301 Moved\r\nLocation: /plugins/cm.yaml\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            };
            let _ = s.write_all(reply.as_bytes());
        }
    });
    let p = Project::new();
    p.write(
        "wf.toml",
        &format!(
            "[steps.cm]\nprovider = \"kube.manifest\"\n[steps.cm.inputs]\nkubeconfig = \"{}\"\nfiles = [\"http://127.0.0.1:{port}/old.yaml\"]\n",
            k.kubeconfig_path()
        ),
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(
        k.get("/api/v1/namespaces/default/configmaps/from-url")
            .unwrap()["data"]["a"],
        "b"
    );
}

/// An EKS connection: the `eks.cluster` step's name, and a token presigned
/// from the AWS credentials, accepted by an API server that authenticates
/// EKS tokens as EKS does (a token webhook calling STS, here moto's).
#[test]
fn eks_connection_authenticates_with_a_signed_token() {
    let moto = Moto::start();
    let Some(k) = KubeServer::start_with(support::kube::Options {
        eks_sts: Some(moto.addr),
        eks_cluster: "dlc".into(),
    }) else {
        return;
    };
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let p = Project::new();
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "eks-conn"
region = "us-east-1"

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
name = "dlc"
subnet_ids = ["subnet-0a", "subnet-0b"]
role_arn = "arn:aws:iam::123456789012:role/eks"

# moto's clusters have no API server: point the connection at the test one,
# keeping the cluster name (bound into the token) from the eks step.
[steps.etcd]
provider = "kube.manifest"
[steps.etcd.inputs]
cluster = {{ name = "${{steps.eks.outputs.name}}", endpoint = "{url}", certificate_authority = "{ca}", region = "us-east-1" }}
namespace = "default"
manifest = """
apiVersion: v1
kind: ConfigMap
metadata: {{name: etcd-config}}
data: {{cluster: "${{steps.eks.outputs.name}}"}}
"""
"#,
            url = k.url,
            ca = k.ca_base64()
        ),
    );
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let cm = k
        .get("/api/v1/namespaces/default/configmaps/etcd-config")
        .expect("applied through the EKS token");
    assert_eq!(cm["data"]["cluster"], "dlc");
    let who = k.eks_identities();
    assert!(
        !who.is_empty() && who.iter().all(|a| a.starts_with("arn:aws:")),
        "{who:?}"
    );
    p.run_env(&["destroy", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/etcd-config")
            .is_none()
    );
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
    p.write("cluster.yaml", "kind: ClusterConfig\nmetadata: {name: x}\n");
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
        "flow does not know how many EFA interfaces `m5.large` has",
        "scaling must have min ≤ desired ≤ max",
        "flow does not create VPCs from eksctl configs",
    ] {
        assert!(out.contains(expected), "{expected} missing from\n{out}");
    }
    assert!(!p.path().join(".flow").exists());
}
