//! A scratch project whose `flow` talks to a moto server (or a fault proxy
//! before it), with the CloudFormation templates of the AWS tests.

use std::process::{Child, Command, Stdio};

use super::fault_proxy::{Fault, FaultProxy};
use super::moto::Moto;
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

/// What one apply of `MANY` makes, as moto has it, each exactly once: the
/// two stacks, one file system, the four uploaded files, the secret and
/// the repository.
pub fn assert_many_made_once(moto: &Moto) {
    let mut stacks = moto.stacks();
    stacks.sort();
    assert_eq!(stacks, ["flow-app", "flow-vpc"]);
    assert_eq!(moto.file_systems().len(), 1, "a second file system");
    assert_eq!(moto.objects("flow-flaky-data", "in/").len(), 4);
    assert_eq!(moto.secrets(), ["hf-token"]);
    let repos = moto.json_call(
        "ecr",
        "AmazonEC2ContainerRegistry_V20150921.DescribeRepositories",
        "{}",
    );
    assert_eq!(
        repos["repositories"].as_array().map(Vec::len),
        Some(1),
        "{repos}"
    );
}

/// Destroys `MANY` while the proxy injects `kinds` into `rate` of the calls,
/// and checks that nothing is left.
pub fn destroy_many_under_faults(
    a: &Aws,
    moto: &Moto,
    proxy: &FaultProxy,
    rate: f64,
    kinds: &[Fault],
) {
    proxy.faults(rate, kinds, None);
    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    proxy.calm();
    assert!(moto.stacks().is_empty());
    assert!(moto.file_systems().is_empty());
    assert!(moto.secrets().is_empty());
}
