//! The `flow` binary.

use clap::Parser;

/// mimalloc instead of glibc's malloc: an apply's layer boundaries (hundreds
/// of steps ending and starting at once, each allocating and freeing on
/// whichever worker thread runs it) spent a fifth of their CPU in glibc's
/// `free` and `malloc_consolidate`. Built without transparent huge pages
/// (`no_thp`): with them the heap doubled and start-up stalled. Measured in
/// docs/performance.md, round 9.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
