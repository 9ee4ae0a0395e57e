//! The read commands on what a user meets: a log that does not exist,
//! followed or not; `[[moved]]` hints only towards what state holds; long
//! values cut with the command that prints them whole; the same columns on
//! a terminal as in a pipe.

use std::process::Command;

use crate::support::{Project, flow_bin};

/// An exec step whose outputs hold a long value, and whose run is recorded
/// (`expect`), with a long script as its input.
fn long_values() -> String {
    format!(
        r#"
[workflow]
name = "long"

[steps.s]
provider = "exec"
[steps.s.inputs]
run = "echo role=arn:aws:iam::123456789012:role/$(printf 'é%.0s' $(seq 300)) >> $FLOW_OUTPUT; echo short=ok >> $FLOW_OUTPUT; echo busbw 12; echo busbw=12 >> $FLOW_OUTPUT; : {pad}"
expect = {{ busbw = ">= 1" }}
"#,
        pad = "x".repeat(1200)
    )
}

/// `flow logs -f` of a step that never ran, with no apply holding the
/// state, is the same error as without `-f` (it exited 0, printing nothing).
#[test]
fn following_the_log_of_a_step_that_never_ran_fails_saying_so() {
    let p = Project::new();
    p.write("wf.toml", &long_values());
    for args in [
        &["logs", "wf.toml", "s", "-f"][..],
        &["logs", "wf.toml", "s"][..],
    ] {
        let run = p.run(args).expect(1);
        assert!(
            run.stderr.contains("there is no log for step `s`"),
            "{args:?}: {}",
            run.all()
        );
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    // Once it ran, -f prints the log and ends with the apply.
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let run = p.run(&["logs", "wf.toml", "s", "-f"]).expect(0);
    assert!(run.stdout.contains("busbw 12"), "{}", run.all());
}

/// A `[[moved]]` entry is suggested only when state holds where it points:
/// on an empty state `flow output`/`flow logs` of the old name say to apply
/// first, as for any name.
#[test]
fn moved_hints_point_only_at_what_state_holds() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "moved"

[steps.nccl]
provider = "exec"
for_each = ["2"]
[steps.nccl.inputs]
run = "echo busbw=17.5 >> $FLOW_OUTPUT"

[[moved]]
from = "old"
to = "nccl[\"2\"]"
"#,
    );
    for cmd in ["output", "logs"] {
        let run = p.run(&[cmd, "wf.toml", "old"]).expect(1);
        assert!(
            !run.stderr.contains("moved") && !run.stderr.contains(r#"nccl["2"]"#),
            "{cmd}: {}",
            run.stderr
        );
    }
    // The shipped workflow the hint was seen on, on an empty state.
    let eks = crate::support::workspace_root().join("workflows/eks-p4d.toml");
    let empty = p.path().join("empty-state");
    let run = p
        .run(&[
            "output",
            eks.to_str().unwrap(),
            "nccl",
            "--state-dir",
            empty.to_str().unwrap(),
        ])
        .expect(1);
    assert!(!run.stderr.contains(r#"nccl["2"]"#), "{}", run.stderr);
    // Once state holds it, the hint is there.
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    for cmd in ["output", "logs"] {
        let run = p.run(&[cmd, "wf.toml", "old"]).expect(1);
        assert!(
            run.stderr.contains(r#"`old` moved to `nccl["2"]`"#),
            "{cmd}: {}",
            run.stderr
        );
    }
}

/// A long output is cut in `flow output`'s table between characters,
/// saying how long it is and which command prints it whole; that command
/// (and the single value by name) print it whole. `flow state show` cuts
/// strings over 1,000 characters, still JSON, and `--full` shows them.
#[test]
fn long_values_are_cut_at_a_character_with_the_whole_one_command_away() {
    let p = Project::new();
    p.write("wf.toml", &long_values());
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let whole = format!("arn:aws:iam::123456789012:role/{}", "é".repeat(300));
    let table = p.run(&["output", "wf.toml"]).expect(0).stdout;
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("role"))
        .unwrap_or_else(|| panic!("{table}"));
    let (shown, note) = line.split_once('…').unwrap_or_else(|| panic!("{line}"));
    let value = shown.split_once(" = ").unwrap().1;
    assert!(
        whole.starts_with(value) && value.chars().count() == 200,
        "{line}"
    );
    assert_eq!(
        note,
        " (331 characters: `flow output wf.toml s.role --json` for the whole)"
    );
    let json = p
        .run(&["output", "wf.toml", "s.role", "--json"])
        .expect(0)
        .stdout;
    assert_eq!(json.trim(), format!("\"{whole}\""));
    let by_name = p.run(&["output", "wf.toml", "s.role"]).expect(0).stdout;
    assert_eq!(by_name.trim(), whole);

    let show = p.run(&["state", "show", "wf.toml", "s"]).expect(0).stdout;
    let show: serde_json::Value = serde_json::from_str(&show).expect("still JSON");
    let run = show["inputs"]["run"].as_str().unwrap();
    assert!(
        run.ends_with("… (1366 characters: `flow state show wf.toml s --full` for the whole)"),
        "{run}"
    );
    assert_eq!(show["outputs"]["role"], whole.as_str(), "under the limit");
    let full = p
        .run(&["state", "show", "wf.toml", "s", "--full"])
        .expect(0)
        .stdout;
    let full: serde_json::Value = serde_json::from_str(&full).unwrap();
    assert!(
        full["inputs"]["run"]
            .as_str()
            .unwrap()
            .ends_with(&"x".repeat(1200))
    );
}

/// What a command prints on a terminal (through `script`, colour on as a
/// user's terminal has it), its colour codes and carriage returns taken
/// out.
fn on_a_terminal(p: &Project, args: &[&str]) -> String {
    let line = std::iter::once(flow_bin().display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(p.path())
        .env("FLOW_CONFIG_DIR", p.config_dir())
        .env("COLUMNS", "100")
        .env_remove("NO_COLOR")
        .output()
        .expect("run script (util-linux)");
    assert!(out.status.success(), "{out:?}");
    plain(&String::from_utf8_lossy(&out.stdout))
}

/// `text` without ANSI escape sequences and `\r`.
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ … final byte in @..~
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// `flow output`, `flow state list` and `flow runs` lay out the same lines
/// and columns on a terminal as in a pipe (colour aside).
#[test]
fn terminal_and_piped_layouts_are_the_same() {
    let p = Project::new();
    p.write("wf.toml", &long_values());
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    for args in [
        &["output", "wf.toml"][..],
        &["output", "wf.toml", "s"][..],
        &["state", "list", "wf.toml"][..],
        &["runs", "wf.toml"][..],
    ] {
        let piped = p.run(args).expect(0).stdout;
        assert!(piped.lines().count() >= 2, "{args:?}: {piped}");
        let tty = on_a_terminal(&p, args);
        assert_eq!(tty, piped, "{args:?}");
    }
    // It was a terminal: its line discipline ends lines with \r\n.
    let raw = Command::new("script")
        .args([
            "-qec",
            &format!("'{}' state list wf.toml", flow_bin().display()),
            "/dev/null",
        ])
        .current_dir(p.path())
        .env("FLOW_CONFIG_DIR", p.config_dir())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&raw.stdout).contains("\r\n"),
        "{raw:?}"
    );
}
