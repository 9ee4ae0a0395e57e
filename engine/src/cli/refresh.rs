//! Refresh as the commands run it: read the real objects (unless
//! `--refresh=false`), and record what was found when apply asks.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flow_providers::Registry;
use flow_state::{Mutation, StateBackend, StepRecord};

use super::common::{CliError, CliResult};
use crate::lang::load::Loaded;
use crate::plan::compute::selected_addresses;
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
        only: (!targets.is_empty()).then(|| refresh_scope(loaded, &records, targets)),
    };
    refresh_records(loaded, registry, records, settings)
        .await
        .map_err(|e| CliError::help(e.to_string(), e.help()))
}

/// The steps a refresh with `--target` reads: the targets and what they
/// need, `nccl` meaning every instance of it and `cluster` every step of
/// that module call, as for plan.
fn refresh_scope(
    loaded: &Loaded,
    records: &BTreeMap<String, StepRecord>,
    targets: &[String],
) -> BTreeSet<String> {
    let targets = selected_addresses(loaded, records, targets);
    let mut steps = loaded.dag.with_ancestors(&targets);
    steps.extend(targets);
    steps
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::vars::VarInputs;

    #[test]
    fn a_target_names_every_instance_and_every_step_of_a_module_call() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("m")).unwrap();
        std::fs::write(
            dir.path().join("m/main.toml"),
            "[steps.inner]\nprovider = \"null\"\n",
        )
        .unwrap();
        let path = dir.path().join("wf.toml");
        std::fs::write(
            &path,
            r#"
[steps.vpc]
provider = "null"
[steps.nccl]
provider = "null"
for_each = [2, 4]
depends_on = ["vpc"]
[steps.other]
provider = "null"
[modules.cluster]
source = "m"
"#,
        )
        .unwrap();
        let loaded =
            crate::lang::load::load(&path, &VarInputs::default(), &Registry::builtin(), &|_| {
                None
            })
            .unwrap();
        let records = BTreeMap::new();
        let scope = refresh_scope(&loaded, &records, &["nccl".into()]);
        let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
        assert_eq!(scope, [r#"nccl["2"]"#, r#"nccl["4"]"#, "vpc"]);
        let scope = refresh_scope(&loaded, &records, &["cluster".into()]);
        assert_eq!(scope.into_iter().collect::<Vec<_>>(), ["cluster.inner"]);
    }
}
