//! A wall clock that jumps: `clock_shift.c` (beside this file), compiled
//! with the system's C compiler and preloaded into `flow`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The compiled library (built once per test process, into the target's
/// temporary folder), or why it could not be built.
pub fn library() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = super::workspace_root().join("tests/support/clock_shift.c");
            // Built per test process, then renamed over the shared name,
            // so that concurrent test binaries never load a half-written one.
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            let out = dir.join(format!("clock_shift-{}.so", std::process::id()));
            let shared = dir.join("clock_shift.so");
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
            let built = Command::new(&cc)
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&out)
                .arg(&src)
                .arg("-ldl")
                .output()
                .map_err(|e| format!("{cc} cannot run: {e}"))?;
            if !built.status.success() {
                return Err(format!(
                    "{cc} failed on {}: {}",
                    src.display(),
                    String::from_utf8_lossy(&built.stderr)
                ));
            }
            std::fs::rename(&out, &shared).map_err(|e| format!("{}: {e}", shared.display()))?;
            Ok(shared)
        })
        .clone()
}

/// The environment that shifts the wall clock of `flow` (and what it runs)
/// by `secs` seconds.
pub fn shifted(secs: i64) -> Vec<(String, String)> {
    let lib = library().unwrap_or_else(|e| panic!("the clock-shift library: {e}"));
    vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        ("FLOW_TEST_CLOCK_SHIFT".to_string(), secs.to_string()),
    ]
}
