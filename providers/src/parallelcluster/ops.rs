//! What the `parallelcluster.cluster` kind's operations share: the
//! step's configuration read and handed to pcluster, the wait for pcluster
//! to settle, and whether the compute fleet is stopped.

use std::io::Write;

use serde_json::Value;

use super::cli::Pcluster;
use super::config;
use super::wait;
use crate::contract::{Applied, OpContext, ProviderError, Values};
use crate::inputs;
use crate::substitute::Substitutions;

/// The step's configuration, read and parsed: `(path, text, parsed)`.
pub(super) fn load(
    ctx_workdir: &crate::Workdir,
    values: &Values,
) -> Result<(String, String, Value), ProviderError> {
    let path = inputs::req_str(values, "config")?;
    let text = config::read(ctx_workdir, &path, &Substitutions::from_values(values)?)?;
    let parsed =
        config::parse(&text).map_err(|why| ProviderError::bad_input(format!("{path}: {why}")))?;
    Ok((path, text, parsed))
}

/// The configuration pcluster is handed: `parsed` with the token tag, as
/// JSON (which is YAML), in a temporary file.
pub(super) fn rendered(
    parsed: &Value,
    token: &str,
) -> Result<tempfile::NamedTempFile, ProviderError> {
    let mut file = tempfile::Builder::new()
        .prefix("flow-pcluster-")
        .suffix(".yaml")
        .tempfile()
        .map_err(|e| {
            ProviderError::fatal(format!("could not write the cluster configuration: {e}"))
        })?;
    let body = serde_json::to_vec_pretty(&config::with_token_tag(parsed, token))
        .expect("JSON values serialise");
    file.write_all(&body)
        .and_then(|()| file.flush())
        .map_err(|e| {
            ProviderError::fatal(format!("could not write the cluster configuration: {e}"))
        })?;
    Ok(file)
}

/// Where the cluster stands and its outputs, once pcluster says it is up.
pub(super) async fn settle(
    ctx: &OpContext,
    pc: &Pcluster,
    name: &str,
    parsed: &Value,
) -> Result<Applied, ProviderError> {
    let cluster = wait::until_done(ctx, pc, name).await?;
    Ok(wait::applied(name, &cluster, &config::summary(parsed)))
}

/// pcluster's answer to an update that changes nothing.
pub(super) fn no_changes(answer: &super::cli::Answer) -> bool {
    answer.message().contains("No changes found")
}

/// Whether the compute fleet of `name` is stopped or stopping.
pub(super) async fn fleet_stopped(pc: &Pcluster, name: &str) -> Result<bool, ProviderError> {
    fleet_in(pc, name, &["STOPPED", "STOPPING", "STOP_REQUESTED"]).await
}

/// Whether the compute fleet of `name` was asked to start and is not
/// running yet.
pub(super) async fn fleet_starting(pc: &Pcluster, name: &str) -> Result<bool, ProviderError> {
    fleet_in(pc, name, &["START_REQUESTED", "STARTING"]).await
}

async fn fleet_in(pc: &Pcluster, name: &str, statuses: &[&str]) -> Result<bool, ProviderError> {
    Ok(pc.describe(name).await?.is_some_and(|c| {
        c.get("computeFleetStatus")
            .and_then(Value::as_str)
            .is_some_and(|s| statuses.contains(&s))
    }))
}
