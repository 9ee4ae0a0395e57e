//! `batch.node_check`: every node of a Batch multi-node parallel job
//! checked on its own instance, through the `flow` binary against moto.
//!
//! The local cloud gives moto's MNP jobs their nodes (`JOBID#N`, each on an
//! instance of the compute environment: scripts/local-cloud/
//! cloud_batch_mnp.py) and writes each node's log stream
//! (batch_compute.py, batch_nodes.py) with the faults this test plants by
//! node index in the fault table the local Slurm fleet's stand-ins read
//! (lines "NODE KEY VALUE", NODE `#N`). The assertions are on what flow
//! named, checked against what Batch and EC2 say of that node.

use serde_json::{Value, json};

use std::time::Duration;

use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::{BatchCompute, Moto};
use crate::support::{finish, signal, wait_until};

const NODES: usize = 8;

/// The Batch stacks of the Batch chain and a node check of their queue,
/// with `policy`.
fn workflow(policy: &str) -> String {
    format!(
        r#"
[workflow]
name = "batch-fleet"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.batch]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.batch.inputs]
stack_name = "flow-batch"
template = "batch.yaml"
capabilities = ["CAPABILITY_NAMED_IAM"]
parameters = {{ VPCStackParameter = "flow-vpc" }}

[steps.health]
provider = "batch.node_check"
[steps.health.inputs]
job_queue = "${{steps.batch.outputs.DistributedDeepLearningJQ}}"
job_definition = "node-health"
num_nodes = {NODES}
policy = "{policy}"
max_bad_fraction = 0.5

[steps.health.inputs.check]
command = ["/bin/sh", "-c", "nvidia-smi; fi_info -p efa -t FI_EP_RDM; dcgmi diag -r 2; all_reduce_perf -b 8 -e 1G -g 8"]
gpus = "instance-type"
efa = "instance-type"
dcgm = true
parse = "nccl-tests"
expect = {{ busbw = ">= 10" }}
"#
    )
}

/// moto, the Batch compute emulator reading the test's fault table, the
/// project, and the multi-node job definition the check runs (registered
/// as a user would with RegisterJobDefinition).
struct Fleet {
    moto: Moto,
    proxy: Option<FaultProxy>,
    _compute: BatchCompute,
    a: Aws,
    faults: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet::start(false)
    }

    /// With `proxy`, flow reaches moto through a fault proxy.
    fn start(proxy: bool) -> Fleet {
        let moto = Moto::start();
        let proxy = proxy.then(|| FaultProxy::start(moto.addr));
        let dir = tempfile::tempdir().unwrap();
        let faults = dir.path().join("faults");
        std::fs::write(&faults, "").unwrap();
        let compute = moto.batch_compute_with(&[("FLOW_TEST_FAULTS", faults.to_str().unwrap())]);
        let a = Aws::new(&moto, proxy.as_ref().map(|p| p.endpoint()).as_deref());
        a.p.write("wf.toml", &workflow("fail"));
        let (status, body) = moto.rest_call(
            "batch",
            "POST",
            "/v1/registerjobdefinition",
            &json!({
                "jobDefinitionName": "node-health",
                "type": "multinode",
                "nodeProperties": {"numNodes": 2, "mainNode": 0, "nodeRangeProperties": [
                    {"targetNodes": "0:", "container": {
                        "image": "public.ecr.aws/hpc-cloud/nccl-tests:latest",
                        "vcpus": 96, "memory": 1000000, "command": ["true"]}}]}
            })
            .to_string(),
        );
        assert_eq!(status, 200, "{body}");
        Fleet {
            moto,
            proxy,
            _compute: compute,
            a,
            faults,
            _dir: dir,
        }
    }

    fn plant(&self, table: &str) {
        std::fs::write(&self.faults, table).unwrap();
    }

    fn apply(&self, code: i32) -> String {
        self.a
            .run(&["apply", "wf.toml", "--auto-approve"])
            .expect(code)
            .all()
    }

    /// The verdicts of the newest run of the check, as `flow runs` keeps them.
    fn last_verdicts(&self) -> Value {
        let runs = self.a.run(&["runs", "wf.toml", "--json"]).expect(0);
        let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
        runs.as_array()
            .and_then(|r| r.iter().rfind(|r| r["step"] == "health"))
            .map(|r| r["values"].clone())
            .unwrap_or_else(|| panic!("no run of the check in {runs}"))
    }
}

/// The job a run of the check submitted, from its verdicts.
fn job_of(verdicts: &Value) -> String {
    let any = verdicts.as_object().unwrap().values().next().unwrap();
    let job = any["job"].as_str().unwrap();
    job[..job.find('#').unwrap()].to_string()
}

/// A healthy fleet passes, each node named by its own instance; then one
/// node's GPU 7 gone: that node, and only it, is named bad with its
/// evidence (the value, the instance type's count, nvidia-smi's line) in
/// the step's error and `flow runs`; then one node whose nvidia-smi
/// prints an error instead of its table: unknown, not healthy, failing
/// the step.
#[test]
fn each_node_of_a_multi_node_job_is_checked_and_only_the_planted_one_is_named() {
    let f = Fleet::new();

    // The control: no fault, all healthy, each on its own instance.
    let all = f.apply(0);
    assert!(all.contains("checking its 8 nodes"), "{all}");
    let healthy: Vec<String> = serde_json::from_str(
        &f.a.run(&["output", "wf.toml", "health.healthy", "--json"])
            .expect(0)
            .stdout,
    )
    .unwrap();
    assert_eq!(healthy.len(), NODES, "{healthy:?}");
    assert_eq!(
        f.a.run(&["output", "wf.toml", "health.bad", "--json"])
            .expect(0)
            .stdout
            .trim(),
        "[]"
    );
    let v = f.last_verdicts();
    let job = job_of(&v);
    for index in [0, 5] {
        let instance = f.moto.instance_of_batch_node(&job, index);
        assert_eq!(v[&instance]["node_index"], json!(index), "{v}");
        assert_eq!(v[&instance]["status"], "healthy", "{v}");
        assert_eq!(v[&instance]["instance_type"], "p4d.24xlarge", "{v}");
    }

    // Node 2's instance lists 7 GPUs.
    f.plant("#2 gpus 7\n");
    let all =
        f.a.run(&["apply", "wf.toml", "--auto-approve", "--replace", "health"])
            .expect(1)
            .all();
    let v = f.last_verdicts();
    let job = job_of(&v);
    let planted = f.moto.instance_of_batch_node(&job, 2);
    assert!(all.contains(&format!("bad node(s) {planted}: {planted}: nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8 (line: `|   6  NVIDIA A100-SXM4-40GB")), "{all}");
    let bad: Vec<&String> = v
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, n)| n["status"] != "healthy")
        .map(|(name, _)| name)
        .collect();
    assert_eq!(bad, [&planted], "{v}");
    let seven = &v[&planted];
    assert_eq!(
        (seven["value"].clone(), seven["threshold"].clone()),
        (json!(7), json!(8))
    );
    assert_eq!(seven["job"], format!("{job}#2"));
    assert!(
        seven["line"]
            .as_str()
            .unwrap()
            .starts_with("|   6  NVIDIA A100"),
        "{v}"
    );

    // `flow report` draws both runs in the fleet's heatmap: the planted
    // node's row first, healthy then bad; every other node healthy twice.
    f.a.run(&["report", "wf.toml", "-o", "report.html"])
        .expect(0);
    let page = std::fs::read_to_string(f.a.p.path().join("report.html")).unwrap();
    let from = page
        .find("Fleet health: health</h2>")
        .unwrap_or_else(|| panic!("no fleet section: {page}"));
    let svg = &page[from..from + page[from..].find("</svg>").unwrap()];
    let cells: Vec<(&str, &str)> = svg
        .split("<rect class=\"cell\" ")
        .skip(1)
        .map(|c| {
            let attr = |name: &str| {
                let at = c.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                &c[at..at + c[at..].find('"').unwrap()]
            };
            (attr("data-node"), attr("data-status"))
        })
        .collect();
    assert_eq!(cells.len(), 2 * NODES, "{svg}");
    assert_eq!(
        cells[..2],
        [(planted.as_str(), "healthy"), (planted.as_str(), "bad")],
        "{svg}"
    );
    assert!(
        cells[2..]
            .iter()
            .all(|(n, s)| *n != planted && *s == "healthy"),
        "{svg}"
    );

    // Node 3 with an EFA device missing, node 4's NVLink slow, node 6
    // failing a DCGM test: those three named, each with its own evidence.
    f.plant("#3 efa 3\n#4 busbw 0.25\n#6 dcgm GPU_Memory\n");
    let all = f.apply(1);
    let v = f.last_verdicts();
    let job = job_of(&v);
    let [efa, slow, dcgm] = [3, 4, 6].map(|i| f.moto.instance_of_batch_node(&job, i));
    let mut bad: Vec<&String> = v
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, n)| n["status"] != "healthy")
        .map(|(name, _)| name)
        .collect();
    bad.sort();
    let mut want = vec![&efa, &slow, &dcgm];
    want.sort();
    assert_eq!(bad, want, "{v}");
    assert!(
        all.contains(&format!("{efa}: fi_info lists 3 EFA devices, the EFA interfaces of a p4d.24xlarge is 4 (line: `domain: efa_2-rdm`)")),
        "{all}"
    );
    assert_eq!(
        (v[&efa]["value"].clone(), v[&efa]["threshold"].clone()),
        (json!(3), json!(4))
    );
    assert!(
        all.contains(&format!(
            "{dcgm}: dcgmi diag: GPU Memory Fail - GPU: 5: GPU 5 failed the test on this node"
        )),
        "{all}"
    );
    assert!(
        v[&dcgm]["line"]
            .as_str()
            .unwrap()
            .starts_with("| GPU Memory "),
        "{v}"
    );
    let gate = v[&slow]["reason"].as_str().unwrap();
    assert!(
        gate.starts_with("busbw = ") && gate.ends_with(" is not >= 10"),
        "{v}"
    );
    assert!(
        v[&slow]["line"]
            .as_str()
            .unwrap()
            .starts_with("# Avg bus bandwidth    : "),
        "{v}"
    );

    // Node 5's nvidia-smi prints its failure, not its table: unknown.
    let broken = f._dir.path().join("nvidia-smi-failed.txt");
    std::fs::write(
        &broken,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    )
    .unwrap();
    f.plant(&format!("#5 nvidia-smi {}\n", broken.display()));
    let all = f.apply(1);
    let v = f.last_verdicts();
    let job = job_of(&v);
    let unknown = f.moto.instance_of_batch_node(&job, 5);
    assert!(all.contains(&format!("node(s) {unknown} are unknown, not known healthy: {unknown}: its check's output lists no GPUs: it is not nvidia-smi's (line: `NVIDIA-SMI has failed")), "{all}");
    assert_eq!(v[&unknown]["status"], "unknown", "{v}");
    let not_healthy = v
        .as_object()
        .unwrap()
        .values()
        .filter(|n| n["status"] != "healthy")
        .count();
    assert_eq!(not_healthy, 1, "{v}");
}

/// `cordon`, `drain` and `replace` cannot be carried out on Batch: validate
/// refuses each at its line, before anything runs.
#[test]
fn policies_batch_cannot_carry_out_are_refused_at_validate() {
    let p = crate::support::Project::new();
    for (policy, says) in [
        ("replace", "policy `replace` cannot be carried out on Batch"),
        ("cordon", "policy `cordon` is EKS's (kube.node_check)"),
        ("drain", "policy `drain` is Slurm's (slurm.node_check)"),
    ] {
        let wf = workflow(policy);
        p.write("wf.toml", &wf);
        let line = wf.lines().position(|l| l.starts_with("policy =")).unwrap() + 1;
        let out = p.run(&["validate", "wf.toml"]).expect(1).all();
        assert!(out.contains(says), "{out}");
        assert!(
            out.contains(&format!("wf.toml:{line}:")),
            "{policy}: line {line}: {out}"
        );
    }
}

/// kill -9 while flow finds where the nodes ran (EC2's answer held by the
/// fault proxy after moto gave it): the next apply takes up the job the
/// killed run recorded, judges its nodes and submits no second job.
#[test]
fn a_check_killed_while_it_reads_the_nodes_is_taken_up_without_a_second_job() {
    let f = Fleet::start(true);
    let proxy = f.proxy.as_ref().unwrap();
    proxy.hold("DescribeNetworkInterfaces", Duration::from_secs(60));
    let child = f.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(
        Duration::from_secs(60),
        "flow to look up the nodes' instances",
        || proxy.forwarded("DescribeNetworkInterfaces") >= 1,
    );
    signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert!(
        killed.all().contains("submitted, 8 nodes checking"),
        "{}",
        killed.all()
    );
    proxy.calm();
    let all = f.apply(0);
    assert!(all.contains("checking its 8 nodes"), "{all}");
    assert_eq!(
        proxy.forwarded("batch:submitjob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    let healthy: Vec<String> = serde_json::from_str(
        &f.a.run(&["output", "wf.toml", "health.healthy", "--json"])
            .expect(0)
            .stdout,
    )
    .unwrap();
    assert_eq!(healthy.len(), NODES, "{healthy:?}");
    f.a.run(&["plan", "wf.toml", "--detailed-exitcode"])
        .expect(0);
}
