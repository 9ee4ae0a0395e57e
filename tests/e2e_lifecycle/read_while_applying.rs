//! Reading while an apply holds the state: every command that only shows
//! things answers from the apply's last committed change and says so on
//! stderr, with how old it is; the commands that would change the state,
//! and `plan`, are still refused by the lock.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::process::Child;

use crate::support::{Project, finish, wait_until};

/// `first` measures a value (so a run is recorded) and has a log, `quiet`
/// says nothing (no log file), and `hold` runs until the test writes
/// `release`, holding the state meanwhile.
const WF: &str = r#"
[workflow]
name = "rw"

[steps.first]
provider = "exec"
[steps.first.inputs]
run = "echo measured once; echo busbw=17.5 >> $FLOW_OUTPUT; echo ready=yes >> $FLOW_OUTPUT"
expect = { busbw = ">= 10" }

[steps.quiet]
provider = "null"

[steps.hold]
provider = "exec"
depends_on = ["first", "quiet"]
[steps.hold.inputs]
run = "touch holding; while [ ! -f release ]; do sleep 0.05; done"
"#;

/// An apply of `WF` that has committed `hold`'s intent and waits.
fn holding(p: &Project) -> Child {
    p.write("wf.toml", WF);
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "`hold` to run", || {
        p.path().join("holding").exists()
    });
    child
}

/// Every file of the state a reader could touch (all but sled's own files,
/// which the apply's writer flushes as it likes), with bytes and mtime.
fn reader_visible(root: &Path) -> Vec<(PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut out: Vec<_> = crate::support::files_under(root)
        .into_iter()
        .filter(|f| !f.starts_with(root.join("db")))
        .map(|f| {
            let modified = std::fs::metadata(&f).unwrap().modified().unwrap();
            (f.clone(), std::fs::read(&f).unwrap_or_default(), modified)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_read_only_command_answers_while_an_apply_holds_the_state() {
    let p = Project::new();
    let child = holding(&p);
    let said = format!(
        "read while `flow apply` (pid {}) holds the state; as of its last committed change ",
        child.id()
    );
    let root = p.path().join(".flow/wf");
    let before = reader_visible(&root);
    let read = |args: &[&str]| {
        let r = p.run(args).expect(0);
        assert!(
            r.stderr.contains(&said) && r.stderr.contains(" ago (serial "),
            "`flow {}` does not say what it read:\n{}",
            args.join(" "),
            r.stderr
        );
        r
    };

    assert_eq!(read(&["output", "wf.toml", "first.ready"]).stdout, "yes\n");
    let all = read(&["output", "wf.toml"]).stdout;
    assert!(all.contains("first:") && all.contains("busbw"), "{all}");

    // The last committed change: `hold`'s intent, written before it ran.
    let list = read(&["state", "list", "wf.toml"]).stdout;
    let status = |step: &str| {
        list.lines()
            .find(|l| l.starts_with(&format!("{step} ")))
            .unwrap_or_else(|| panic!("no `{step}` in\n{list}"))
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (status("first"), status("quiet"), status("hold")),
        ("applied".into(), "applied".into(), "create…".into()),
        "{list}"
    );
    let show = read(&["state", "show", "wf.toml", "hold"]).stdout;
    let show: serde_json::Value = serde_json::from_str(&show).expect("JSON");
    assert_eq!(show["in_flight"]["operation"], "create", "{show}");

    // A log is its own file, appended as the step runs: no state is read.
    let log = p.run(&["logs", "wf.toml", "first"]).expect(0);
    assert!(log.stdout.contains("measured once"), "{}", log.stdout);
    // A step that ran and said nothing, known as such from the state.
    let quiet = read(&["logs", "wf.toml", "quiet"]).stdout;
    assert!(
        quiet.contains("step `quiet` ran (applied) and wrote nothing"),
        "{quiet}"
    );

    let runs = read(&["runs", "wf.toml"]).stdout;
    assert!(
        runs.contains("first") && runs.contains("busbw=17.5"),
        "{runs}"
    );
    let report = read(&["report", "wf.toml", "-o", "report.html"]).stdout;
    assert!(report.contains("Report written to report.html"), "{report}");
    // Coloured from the state: applied (green) and in flight (amber).
    let graph = read(&["graph", "wf.toml"]).stdout;
    let node = |step: &str| {
        graph
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("\"{step}\" [")))
            .unwrap_or_else(|| panic!("no node `{step}` in\n{graph}"))
            .to_string()
    };
    assert!(node("first").contains("#e6f4ea"), "{graph}");
    assert!(node("hold").contains("#fff6d5"), "{graph}");

    assert_eq!(
        reader_visible(&root),
        before,
        "a read wrote to the state (or the apply moved on while it was held)"
    );
    std::fs::write(p.path().join("release"), "").unwrap();
    finish(child).expect(0);
    // Under the lock again: nothing to say.
    let after = p.run(&["state", "list", "wf.toml"]).expect(0);
    assert!(!after.stderr.contains("read while"), "{}", after.stderr);
    assert!(after.stdout.contains("hold"), "{}", after.stdout);
}

/// `plan` takes the lock (a plan of a state that moves is no plan), and so
/// do the commands that change the state: they are refused as before.
#[test]
fn plan_and_the_commands_that_write_are_still_refused_while_an_apply_holds_it() {
    let p = Project::new();
    let child = holding(&p);
    for args in [
        &["plan", "wf.toml"][..],
        &["apply", "wf.toml", "--auto-approve"],
        &["destroy", "wf.toml", "--auto-approve"],
    ] {
        let r = p.run(args).expect(1);
        assert!(
            r.stderr.contains("is locked by `flow apply`") && !r.stderr.contains("read while"),
            "`flow {}`:\n{}",
            args.join(" "),
            r.stderr
        );
    }
    std::fs::write(p.path().join("release"), "").unwrap();
    finish(child).expect(0);
}
