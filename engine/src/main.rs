//! The `flow` binary.

use clap::Parser;

fn main() {
    // Die quietly on a closed pipe (`flow plan | head`), like other Unix tools,
    // instead of panicking on the next write.
    // SAFETY: restoring the default disposition of one signal at start-up.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = flow_engine::cli::args::Cli::parse();
    std::process::exit(flow_engine::cli::run(cli));
}
