//! The official `pcluster` command (PyPI `aws-parallelcluster`), run as a
//! user runs it: `create-cluster`, `describe-cluster`, `update-cluster`,
//! `update-compute-fleet`, `delete-cluster`, each answering JSON on
//! standard output. It reads AWS's usual settings from the environment
//! (`AWS_PROFILE`, `AWS_ENDPOINT_URL`, …); flow adds the step's region.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use tokio::process::Command;

use super::errors;
use crate::contract::{OpContext, ProviderError, Values};
use crate::inputs;

/// The version flow is tested with; `scripts/install-pcluster` installs it.
pub(crate) const TESTED_VERSION: &str = "3.16.1";

/// A `pcluster` to run, for one region and profile.
#[derive(Debug, Clone)]
pub(crate) struct Pcluster {
    program: PathBuf,
    region: Option<String>,
    profile: Option<String>,
}

/// What one run answered: whether it exited 0, and its JSON.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Exit code 0.
    pub ok: bool,
    /// The JSON it printed (`Null` when it printed none).
    pub json: Value,
    /// Its standard error's last line, for when there is no JSON.
    pub complaint: String,
}

impl Answer {
    /// pcluster's `message`, else the complaint.
    pub fn message(&self) -> String {
        self.json
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| self.complaint.clone())
    }
}

impl Pcluster {
    /// The `pcluster` the step names (`pcluster` input), else
    /// `FLOW_PCLUSTER`, else the one on PATH.
    pub fn for_step(ctx: &OpContext, values: &Values) -> Result<Pcluster, ProviderError> {
        let program = inputs::opt_str(values, "pcluster")?
            .filter(|p| !p.is_empty())
            .or_else(|| {
                std::env::var("FLOW_PCLUSTER")
                    .ok()
                    .filter(|p| !p.is_empty())
            })
            .unwrap_or_else(|| "pcluster".into());
        Ok(Pcluster {
            program: PathBuf::from(program),
            region: ctx.region.clone(),
            profile: ctx.profile.clone(),
        })
    }

    /// Runs `pcluster ARGS -r REGION` and reads its answer.
    pub async fn run(&self, args: &[&str]) -> Result<Answer, ProviderError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(args);
        if let Some(region) = &self.region {
            cmd.args(["--region", region]);
        }
        if let Some(profile) = &self.profile {
            cmd.env("AWS_PROFILE", profile);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = cmd.output().await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ProviderError::not_created(format!(
                    "`{}` is not installed (not found)",
                    self.program.display()
                ))
                .with_help(format!(
                    "install ParallelCluster's CLI: `scripts/install-pcluster` (aws-parallelcluster {TESTED_VERSION} in .venv/pcluster) and set FLOW_PCLUSTER to the path it prints, or `pip install aws-parallelcluster=={TESTED_VERSION}`; it needs Node.js too"
                ))
            } else {
                ProviderError::fatal(format!("could not run `{}`: {e}", self.program.display()))
            }
        })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        Ok(Answer {
            ok: out.status.success(),
            json: errors::answer(&stdout).unwrap_or(Value::Null),
            complaint: stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string(),
        })
    }

    /// `describe-cluster`: the cluster, or `None` when there is none of that name.
    pub async fn describe(&self, name: &str) -> Result<Option<Value>, ProviderError> {
        let answer = self
            .run(&["describe-cluster", "--cluster-name", name])
            .await?;
        if answer.ok {
            return Ok(Some(answer.json));
        }
        let message = answer.message();
        if message.contains("does not exist") {
            return Ok(None);
        }
        Err(self.failed(&format!("describe cluster `{name}`"), &message))
    }

    /// `create-cluster` with the configuration file at `config`.
    pub async fn create(
        &self,
        name: &str,
        config: &Path,
        suppress: &[String],
    ) -> Result<Answer, ProviderError> {
        let config = config.display().to_string();
        let mut args = vec![
            "create-cluster",
            "--cluster-name",
            name,
            "--cluster-configuration",
            &config,
        ];
        for s in suppress {
            args.extend(["--suppress-validators", s]);
        }
        self.run(&args).await
    }

    /// `update-cluster` with the configuration file at `config`.
    pub async fn update(
        &self,
        name: &str,
        config: &Path,
        suppress: &[String],
    ) -> Result<Answer, ProviderError> {
        let config = config.display().to_string();
        let mut args = vec![
            "update-cluster",
            "--cluster-name",
            name,
            "--cluster-configuration",
            &config,
        ];
        for s in suppress {
            args.extend(["--suppress-validators", s]);
        }
        self.run(&args).await
    }

    /// `update-compute-fleet --status STATUS` (`STOP_REQUESTED`, `START_REQUESTED`).
    pub async fn set_fleet(&self, name: &str, status: &str) -> Result<(), ProviderError> {
        let answer = self
            .run(&[
                "update-compute-fleet",
                "--cluster-name",
                name,
                "--status",
                status,
            ])
            .await?;
        if answer.ok {
            return Ok(());
        }
        Err(self.failed(
            &format!("set the compute fleet of `{name}` to {status}"),
            &answer.message(),
        ))
    }

    /// `delete-cluster`; a cluster already gone is fine.
    pub async fn delete(&self, name: &str) -> Result<(), ProviderError> {
        let answer = self
            .run(&["delete-cluster", "--cluster-name", name])
            .await?;
        let message = answer.message();
        if answer.ok || message.contains("does not exist") {
            return Ok(());
        }
        Err(self.failed(&format!("delete cluster `{name}`"), &message))
    }

    /// An error pcluster reported for `what`, classified by its words.
    pub fn failed(&self, what: &str, message: &str) -> ProviderError {
        let text = format!("{what}: {message}");
        if message.contains("Throttl")
            || message.contains("Could not connect")
            || message.contains("timed out")
            || message.contains("Rate exceeded")
        {
            ProviderError::retryable(text)
        } else if message.contains("credentials") || message.contains("AccessDenied") {
            ProviderError::auth(text)
        } else {
            ProviderError::fatal(text)
        }
    }
}
