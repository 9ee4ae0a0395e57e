//! Refresh as the commands run it: read the real objects (unless
//! `--refresh=false`), and record what was found when apply asks.

use std::collections::BTreeMap;

use flow_providers::Registry;
use flow_state::{Mutation, StepRecord, Store};

use super::common::{CliError, CliResult};
use crate::lang::load::Loaded;
use crate::plan::refresh::{READ_TIMEOUT, Refresh, RefreshSettings, refresh_records};

/// The records as the real objects say (or as state says, when `enabled`
/// is false), with what refresh found.
pub async fn refreshed(
    loaded: &Loaded,
    registry: &Registry,
    records: BTreeMap<String, StepRecord>,
    enabled: bool,
    parallelism: usize,
) -> CliResult<Refresh> {
    if !enabled {
        return Ok(Refresh {
            records,
            ..Refresh::default()
        });
    }
    let settings = RefreshSettings {
        parallelism,
        timeout: READ_TIMEOUT,
    };
    refresh_records(loaded, registry, records, settings)
        .await
        .map_err(|e| CliError::help(e.to_string(), e.help()))
}

/// Store the records refresh rewrote, durably, before apply acts on them.
pub async fn record(store: &Store, refresh: &Refresh) -> CliResult {
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
