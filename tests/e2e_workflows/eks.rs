//! The EKS workflows: eks-p4d and torchrec-eks, on moto and a real
//! kube-apiserver standing in for the cluster's API server.

use super::batch::{scanned, scanned_output};
use super::*;
use crate::support::secret_scan::{Kind, SecretScan, fingerprint};

/// The local cloud of the EKS workflows: moto, and a real API server that
/// stands in for the cluster's (it checks EKS tokens against moto's STS);
/// `flow` reaches it through `FLOW_EKS_API_SERVER`. The image build uses the
/// stand-in container tool (`tests/fixtures/bin/container-tool`), whose
/// push puts the image into moto's ECR.
pub(super) struct EksCloud {
    pub(super) moto: Moto,
    pub(super) k: KubeServer,
    pub(super) l: Local,
    pub(super) tool_log: PathBuf,
}

impl EksCloud {
    /// The test cloud with a real API server that EKS describes for
    /// `cluster` (DescribeCluster answers its endpoint and CA, so flow
    /// reaches it as on AWS, through no override), and `extra` in flow's
    /// environment.
    pub(super) fn start(name: &str, cluster: &str, extra: &[(&str, &str)]) -> EksCloud {
        let moto = Moto::start();
        let k = KubeServer::start_with(Options {
            eks_sts: Some(moto.addr),
            eks_cluster: cluster.into(),
        });
        k.describe_in_eks(cluster);
        let mut l = Local::new(name, moto.env());
        let tool_log = l.image_tools();
        l.env
            .extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert!(l.env.iter().all(|(k, _)| !k.starts_with("FLOW_EKS")));
        EksCloud {
            moto,
            k,
            l,
            tool_log,
        }
    }

    /// `GET` on the EKS API of moto.
    pub(super) fn eks(&self, path: &str) -> serde_json::Value {
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
    let c = EksCloud::start("eks-p4d.toml", "eks-p4d", &[("HF_TOKEN", token)]);
    let tool = container_tool_var(&c.l);
    // Every command goes through the secret scan (see its end). The test
    // gives flow the token; the workflow passes it to no process.
    let mut scan = SecretScan::new();
    scan.input(&c.l.wf, std::fs::read_to_string(&c.l.wf).unwrap())
        .secret_env(&["HF_TOKEN"], &[]);
    let apply = scanned(
        &mut scan,
        &c.l,
        "apply",
        &["apply"],
        &["--auto-approve", "--var", &tool],
    )
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
    let driver = scanned_output(&mut scan, &c.l, "nvidia_smi.driver_version");
    assert_eq!(driver, "550.127.05");
    // The NCCL check runs once per node count (`for_each` over node_counts).
    assert_eq!(
        scanned_output(&mut scan, &c.l, r#"nccl["2"].busbw"#),
        "17.9053"
    );
    assert_eq!(
        scanned_output(&mut scan, &c.l, "train.train_epoch_loss"),
        "1.4993"
    );
    let secret =
        c.k.get("/api/v1/namespaces/default/secrets/hf-token")
            .expect("the token's secret");
    let stored = secret["data"]["HF_TOKEN"].as_str().unwrap_or_default();
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(stored)
        .unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&decoded), token);

    // Nothing left to do, in the real objects either (refresh reads every
    // AWS object and Kubernetes object; the offline plan only state). The
    // two times are printed for docs/performance/time-to-training.md, not judged here.
    let started = std::time::Instant::now();
    scanned(
        &mut scan,
        &c.l,
        "plan",
        &["plan"],
        &["--var", &tool, "--detailed-exitcode"],
    )
    .expect(0);
    let refreshing = started.elapsed();
    let started = std::time::Instant::now();
    scanned(
        &mut scan,
        &c.l,
        "plan --refresh=false",
        &["plan"],
        &["--var", &tool, "--refresh=false"],
    )
    .expect(0);
    eprintln!(
        "eks-p4d plan: {refreshing:.2?} with refresh, {:.2?} offline",
        started.elapsed()
    );
    let runs = scanned(&mut scan, &c.l, "runs --json", &["runs"], &["--json"]).expect(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let run = runs
        .as_array()
        .and_then(|r| r.iter().find(|r| r["step"] == "nvidia_smi"))
        .unwrap_or_else(|| panic!("no nvidia_smi run in {runs}"));
    let run_id = run["id"].as_str().unwrap_or_default().to_string();
    let digest = run["inputs_digest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    scanned(&mut scan, &c.l, "runs", &["runs"], &[]).expect(0);
    let repository = scanned_output(&mut scan, &c.l, "images.repository_uri");
    scanned(
        &mut scan,
        &c.l,
        "report",
        &["report"],
        &["-o", "report.html"],
    )
    .expect(0);
    scan.tree_as_of("before destroy", c.l.p.path(), |_| false);
    scanned(
        &mut scan,
        &c.l,
        "destroy",
        &["destroy"],
        &["--auto-approve", "--var", &tool],
    )
    .expect(0);
    scan.tree_as_of("after destroy", c.l.p.path(), |_| false);
    // The token, in clear or encoded, in nothing flow printed or wrote:
    // output, state, logs, history, the report, the processes. Each kind
    // of place has a control flow wrote there: the token's fingerprint
    // under the key flow made (state keeps the Secret's input sealed), the
    // capture flow logged with the value read back from state, the run's
    // id and inputs digest from the history, the image build's script
    // (`sh /dev/fd/3`) and the repository flow resolved into its
    // environment.
    let sealed = fingerprint(&c.l.p.config_dir(), token);
    let captured = format!("captured driver_version = {driver}");
    scan.control(Kind::State, "the token's fingerprint", &sealed)
        .control(Kind::Backups, "the token's fingerprint", &sealed)
        .control(Kind::StepLogs, "nvidia-smi's capture", &captured)
        .control(Kind::RunHistory, "nvidia-smi's run id", &run_id)
        .control(Kind::RunHistory, "nvidia-smi's inputs digest", &digest)
        .control(Kind::Report, "nvidia-smi's run id", &run_id)
        .control_in(Kind::Output, "apply", "nvidia-smi's capture", &captured)
        .control_in(Kind::Output, "runs", "nvidia-smi's run id", &run_id)
        .control_in(
            Kind::Cmdline,
            "apply",
            "a descendant of flow running the image build's script",
            "sh /dev/fd/3",
        )
        .control_in(
            Kind::Environ,
            "apply",
            "the repository flow put into the image build's environment",
            format!("REPO_URI={repository}"),
        );
    scan.assert_clean(token);
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
    let c = EksCloud::start("torchrec-eks.toml", "torchrec-cluster", &[]);
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
