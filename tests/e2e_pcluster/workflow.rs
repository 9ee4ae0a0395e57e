//! `workflows/pcluster-p5.toml`, the shipped file, applied whole by the
//! `flow` binary on the local cloud whose instances are hosts (issue 39
//! part 2): under `scripts/local-hosts` (tests/support/hosts.rs), with the
//! local cloud answering over HTTPS (a test CA made here, trusted through
//! `AWS_CA_BUNDLE` by flow and by pcluster's boto3), pcluster's validators
//! running, its official AMI looked up, the head node reached at its public
//! address, the queue's dynamic nodes powered up by Slurm's power saving
//! (scripts/local-cloud/cloud_pcluster_power.py) and the FSx file system
//! at /fsx on every node. The NCCL check runs the sbatch script as shipped
//! with the real Open MPI across 4 nodes (only all_reduce_perf, a GPU
//! program, is a stand-in that says so: tests/fixtures/pcluster/
//! all_reduce_perf); the DDP test case is cloned from a local git
//! repository holding the vendored ddp.py, and trained for real with
//! Debian's PyTorch (CPU, gloo) on 4 nodes × 4 processes.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::hosts::{Hosts, ensure_installed, import_key_pair, keygen};
use super::https::test_ca;
use super::support::moto::Moto;
use super::support::{Project, workspace_root};

/// The nodes the jobs run on (the queue's MaxCount).
const NODES: usize = 4;
/// Training epochs (few: 16 processes share this machine's cores).
const EPOCHS: u32 = 3;
/// The capacity reservation the queue targets.
const RESERVATION: &str = "cr-0a5b7c9d1e3f50001";

/// Debian's PyTorch for the system Python (`python3-torch`), installed
/// when `import torch` fails (before the sealed namespace: nothing can be
/// fetched inside).
fn ensure_pytorch() {
    let works = || {
        Command::new("/usr/bin/python3")
            .args(["-c", "import torch.distributed.run"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works() {
        return;
    }
    eprintln!("installing Debian's python3-torch (CPU PyTorch for the training)");
    let _ = Command::new("apt-get").args(["update", "-qq"]).status();
    let install = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "python3-torch",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    assert!(
        works(),
        "`/usr/bin/python3 -c 'import torch'` fails and `apt-get install python3-torch` did not fix it ({install:?})"
    );
}

/// A git repository in `dir` holding the vendored ddp.py where the test
/// case has it in awsome-distributed-training; its commit.
fn test_case_repository(dir: &Path) -> String {
    let case = dir.join("3.test_cases/pytorch/cpu-ddp");
    std::fs::create_dir_all(&case).expect("mkdir");
    std::fs::copy(
        workspace_root().join("workflows/docker/cpu-ddp/ddp.py"),
        case.join("ddp.py"),
    )
    .expect("copy ddp.py");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=flow test",
                "-c",
                "user.email=test@flow.invalid",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&[
        "commit",
        "-q",
        "-m",
        "ddp.py of awsome-distributed-training",
    ]);
    git(&["rev-parse", "HEAD"])
}

/// The cluster's configuration as flow gave it to pcluster: the shipped
/// file with the step's recorded `substitute` filled in.
fn filled_config(p: &Project, env: &[(&str, &str)], wf: &str, state: &str) -> String {
    let args = ["state", "show", wf, "cluster", "--state-dir", state];
    let rec: serde_json::Value =
        serde_json::from_str(&p.run_env(&args, env).expect(0).stdout).expect("JSON");
    let mut config = std::fs::read_to_string(
        workspace_root().join("workflows/pcluster/distributed-training-p5.yaml"),
    )
    .expect("the cluster configuration");
    for (placeholder, value) in rec["inputs"]["substitute"].as_object().expect("substitute") {
        config = config.replace(placeholder, value.as_str().expect("a value"));
    }
    config
}

/// `pcluster create-cluster` of CONFIG as a second cluster, then
/// `describe-cluster` every second until CREATE_COMPLETE: its seconds.
/// The cluster is deleted again (and waited for) before this returns.
fn pcluster_by_hand(p: &Project, env: &[(&str, &str)], config: &str) -> f64 {
    let file = p.write("by-hand.yaml", config);
    let pcluster = |args: &[&str]| {
        let out = Command::new(super::pcluster())
            .args(args)
            .args(["--region", "us-east-1"])
            .envs(env.iter().copied())
            .output()
            .expect("run pcluster");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success(), text)
    };
    let status = || {
        let (_, text) = pcluster(&["describe-cluster", "--cluster-name", "by-hand"]);
        serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default()["clusterStatus"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let started = Instant::now();
    let file = file.to_string_lossy().into_owned();
    let (ok, text) = pcluster(&[
        "create-cluster",
        "--cluster-name",
        "by-hand",
        "--cluster-configuration",
        &file,
    ]);
    assert!(ok, "pcluster create-cluster by hand: {text}");
    super::support::wait_until(std::time::Duration::from_secs(300), "by-hand", || {
        status() == "CREATE_COMPLETE"
    });
    let seconds = started.elapsed().as_secs_f64();
    // moto's CloudFormation deletes at once, so pcluster's look at the
    // stack after its DeleteStack finds none and says the cluster "does
    // not exist": what counts is that it is gone.
    pcluster(&["delete-cluster", "--cluster-name", "by-hand"]);
    super::support::wait_until(std::time::Duration::from_secs(300), "by-hand gone", || {
        status().is_empty()
    });
    seconds
}

#[test]
fn the_pcluster_p5_workflow_applies_whole_on_hosts() {
    for (command, package) in [
        ("slurmctld", "slurmctld"),
        ("slurmd", "slurmd"),
        ("munged", "munge"),
        ("srun", "slurm-client"),
        ("mpirun", "openmpi-bin"),
        ("openssl", "openssl"),
    ] {
        ensure_installed(command, package);
    }
    ensure_pytorch();
    let p = Project::new();
    let tls = p.path().join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    let https = "10.0.0.1";
    let (ca, cert, key_file) = test_ca(&tls, https);
    let repo = p.path().join("awsome-distributed-training");
    let commit = test_case_repository(&repo);

    let hosts = Hosts::start();
    let _inside = super::enter(&hosts);
    let moto = Moto::start_with(&[
        ("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy()),
        ("FLOW_LOCAL_CLOUD_HTTPS", &format!("{https}:443")),
        ("FLOW_LOCAL_CLOUD_TLS_CERT", &cert.to_string_lossy()),
        ("FLOW_LOCAL_CLOUD_TLS_KEY", &key_file.to_string_lossy()),
        ("FLOW_LOCAL_CLOUD_TLS_CA", &ca.to_string_lossy()),
        // AWS's managed policies exist in every account (the cluster's
        // AdditionalIamPolicies name three; pcluster checks them).
        ("MOTO_IAM_LOAD_MANAGED_POLICIES", "true"),
    ]);
    super::support::wait_until(
        std::time::Duration::from_secs(60),
        "the local cloud's HTTPS port",
        || std::net::TcpStream::connect((https, 443)).is_ok(),
    );
    let _log = super::live::LogOnFailure(&moto);
    let key = keygen(p.path(), "flow-key");
    import_key_pair(&moto, "flow-key", &key);
    moto.capacity_reservation(
        RESERVATION,
        "p5.48xlarge",
        "us-east-1a",
        NODES as u32,
        false,
        None,
    );

    let mut env = moto.env_for(&format!("https://{https}"));
    env.push(("AWS_CA_BUNDLE".into(), ca.to_string_lossy().into_owned()));
    env.push(("FLOW_PCLUSTER".into(), super::pcluster()));
    env.push((
        "FLOW_SSH_PRIVATE_KEY".into(),
        std::fs::read_to_string(&key).expect("private key"),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // The shipped workflow, copied as a user's checkout: its cluster
    // configuration is edited below, as a user edits it.
    let workflows = p.path().join("workflows");
    super::support::copy_dir(&workspace_root().join("workflows"), &workflows);
    let wf = workflows.join("pcluster-p5.toml");
    let wf = wf.to_string_lossy().into_owned();
    let state = p.path().join("state").to_string_lossy().into_owned();
    let stand_in = workspace_root().join("tests/fixtures/pcluster/all_reduce_perf");
    // Debian's PyTorch for the training (see the fixture's header).
    let python = workspace_root().join("tests/fixtures/pcluster/python3-torch");
    let vars = [
        "region=us-east-1".to_string(),
        "availability_zone=us-east-1a".into(),
        "key_name=flow-key".into(),
        format!("capacity_reservation_id={RESERVATION}"),
        format!("num_nodes={NODES}"),
        format!("epochs={EPOCHS}"),
        format!("all_reduce_perf={}", stand_in.display()),
        format!("test_case_repository={}", repo.display()),
        format!("test_case_commit={commit}"),
        format!("pytorch_python={}", python.display()),
    ];
    let flow = |command: &[&str]| {
        let mut args: Vec<&str> = command.to_vec();
        args.push(&wf);
        args.extend(["--state-dir", &state]);
        for v in &vars {
            args.extend(["--var", v.as_str()]);
        }
        p.run_env(&args, &env)
    };

    let started = Instant::now();
    let apply = flow(&["apply", "--auto-approve"]);
    let apply_s = started.elapsed().as_secs_f64();
    assert_eq!(apply.code, 0, "{}", apply.all());
    eprintln!("pcluster-p5 apply: {apply_s:.1} s");
    for line in apply.all().lines().filter(|l| l.contains("✓ created in")) {
        eprintln!("  {line}");
    }
    let outputs = |step: &str| {
        let args = [
            "state",
            "show",
            wf.as_str(),
            step,
            "--state-dir",
            state.as_str(),
        ];
        let run = p.run_env(&args, &env).expect(0);
        let rec: serde_json::Value = serde_json::from_str(&run.stdout).expect("state show JSON");
        assert_eq!(rec["status"], "applied", "{step}: {rec}");
        rec["outputs"].clone()
    };
    let number = |v: &serde_json::Value| -> f64 {
        v.as_f64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or_else(|| panic!("not a number: {v}"))
    };
    let cluster = outputs("cluster");
    assert_eq!(cluster["status"], "CREATE_COMPLETE", "{cluster}");
    let nccl = outputs("nccl");
    assert!(number(&nccl["busbw"]) > 0.0, "{nccl}");
    let train = outputs("train");
    assert!(
        number(&train["last_epoch"]) >= f64::from(EPOCHS - 1),
        "{train}"
    );
    outputs("ddp_setup");

    // The head node, reached at its public address as flow reached it.
    let head_ip = cluster["head_node_ip"]
        .as_str()
        .expect("head node ip")
        .to_string();
    let public = cluster["head_node_public_ip"].as_str().expect("public ip");
    assert!(!public.is_empty() && public != head_ip, "{cluster}");
    let host_key = hosts.at(&head_ip).expect("the head node is a host")["host_key"].clone();
    let head = serde_json::json!({"ip": public, "user": "ec2-user", "host_key": host_key});
    let on_head = |command: &str| {
        let out = hosts.ssh(&head, &key, command);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{command}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let id = |job: &serde_json::Value| job.as_str().map_or_else(|| job.to_string(), str::to_string);
    // Slurm's own account of each job: its nodes' addresses, and how long
    // it took from submission to its end.
    let job = |step: &str, out: &serde_json::Value| {
        let id = id(&out["job_id"]);
        let show = on_head(&format!("scontrol show job -o {id}"));
        let field = |name: &str| {
            show.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name} in {show}"))
                .to_string()
        };
        let nodes = on_head(&format!(
            "for n in $(scontrol show hostnames {}); do scontrol show node -o $n; done",
            field("NodeList")
        ));
        let mut addresses: Vec<String> = nodes
            .split_whitespace()
            .filter_map(|kv| kv.strip_prefix("NodeAddr="))
            .map(str::to_string)
            .collect();
        addresses.sort();
        addresses.dedup();
        let seconds = |t: &str| {
            let t = humantime::parse_rfc3339_weak(&t.replace('T', " ")).expect("a Slurm time");
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
        };
        let slurm_s = seconds(&field("EndTime")) - seconds(&field("SubmitTime"));
        eprintln!("{step}: Slurm job {id}, submitted to ended {slurm_s} s, on {addresses:?}");
        (id, addresses)
    };
    let running: Vec<String> = hosts
        .list()
        .iter()
        .map(|h| h["ip"].as_str().unwrap().to_string())
        .collect();
    let mut jobs = Vec::new();
    for (step, out) in [("nccl", &nccl), ("train", &train)] {
        let (id, addresses) = job(step, out);
        assert_eq!(addresses.len(), NODES, "{step} ran on {addresses:?}");
        for a in &addresses {
            assert!(
                running.contains(a),
                "{step}'s node {a} is no running host: {running:?}"
            );
            assert_ne!(*a, head_ip, "{step} ran on the head node");
        }
        jobs.push(id);
    }
    // Open MPI's first mpirun line printed each node's hostname and
    // board_asset_tag: the 4 instances the resume program launched, one per
    // node; the stand-in said it is one.
    let nccl_out = on_head(&format!("cat /fsx/nccl-all_reduce_perf_{}.out", jobs[0]));
    let mut instances: Vec<&str> = nccl_out
        .lines()
        .filter_map(|l| l.split_once(" ➡️ ").map(|(_, id)| id.trim()))
        .collect();
    instances.sort();
    instances.dedup();
    let hosts_now = hosts.list();
    assert_eq!(instances.len(), NODES, "{nccl_out}");
    for i in &instances {
        assert!(
            hosts_now.iter().any(|h| h["id"] == *i),
            "{i} is no host: {nccl_out}"
        );
    }
    assert!(nccl_out.contains("STAND-IN all_reduce_perf"), "{nccl_out}");
    // The training: 4 processes per node on 4 nodes, every rank at the
    // last epoch, reading the ddp.py ddp_setup put on /fsx from one node.
    let train_out = on_head(&format!("cat /fsx/cpu-ddp/logs/cpu-ddp_{}.out", jobs[1]));
    for rank in 0..NODES * 4 {
        let line = format!("[RANK {rank}] Epoch {} |", EPOCHS - 1);
        assert!(train_out.contains(&line), "{line} missing:\n{train_out}");
    }
    assert!(
        !train_out.contains(&format!("[RANK {}]", NODES * 4)),
        "{train_out}"
    );

    // pcluster's own create, run by hand as the runbook runs it, with the
    // configuration flow filled: flow's overhead is its step's time less
    // this one.
    let filled = filled_config(&p, &env, &wf, &state);
    let direct = pcluster_by_hand(&p, &env, &filled);
    eprintln!("cluster: pcluster create-cluster to CREATE_COMPLETE by hand {direct:.1} s");

    let plan = flow(&["plan", "--detailed-exitcode"]);
    assert_eq!(plan.code, 0, "{}", plan.all());

    // The queue's MaxCount 4 → 3 in the workflow's configuration, with
    // every validator on: pcluster needs the compute fleet stopped; flow
    // stops it (the powered-up nodes terminated), updates, starts it again.
    let yaml = workflows.join("pcluster/distributed-training-p5.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(text.contains("MaxCount: 4 #"), "{text}");
    std::fs::write(&yaml, text.replacen("MaxCount: 4 #", "MaxCount: 3 #", 1)).unwrap();
    let plan = flow(&["plan", "--detailed-exitcode"]);
    assert_eq!(plan.code, 2, "{}", plan.all());
    assert!(
        plan.stdout
            .contains("queues change: flow stops the compute fleet, updates, and starts it again"),
        "{}",
        plan.stdout
    );
    // The jobs reach the head node, which an update keeps: none of them is
    // planned anew.
    assert!(
        plan.stdout
            .contains("Plan: 0 to create, 1 to update, 0 to replace, 0 to delete"),
        "{}",
        plan.stdout
    );
    // kill -9 of flow inside the update: once pcluster's compute fleet
    // was asked to stop (flow's stop answered) and before the update went
    // to CloudFormation (the stack not yet updating), then apply again.
    let fleet = || {
        let item = moto.json_call(
            "dynamodb",
            "DynamoDB_20120810.GetItem",
            r#"{"TableName": "parallelcluster-ml-p5", "Key": {"Id": {"S": "COMPUTE_FLEET"}}}"#,
        );
        item["Item"]["Data"]["M"]["status"]["S"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let stack = || {
        let xml = moto.query_call(
            "cloudformation",
            "Action=DescribeStacks&StackName=ml-p5&Version=2010-05-15",
        );
        super::support::moto::between_all(&xml, "<StackStatus>", "</StackStatus>").join(",")
    };
    assert_eq!(fleet(), "RUNNING");
    let started = Instant::now();
    let mut args: Vec<&str> = vec!["apply", "--auto-approve", &wf, "--state-dir", &state];
    for v in &vars {
        args.extend(["--var", v.as_str()]);
    }
    let mut killed = p.cmd(&args);
    let killed = killed
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flow");
    super::support::wait_until(
        std::time::Duration::from_secs(180),
        "the compute fleet asked to stop",
        || fleet() != "RUNNING",
    );
    let (fleet_at_kill, stack_at_kill) = (fleet(), stack());
    super::support::signal(&killed, 9);
    let killed = super::support::finish(killed);
    eprintln!("kill -9 inside the update: fleet {fleet_at_kill}, stack {stack_at_kill}");
    assert_ne!(killed.code, 0, "{}", killed.all());
    assert!(
        killed
            .all()
            .contains("stopping the compute fleet for the update"),
        "{}",
        killed.all()
    );
    assert_eq!(
        stack_at_kill, "CREATE_COMPLETE",
        "the kill came after the update's call"
    );
    let update = flow(&["apply", "--auto-approve"]);
    eprintln!(
        "pcluster-p5 update (MaxCount 4 → 3) across a kill -9: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(update.code, 0, "{}", update.all());
    let all = update.all();
    for said in ["MaxCount \"4\" → \"3\"", "starting the compute fleet again"] {
        assert!(all.contains(said), "{said:?} missing from\n{all}");
    }
    assert_eq!(fleet(), "RUNNING");
    assert_eq!(stack(), "UPDATE_COMPLETE");
    let updated = outputs("cluster");
    assert_eq!(updated["status"], "UPDATE_COMPLETE", "{updated}");
    assert_eq!(updated["compute_fleet_status"], "RUNNING", "{updated}");
    let plan = flow(&["plan", "--detailed-exitcode"]);
    assert_eq!(plan.code, 0, "{}", plan.all());

    // Another state adopts the live cluster as it is: what its inputs read
    // first (the VPC's stack, the file system), then the cluster.
    let other = p.path().join("state-import").to_string_lossy().into_owned();
    let fsx_id = outputs("fsx")["file_system_id"]
        .as_str()
        .expect("file system id")
        .to_string();
    for (step, id) in [
        ("vpc", "ml-p5-vpc"),
        ("fsx", fsx_id.as_str()),
        ("cluster", "ml-p5"),
    ] {
        let mut args = vec![
            "import",
            wf.as_str(),
            step,
            id,
            "--state-dir",
            other.as_str(),
        ];
        for v in &vars {
            args.extend(["--var", v.as_str()]);
        }
        let import = p.run_env(&args, &env);
        assert_eq!(import.code, 0, "import {step} {id}: {}", import.all());
    }
    let show = p
        .run_env(
            &[
                "state",
                "show",
                wf.as_str(),
                "cluster",
                "--state-dir",
                other.as_str(),
            ],
            &env,
        )
        .expect(0);
    let imported: serde_json::Value = serde_json::from_str(&show.stdout).expect("state show JSON");
    assert_eq!(
        imported["outputs"]["status"], "UPDATE_COMPLETE",
        "{imported}"
    );
    assert_eq!(
        imported["outputs"]["head_node_instance_id"], updated["head_node_instance_id"],
        "{imported}"
    );

    let started = Instant::now();
    let destroy = flow(&["destroy", "--auto-approve"]);
    eprintln!(
        "pcluster-p5 destroy: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    assert!(hosts.list().is_empty(), "destroy left {:?}", hosts.list());
    let xml = moto.query_call("cloudformation", "Action=ListStacks&Version=2010-05-15");
    let live: Vec<String> =
        super::support::moto::between_all(&xml, "<StackStatus>", "</StackStatus>")
            .into_iter()
            .filter(|s| s != "DELETE_COMPLETE")
            .collect();
    assert!(live.is_empty(), "stacks left: {live:?}");
    assert!(moto.file_systems().is_empty(), "{:?}", moto.file_systems());
}
