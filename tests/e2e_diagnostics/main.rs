#[path = "../support/mod.rs"]
mod support;

// End-to-end tests of what `flow` says about broken workflows.
//
// The corpus: every file `tests/fixtures/bad/NN-short-name.toml` is one
// broken workflow (var files it needs live in `tests/fixtures/bad/vars/`).
// Each case runs `flow validate`, `flow plan` and `flow apply` on its file in
// a scratch copy of the fixtures folder and checks that all three:
//
// - exit with code 1 and print nothing on stdout;
// - print the same diagnostics, which point at the expected places
//   (`╭─[bad/NN-....toml:LINE:COL]`), unless the problem is on the command
//   line only;
// - end with the `N problem(s) found; nothing was changed` summary;
// - create no `.flow` state folder.
//
// The rendered diagnostics are kept as insta snapshots in `snapshots/` beside
// this file; the cases are in `cases/`, a file per topic (see `cases/mod.rs`).
//
// No case is ignored: a case the engine gets wrong fails until the engine is
// fixed (scripts/test refuses ignored tests). A new case's snapshot is
// created with `INSTA_UPDATE=always` and committed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use support::{Project, Run};

/// An environment variable that a fixture reads and that must not be set.
const UNSET_ENV: &str = "FLOW_E2E_SURELY_UNSET_TOKEN";
/// An environment variable that a fixture reads; set only by its case.
const NODES_ENV: &str = "FLOW_E2E_NODES";

/// One broken workflow and what `flow` must say about it.
#[derive(Debug, Clone, Copy)]
struct Case {
    /// The file under `tests/fixtures/bad/`.
    file: &'static str,
    /// Extra command-line arguments (`--var`, `--var-file`).
    args: &'static [&'static str],
    /// Extra environment variables.
    env: &'static [(&'static str, &'static str)],
    /// Diagnostic codes that must appear.
    codes: &'static [&'static str],
    /// Locations that must appear as `╭─[LOCATION]`: `LINE:COL` in the case's
    /// file, or `bad/...:LINE:COL` in another file. Empty: the problem is on
    /// the command line and nothing may point into a file.
    at: &'static [&'static str],
    /// How many problems the summary must count.
    problems: usize,
    /// Text that must appear on stderr.
    says: &'static [&'static str],
    /// Text that must not appear on stderr.
    never_says: &'static [&'static str],
}

const BASE: Case = Case {
    file: "",
    args: &[],
    env: &[],
    codes: &[],
    at: &[],
    problems: 1,
    says: &[],
    never_says: &[],
};

/// One `#[test]` per case, plus `CASES` listing those of one part of the corpus.
macro_rules! corpus {
    ($( $(#[$meta:meta])* $test:ident: $case:expr, )*) => {
        $(
            #[test]
            $(#[$meta])*
            fn $test() {
                check(&$case);
            }
        )*

        /// The cases of this part of the corpus.
        pub const CASES: &[Case] = &[$($case),*];
    };
}

mod cases;
use cases::corpus;

/// The fixtures folder.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/bad")
}

/// Run `flow ARGS` in `project` with a controlled environment.
fn run_flow(project: &Project, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = project.cmd(args);
    cmd.env_remove(UNSET_ENV).env_remove(NODES_ENV);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run flow");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `text` with the project's path replaced by `[dir]`.
fn normalize(project: &Project, text: &str) -> String {
    let mut out = text.to_string();
    if let Ok(real) = project.path().canonicalize() {
        out = out.replace(&real.display().to_string(), "[dir]");
    }
    out.replace(&project.path().display().to_string(), "[dir]")
}

/// Every `.flow` folder anywhere in the project.
fn state_folders(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if entry.file_name() == ".flow" {
                found.push(path.clone());
            }
            found.extend(state_folders(&path));
        }
    }
    found
}

/// The summary line that ends every failed run.
fn summary(problems: usize) -> String {
    format!(
        "error: {problems} problem{} found; nothing was changed\n",
        if problems == 1 { "" } else { "s" }
    )
}

/// Every check that holds for a run of `flow COMMAND` on a broken case.
fn check_run(case: &Case, command: &str, run: &Run, project: &Project) {
    let file = format!("bad/{}", case.file);
    let context = format!(
        "`flow {command} {file} {}`\n--- exit {}\n--- stdout\n{}\n--- stderr\n{}",
        case.args.join(" "),
        run.code,
        run.stdout,
        run.stderr
    );
    assert_eq!(run.code, 1, "exit code should be 1: {context}");
    assert!(
        run.stdout.is_empty(),
        "nothing should go to stdout: {context}"
    );
    assert!(
        run.stderr.ends_with(&summary(case.problems)),
        "stderr should end with {:?}: {context}",
        summary(case.problems)
    );
    if case.at.is_empty() {
        assert!(
            !run.stderr.contains("╭─["),
            "a command-line problem should not point into a file: {context}"
        );
    }
    for at in case.at {
        let location = if at.starts_with("bad/") {
            at.to_string()
        } else {
            format!("{file}:{at}")
        };
        assert!(
            run.stderr.contains(&format!("╭─[{location}]")),
            "stderr should point at {location}: {context}"
        );
    }
    for code in case.codes {
        assert!(
            run.stderr.contains(code),
            "stderr should have {code}: {context}"
        );
    }
    for text in case.says {
        assert!(
            run.stderr.contains(text),
            "stderr should say {text:?}: {context}"
        );
    }
    for text in case.never_says {
        assert!(
            !run.stderr.contains(text),
            "stderr should not say {text:?}: {context}"
        );
    }
    let state = state_folders(project.path());
    assert!(
        state.is_empty(),
        "no state folder should be created, found {state:?}: {context}"
    );
}

/// Run validate, plan and apply on the case and check all of them; snapshot
/// what validate prints.
fn check(case: &Case) {
    let project = Project::new();
    support::copy_dir(&fixtures(), &project.path().join("bad"));
    let file = format!("bad/{}", case.file);
    let mut validate_stderr = None;
    for command in ["validate", "plan", "apply"] {
        let mut args = vec![command, file.as_str()];
        args.extend_from_slice(case.args);
        let run = run_flow(&project, &args, case.env);
        check_run(case, command, &run, &project);
        match &validate_stderr {
            None => validate_stderr = Some(run.stderr),
            Some(expected) => assert_eq!(
                &run.stderr, expected,
                "`flow {command}` should report exactly what `flow validate` does"
            ),
        }
    }
    let name = case.file.trim_end_matches(".toml");
    let rendered = normalize(&project, &validate_stderr.expect("validate ran"));
    insta::assert_snapshot!(name, rendered);
}

/// Every fixture is a case, every case has a fixture, and the corpus is big
/// enough.
#[test]
fn every_fixture_is_in_the_corpus() {
    let mut on_disk: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut in_corpus: Vec<String> = corpus().map(|c| c.file.to_string()).collect();
    in_corpus.sort();
    let mut unique = in_corpus.clone();
    unique.dedup();
    assert_eq!(unique, in_corpus, "a fixture is used by two cases");
    assert_eq!(on_disk, in_corpus, "fixtures and cases differ");
    for name in &on_disk {
        let digits = name.chars().take_while(char::is_ascii_digit).count();
        assert!(
            (2..=3).contains(&digits) && name[digits..].starts_with('-'),
            "fixture {name} should be named NN-short-name.toml"
        );
        assert!(name.ends_with(".toml"), "fixture {name} should be TOML");
    }
    // The file a case names from inside its workflow.
    let template = fixtures().join("templates/nccl.sbatch.tpl");
    assert!(template.is_file(), "{} is missing", template.display());
    for entry in std::fs::read_dir(fixtures().join("vars")).expect("var files") {
        let name = format!(
            "bad/vars/{}",
            entry.expect("entry").file_name().to_string_lossy()
        );
        assert!(
            corpus().any(|c| c.args.contains(&name.as_str())),
            "{name} is used by no case"
        );
    }
    assert!(corpus().count() >= 100, "only {} cases", corpus().count());
}

/// A missing workflow file is reported like any other problem.
fn check_missing_workflow_file(command: &str) {
    let project = Project::new();
    let run = run_flow(&project, &[command, "nope.toml"], &[]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("cannot read workflow nope.toml"),
        "{run:?}"
    );
    assert!(run.stderr.ends_with(&summary(1)), "{run:?}");
    assert!(state_folders(project.path()).is_empty(), "{run:?}");
}

#[test]
fn missing_workflow_file_validate() {
    check_missing_workflow_file("validate");
}

#[test]
fn missing_workflow_file_plan() {
    check_missing_workflow_file("plan");
}

#[test]
fn missing_workflow_file_apply() {
    check_missing_workflow_file("apply");
}

// ---- existing state is never touched by a broken workflow -----------------

const VALID: &str = r#"[workflow]
name = "keep"

[vars.label]
default = "first"

[steps.base]
provider = "null"

[steps.base.inputs]
label = "${vars.label}"

[steps.top]
provider = "null"
inputs = { from = "${steps.base.outputs.label}" }
"#;

/// Broken variants of [`VALID`], each with the extra arguments to pass.
const BROKEN: &[(&str, &str, &[&str])] = &[
    (
        "TOML syntax error",
        "[steps.base]\nprovider \"null\"\n",
        &[],
    ),
    (
        "unknown provider",
        "[steps.base]\nprovider = \"nul\"\n\n[steps.top]\nprovider = \"null\"\n",
        &[],
    ),
    (
        "dependency cycle",
        "[steps.base]\nprovider = \"null\"\ndepends_on = [\"top\"]\n\n\
         [steps.top]\nprovider = \"null\"\ninputs = { from = \"${steps.base.outputs.label}\" }\n",
        &[],
    ),
    (
        "missing variable value",
        "[vars.label]\ntype = \"string\"\n\n[steps.base]\nprovider = \"null\"\n\
         inputs = { label = \"${vars.label}\" }\n\n[steps.top]\nprovider = \"null\"\n",
        &[],
    ),
    (
        "input rejected by the provider",
        "[steps.base]\nprovider = \"null\"\ninputs = { delay_ms = -1 }\n\n\
         [steps.top]\nprovider = \"null\"\n",
        &[],
    ),
    (
        "--var for an undeclared variable",
        VALID,
        &["--var", "lable=x"],
    ),
    (
        "--var-file that does not exist",
        VALID,
        &["--var-file", "nope.toml"],
    ),
    (
        "keep_backups below 3",
        "[workflow.state]\nkeep_backups = 2\n\n[steps.base]\nprovider = \"null\"\n\n\
         [steps.top]\nprovider = \"null\"\n",
        &[],
    ),
    (
        "unknown step in depends_on",
        "[steps.base]\nprovider = \"null\"\n\n[steps.top]\nprovider = \"null\"\n\
         depends_on = [\"bsae\"]\n",
        &[],
    ),
];

/// Every file under the project's `.flow`: its bytes and modification time.
fn state_contents(project: &Project) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    project
        .state_files()
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("read state file");
            let modified = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .expect("mtime");
            (path, (bytes, modified))
        })
        .collect()
}

#[test]
fn broken_workflows_leave_existing_state_byte_for_byte_unchanged() {
    let project = Project::new();
    project.write("wf.toml", VALID);
    project
        .run(&["apply", "wf.toml", "--auto-approve"])
        .expect(0);
    let before = state_contents(&project);
    assert!(
        before.keys().any(|p| p.ends_with("lock")),
        "state should have a lock file: {:?}",
        before.keys()
    );
    assert!(before.len() > 2, "state is too small: {:?}", before.keys());

    for (what, text, extra) in BROKEN {
        project.write("wf.toml", text);
        for command in [
            &["validate", "wf.toml"][..],
            &["plan", "wf.toml"],
            &["apply", "wf.toml"],
            &["apply", "wf.toml", "--auto-approve"],
        ] {
            let mut args = command.to_vec();
            args.extend_from_slice(extra);
            let run = run_flow(&project, &args, &[]);
            let context = format!("{what}: `flow {}`\n{run:?}", args.join(" "));
            assert_eq!(run.code, 1, "{context}");
            assert!(
                run.stderr.contains("found; nothing was changed\n"),
                "{context}"
            );
            let after = state_contents(&project);
            assert_eq!(
                after.keys().collect::<Vec<_>>(),
                before.keys().collect::<Vec<_>>(),
                "the set of state files changed: {context}"
            );
            for (path, (bytes, modified)) in &before {
                let (now, now_modified) = &after[path];
                assert!(
                    now == bytes,
                    "{} changed ({} bytes before, {} after): {context}",
                    path.display(),
                    bytes.len(),
                    now.len()
                );
                assert_eq!(
                    now_modified,
                    modified,
                    "{} was rewritten: {context}",
                    path.display()
                );
            }
        }
    }

    // The state is still good: the valid workflow has nothing to change.
    project.write("wf.toml", VALID);
    project
        .run(&["plan", "wf.toml", "--detailed-exitcode"])
        .expect(0);
}
