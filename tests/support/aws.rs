//! A scratch project whose `flow` talks to a moto server (or a fault proxy
//! before it), with the CloudFormation templates of the AWS tests.

use std::process::{Child, Command, Stdio};

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
