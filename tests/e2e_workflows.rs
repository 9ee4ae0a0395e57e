//! End-to-end: the ready-made workflows under `workflows/`, as a user runs
//! them, against the local cloud — the moto server for AWS (with the Batch
//! compute emulator writing what a job's program prints into its log
//! stream) and, for the EKS workflows, a real kube-apiserver standing in for
//! each cluster's API server (see `support::kube`). Each workflow validates
//! and plans with no AWS credentials and no state, applies, re-plans with no
//! changes, and destroys; what every step made is checked through the APIs.

mod support;

use std::path::PathBuf;

use support::Run;
use support::kube::{KubeServer, Options};
use support::moto::{BatchCompute, Moto};
use support::{Project, workspace_root};

/// A workflow file of the repository.
fn workflow(name: &str) -> String {
    let path = workspace_root().join("workflows").join(name);
    assert!(path.exists(), "{} is missing", path.display());
    path.to_string_lossy().into_owned()
}

/// A run of one workflow: its state in a scratch folder, `flow` pointed at
/// the local cloud.
struct Local {
    p: Project,
    wf: String,
    env: Vec<(String, String)>,
}

impl Local {
    fn new(name: &str, env: Vec<(String, String)>) -> Local {
        Local {
            p: Project::new(),
            wf: workflow(name),
            env,
        }
    }

    fn state(&self) -> String {
        self.p.path().join("state").to_string_lossy().into_owned()
    }

    /// `flow COMMAND WORKFLOW --state-dir … ARGS`.
    fn flow(&self, command: &[&str], args: &[&str]) -> Run {
        let state = self.state();
        let mut all: Vec<&str> = command.to_vec();
        all.push(&self.wf);
        all.extend(["--state-dir", &state]);
        all.extend(args);
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.p.run_env(&all, &env)
    }

    fn output(&self, key: &str) -> String {
        self.flow(&["output"], &[key])
            .expect(0)
            .stdout
            .trim()
            .to_string()
    }

    /// Sets up the image builds: `.venv/bin` first on PATH (the build
    /// script's and the stand-in container tool's python, with boto3), and
    /// the file where the stand-in records its calls, which is returned.
    fn image_tools(&mut self) -> PathBuf {
        let tool_log = self.p.path().join("container-tool.log");
        let path = format!(
            "{}:{}",
            workspace_root().join(".venv/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        self.env.push(("PATH".into(), path));
        self.env.push((
            "CONTAINER_TOOL_LOG".into(),
            tool_log.to_string_lossy().into_owned(),
        ));
        tool_log
    }

    /// Every file of the state folder as text (lossy), for secret checks.
    fn state_text(&self) -> String {
        support::files_under(&self.p.path().join("state"))
            .iter()
            .filter_map(|f| std::fs::read(f).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect()
    }
}

/// `flow ARGS` as on a fresh machine: no AWS credentials, configuration or
/// endpoint, no kubeconfig, an empty home.
fn offline(p: &Project, args: &[&str]) -> std::process::Output {
    let home = p.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let nowhere = p.path().join("none");
    let mut c = p.cmd(args);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "KUBECONFIG",
    ] {
        c.env_remove(var);
    }
    c.env("HOME", &home)
        .env("AWS_CONFIG_FILE", &nowhere)
        .env("AWS_SHARED_CREDENTIALS_FILE", &nowhere)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    c.output().expect("run flow")
}

/// `flow validate` and `flow plan` work offline, with an empty state: the
/// plan creates everything.
fn validates_and_plans_offline(name: &str) {
    let p = Project::new();
    let wf = workflow(name);
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let validate = offline(&p, &["validate", &wf]);
    assert!(
        validate.status.success(),
        "validate {name}: {}",
        text(&validate)
    );
    let state = p.path().join("state").to_string_lossy().into_owned();
    let plan = offline(
        &p,
        &["plan", &wf, "--state-dir", &state, "--detailed-exitcode"],
    );
    assert_eq!(plan.status.code(), Some(2), "plan {name}: {}", text(&plan));
    assert!(text(&plan).contains("to create"), "{}", text(&plan));
}

/// The status of stack `name` (None once moto no longer lists it).
fn stack_status(moto: &Moto, name: &str) -> Option<String> {
    let xml = moto.query_call("cloudformation", "Action=ListStacks&Version=2010-05-15");
    xml.split("<member>")
        .filter(|m| m.contains(&format!("<StackName>{name}</StackName>")))
        .filter_map(|m| between(m, "<StackStatus>", "</StackStatus>"))
        .find(|s| s != "DELETE_COMPLETE")
}

/// How many EFA interfaces launch template `id` declares.
fn efa_interfaces_of(moto: &Moto, id: &str) -> usize {
    moto.query_call(
        "ec2",
        &format!("Action=DescribeLaunchTemplateVersions&LaunchTemplateId={id}&Version=2016-11-15"),
    )
    .matches("<interfaceType>efa</interfaceType>")
    .count()
}

/// The text between `start` and `end` in `s`.
fn between(s: &str, start: &str, end: &str) -> Option<String> {
    let from = s.find(start)? + start.len();
    let to = s[from..].find(end)? + from;
    Some(s[from..to].to_string())
}

/// A Batch workflow (p4d, p5, p6): VPC and Batch stacks, bucket, SSH key in
/// Secrets Manager, and the NCCL test with its bus bandwidth captured from
/// the job's CloudWatch log stream.
fn batch_workflow_end_to_end(kind: &str, efa_interfaces: usize) {
    let name = format!("batch-{kind}.toml");
    validates_and_plans_offline(&name);
    let moto = Moto::start();
    let _compute: BatchCompute = moto.batch_compute();
    let l = Local::new(&name, moto.env());

    let apply = l.flow(&["apply"], &["--auto-approve"]).expect(0);
    let all = apply.all();
    assert!(all.contains("5 created"), "{all}");
    assert!(all.contains("captured busbw = 17.9053"), "{all}");

    // The stacks, by the names the vars make.
    for stack in ["vpc", "batch"] {
        assert_eq!(
            stack_status(&moto, &format!("batch-{kind}-{stack}")).as_deref(),
            Some("CREATE_COMPLETE")
        );
    }
    // The launch template with one EFA interface per network card.
    let lt = l.output("cluster.batch.LaunchTemplateId");
    assert_eq!(efa_interfaces_of(&moto, &lt), efa_interfaces);
    // The compute environment and queue the job ran in.
    let (status, envs) = moto.rest_call("batch", "POST", "/v1/describecomputeenvironments", "{}");
    assert_eq!(status, 200, "{envs}");
    assert!(
        envs.contains(&format!("\"{lt}\"")) || envs.contains(&lt),
        "{envs}"
    );
    // The NCCL test: the bandwidth the job's log shows is the step's output.
    assert_eq!(l.output("cluster.nccl.busbw"), "17.9053");
    let stream = l.output("cluster.nccl.log_stream");
    let events = moto.json_call(
        "logs",
        "Logs_20140328.GetLogEvents",
        &format!(
            r#"{{"logGroupName":"/aws/batch/job","logStreamName":"{stream}","startFromHead":true}}"#
        ),
    );
    assert!(
        events
            .to_string()
            .contains("Avg bus bandwidth    : 17.9053"),
        "{events}"
    );
    let log = std::fs::read_to_string(l.p.path().join("state/logs/cluster%2Enccl.log")).unwrap();
    assert!(log.contains("# Out of bounds values : 0 OK"), "{log}");
    // The SSH key: in Secrets Manager only, never in state.
    let secret = moto.json_call(
        "secretsmanager",
        "secretsmanager.GetSecretValue",
        &format!(r#"{{"SecretId":"batch-{kind}-ssh-key"}}"#),
    );
    let key = secret["SecretString"].as_str().unwrap_or_default();
    assert!(
        key.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{secret}"
    );
    let body: String = key.lines().nth(1).unwrap_or_default().to_string();
    assert!(
        !l.state_text().contains(&body),
        "the private key is in state"
    );
    // The bucket.
    let bucket = l.output("cluster.bucket.name");
    assert!(bucket.starts_with(&format!("batch-{kind}-")), "{bucket}");
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 200);

    // Nothing left to do.
    l.flow(&["plan"], &["--detailed-exitcode"]).expect(0);

    // Destroy: every stack, the secret, the bucket.
    let destroy = l.flow(&["destroy"], &["--auto-approve"]).expect(0);
    assert!(destroy.stdout.contains("5 deleted"), "{}", destroy.all());
    for stack in ["vpc", "batch"] {
        assert_eq!(stack_status(&moto, &format!("batch-{kind}-{stack}")), None);
    }
    let listed = moto.json_call("secretsmanager", "secretsmanager.ListSecrets", "{}");
    assert!(
        listed["SecretList"]
            .as_array()
            .is_none_or(|s| s.iter().all(|s| !s["DeletedDate"].is_null())),
        "{listed}"
    );
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 404);
}

#[test]
fn batch_p4d_end_to_end() {
    batch_workflow_end_to_end("p4d", 4);
}

#[test]
fn batch_p5_end_to_end() {
    batch_workflow_end_to_end("p5", 32);
}

#[test]
fn batch_p6_end_to_end() {
    batch_workflow_end_to_end("p6", 8);
}

/// The reference pair: the bucket and the one-AZ VPC stack, with the ids
/// other stacks import.
#[test]
fn reference_end_to_end() {
    validates_and_plans_offline("reference.toml");
    let moto = Moto::start();
    let l = Local::new("reference.toml", moto.env());
    let apply = l.flow(&["apply"], &["--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    assert_eq!(
        stack_status(&moto, "ml-reference-vpc").as_deref(),
        Some("CREATE_COMPLETE")
    );
    let exports = moto.query_call("cloudformation", "Action=ListExports&Version=2010-05-15");
    let subnet = l.output("outputs.private_subnet");
    let sg = l.output("outputs.efa_security_group");
    assert!(
        subnet.starts_with("subnet-") && exports.contains(&subnet),
        "{exports}"
    );
    assert!(sg.starts_with("sg-") && exports.contains(&sg), "{exports}");
    let bucket = l.output("outputs.bucket");
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 200);

    // A var changed in place: versioning on, nothing replaced.
    l.flow(&["plan"], &["--detailed-exitcode"]).expect(0);
    let plan = l
        .flow(
            &["plan"],
            &["--var", "bucket_versioning=true", "--detailed-exitcode"],
        )
        .expect(2);
    assert!(plan.stdout.contains("0 to replace"), "{}", plan.stdout);

    l.flow(&["destroy"], &["--auto-approve"]).expect(0);
    assert_eq!(stack_status(&moto, "ml-reference-vpc"), None);
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 404);
}

/// The local cloud of the EKS workflows: moto, and a real API server that
/// stands in for the cluster's (it checks EKS tokens against moto's STS);
/// `flow` reaches it through `FLOW_EKS_API_SERVER`. The image build uses the
/// stand-in container tool (`tests/fixtures/bin/container-tool`), whose
/// push puts the image into moto's ECR.
struct EksCloud {
    moto: Moto,
    k: KubeServer,
    l: Local,
    tool_log: PathBuf,
}

impl EksCloud {
    fn start(name: &str, cluster: &str, extra: &[(&str, &str)]) -> Option<EksCloud> {
        let moto = Moto::start();
        let k = KubeServer::start_with(Options {
            eks_sts: Some(moto.addr),
            eks_cluster: cluster.into(),
        })?;
        let mut l = Local::new(name, moto.env());
        let ca = l.p.write("api-server-ca.pem", &k.ca_pem);
        let tool_log = l.image_tools();
        l.env.extend(
            [
                ("FLOW_EKS_API_SERVER", k.url.clone()),
                ("FLOW_EKS_API_SERVER_CA", ca.to_string_lossy().into_owned()),
            ]
            .into_iter()
            .chain(extra.iter().map(|(k, v)| (*k, v.to_string())))
            .map(|(k, v)| (k.to_string(), v)),
        );
        Some(EksCloud {
            moto,
            k,
            l,
            tool_log,
        })
    }

    fn container_tool_var() -> String {
        format!(
            "container_tool={}",
            workspace_root()
                .join("tests/fixtures/bin/container-tool")
                .display()
        )
    }

    /// `GET` on the EKS API of moto.
    fn eks(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.moto.rest_call("eks", "GET", path, "");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }
}

/// eks-p4d: VPC, EKS cluster, system and EFA GPU node groups, etcd, the
/// training operator, device plugins, FSx with its volume, the image built
/// and pushed, nvidia-smi, the NCCL test and the FSDP job; the Hugging Face
/// token never leaves the Kubernetes secret.
#[test]
fn eks_p4d_end_to_end() {
    validates_and_plans_offline("eks-p4d.toml");
    let token = "hf_flowTestTokenDoNotLeak42";
    let Some(c) = EksCloud::start("eks-p4d.toml", "eks-p4d", &[("HF_TOKEN", token)]) else {
        return;
    };
    let tool = EksCloud::container_tool_var();
    let apply =
        c.l.flow(&["apply"], &["--auto-approve", "--var", &tool])
            .expect(0);
    let all = apply.all();
    assert!(all.contains("captured busbw = 17.9053"), "{all}");

    // AWS: the cluster, its node groups (the GPU one with 4 EFA interfaces), FSx, the image.
    let cluster = c.eks("/clusters/eks-p4d");
    assert_eq!(cluster["cluster"]["status"], "ACTIVE", "{cluster}");
    let groups = c.eks("/clusters/eks-p4d/node-groups");
    let mut names: Vec<&str> = groups["nodegroups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g.as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["gpu", "sys"]);
    let gpu = c.eks("/clusters/eks-p4d/node-groups/gpu");
    let lt = gpu["nodegroup"]["launchTemplate"]["id"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(efa_interfaces_of(&c.moto, lt), 4);
    let fs = c.moto.file_systems();
    assert_eq!(fs.len(), 1, "{fs:?}");
    let images = c.moto.json_call(
        "ecr",
        "AmazonEC2ContainerRegistry_V20150921.DescribeImages",
        r#"{"repositoryName":"fsdp"}"#,
    );
    assert!(images.to_string().contains("llama2-efa-dlc"), "{images}");
    let calls = std::fs::read_to_string(&c.tool_log).unwrap_or_default();
    assert!(
        calls.contains("build -t ") && calls.contains("docker/llama2-efa-dlc"),
        "{calls}"
    );

    // Kubernetes: what each step applied, through the API server.
    for path in [
        "/apis/apps/v1/namespaces/default/deployments/etcd",
        "/apis/apps/v1/namespaces/kubeflow/deployments/training-operator",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org",
        "/apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin-daemonset",
    ] {
        assert!(c.k.get(path).is_some(), "{path} missing");
    }
    let pv =
        c.k.get("/api/v1/persistentvolumes/fsx-pv")
            .expect("the FSx volume");
    assert_eq!(pv["spec"]["csi"]["volumeHandle"], fs[0].as_str(), "{pv}");
    let pvc =
        c.k.get("/api/v1/namespaces/default/persistentvolumeclaims/fsx-pvc")
            .expect("the claim");
    assert_eq!(pvc["status"]["phase"], "Bound");
    assert_eq!(c.l.output("nvidia_smi.driver_version"), "550.127.05");
    // The NCCL check runs once per node count (`for_each` over node_counts).
    assert_eq!(c.l.output(r#"nccl["2"].busbw"#), "17.9053");
    assert_eq!(c.l.output("train.train_epoch_loss"), "1.4993");
    let secret =
        c.k.get("/api/v1/namespaces/default/secrets/hf-token")
            .expect("the token's secret");
    let stored = secret["data"]["HF_TOKEN"].as_str().unwrap_or_default();
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(stored)
        .unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&decoded), token);
    assert!(!all.contains(token), "the token was printed");
    assert!(
        !c.l.state_text().contains(token),
        "the token is in state or logs"
    );

    // Nothing left to do, in the real objects either (refresh reads every
    // AWS object and Kubernetes object; the offline plan only state). The
    // two times are printed for docs/performance.md, not judged here.
    let started = std::time::Instant::now();
    c.l.flow(&["plan"], &["--var", &tool, "--detailed-exitcode"])
        .expect(0);
    let refreshing = started.elapsed();
    let started = std::time::Instant::now();
    c.l.flow(&["plan"], &["--var", &tool, "--refresh=false"])
        .expect(0);
    eprintln!(
        "eks-p4d plan: {refreshing:.2?} with refresh, {:.2?} offline",
        started.elapsed()
    );
    let destroy =
        c.l.flow(&["destroy"], &["--auto-approve", "--var", &tool])
            .expect(0);
    assert!(!destroy.all().contains(token));
    let (status, _) = c.moto.rest_call("eks", "GET", "/clusters/eks-p4d", "");
    assert_eq!(status, 404);
    assert!(c.moto.file_systems().is_empty());
    for path in [
        "/apis/apps/v1/namespaces/default/deployments/etcd",
        "/api/v1/persistentvolumes/fsx-pv",
        "/api/v1/namespaces/default/secrets/hf-token",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
    ] {
        assert!(c.k.get(path).is_none(), "{path} is left");
    }
}

/// torchrec-eks: the cluster with EFA GPU nodes, the Criteo sample uploaded
/// to S3, FSx importing it, and the DLRM training with `/dev/shm`, the FSx
/// claim and the EFA variables, its launcher chosen by a var. The test API
/// server is Kubernetes 1.20, older than Indexed Jobs (1.21 alpha, 1.24 GA),
/// so the runbook's torchrun Job is rendered and planned here, and the
/// PyTorchJob launcher is the one applied.
#[test]
fn torchrec_eks_end_to_end() {
    validates_and_plans_offline("torchrec-eks.toml");
    let Some(c) = EksCloud::start("torchrec-eks.toml", "torchrec-cluster", &[]) else {
        return;
    };
    let pytorchjob = ["--var", "launcher=pytorchjob"];
    let apply =
        c.l.flow(
            &["apply"],
            &[pytorchjob.as_slice(), &["--auto-approve"]].concat(),
        )
        .expect(0);
    assert!(apply.stdout.contains("12 created"), "{}", apply.all());

    // The data: uploaded under criteo/, imported by FSx.
    let bucket = c.l.output("data_bucket.name");
    let (status, listing) = c.moto.rest_call(
        "s3",
        "GET",
        &format!("/{bucket}?list-type=2&prefix=criteo/"),
        "",
    );
    assert_eq!(status, 200, "{listing}");
    assert!(
        listing.contains("<Key>criteo/day_0_sample.tsv</Key>"),
        "{listing}"
    );
    let fs = c.moto.json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.DescribeFileSystems",
        "{}",
    );
    assert_eq!(
        fs["FileSystems"][0]["LustreConfiguration"]["ImportPath"],
        format!("s3://{bucket}/criteo/").as_str(),
        "{fs}"
    );

    // The training: a PyTorchJob with the mounts and the EFA environment.
    let job =
        c.k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/torchrec-dlrm-training")
            .expect("the PyTorchJob");
    let text = job["spec"].to_string();
    assert!(text.contains(r#""medium":"Memory""#), "{text}");
    assert!(text.contains(r#""claimName":"fsx-pvc""#), "{text}");
    assert!(
        text.contains(r#""name":"FI_PROVIDER","value":"efa""#),
        "{text}"
    );
    assert!(text.contains(r#""nvidia.com/gpu":"8""#), "{text}");
    let log = std::fs::read_to_string(c.l.p.path().join("state/logs/train.log")).unwrap();
    assert!(log.contains("AUROC over test set: 0.8013"), "{log}");
    c.l.flow(
        &["plan"],
        &[pytorchjob.as_slice(), &["--detailed-exitcode"]].concat(),
    )
    .expect(0);

    // The default launcher, torchrun: the training step is replaced by an
    // Indexed Job over the headless Service (planned, see above).
    let plan = c.l.flow(&["plan"], &["--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout.contains("train") && plan.stdout.contains("torchrec-torchrun.yaml"),
        "{}",
        plan.stdout
    );
    assert!(
        c.k.get("/api/v1/namespaces/default/services/torchrec-headless")
            .is_some()
    );

    c.l.flow(
        &["destroy"],
        &[pytorchjob.as_slice(), &["--auto-approve"]].concat(),
    )
    .expect(0);
    let (status, _) = c
        .moto
        .rest_call("eks", "GET", "/clusters/torchrec-cluster", "");
    assert_eq!(status, 404);
    let (status, _) = c.moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 404);
    assert!(c.moto.file_systems().is_empty());
    assert!(
        c.k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/torchrec-dlrm-training")
            .is_none()
    );
}

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
    let tool = EksCloud::container_tool_var();
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

/// multi-az: the VPC's subnets come out as the upstream multi-AZ template
/// writes them, one comma-joined string per kind; `split` and `concat` turn
/// them into the EKS cluster's and FSx's subnet lists.
#[test]
fn multi_az_subnet_lists_from_joined_outputs() {
    validates_and_plans_offline("multi-az.toml");
    let moto = Moto::start();
    let l = Local::new("multi-az.toml", moto.env());
    let apply = l.flow(&["apply"], &["--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    let private = l.output("vpc.PrivateSubnets");
    let public = l.output("vpc.PublicSubnets");
    let private: Vec<&str> = private.split(',').collect();
    let public: Vec<&str> = public.split(',').collect();
    assert_eq!(private.len(), 2, "{private:?}");
    assert!(
        private
            .iter()
            .chain(&public)
            .all(|s| s.starts_with("subnet-"))
    );
    let (status, body) = moto.rest_call("eks", "GET", "/clusters/multi-az", "");
    assert_eq!(status, 200, "{body}");
    let cluster: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let subnets: Vec<&str> = cluster["cluster"]["resourcesVpcConfig"]["subnetIds"]
        .as_array()
        .expect("subnets")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    let every: Vec<&str> = private.iter().chain(&public).copied().collect();
    assert_eq!(subnets, every, "the cluster has every subnet, in order");
    let fs = moto.json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.DescribeFileSystems",
        "{}",
    );
    assert_eq!(
        fs["FileSystems"][0]["SubnetIds"],
        serde_json::json!([private[0]]),
        "{fs}"
    );
    l.flow(&["plan"], &["--detailed-exitcode"]).expect(0);
    l.flow(&["destroy"], &["--auto-approve"]).expect(0);
    assert_eq!(stack_status(&moto, "multi-az-vpc"), None);
}

/// Writes tests/fixtures/compat-batch-p4d/state: batch-p4d as it was before
/// its steps moved into workflows/modules/batch-efa (the copy in the
/// fixture), applied against moto by the binary `FLOW_E2E_BIN` names, the
/// release before the move. Run on purpose only:
/// `FLOW_E2E_BIN=…/old/flow cargo test -p flow --test e2e_workflows -- --ignored write_compat`.
#[test]
#[ignore = "writes a fixture with an earlier release; run on purpose"]
fn write_compat_batch_p4d_fixture() {
    let fixture = workspace_root().join("tests/fixtures/compat-batch-p4d");
    let moto = Moto::start();
    let _compute: BatchCompute = moto.batch_compute();
    let p = Project::new();
    p.write(
        "batch-p4d.toml",
        &std::fs::read_to_string(fixture.join("batch-p4d.toml")).unwrap(),
    );
    for template in ["vpc-one-az.yaml", "batch-p4d.yaml"] {
        let text =
            std::fs::read_to_string(workspace_root().join("workflows/templates").join(template))
                .unwrap();
        p.write(&format!("templates/{template}"), &text);
    }
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    p.run_env(
        &[
            "apply",
            "batch-p4d.toml",
            "--state-dir",
            "state",
            "--auto-approve",
        ],
        &env,
    )
    .expect(0);
    let to = fixture.join("state");
    let _ = std::fs::remove_dir_all(&to);
    for file in support::files_under(&p.path().join("state")) {
        let relative = file.strip_prefix(p.path().join("state")).unwrap();
        if relative.starts_with("logs") || relative.ends_with("lock") {
            continue;
        }
        let dest = to.join(relative);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&file, &dest).unwrap();
    }
}

/// batch-p4d's state from before its steps moved into the batch-efa module
/// (tests/fixtures/compat-batch-p4d, written by the earlier release): the
/// module version plans only the five moves its [[moved]] entries make, and
/// no change to any object.
#[test]
fn batch_p4d_state_from_before_the_module_plans_only_moves() {
    let p = Project::new();
    support::copy_dir(
        &workspace_root().join("tests/fixtures/compat-batch-p4d/state"),
        &p.path().join("state"),
    );
    let wf = workflow("batch-p4d.toml");
    let state = p.path().join("state").to_string_lossy().into_owned();
    let plan = offline(&p, &["plan", &wf, "--state-dir", &state]);
    let text =
        String::from_utf8_lossy(&plan.stdout).into_owned() + &String::from_utf8_lossy(&plan.stderr);
    assert!(plan.status.success(), "{text}");
    for step in ["vpc", "bucket", "ssh", "batch", "nccl"] {
        assert!(text.contains(&format!("{step} → cluster.{step}")), "{text}");
    }
    assert!(
        text.contains(
            "Plan: 5 to move, 0 to create, 0 to update, 0 to replace, 0 to delete, 5 unchanged."
        ),
        "{text}"
    );
}
