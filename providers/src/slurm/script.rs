//! The batch script as submitted: the file the step names, read from inside
//! the workflow's folder, with the step's `environment` exported and its
//! `args` set as the positional parameters (`$1`, `$2`, … as `sbatch SCRIPT
//! ARGS` would give them) right after its `#SBATCH` header (sbatch stops
//! reading `#SBATCH` lines at the first command, so this goes after the
//! header, not before it). It reaches
//! sbatch on standard input, so the same bytes run locally and over SSH and
//! no value ever sits on a command line.

use std::collections::BTreeMap;

use crate::Workdir;
use crate::contract::ProviderError;

/// Whether `name` may be exported from a shell script.
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The script file `path` (relative to `workdir`, inside it), read.
pub(crate) fn read(workdir: &Workdir, path: &str) -> Result<String, ProviderError> {
    let full = workdir.resolve(path).map_err(ProviderError::bad_input)?;
    std::fs::read_to_string(&full)
        .map_err(|e| ProviderError::bad_input(format!("cannot read the job script `{path}`: {e}")))
}

/// `script` with `export NAME='value'` lines for `env` and a `set --` line
/// for `args` after its header: the shebang, `#SBATCH` lines, other
/// comments and blank lines at the top.
pub(crate) fn with_preamble(
    script: &str,
    env: &BTreeMap<String, String>,
    args: &[String],
) -> String {
    if env.is_empty() && args.is_empty() {
        return script.to_string();
    }
    let lines: Vec<&str> = script.split_inclusive('\n').collect();
    let header = lines
        .iter()
        .take_while(|l| {
            let t = l.trim();
            t.is_empty() || t.starts_with('#')
        })
        .count();
    let mut out = String::with_capacity(script.len() + 64 * env.len());
    for line in &lines[..header] {
        out.push_str(line);
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("# set by flow (the step's `environment` and `args`)\n");
    for (name, value) in env {
        out.push_str(&format!("export {name}={}\n", single_quoted(value)));
    }
    if !args.is_empty() {
        let quoted: Vec<String> = args.iter().map(|a| single_quoted(a)).collect();
        out.push_str(&format!("set -- {}\n", quoted.join(" ")));
    }
    for line in &lines[header..] {
        out.push_str(line);
    }
    out
}

/// `value` in single quotes for a shell, whatever it holds.
fn single_quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NCCL: &str = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --exclusive\n\n# comment\nset -ex\nsrun all_reduce_perf\n";

    #[test]
    fn exports_go_after_the_sbatch_header() {
        let env = BTreeMap::from([
            ("NCCL_DEBUG".to_string(), "INFO".to_string()),
            ("QUOTE".to_string(), "it's $HOME".to_string()),
        ]);
        let out = with_preamble(
            NCCL,
            &env,
            &["/opt/nccl/all_reduce_perf".into(), "a b".into()],
        );
        let set = out.find("set -ex").unwrap();
        let export = out.find("export NCCL_DEBUG='INFO'").unwrap();
        let last_sbatch = out.rfind("#SBATCH").unwrap();
        assert!(last_sbatch < export && export < set, "{out}");
        assert!(out.contains("export QUOTE='it'\\''s $HOME'\n"), "{out}");
        let set = out
            .find("set -- '/opt/nccl/all_reduce_perf' 'a b'\n")
            .unwrap();
        assert!(export < set && set < out.find("set -ex").unwrap(), "{out}");
        assert_eq!(with_preamble(NCCL, &BTreeMap::new(), &[]), NCCL);
        // A script that is only a header still gets its exports.
        assert!(with_preamble("#!/bin/sh", &env, &[]).starts_with("#!/bin/sh\n# set by flow"));
    }

    #[test]
    fn names_must_be_shell_names() {
        assert!(is_env_name("NCCL_DEBUG") && is_env_name("_x1"));
        assert!(!is_env_name("1X") && !is_env_name("A-B") && !is_env_name("A;rm"));
    }
}
