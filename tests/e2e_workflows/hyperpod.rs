//! hyperpod-cpu-ddp on a cluster reached through a kubeconfig.

use super::*;

/// hyperpod-cpu-ddp: on a cluster that exists already (reached through a
/// kubeconfig), the ECR repository, the image built and pushed, etcd, and
/// the PyTorchJob with NUM_NODES, CPU_PER_NODE and the epochs as vars,
/// followed until its last epoch.
#[test]
fn hyperpod_cpu_ddp_end_to_end() {
    validates_and_plans_offline("hyperpod-cpu-ddp.toml");
    let moto = Moto::start();
    let Some(k) = KubeServer::start() else { return };
    let mut l = Local::new("hyperpod-cpu-ddp.toml", moto.env());
    let tool_log = l.image_tools();
    // What the runbook assumes the HyperPod cluster has: the training
    // operator and an FSx claim (set up here with flow, in a state of its own).
    l.p.write(
        "cluster.toml",
        &format!(
            r#"
[steps.prerequisites]
provider = "kube.manifest"
[steps.prerequisites.inputs]
kubeconfig = "{kc}"
files = ["{operator}"]
manifest = """
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: fsx-pvc, namespace: default}}
spec: {{accessModes: [ReadWriteMany], storageClassName: "", resources: {{requests: {{storage: 1200Gi}}}}}}
"""
"#,
            kc = k.kubeconfig_path(),
            operator = workspace_root().join("workflows/manifests/training-operator.yaml").display()
        ),
    );
    l.p.run(&["apply", "cluster.toml", "--auto-approve"])
        .expect(0);
    let kubeconfig = format!("kubeconfig={}", k.kubeconfig_path());
    let tool = container_tool_var();
    let vars = [
        "--var",
        &kubeconfig,
        "--var",
        &tool,
        "--var",
        "num_nodes=3",
        "--var",
        "cpu_per_node=2",
        "--var",
        "epochs=40",
    ];
    let apply = l
        .flow(&["apply"], &[vars.as_slice(), &["--auto-approve"]].concat())
        .expect(0);
    assert!(apply.stdout.contains("4 created"), "{}", apply.all());

    // The image: pushed to the repository by the build step.
    let uri = l.output("image.image_uri");
    assert!(uri.ends_with("/fsdp:pytorch2.2-cpu"), "{uri}");
    let images = moto.json_call(
        "ecr",
        "AmazonEC2ContainerRegistry_V20150921.DescribeImages",
        r#"{"repositoryName":"fsdp"}"#,
    );
    assert!(images.to_string().contains("pytorch2.2-cpu"), "{images}");
    let calls = std::fs::read_to_string(&tool_log).unwrap_or_default();
    assert!(calls.contains("docker/cpu-ddp"), "{calls}");

    // etcd, and the job with the vars in place, followed to its last epoch.
    assert!(
        k.get("/apis/apps/v1/namespaces/default/deployments/etcd")
            .is_some()
    );
    let job = k
        .get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/cpu-ddp")
        .expect("the PyTorchJob");
    let text = job["spec"].to_string();
    assert_eq!(
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 3,
        "{text}"
    );
    assert!(text.contains(&uri), "{text}");
    assert!(text.contains("--nproc_per_node=2"), "{text}");
    assert_eq!(l.output("train.last_epoch"), "40");
    assert_eq!(l.output("train.last_snapshot_epoch"), "40");
    l.flow(
        &["plan"],
        &[vars.as_slice(), &["--detailed-exitcode"]].concat(),
    )
    .expect(0);

    l.flow(
        &["destroy"],
        &[vars.as_slice(), &["--auto-approve"]].concat(),
    )
    .expect(0);
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/cpu-ddp")
            .is_none()
    );
    assert!(
        k.get("/apis/apps/v1/namespaces/default/deployments/etcd")
            .is_none()
    );
    let (status, body) = moto.try_json_call(
        "ecr",
        "AmazonEC2ContainerRegistry_V20150921.DescribeRepositories",
        r#"{"repositoryNames":["fsdp"]}"#,
    );
    assert!(
        status == 400 && body.contains("RepositoryNotFoundException"),
        "the repository is left: {status} {body}"
    );
}
