//! A scratch project whose `flow` talks to a moto server (or a fault proxy
//! before it), with the CloudFormation templates of the AWS tests.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};

use super::fault_proxy::{Call, Creates, Fault, FaultProxy, creates};
use super::moto::{Moto, between_all};
use super::{Project, Run};

/// The CloudFormation templates of the tests.
const VPC: &str = include_str!("../fixtures/aws/vpc.yaml");
const VPC_V2: &str = include_str!("../fixtures/aws/vpc-v2.yaml");
const APP: &str = include_str!("../fixtures/aws/app.yaml");
const BATCH: &str = include_str!("../fixtures/aws/batch.yaml");

/// A project for AWS tests: the scratch folder, its templates, and the
/// environment that points `flow` at a moto server (or a proxy before it).
pub struct Aws {
    /// The scratch folder.
    pub p: Project,
    /// The environment `flow` runs with.
    pub env: Vec<(String, String)>,
}

impl Aws {
    /// A project whose `flow` talks to `moto`, or to `endpoint` before it.
    pub fn new(moto: &Moto, endpoint: Option<&str>) -> Aws {
        let p = Project::new();
        p.write("vpc.yaml", VPC);
        p.write("vpc-v2.yaml", VPC_V2);
        p.write("app.yaml", APP);
        p.write("batch.yaml", BATCH);
        let env = match endpoint {
            Some(e) => moto.env_for(e),
            None => moto.env(),
        };
        Aws { p, env }
    }

    /// `flow ARGS` as a command, in the project with the AWS environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.p.cmd(args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Runs `flow ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Run {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.p.run_env(args, &env)
    }

    /// Starts `flow ARGS`, its output piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn flow")
    }

    /// `flow apply wf.toml --auto-approve`.
    pub fn apply(&self) -> Run {
        self.run(&["apply", "wf.toml", "--auto-approve"])
    }
}

/// Two stacks, the second importing the first's exports.
pub const STACKS: &str = r#"
[workflow]
name = "stacks"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"
tags = { project = "flow-e2e" }

[steps.app]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.app.inputs]
stack_name = "flow-app"
template = "app.yaml"
parameters = { VpcStack = "flow-vpc" }
"#;

/// The Batch chain: VPC stack, Batch stack, an SSH key generated into
/// Secrets Manager, and a 2-node NCCL job.
pub const BATCH_CHAIN: &str = r#"
[workflow]
name = "batch-nccl"
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
parameters = { VPCStackParameter = "flow-vpc" }

[steps.ssh]
provider = "secretsmanager.secret"
[steps.ssh.inputs]
name = "flow-batch-ssh-key"
generate = "ssh-ed25519"

[steps.nccl]
provider = "batch.job"
[steps.nccl.inputs]
job_name = "nccl-test-2node"
job_queue = "${steps.batch.outputs.DistributedDeepLearningJQ}"
job_definition = "${steps.batch.outputs.JobDefinitionMultiInstance}"
num_nodes = 2
environment = { SSH_PUBLIC_KEY = "${steps.ssh.outputs.public_key}" }
timeout = "1h"
"#;

/// Stacks, a bucket and an upload, a secret from a sensitive variable, a
/// repository and FSx, each step with `retries = 8`.
pub const MANY: &str = r#"
[workflow]
name = "flaky"
region = "us-east-1"

[vars.token]
sensitive = true
default = "hf_not_really_a_token_0123456789"

[steps.vpc]
provider = "cloudformation.stack"
retries = 8
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.app]
provider = "cloudformation.stack"
depends_on = ["vpc"]
retries = 8
[steps.app.inputs]
stack_name = "flow-app"
template = "app.yaml"
parameters = { VpcStack = "flow-vpc" }

[steps.data]
provider = "s3.bucket"
retries = 8
[steps.data.inputs]
name = "flow-flaky-data"

[steps.upload]
provider = "s3.sync"
retries = 8
[steps.upload.inputs]
source = "data"
destination = "s3://${steps.data.outputs.name}/in/"

[steps.hf]
provider = "secretsmanager.secret"
retries = 8
[steps.hf.inputs]
name = "hf-token"
value = "${vars.token}"

[steps.images]
provider = "ecr.repository"
retries = 8
[steps.images.inputs]
name = "nccl-tests"
scan_on_push = true
tags = { team = "ml" }

[steps.fsx]
provider = "fsx.lustre"
retries = 8
[steps.fsx.inputs]
storage_capacity = 1200
subnet_ids = ["${steps.vpc.outputs.SubnetId}"]
"#;

/// What one apply of `MANY` makes, as [`inventory`] lists it.
pub const MANY_MADE: [&str; 10] = [
    "bucket flow-flaky-data",
    "file system",
    "object flow-flaky-data/in/f0.txt",
    "object flow-flaky-data/in/f1.txt",
    "object flow-flaky-data/in/f2.txt",
    "object flow-flaky-data/in/f3.txt",
    "repository nccl-tests",
    "secret hf-token",
    "stack flow-app",
    "stack flow-vpc",
];

/// Everything of every kind the AWS tests make, as moto lists it, sorted:
/// stacks, secrets, file systems (all named "file system": their ids
/// change from one make to the next), buckets and their objects, ECR
/// repositories, EKS clusters and their node groups. A listing that fails,
/// or answers without its list, fails the test: it never reads as
/// "nothing there". (Batch jobs are left out: a job is not left behind,
/// and its queue goes with its stack.)
pub fn inventory(moto: &Moto) -> Vec<String> {
    let mut all = Vec::new();
    let xml = moto.query_call("cloudformation", "Action=DescribeStacks&Version=2010-05-15");
    assert!(
        xml.contains("<DescribeStacksResult"),
        "DescribeStacks: {xml}"
    );
    for stack in between_all(&xml, "<StackName>", "</StackName>") {
        all.push(format!("stack {stack}"));
    }
    let secrets = moto.json_call("secretsmanager", "secretsmanager.ListSecrets", "{}");
    for s in list(&secrets, "SecretList") {
        all.push(format!("secret {}", text(&s, "Name")));
    }
    let fsx = "AWSSimbaAPIService_v20180301.DescribeFileSystems";
    for _ in list(&moto.json_call("fsx", fsx, "{}"), "FileSystems") {
        all.push("file system".to_string());
    }
    let ecr = "AmazonEC2ContainerRegistry_V20150921.DescribeRepositories";
    for r in list(&moto.json_call("ecr", ecr, "{}"), "repositories") {
        all.push(format!("repository {}", text(&r, "repositoryName")));
    }
    let (status, xml) = moto.rest_call("s3", "GET", "/", "");
    assert!(
        status == 200 && xml.contains("<ListAllMyBucketsResult"),
        "ListBuckets: {status} {xml}"
    );
    for bucket in between_all(&xml, "<Name>", "</Name>") {
        for key in moto.objects(&bucket, "") {
            all.push(format!("object {bucket}/{key}"));
        }
        all.push(format!("bucket {bucket}"));
    }
    for c in list(&rest_json(moto, "/clusters"), "clusters") {
        let c = c.as_str().expect("a cluster name").to_string();
        let groups = rest_json(moto, &format!("/clusters/{c}/node-groups"));
        for g in list(&groups, "nodegroups") {
            all.push(format!("node group {c}/{}", g.as_str().expect("a name")));
        }
        all.push(format!("cluster {c}"));
    }
    all.sort();
    all
}

/// The list under `key` in a listing's answer; fails the test when the
/// answer has none.
fn list(answer: &serde_json::Value, key: &str) -> Vec<serde_json::Value> {
    match answer[key].as_array() {
        Some(items) => items.clone(),
        None => panic!("no {key} in the listing: {answer}"),
    }
}

/// The string under `key`; fails the test when there is none.
fn text(item: &serde_json::Value, key: &str) -> String {
    match item[key].as_str() {
        Some(t) => t.to_string(),
        None => panic!("no {key} in {item}"),
    }
}

/// An EKS listing (`GET path`), which must answer 200 with JSON.
fn rest_json(moto: &Moto, path: &str) -> serde_json::Value {
    let (status, body) = moto.rest_call("eks", "GET", path, "");
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// The objects, by kind, that the creates of `calls` made at moto
/// ([`Creates::made`]: each create moto did, less those it did again onto
/// an object of the same name made already).
pub fn made(calls: &[Call]) -> BTreeMap<String, usize> {
    creates(calls)
        .into_iter()
        .filter(|(_, c)| c.made() > 0)
        .map(|(kind, c)| (kind, c.made()))
        .collect()
}

/// A table of what creates did at moto, a row per kind.
pub fn creates_table(creates: &BTreeMap<String, Creates>) -> String {
    if creates.is_empty() {
        return "no create sent".to_string();
    }
    let mut out = String::from(
        "| create | sent to moto | done by moto | done again (same name) | objects made |\n|---|---:|---:|---:|---:|",
    );
    for (kind, c) in creates {
        out.push_str(&format!(
            "\n| {kind} | {} | {} | {} | {} |",
            c.sent,
            c.done,
            c.again,
            c.made()
        ));
    }
    out
}

/// Asserts that the creates of `calls` made `expected` objects by kind,
/// exactly one per object, and prints what they did.
pub fn assert_made_once(what: &str, calls: &[Call], expected: &[(&str, usize)]) {
    eprintln!("{what}:\n{}", creates_table(&creates(calls)));
    let expected: BTreeMap<String, usize> =
        expected.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    assert_eq!(
        made(calls),
        expected,
        "{what}: an object made twice (or never)"
    );
}

/// One apply of `MANY`, through `proxy` from an empty account: every
/// object once in moto, and made once by the creates moto did.
pub fn assert_many_made_once(moto: &Moto, proxy: &FaultProxy) {
    assert_eq!(inventory(moto), MANY_MADE);
    assert_made_once(
        "apply",
        &proxy.calls(),
        &[
            ("CreateBucket", 1),
            ("CreateFileSystem", 1),
            ("CreateRepository", 1),
            ("CreateSecret", 1),
            ("CreateStack", 2),
            ("PutObject", 4),
        ],
    );
}

/// Destroys `MANY` while the proxy injects `kinds` into `rate` of the calls,
/// and checks that nothing of any kind is left, and that the destroy
/// created nothing.
pub fn destroy_many_under_faults(
    a: &Aws,
    moto: &Moto,
    proxy: &FaultProxy,
    rate: f64,
    kinds: &[Fault],
) {
    let from = proxy.calls().len();
    proxy.faults(rate, kinds, None);
    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    proxy.calm();
    assert_eq!(inventory(moto), Vec::<String>::new(), "left after destroy");
    assert_made_once("destroy", &proxy.calls_from(from), &[]);
}
