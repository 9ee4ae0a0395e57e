//! The `flow` binary.

use clap::Parser;

/// mimalloc instead of glibc's malloc: an apply's layer boundaries (hundreds
/// of steps ending and starting at once, each allocating and freeing on
/// whichever worker thread runs it) spent as much CPU in glibc's `malloc`,
/// `free` and `malloc_consolidate` as in flow's own code. Built with
/// `no_thp`, which leaves out its request for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`): with it the heap doubled and start-up
/// stalled. The system's huge-page policy is left as it is, for flow and
/// for the commands it runs, unless the user sets `MIMALLOC_ALLOW_THP=0`
/// (mimalloc reads its `MIMALLOC_*` variables; see docs/operator.md).
/// tests/e2e_lifecycle checks both. Measured in docs/performance/engine.md, round 9.
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
