//! The `flow` binary.

use clap::Parser;

fn main() {
    let cli = flow_engine::cli::args::Cli::parse();
    std::process::exit(flow_engine::cli::run(cli));
}
