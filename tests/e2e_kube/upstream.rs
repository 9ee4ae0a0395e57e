//! The runbook's published files as a user brings them
//! (tests/fixtures/upstream/, unmodified: their digests are checked), wired
//! by tests/fixtures/upstream/runbook.toml, the README's "bring your
//! runbook" workflow: validated and planned whole, then applied whole and
//! destroyed: the AWS half (the multi-AZ VPC template and the eksctl config
//! without `vpc:`) on moto, the Kubernetes half (the NCCL MPIJob of
//! kubeflow.org/v2beta1 and the FSDP PyTorchJob) on a real kube-apiserver
//! that stands in for the EKS cluster's, with the operators the runbook
//! assumes installed from their vendored manifests.

use sha2::{Digest, Sha256};

use crate::support::kube::{KubeServer, Options};
use crate::support::moto::Moto;
use crate::support::secret_scan::{Kind, SecretScan, fingerprint};
use crate::support::{Project, copy_dir, workspace_root};

fn upstream() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/upstream")
}

/// The files as tests/fixtures/upstream/SOURCE records them: name and digest.
fn recorded() -> Vec<(String, String)> {
    let source = std::fs::read_to_string(upstream().join("SOURCE")).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let digest = line.trim().strip_prefix("sha256 ")?;
            let name = lines[i - 3].trim();
            Some((name.to_string(), digest.to_string()))
        })
        .collect()
}

#[test]
fn the_published_files_are_copied_unmodified() {
    let files = recorded();
    assert_eq!(files.len(), 4, "{files:?}");
    for (name, digest) in files {
        let bytes = std::fs::read(upstream().join(&name)).unwrap();
        assert_eq!(
            hex::encode(Sha256::digest(&bytes)),
            digest,
            "{name} differs from the published file"
        );
    }
}

/// What the runbook assumes the cluster already runs ("Kubeflow MPI operator
/// deployed to your cluster", the training operator), installed by flow from
/// the vendored manifests, unchanged: the MPI operator v0.8.0 (MPIJob
/// kubeflow.org/v2beta1) and the training operator's PyTorchJob CRD (its
/// MPIJob CRD has the same name; see workflows/manifests/mpi-operator/SOURCE).
/// The test cluster's driver plays both controllers.
const OPERATORS: &str = r#"
[workflow]
name = "operators"

[steps.mpi_operator]
provider = "kube.manifest"
[steps.mpi_operator.inputs]
kubeconfig = "KUBECONFIG"
files = ["mpi-operator/mpi-operator.yaml"]

[steps.pytorchjob_crd]
provider = "kube.manifest"
[steps.pytorchjob_crd.inputs]
kubeconfig = "KUBECONFIG"
files = ["training-operator/base/crds/kubeflow.org_pytorchjobs.yaml"]
"#;

const TOKEN: &str = "hf_secret_for_the_test_only";

#[test]
fn the_runbook_files_run_unmodified() {
    let moto = Moto::start();
    let k = KubeServer::start_with(Options {
        eks_sts: Some(moto.addr),
        eks_cluster: "eks-p4de-odcr".into(),
    });
    // The reservation the runbook's p4de-odcr group launches into (the
    // workflow's default id), in the group's zone (PLACEHOLDER_AZ_2): the
    // plan and create read it.
    moto.capacity_reservation(
        "cr-0123456789abcdef0",
        "p4de.24xlarge",
        "us-east-1b",
        2,
        false,
        None,
    );
    let p = Project::new();
    let ca = p.write("api-server-ca.pem", &k.ca_pem);
    let ca = ca.to_string_lossy().into_owned();
    let env = moto.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("HF_TOKEN", TOKEN));
    // moto's clusters have no API server: the connection the eks.cluster
    // step hands on reaches the test one, with a token signed for the cluster.
    env.push(("FLOW_EKS_API_SERVER", &k.url));
    env.push(("FLOW_EKS_API_SERVER_CA", &ca));
    for (name, _) in recorded() {
        let text = std::fs::read_to_string(upstream().join(&name)).unwrap();
        p.write(&name, &text);
    }
    let workflow = std::fs::read_to_string(upstream().join("runbook.toml")).unwrap();
    assert!(workflow.lines().count() < 60, "the README's workflow grew");
    let readme = std::fs::read_to_string(upstream().join("../../../README.md")).unwrap();
    assert!(
        readme.contains(&format!("```toml\n{workflow}```")),
        "README's \"Bring your runbook\" shows another workflow than tests/fixtures/upstream/runbook.toml"
    );
    p.write("runbook.toml", &workflow);
    // Every command goes through the secret scan (see its end). The test
    // gives flow the token; flow starts no process here (no exec step:
    // AWS and Kubernetes through their APIs).
    let mut scan = SecretScan::new();
    scan.input("runbook.toml", &workflow)
        .input("operators.toml", OPERATORS)
        .secret_env(&["HF_TOKEN"], &[])
        .without_control(
            Kind::Cmdline,
            "flow starts no process in this workflow: its own command line, read in every command, is the test's",
        )
        .without_control(
            Kind::Environ,
            "flow starts no process in this workflow: its own environment, read in every command, is the test's",
        );
    let flow = |scan: &mut SecretScan, args: &[&str]| {
        let mut cmd = p.cmd(args);
        cmd.envs(env.iter().copied());
        scan.command(&args.join(" "), cmd)
    };

    flow(&mut scan, &["validate", "runbook.toml"]).expect(0);
    let plan = flow(&mut scan, &["plan", "runbook.toml"]).expect(0);
    for line in [
        "+ cluster eks-p4de-odcr (Kubernetes 1.32, subnets (known after apply)",
        "+ managed node group p4de-odcr: p4de.24xlarge × 0..10 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123456789abcdef0",
        "+ managed node group sys: c5.2xlarge × 1..1 (desired 1)",
        "(1 × c5.2xlarge, 2 × p4de.24xlarge)",
        "(on-demand, us-east-1 prices of ",
    ] {
        assert!(
            plan.stdout.contains(line),
            "{line} missing from\n{}",
            plan.stdout
        );
    }

    // The AWS half first: the VPC template's subnets, split, become the cluster's.
    let apply = flow(
        &mut scan,
        &[
            "apply",
            "runbook.toml",
            "--target",
            "cluster",
            "--auto-approve",
        ],
    )
    .expect(0);
    assert!(apply.stdout.contains("2 created"), "{}", apply.all());
    let private = flow(&mut scan, &["output", "runbook.toml", "vpc.PrivateSubnets"])
        .expect(0)
        .stdout
        .trim()
        .to_string();
    let private: Vec<&str> = private.split(',').collect();
    assert_eq!(private.len(), 2, "{private:?}");
    let (_, cluster) = moto.rest_call("eks", "GET", "/clusters/eks-p4de-odcr", "");
    let cluster: serde_json::Value = serde_json::from_str(&cluster).unwrap();
    assert_eq!(
        cluster["cluster"]["resourcesVpcConfig"]["subnetIds"],
        serde_json::json!(private),
        "{cluster}"
    );
    let (_, ng) = moto.rest_call(
        "eks",
        "GET",
        "/clusters/eks-p4de-odcr/node-groups/p4de-odcr",
        "",
    );
    let ng: serde_json::Value = serde_json::from_str(&ng).unwrap();
    assert_eq!(ng["nodegroup"]["subnets"], serde_json::json!(private));
    // No VPC of flow's: the step's subnets won.
    assert!(
        !moto
            .stacks()
            .contains(&"flow-eks-eks-p4de-odcr-vpc".to_string())
    );

    // The operators the runbook assumes, then the rest of the runbook: the
    // NCCL test and the FSDP job, through the cluster step's connection.
    let manifests = workspace_root().join("workflows/manifests");
    for dir in ["mpi-operator", "training-operator"] {
        copy_dir(&manifests.join(dir), &p.path().join(dir));
    }
    p.write(
        "operators.toml",
        &OPERATORS.replace("KUBECONFIG", &k.kubeconfig_path()),
    );
    flow(&mut scan, &["apply", "operators.toml", "--auto-approve"]).expect(0);
    let apply = flow(&mut scan, &["apply", "runbook.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("2 created"), "{}", apply.all());

    // The MPIJob as published, its one placeholder filled and nothing else
    // touched: the container's own `$PATH` and `$LD_LIBRARY_PATH` stay.
    let nccl = k
        .get("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs/nccl-tests")
        .expect("the NCCL MPIJob, kubeflow.org/v2beta1");
    let launcher =
        &nccl["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0];
    assert_eq!(
        launcher["image"],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:nccl"
    );
    assert_eq!(
        launcher["env"][0]["value"],
        "$PATH:/opt/amazon/efa/bin:/usr/bin"
    );
    assert!(
        launcher["env"][1]["value"]
            .as_str()
            .unwrap()
            .ends_with(":$LD_LIBRARY_PATH")
    );
    let worker = &nccl["spec"]["mpiReplicaSpecs"]["Worker"];
    assert_eq!(worker["replicas"], 2);
    assert_eq!(
        worker["template"]["spec"]["containers"][0]["image"],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:nccl"
    );
    // The job ran to its end and its log passed the step's success pattern.
    assert!(
        nccl["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Succeeded" && c["status"] == "True"),
        "{nccl}"
    );

    // The FSDP template, its envsubst-style placeholders filled as numbers
    // where the schema wants numbers.
    let fsdp = k
        .get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/fsdp")
        .expect("the FSDP PyTorchJob");
    assert_eq!(fsdp["spec"]["elasticPolicy"]["maxReplicas"], 2);
    let worker = &fsdp["spec"]["pytorchReplicaSpecs"]["Worker"];
    assert_eq!(worker["replicas"], 2);
    let container = &worker["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:fsdp"
    );
    // Quantities: the server keeps them as strings.
    assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], "8");
    assert_eq!(
        container["resources"]["limits"]["vpc.amazonaws.com/efa"],
        "4"
    );
    let command: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(command.contains(&"--nproc_per_node=8"), "{command:?}");
    assert!(command.contains(&"--nnodes=1:2"), "{command:?}");
    // The published template puts the token in the pod's environment: that
    // is where it goes, and nowhere of flow's.
    let token_env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "HF_TOKEN")
        .expect("HF_TOKEN in the pod's environment");
    assert_eq!(token_env["value"], TOKEN);

    // The NCCL job's run, read back from the history.
    let runs = flow(&mut scan, &["runs", "runbook.toml", "--json"]).expect(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let run = runs
        .as_array()
        .and_then(|r| r.iter().find(|r| r["step"] == "nccl"))
        .unwrap_or_else(|| panic!("no nccl run in {runs}"));
    let run_id = run["id"].as_str().unwrap_or_default().to_string();
    let digest = run["inputs_digest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    flow(&mut scan, &["runs", "runbook.toml"]).expect(0);
    scan.tree_as_of("before destroy", p.path(), |_| false);

    let d = flow(&mut scan, &["destroy", "runbook.toml", "--auto-approve"]).expect(0);
    assert!(d.stdout.contains("4 deleted"), "{}", d.all());
    assert!(
        k.get("/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs/nccl-tests")
            .is_none()
    );
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/fsdp")
            .is_none()
    );
    assert!(moto.stacks().is_empty(), "{:?}", moto.stacks());
    let xml = moto.query_call("ec2", "Action=DescribeVpcs&Version=2016-11-15");
    assert_eq!(
        xml.matches("<vpcId>").count(),
        1,
        "only the default VPC is left: {xml}"
    );
    flow(&mut scan, &["destroy", "operators.toml", "--auto-approve"]).expect(0);

    scan.tree_as_of("after destroy", p.path(), |_| false);

    // The token, in clear or encoded, in nothing flow printed or wrote.
    // Each kind of place has a control flow wrote there: the token's
    // fingerprint under the key flow made (state keeps the FSDP job's
    // substitution sealed), the NCCL run's id and inputs digest from the
    // history, and the remark that opens a job step's log.
    let sealed = fingerprint(&p.config_dir(), TOKEN);
    scan.control(Kind::State, "the token's fingerprint", &sealed)
        .control(Kind::Backups, "the token's fingerprint", &sealed)
        .control(
            Kind::StepLogs,
            "flow's remark opening a job step's log",
            "[flow] create (kube.job)",
        )
        .control(Kind::RunHistory, "the NCCL run's id", &run_id)
        .control(Kind::RunHistory, "the NCCL run's inputs digest", &digest)
        .control_in(
            Kind::Output,
            "runs runbook.toml",
            "the NCCL run's id",
            &run_id,
        );
    scan.assert_clean(TOKEN);
}
