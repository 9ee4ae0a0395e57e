//! Which state a command works on (local, or S3 from `[workflow.state]` or
//! `--state`) and opening it through the [`StateBackend`] boundary: nothing
//! else in the engine knows where a state is kept.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flow_state::remote::LockOptions;
use flow_state::{
    LiveRead, ReadOnlyStore, Retention, S3Backend, S3Location, S3Options, StateBackend, StateError,
    Store,
};

use super::args::StateArgs;
use super::common::{CliError, CliResult, state_dir};
use crate::lang::ast::StateSettings;
use crate::lang::state_table::read_state_settings;

/// An open state, wherever it is kept.
pub type Backend = Box<dyn StateBackend>;

/// How long a lock lasts without renewal, unless `lease` says otherwise.
const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Where a command's state is.
#[derive(Debug, Clone)]
pub struct StateTarget {
    /// The local folder: the state, or the S3 state's copy; logs either way.
    pub dir: PathBuf,
    /// The S3 state, when it is kept there.
    pub s3: Option<S3Location>,
    /// How long the S3 lock lasts without renewal.
    pub lease: Duration,
    /// The workflow file, for commands in messages.
    pub file: PathBuf,
    /// How backups are kept (`keep_backups`, `keep_backups_for`).
    pub backups: Retention,
}

impl StateTarget {
    /// `s3://…` or the local folder.
    pub fn describe(&self) -> String {
        match &self.s3 {
            Some(loc) => loc.to_string(),
            None => self.dir.display().to_string(),
        }
    }
}

/// The state of workflow `file`: `--state` first, then the workflow's
/// `[workflow.state]` (`settings`, already read with the workflow).
pub fn target_with(
    file: &Path,
    args: &StateArgs,
    settings: Option<&StateSettings>,
) -> CliResult<StateTarget> {
    let dir = state_dir(file, args.state_dir.as_ref());
    let mut target = StateTarget {
        dir,
        s3: None,
        lease: DEFAULT_LEASE,
        file: file.to_path_buf(),
        backups: settings.map(StateSettings::backups).unwrap_or_default(),
    };
    if let Some(url) = &args.state_url {
        target.s3 = Some(
            S3Location::parse(url)
                .map_err(|e| CliError::help(e, "--state takes s3://BUCKET/KEY"))?,
        );
        if let Some(StateSettings::S3 {
            region,
            profile,
            lease,
            ..
        }) = settings
        {
            let loc = target.s3.as_mut().expect("just set");
            loc.region = region.clone();
            loc.profile = profile.clone();
            target.lease = lease.unwrap_or(DEFAULT_LEASE);
        }
        return Ok(target);
    }
    if let Some(StateSettings::S3 {
        bucket,
        key,
        region,
        profile,
        lease,
        ..
    }) = settings
    {
        target.s3 = Some(S3Location {
            bucket: bucket.clone(),
            key: key.clone(),
            region: region.clone(),
            profile: profile.clone(),
        });
        target.lease = lease.unwrap_or(DEFAULT_LEASE);
    }
    Ok(target)
}

/// Like [`target_with`], reading `[workflow.state]` from `file` on its own
/// (for commands that need nothing else of the workflow).
pub fn target(file: &Path, args: &StateArgs) -> CliResult<StateTarget> {
    let settings = read_state_settings(file).map_err(CliError::Diagnostics)?;
    target_with(file, args, settings.as_ref())
}

/// Whether a command may write the state it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// It writes: it takes the S3 lock (waiting `--lock-timeout`).
    Write,
    /// It may only read; it takes the lock unless `--lock=false`.
    Plan,
    /// It only reads and never takes the S3 lock (output, state list);
    /// while another process holds the state, it reads what that process
    /// last committed, asked of it.
    Read,
}

/// How long S3 may stay unreachable mid-run before the run stops:
/// `FLOW_STATE_RETRY_FOR` (a duration), else five minutes.
fn retry_for() -> Duration {
    std::env::var("FLOW_STATE_RETRY_FOR")
        .ok()
        .and_then(|t| humantime::parse_duration(&t).ok())
        .unwrap_or(Duration::from_secs(300))
}

/// The S3 options for `command` on `target`.
pub fn s3_options(
    target: &StateTarget,
    args: &StateArgs,
    command: &str,
    access: Access,
) -> S3Options {
    let lock = match access {
        Access::Write => true,
        Access::Plan => args.lock,
        Access::Read => false,
    };
    S3Options {
        command: command.to_string(),
        lock: lock.then(|| LockOptions {
            operation: command.to_string(),
            lease: target.lease,
            wait: args.lock_timeout,
            unlock_command: format!("flow state unlock {}", target.file.display()),
        }),
        retry_for: retry_for(),
        workflow: target.file.display().to_string(),
        retention: target.backups,
    }
}

/// An S3 client configured as the providers' are, for `loc`.
pub async fn s3_client(loc: &S3Location) -> CliResult<flow_state::remote::S3Client> {
    flow_providers::aws::state_s3_client(loc.region.clone(), loc.profile.clone())
        .await
        .map_err(|e| {
            CliError::help(
                format!("cannot reach the S3 state {loc}: {e}"),
                "set `region` under [workflow.state]",
            )
        })
}

/// Opens (creating if needed) the state of `target` for `command`.
pub async fn open(
    target: &StateTarget,
    args: &StateArgs,
    command: &str,
    access: Access,
) -> CliResult<Backend> {
    let backend: Backend = match &target.s3 {
        None => Box::new(Store::open_keeping(&target.dir, command, target.backups)?),
        Some(loc) => {
            let client = s3_client(loc).await?;
            let opts = s3_options(target, args, command, access);
            Box::new(S3Backend::open(&target.dir, client, loc.clone(), &opts).await?)
        }
    };
    show_notes(backend.as_ref());
    Ok(backend)
}

/// Like [`open`], but `None`, creating nothing, when there is no state yet.
pub async fn open_if_exists(
    target: &StateTarget,
    args: &StateArgs,
    command: &str,
    access: Access,
) -> CliResult<Option<Backend>> {
    let backend: Option<Backend> = match &target.s3 {
        // Plan and the commands that only show things never write a local
        // state (nor migrate it): they read a private copy of it, or the
        // state as the apply holding it last committed it.
        None if access == Access::Read => {
            ReadOnlyStore::open_or_read_live(&target.dir, command)?.map(read_live)
        }
        None if access != Access::Write => {
            ReadOnlyStore::open_if_exists(&target.dir, command)?.map(|s| Box::new(s) as Backend)
        }
        None => Store::open_if_exists_keeping(&target.dir, command, target.backups)?
            .map(|s| Box::new(s) as Backend),
        Some(loc) => {
            let client = s3_client(loc).await?;
            let opts = s3_options(target, args, command, access);
            let started = Instant::now();
            loop {
                match S3Backend::open_if_exists(&target.dir, client.clone(), loc.clone(), &opts)
                    .await
                {
                    // Its local copy is held by an apply on this machine:
                    // what that apply last committed (written to S3 before
                    // that); a lock changing hands is opened again.
                    Err(StateError::Locked { path, info }) if access == Access::Read => {
                        match ReadOnlyStore::read_from_holder(&target.dir, command, info.clone())? {
                            Some(s) => break Some(read_live(s)),
                            None if ReadOnlyStore::lock_changing_hands(
                                &target.dir,
                                info.as_ref(),
                                started,
                            ) =>
                            {
                                tokio::time::sleep(Duration::from_millis(10)).await
                            }
                            None => return Err(StateError::Locked { path, info }.into()),
                        }
                    }
                    opened => break opened?.map(|s| Box::new(s) as Backend),
                }
            }
        }
    };
    if let Some(b) = &backend {
        show_notes(b.as_ref());
    }
    Ok(backend)
}

/// `store`, saying on stderr when it was read from the process holding it
/// and as of when.
fn read_live(store: ReadOnlyStore) -> Backend {
    say_if_live(&store);
    Box::new(store)
}

/// Says on stderr when `store` was read from the process holding the
/// state, and as of when; nothing otherwise.
pub fn say_if_live(store: &ReadOnlyStore) {
    if let Some(live) = store.live() {
        eprintln!("{}", freshness(live, flow_state::now_secs()));
    }
}

/// What a read from the holder of the state shows of it, at `now` (seconds
/// since the Unix epoch).
fn freshness(live: &LiveRead, now: u64) -> String {
    let who = match &live.holder {
        Some(h) => format!("`{}` (pid {})", h.command, h.pid),
        None => "another flow process".to_string(),
    };
    let human = crate::duration::human;
    match (live.age, &live.holder) {
        (Some(age), _) => format!(
            "read while {who} holds the state; as of its last committed change {} ago (serial {})",
            human(age),
            live.serial
        ),
        (None, Some(h)) => format!(
            "read while {who} holds the state; it has committed no change since it took it {} ago (serial {})",
            human(Duration::from_secs(now.saturating_sub(h.since))),
            live.serial
        ),
        (None, None) => format!(
            "read while {who} holds the state; it has committed no change since it took it (serial {})",
            live.serial
        ),
    }
}

fn show_notes(backend: &dyn StateBackend) {
    for note in backend.notes() {
        eprintln!("warning: {note}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>) -> StateArgs {
        StateArgs {
            state_url: url.map(str::to_string),
            ..StateArgs::default()
        }
    }

    #[test]
    fn a_read_from_the_holder_says_who_holds_it_and_how_old_it_is() {
        let holder = flow_state::LockInfo {
            pid: 4242,
            host: "h".into(),
            since: 1_000,
            command: "flow apply".into(),
            answers_reads: true,
        };
        let mut live = LiveRead {
            holder: Some(holder),
            serial: 57,
            age: Some(Duration::from_millis(1234)),
        };
        assert_eq!(
            freshness(&live, 1_010),
            "read while `flow apply` (pid 4242) holds the state; as of its last committed change 1.2s ago (serial 57)"
        );
        live.age = None;
        assert_eq!(
            freshness(&live, 1_003),
            "read while `flow apply` (pid 4242) holds the state; it has committed no change since it took it 3.0s ago (serial 57)"
        );
        live.holder = None;
        assert!(freshness(&live, 0).starts_with("read while another flow process holds"));
    }

    #[test]
    fn the_flag_wins_over_the_workflow() {
        let settings = StateSettings::S3 {
            bucket: "team".into(),
            key: "a.json".into(),
            region: Some("eu-west-1".into()),
            profile: None,
            lease: Some(Duration::from_secs(20)),
            backups: Retention::default(),
        };
        let t = target_with(Path::new("wf.toml"), &args(None), Some(&settings)).unwrap();
        assert_eq!(t.describe(), "s3://team/a.json");
        assert_eq!(t.lease, Duration::from_secs(20));
        let t = target_with(
            Path::new("wf.toml"),
            &args(Some("s3://other/b.json")),
            Some(&settings),
        )
        .unwrap();
        assert_eq!(t.describe(), "s3://other/b.json");
        assert_eq!(t.s3.unwrap().region.as_deref(), Some("eu-west-1"));
        let t = target_with(Path::new("wf.toml"), &args(None), None).unwrap();
        assert!(t.s3.is_none() && t.describe().ends_with(".flow/wf"));
        assert!(target_with(Path::new("wf.toml"), &args(Some("bucket/key")), None).is_err());
    }
}
