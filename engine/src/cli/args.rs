//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::style::ColorChoice;

/// flow: plan, apply and destroy distributed-training infrastructure and the
/// jobs that validate and train on it, from one TOML workflow.
#[derive(Debug, Parser)]
#[command(name = "flow", version, about, max_term_width = 100)]
pub struct Cli {
    /// Colour output: auto (terminal, unless NO_COLOR is set), always or never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Print less: only errors and the final summary.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more: every provider event and retry.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a workflow file: syntax, references, providers, inputs, cycles.
    Validate(WorkflowArgs),
    /// Show what apply would do, without changing anything.
    Plan(PlanArgs),
    /// Create, update or replace what the workflow describes.
    Apply(ApplyArgs),
    /// Delete everything state records, in reverse dependency order.
    Destroy(DestroyArgs),
    /// Print the dependency graph as DOT, SVG or Mermaid, coloured by status.
    /// Works while an apply holds the state.
    Graph(GraphArgs),
    /// Print a step's log (command output, provider events); -f follows it.
    /// Works while an apply holds the state.
    Logs(LogsArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `flow man > flow.1`.
    Man,
    /// Print outputs of applied steps (long values cut, long tables
    /// summarized: --json prints them whole). Works while an apply holds the
    /// state: it reads the apply's last committed change.
    Output(OutputArgs),
    /// Adopt an existing object (a stack, a cluster, a bucket…) as a step's,
    /// without changing it.
    Import(ImportArgs),
    /// List the recorded runs of the workflow's job steps (they outlive
    /// destroy). Works while an apply holds the state.
    Runs(RunsArgs),
    /// Print two runs' measured values side by side with the change in percent.
    /// Works while an apply holds the state.
    Compare(CompareArgs),
    /// Write one self-contained HTML page: the graph by status, where the
    /// last run's time went, bandwidth and loss curves, the latest runs.
    /// Works while an apply holds the state.
    Report(ReportArgs),
    /// Inspect the state.
    #[command(subcommand)]
    State(StateCommand),
}

/// Where the workflow and its variables come from.
#[derive(Debug, Clone, Args)]
pub struct WorkflowArgs {
    /// The workflow file.
    pub file: PathBuf,
    /// Set a variable: NAME=VALUE (lists and tables in TOML syntax).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Read variables from a TOML file of NAME = VALUE lines.
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    /// Where the state is.
    #[command(flatten)]
    pub state: StateArgs,
}

/// Where the state is and how it is locked (every command that reads it).
#[derive(Debug, Clone, Default, Args)]
pub struct StateArgs {
    /// The local state folder (default: .flow/NAME beside the workflow
    /// file); for an S3 state, where its local copy and the step logs are.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Keep the state in S3 at s3://BUCKET/KEY (instead of what
    /// [workflow.state] says).
    #[arg(long = "state", value_name = "s3://BUCKET/KEY")]
    pub state_url: Option<String>,
    /// Take the S3 state's lock; `--lock=false` reads without it (for a
    /// plan while someone else applies; nothing can be written).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub lock: bool,
    /// Wait this long for the S3 state's lock before giving up.
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub lock_timeout: std::time::Duration,
}

/// `flow import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The workflow.
    #[command(flatten)]
    pub workflow: WorkflowArgs,
    /// The step that adopts the object.
    pub step: String,
    /// The object's ID: a stack name, cluster or node group name, FSx id,
    /// bucket name, secret name, repository name.
    pub id: String,
}

/// `flow graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The workflow.
    #[command(flatten)]
    pub workflow: WorkflowArgs,
    /// dot, svg or mermaid.
    #[arg(long, value_enum, default_value_t = super::graph::GraphFormat::Dot)]
    pub format: super::graph::GraphFormat,
}

/// `flow logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The workflow file.
    pub file: PathBuf,
    /// The step.
    pub step: String,
    /// Keep printing what is appended while a flow process holds the state.
    #[arg(short, long)]
    pub follow: bool,
    /// Where the state is.
    #[command(flatten)]
    pub state: StateArgs,
}

/// `flow plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The workflow.
    #[command(flatten)]
    pub workflow: WorkflowArgs,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit 0 when nothing would change, 2 when something would, 1 on error.
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Save the plan to FILE, for `flow apply FILE`.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Plan only these steps and what they need.
    #[arg(long, value_name = "STEP")]
    pub target: Vec<String>,
    /// Replace (or re-run) these steps even if unchanged.
    #[arg(long, value_name = "STEP")]
    pub replace: Vec<String>,
    /// Price table for the cost estimate (entries override the built-in
    /// table; default: $FLOW_PRICES, else the built-in one).
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Read each applied step's real object before planning, to show what
    /// changed outside flow; `--refresh=false` plans from state alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub refresh: bool,
    /// How many real objects are read at once.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub parallelism: usize,
    /// How long one object's read may take before its step is planned from
    /// state alone ("could not read").
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub refresh_timeout: std::time::Duration,
}

/// `flow apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The workflow file, or a plan saved with `flow plan --out`.
    pub file: PathBuf,
    /// Set a variable: NAME=VALUE.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Read variables from a TOML file.
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    /// Where the state is.
    #[command(flatten)]
    pub state: StateArgs,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub auto_approve: bool,
    /// How many steps may run at once.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub parallelism: usize,
    /// Apply only these steps and what they need.
    #[arg(long, value_name = "STEP")]
    pub target: Vec<String>,
    /// Replace (or re-run) these steps even if unchanged.
    #[arg(long, value_name = "STEP")]
    pub replace: Vec<String>,
    /// Print the plan and then one JSON event per line (needs --auto-approve
    /// or a saved plan).
    #[arg(long)]
    pub json: bool,
    /// Read each applied step's real object first, and record what changed
    /// outside flow; `--refresh=false` trusts state alone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub refresh: bool,
    /// Only record what the real objects are now: change nothing in the cloud.
    #[arg(long, conflicts_with_all = ["replace", "target"])]
    pub refresh_only: bool,
    /// How long one object's read may take before its step is planned from
    /// state alone ("could not read").
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub refresh_timeout: std::time::Duration,
}

/// `flow destroy`.
#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// The workflow file (only its folder and state are used: destroy works
    /// from the dependencies recorded in state, even if the file changed).
    pub file: PathBuf,
    /// Where the state is.
    #[command(flatten)]
    pub state: StateArgs,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub auto_approve: bool,
    /// How many steps may be deleted at once.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub parallelism: usize,
    /// Destroy only these steps.
    #[arg(long, value_name = "STEP")]
    pub target: Vec<String>,
    /// Also destroy steps that depend on the targets.
    #[arg(long)]
    pub with_dependents: bool,
    /// Destroy steps with lifecycle.prevent_destroy too.
    #[arg(long)]
    pub allow_protected: bool,
    /// Delete what Kubernetes controllers made for the destroyed clusters
    /// and left in their VPCs (load balancers, target groups, security
    /// groups, unattached interfaces), instead of listing it and stopping.
    #[arg(long)]
    pub clean_leftovers: bool,
    /// Set a variable (only used to give destroy commands the secrets state
    /// does not keep).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Read variables from a TOML file.
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    /// Print the plan and then one JSON event per line (needs --auto-approve).
    #[arg(long)]
    pub json: bool,
}

/// `flow output`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// The workflow file.
    pub file: PathBuf,
    /// A step, or STEP.KEY for one value.
    pub selector: Option<String>,
    /// Where the state is.
    #[command(flatten)]
    pub state: StateArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `flow runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The workflow file.
    pub file: PathBuf,
    /// Only this step's runs.
    pub step: Option<String>,
    /// Where the state is.
    #[command(flatten)]
    pub state: StateArgs,
    /// Print JSON: every field of each run.
    #[arg(long)]
    pub json: bool,
}

/// `flow report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The workflow.
    #[command(flatten)]
    pub workflow: WorkflowArgs,
    /// Only this step's runs in the curves and the table.
    pub step: Option<String>,
    /// Where to write the page (default: report.html in the state folder).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `flow compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The earlier run's id (as `flow runs` lists it).
    pub run_a: String,
    /// The later run's id.
    pub run_b: String,
    /// The workflow whose state holds the runs (default: every local state
    /// under ./.flow is searched).
    #[arg(long, short = 'w', value_name = "FILE")]
    pub workflow: Option<PathBuf>,
    /// Where the state is (with --workflow).
    #[command(flatten)]
    pub state: StateArgs,
}

/// `flow state ...`.
#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// List every step in state with its status. Works while an apply
    /// holds the state: it reads the apply's last committed change.
    List {
        /// The workflow file.
        file: PathBuf,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the state backups kept (one is written before every apply and destroy).
    Backups {
        /// The workflow file.
        file: PathBuf,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
    },
    /// Replace the state with a backup (the current state is backed up first).
    Restore {
        /// The workflow file.
        file: PathBuf,
        /// The backup, as listed by `flow state backups`: a file, or for an
        /// S3 state a version id or an s3:// backup object.
        backup: PathBuf,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
    },
    /// Move the local state to the S3 state the workflow (or --state)
    /// names; the local state becomes its copy.
    Push {
        /// The workflow file.
        file: PathBuf,
        /// Replace a state S3 already holds (it is backed up first).
        #[arg(long)]
        force: bool,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
    },
    /// Copy the S3 state into the local state and make that the state (the
    /// object in S3 is left as it is).
    Pull {
        /// The workflow file.
        file: PathBuf,
        /// Replace local steps that are not a copy of the S3 state (they
        /// are backed up first).
        #[arg(long)]
        force: bool,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
    },
    /// Break the lock of an S3 state whose holder is gone (the id is in
    /// the message that refused you).
    Unlock {
        /// The workflow file.
        file: PathBuf,
        /// The lock's id.
        lock_id: String,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
    },
    /// Show everything state records about one step (JSON; strings over
    /// 1,000 characters cut, --full for them whole). Works while an apply
    /// holds the state: it reads the apply's last committed change.
    Show {
        /// The workflow file.
        file: PathBuf,
        /// The step.
        step: String,
        /// Every string whole, however long.
        #[arg(long)]
        full: bool,
        /// Where the state is.
        #[command(flatten)]
        state: StateArgs,
    },
}
