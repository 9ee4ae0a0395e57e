//! End-to-end: the ready-made workflows under `workflows/`, as a user runs
//! them, against the local cloud — the moto server for AWS (with the Batch
//! compute emulator writing what a job's program prints into its log
//! stream) and, for the EKS workflows, a real kube-apiserver standing in for
//! each cluster's API server (see `support::kube`). Each workflow validates
//! and plans with no AWS credentials and no state, applies, re-plans with no
//! changes, and destroys; what every step made is checked through the APIs.
//!
//! One test binary, a module per workflow family: `batch` (batch-p4d/p5/p6,
//! the reference pair, state from before the batch-efa module), `eks`
//! (eks-p4d, torchrec-eks), `hyperpod` (hyperpod-cpu-ddp), `multi_az`,
//! `local_demo` (local-demo, which needs no cloud);
//! `docs_commands` runs every command README.md and docs/workflows/*.md show.

#[path = "../support/mod.rs"]
mod support;

mod batch;
mod docs_commands;
mod eks;
mod hyperpod;
mod local_demo;
mod multi_az;

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
        // exec steps see only the variables they pass on, so the stand-in
        // learns where to log from a wrapper rather than flow's environment.
        let wrapper = self.p.write(
            "container-tool",
            &format!(
                "#!/bin/sh\nCONTAINER_TOOL_LOG='{}' exec '{}' \"$@\"\n",
                tool_log.display(),
                workspace_root()
                    .join("tests/fixtures/bin/container-tool")
                    .display()
            ),
        );
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("wrapper made executable");
        tool_log
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

/// `--var container_tool=…`: the stand-in container tool (through the
/// wrapper [`Local::image_tools`] wrote), whose push puts the image into
/// moto's ECR.
fn container_tool_var(l: &Local) -> String {
    format!(
        "container_tool={}",
        l.p.path().join("container-tool").display()
    )
}
