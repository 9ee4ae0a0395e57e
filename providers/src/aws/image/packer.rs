//! The Packer path: a published Packer template built as it is by the real
//! `packer` CLI (`packer init`, then `packer build -machine-readable`), the
//! AMI id read from its artifact line. Where `packer` is not installed the
//! step is refused, at validate and at apply, naming it.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::contract::{ProviderError, Reporter};

/// What a step with `packer_template` needs and lacks.
pub(crate) const MISSING: &str = "the `packer` CLI is not installed (no `packer` on PATH): a `packer_template` is built by HashiCorp Packer itself";

/// How to get it, or go without it.
pub(crate) const HELP: &str = "install Packer (https://developer.hashicorp.com/packer/install) on the machine flow runs on, or build natively: set `source_ami` and `playbooks` instead of `packer_template`";

/// Whether `packer` is on PATH.
pub(crate) fn installed() -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join("packer");
            p.is_file()
                && std::fs::metadata(&p)
                    .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
                    .unwrap_or(false)
        })
    })
}

/// The AMI id of `region` in a machine-readable artifact line
/// (`TIME,TARGET,artifact,0,id,us-east-1:ami-…`; several regions are
/// separated by `%!(PACKER_COMMA)`).
pub(crate) fn artifact_ami(line: &str, region: &str) -> Option<String> {
    let fields: Vec<&str> = line.splitn(6, ',').collect();
    if fields.len() < 6 || fields[2] != "artifact" || fields[4] != "id" {
        return None;
    }
    let pairs: Vec<(&str, &str)> = fields[5]
        .split("%!(PACKER_COMMA)")
        .filter_map(|p| p.trim().split_once(':'))
        .collect();
    pairs
        .iter()
        .find(|(r, _)| *r == region)
        .or(pairs.first())
        .map(|(_, ami)| ami.to_string())
        .filter(|ami| ami.starts_with("ami-"))
}

/// `packer init` then `packer build -machine-readable` of `template` with
/// `vars`; the AMI id of `region`.
pub(crate) async fn build(
    template: &Path,
    shown: &str,
    vars: &[(String, String)],
    region: &str,
    reporter: &dyn Reporter,
) -> Result<String, ProviderError> {
    if !installed() {
        return Err(ProviderError::invalid(MISSING)
            .with_help(HELP)
            .at_input(["packer_template"]));
    }
    let dir = template.parent().unwrap_or(Path::new("."));
    let init = Command::new("packer")
        .arg("init")
        .arg(template)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| ProviderError::fatal(format!("could not run `packer init`: {e}")))?;
    for line in String::from_utf8_lossy(&init.stdout).lines() {
        reporter.log(line);
    }
    if !init.status.success() {
        return Err(ProviderError::fatal(format!(
            "packer init {shown} failed: {}",
            String::from_utf8_lossy(&init.stderr).trim()
        )));
    }
    reporter.event(&format!("packer build {shown}"));
    let mut cmd = Command::new("packer");
    cmd.arg("build").arg("-machine-readable");
    for (k, v) in vars {
        cmd.arg("-var").arg(format!("{k}={v}"));
    }
    let mut child = cmd
        .arg(template)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ProviderError::fatal(format!("could not run `packer build`: {e}")))?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let (mut ami, mut errors) = (None, Vec::new());
    while let Ok(Some(line)) = lines.next_line().await {
        reporter.log(&line);
        if let Some(id) = artifact_ami(&line, region) {
            ami = Some(id);
        }
        if let Some(message) = line.split_once(",ui,error,").map(|(_, m)| m) {
            errors.push(message.replace("%!(PACKER_COMMA)", ","));
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| ProviderError::fatal(format!("wait for packer build: {e}")))?;
    match ami {
        Some(ami) if status.success() => Ok(ami),
        _ => Err(ProviderError::fatal(format!(
            "packer build {shown} failed{}",
            if errors.is_empty() {
                String::new()
            } else {
                format!(": {}", errors.join("\n"))
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ami_of_the_region_is_read_from_the_artifact_line() {
        let line = "1700000000,amazon-ebs.base,artifact,0,id,us-west-2:ami-0aa%!(PACKER_COMMA)us-east-1:ami-0bb";
        assert_eq!(artifact_ami(line, "us-east-1").as_deref(), Some("ami-0bb"));
        assert_eq!(
            artifact_ami("1,x,artifact,0,id,us-east-1:ami-1", "eu-west-1").as_deref(),
            Some("ami-1")
        );
        assert_eq!(
            artifact_ami("1,x,artifact,0,string,AMIs were created", "us-east-1"),
            None
        );
    }
}
