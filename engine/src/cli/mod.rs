//! The `flow` command line.

pub mod args;
pub mod common;
pub mod display;
pub mod graph;
pub mod inspect;
pub mod logs;
pub mod module_outputs;
pub mod progress;
pub mod refresh;
pub mod report;
pub mod run;
pub mod run_apply;
pub mod run_destroy;
pub mod run_import;
pub mod run_plan;
pub mod runs;
pub mod state_admin;
pub mod state_open;

use std::io::IsTerminal;

use flow_providers::Registry;

use args::{Cli, Command, StateCommand};
use common::{CliError, Ui};

use crate::style::Style;

/// Run the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let ui = Ui {
        style: Style::detect(cli.color, std::io::stdout().is_terminal()),
        quiet: cli.quiet,
        verbose: cli.verbose,
        json: false,
    };
    let registry = Registry::builtin();
    if fingerprints_kept(&cli.command)
        && let Err(e) = install_fingerprint_key()
    {
        report(&e);
        return e.exit_code();
    }
    let result = match &cli.command {
        Command::Validate(a) => run_plan::validate(a, ui, &registry),
        Command::Plan(a) => run_plan::plan(a, ui, &registry),
        Command::Graph(a) => inspect::graph(a, &registry),
        Command::Logs(a) => logs::logs(&a.file, &a.step, &a.state, a.follow),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(*shell, &mut Cli::command(), "flow", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man => {
            use clap::CommandFactory;
            let mut out = Vec::new();
            match clap_mangen::Man::new(Cli::command()).render(&mut out) {
                Ok(()) => {
                    use std::io::Write;
                    let _ = std::io::stdout().write_all(&out);
                    Ok(0)
                }
                Err(e) => Err(CliError::msg(format!("cannot render the manual: {e}"))),
            }
        }
        Command::Output(a) => inspect::output(a),
        Command::Runs(a) => runs::runs(a),
        Command::Compare(a) => runs::compare(a),
        Command::Report(a) => report::report(a, &registry),
        Command::Import(a) => block_on(run_import::import(a, ui, &registry)),
        Command::State(StateCommand::List { file, state, json }) => {
            inspect::state_list(file, state, *json, ui)
        }
        Command::State(StateCommand::Show {
            file,
            step,
            full,
            state,
        }) => inspect::state_show(file, step, state, *full),
        Command::State(StateCommand::Backups { file, state }) => {
            state_admin::state_backups(file, state)
        }
        Command::State(StateCommand::Restore {
            file,
            backup,
            state,
        }) => state_admin::state_restore(file, backup, state),
        Command::State(StateCommand::Push { file, force, state }) => {
            state_admin::state_push(file, state, *force)
        }
        Command::State(StateCommand::Pull { file, force, state }) => {
            state_admin::state_pull(file, state, *force)
        }
        Command::State(StateCommand::Unlock {
            file,
            lock_id,
            state,
        }) => state_admin::state_unlock(file, state, lock_id),
        Command::Apply(a) => block_on(run_apply::apply(a, Ui { json: a.json, ..ui }, &registry)),
        Command::Destroy(a) => block_on(run_destroy::destroy(
            a,
            Ui { json: a.json, ..ui },
            &registry,
        )),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report(&e);
            e.exit_code()
        }
    }
}

/// Whether `command` keeps or compares fingerprints of secrets (in state or
/// a plan file), and so needs the user's key rather than a passing one.
fn fingerprints_kept(command: &Command) -> bool {
    matches!(
        command,
        Command::Plan(_) | Command::Apply(_) | Command::Destroy(_) | Command::Import(_)
    )
}

/// Loads (or makes, the first time) the user's fingerprint key and makes
/// it the process's.
fn install_fingerprint_key() -> Result<(), CliError> {
    use flow_providers::fingerprint;
    let dir = fingerprint::config_dir().ok_or_else(|| {
        CliError::help(
            "no folder for flow's fingerprint key: HOME is not set",
            format!(
                "set HOME, XDG_CONFIG_HOME or {} to a folder of yours",
                fingerprint::CONFIG_DIR_ENV
            ),
        )
    })?;
    let key = fingerprint::load_or_create(&dir).map_err(|e| CliError::help(e.message, e.help))?;
    fingerprint::install(key);
    Ok(())
}

/// Run a future to completion on a fresh multi-threaded runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

fn report(err: &CliError) {
    let style = Style::detect(
        crate::style::ColorChoice::Auto,
        std::io::stderr().is_terminal(),
    );
    match err {
        CliError::Diagnostics(d) => {
            let width = std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(100);
            eprint!("{}", d.render(style.color, width));
        }
        CliError::Message(m, help) => {
            eprintln!("{} {m}", style.err("error:"));
            if let Some(h) = help {
                eprintln!("  {} {h}", style.dim("help:"));
            }
        }
        CliError::StepsFailed | CliError::Interrupted => {}
    }
}
