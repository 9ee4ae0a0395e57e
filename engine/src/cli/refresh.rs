//! Refresh as the commands run it: read the real objects (unless
//! `--refresh=false`), and record what was found when apply asks.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_providers::Registry;
use flow_state::{Mutation, StateBackend, StepRecord};

use super::common::{CliError, CliResult};
use crate::lang::load::Loaded;
use crate::plan::refresh::{Refresh, RefreshSettings, refresh_records};

/// How a command asks for refresh.
pub struct RefreshRequest<'a> {
    /// Whether to read at all (`--refresh=false` says no).
    pub enabled: bool,
    /// Reads at once.
    pub parallelism: usize,
    /// `--target` steps: only they and what they need are read; empty for all.
    pub targets: &'a [String],
    /// How long one read may take.
    pub timeout: Duration,
}

/// The records as the real objects say (or as state says, when refresh is
/// off), with what refresh found.
pub async fn refreshed(
    loaded: &Loaded,
    registry: &Registry,
    records: BTreeMap<String, StepRecord>,
    req: RefreshRequest<'_>,
) -> CliResult<Refresh> {
    let RefreshRequest {
        enabled,
        parallelism,
        targets,
        timeout,
    } = req;
    if !enabled {
        return Ok(Refresh {
            records,
            ..Refresh::default()
        });
    }
    let settings = RefreshSettings {
        parallelism,
        timeout,
        only: (!targets.is_empty()).then(|| {
            let mut steps = loaded.dag.with_ancestors(targets);
            steps.extend(targets.iter().cloned());
            steps
        }),
    };
    refresh_records(loaded, registry, records, settings)
        .await
        .map_err(|e| CliError::help(e.to_string(), e.help()))
}

/// Store the records refresh rewrote, durably, before apply acts on them.
pub async fn record(store: &dyn StateBackend, refresh: &Refresh) -> CliResult {
    if refresh.rewritten.is_empty() {
        return Ok(());
    }
    let muts = refresh
        .rewritten
        .iter()
        .filter_map(|name| refresh.records.get(name))
        .map(|rec| Mutation::Put(rec.clone()))
        .collect();
    store.committer().commit(muts).await?;
    Ok(())
}
