//! hyperpod-cpu-ddp: on a cluster reached through a kubeconfig, and with
//! `create_cluster`, making the cluster itself; and its train step judged on
//! what the runbook's own ddp.py prints.

use super::eks::EksCloud;
use super::*;

/// hyperpod-cpu-ddp: on a cluster that exists already (reached through a
/// kubeconfig), the ECR repository, the image built and pushed, etcd, and
/// the PyTorchJob with NUM_NODES, CPU_PER_NODE and the epochs as vars,
/// followed until its last epoch.
#[test]
fn hyperpod_cpu_ddp_end_to_end() {
    validates_and_plans_offline("hyperpod-cpu-ddp.toml");
    let moto = Moto::start();
    let k = KubeServer::start();
    let mut l = Local::new("hyperpod-cpu-ddp.toml", moto.env());
    let tool_log = l.image_tools();
    prerequisites(&l, &k);
    let kubeconfig = format!("kubeconfig={}", k.kubeconfig_path());
    let tool = container_tool_var(&l);
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
    // The local cloud's emulated log (scripts/local-cloud/outputs/ddp.py.txt)
    // prints what the runbook's ddp.py prints for the job's arguments
    // (40 epochs, a snapshot every 10): epochs 0 to 39, the last snapshot
    // at 30, no closing line.
    assert_eq!(l.output("train.last_epoch"), "39");
    assert_eq!(l.output("train.last_snapshot_epoch"), "30");
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

/// What the runbook assumes the HyperPod cluster has: the training
/// operator and an FSx claim (set up here with flow, in a state of its own).
fn prerequisites(l: &Local, k: &KubeServer) {
    l.p.write(
        "cluster.toml",
        &format!(
            r#"
# The operator's manifest is the shipped one, beside the workflows.
[workflow]
allow_paths = ["{manifests}"]

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
            operator = workspace_root().join("workflows/manifests/training-operator.yaml").display(),
            manifests = workspace_root().join("workflows/manifests").display()
        ),
    );
    l.p.run(&["apply", "cluster.toml", "--auto-approve"])
        .expect(0);
}

/// hyperpod-cpu-ddp with `create_cluster`: the VPC, the EKS cluster, the
/// lifecycle scripts in S3, the execution role, the HyperPod cluster
/// orchestrated by that EKS cluster, FSx with its claim and the training
/// operator are made first, each as the one instance of its step; the
/// Kubernetes steps reach the new cluster through its connection output,
/// not a kubeconfig. Destroy removes all of it.
#[test]
fn hyperpod_cpu_ddp_makes_its_own_cluster_end_to_end() {
    let c = EksCloud::start("hyperpod-cpu-ddp.toml", "ml-cluster", &[]);
    let tool = container_tool_var(&c.l);
    let vars = [
        "--var",
        "create_cluster=true",
        "--var",
        &tool,
        "--var",
        "num_nodes=2",
        "--var",
        "cpu_per_node=2",
        "--var",
        "epochs=20",
    ];
    let plan = c.l.flow(&["plan"], &vars).expect(0);
    assert!(
        plan.stdout.contains(r#"+ hyperpod["new"]"#) && plan.stdout.contains("14 to create"),
        "{}",
        plan.stdout
    );
    let apply =
        c.l.flow(&["apply"], &[vars.as_slice(), &["--auto-approve"]].concat())
            .expect(0);
    assert!(apply.stdout.contains("14 created"), "{}", apply.all());

    // AWS: the EKS cluster, and the HyperPod cluster orchestrated by it,
    // its instances running the uploaded lifecycle script as the role.
    let cluster = c.eks("/clusters/ml-cluster");
    assert_eq!(cluster["cluster"]["status"], "ACTIVE", "{cluster}");
    let eks_arn = cluster["cluster"]["arn"].as_str().unwrap().to_string();
    let hp = c.moto.json_call(
        "sagemaker",
        "SageMaker.DescribeCluster",
        r#"{"ClusterName":"ml-cluster"}"#,
    );
    assert_eq!(hp["ClusterStatus"], "InService", "{hp}");
    // moto keeps no `Orchestrator` (docs/providers/sagemaker.hyperpod.md):
    // what flow sent is what state recorded of the step's inputs.
    let record =
        c.l.flow(&["state", "show"], &[r#"hyperpod["new"]"#])
            .expect(0);
    let record: serde_json::Value = serde_json::from_str(&record.stdout).unwrap();
    assert_eq!(record["inputs"]["orchestrator"], "eks", "{record}");
    assert_eq!(
        record["inputs"]["eks_cluster_arn"],
        eks_arn.as_str(),
        "{record}"
    );
    let group = &hp["InstanceGroups"][0];
    assert_eq!(group["InstanceType"], "ml.m5.2xlarge", "{hp}");
    assert_eq!(group["TargetCount"], 2, "{hp}");
    assert!(
        group["ExecutionRole"]
            .as_str()
            .unwrap_or_default()
            .ends_with(":role/ml-cluster-hyperpod-execution"),
        "{hp}"
    );
    let uri = group["LifeCycleConfig"]["SourceS3Uri"]
        .as_str()
        .unwrap_or_default();
    let bucket = uri
        .trim_start_matches("s3://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let objects = c.moto.objects(&bucket, "lifecycle/");
    assert_eq!(objects, ["lifecycle/on_create.sh"], "{uri}");
    assert_eq!(c.moto.file_systems().len(), 1);

    // Kubernetes, through the new cluster's connection: the prerequisites
    // the runbook assumes, etcd, and the job followed to its last epoch.
    for path in [
        "/apis/apps/v1/namespaces/kubeflow/deployments/training-operator",
        "/api/v1/namespaces/default/persistentvolumeclaims/fsx-pvc",
        "/apis/apps/v1/namespaces/default/deployments/etcd",
        "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/cpu-ddp",
    ] {
        assert!(c.k.get(path).is_some(), "{path} missing");
    }
    assert_eq!(c.l.output("train.last_epoch"), "19");
    c.l.flow(
        &["plan"],
        &[vars.as_slice(), &["--detailed-exitcode"]].concat(),
    )
    .expect(0);

    c.l.flow(
        &["destroy"],
        &[vars.as_slice(), &["--auto-approve"]].concat(),
    )
    .expect(0);
    let (status, body) = c.moto.try_json_call(
        "sagemaker",
        "SageMaker.DescribeCluster",
        r#"{"ClusterName":"ml-cluster"}"#,
    );
    assert!(
        status == 400 || body.contains("Deleting"),
        "{status} {body}"
    );
    assert_eq!(stack_status(&c.moto, "ml-cluster-vpc"), None);
    assert_eq!(stack_status(&c.moto, "ml-cluster-hyperpod-role"), None);
    assert!(
        c.k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/cpu-ddp")
            .is_none()
    );
}

/// The shipped workflows folder copied into the project, with the PyTorchJob
/// manifest annotated so that the test cluster's pods print `log` (the
/// driver's `test.flow/logs`; support/kube) instead of the local cloud's
/// emulation; the workflow itself is unchanged.
fn shipped_with_pod_log(l: &Local, log: &str) {
    let from = workspace_root().join("workflows");
    let to = l.p.path().join("wf");
    let copied = std::process::Command::new("cp")
        .args(["-rT", &from.to_string_lossy(), &to.to_string_lossy()])
        .status()
        .expect("cp");
    assert!(copied.success());
    let manifest = to.join("manifests/cpu-ddp.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let indented: String = log.lines().map(|line| format!("      {line}\n")).collect();
    let annotated = text.replacen(
        "metadata:\n  name: cpu-ddp\n",
        &format!("metadata:\n  name: cpu-ddp\n  annotations:\n    test.flow/logs: |\n{indented}"),
        1,
    );
    assert_ne!(annotated, text, "the manifest's metadata moved");
    std::fs::write(manifest, annotated).unwrap();
}

/// hyperpod-cpu-ddp's train step judged on what the runbook's own ddp.py
/// prints (tests/fixtures/published/cpu-ddp: the program vendored in
/// workflows/docker/cpu-ddp, run as published, 20 epochs counted from 0).
/// First an image whose output has no epoch line: the step fails as soon as
/// the job ends (not at its 6 h timeout), naming the capture that matched
/// nothing and showing the log's first lines. Then the real output: the
/// step succeeds with rank 0's last epoch, 19.
#[test]
fn hyperpod_cpu_ddp_judges_the_runbooks_own_program() {
    let moto = Moto::start();
    let k = KubeServer::start();
    let mut l = Local::new("hyperpod-cpu-ddp.toml", moto.env());
    l.image_tools();
    prerequisites(&l, &k);
    l.wf =
        l.p.path()
            .join("wf/hyperpod-cpu-ddp.toml")
            .display()
            .to_string();
    let kubeconfig = format!("kubeconfig={}", k.kubeconfig_path());
    let tool = container_tool_var(&l);
    let vars = [
        "--var",
        &kubeconfig,
        "--var",
        &tool,
        "--var",
        "epochs=20",
        "--auto-approve",
    ];

    let other = "python: can't open file '/workspace/train.py': [Errno 2] No such file or directory\n\
                 [2026-11-27 10:00:01] torch.distributed.elastic.multiprocessing.api: [ERROR] failed\n";
    shipped_with_pod_log(&l, other);
    let started = std::time::Instant::now();
    let failed = l.flow(&["apply"], &vars).expect(1);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(300),
        "waited {:?}",
        started.elapsed()
    );
    let said = failed.all();
    assert!(
        said.contains(
            r"capture `last_epoch`: no line of the logs matches /\[RANK 0\] Epoch (\d+) \|/"
        ),
        "{said}"
    );
    assert!(
        said.contains("first lines: python: can't open file '/workspace/train.py'"),
        "{said}"
    );

    let published = std::fs::read_to_string(
        workspace_root().join("tests/fixtures/published/cpu-ddp/attempt1.txt"),
    )
    .unwrap();
    shipped_with_pod_log(&l, &published);
    let apply = l.flow(&["apply"], &vars).expect(0);
    assert!(
        apply.stdout.contains("captured last_epoch = 19"),
        "{}",
        apply.all()
    );
    assert_eq!(l.output("train.last_epoch"), "19");
    assert_eq!(l.output("train.last_snapshot_epoch"), "10");
}
