//! Unicode and long names: step names of 255 bytes, instance keys and
//! values in scripts from several alphabets (and emoji), a workflow name
//! that is not ASCII. Every command a user runs works on them, state and
//! logs keep them exactly, and a name the language does not take is a
//! clear error.

use crate::support::Project;

/// The longest name a file system takes for one path component.
const NAME_MAX: usize = 255;

#[test]
fn unicode_and_255_byte_names_and_values_survive_every_command() {
    let p = Project::new();
    let long = format!("s{}", "x".repeat(NAME_MAX - 1));
    assert_eq!(long.len(), NAME_MAX);
    // A key of 255 bytes of UTF-8: 85 three-byte characters.
    let long_key = "語".repeat(NAME_MAX / 3);
    assert_eq!(long_key.len(), NAME_MAX);
    let value = "Grüße, 世界 — Ελλάδα 🚀";
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "ünïcødé-名前"

[steps.{long}]
provider = "exec"
[steps.{long}.inputs]
run = "echo 'value={value}' >> $FLOW_OUTPUT; echo 'said {value}'"

[steps.each]
provider = "exec"
for_each = ["日本語", "ünï-😀", "{long_key}"]
[steps.each.inputs]
run = "echo \"key=$K\" >> $FLOW_OUTPUT; echo \"from $V\""
env = {{ K = "${{each.value}}", V = "${{steps.{long}.outputs.value}}" }}
"#
        ),
    );
    p.run(&["validate", "wf.toml"]).expect(0);
    p.run(&["plan", "wf.toml"]).expect(0);
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.all().contains("4 created"), "{}", apply.all());
    let out = p.run(&["output", "wf.toml", "--json"]).expect(0);
    let outputs: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(outputs[&long]["value"], value, "{}", out.stdout);
    assert_eq!(
        outputs[format!("each[\"{long_key}\"]")]["key"],
        long_key.as_str(),
        "{}",
        out.stdout
    );
    assert_eq!(
        outputs["each[\"ünï-😀\"]"]["key"], "ünï-😀",
        "{}",
        out.stdout
    );
    let log = p.run(&["logs", "wf.toml", &long]).expect(0);
    assert!(
        log.stdout.contains(&format!("said {value}")),
        "{}",
        log.stdout
    );
    let instance = format!("each[\"{long_key}\"]");
    let log = p.run(&["logs", "wf.toml", &instance]).expect(0);
    assert!(
        log.stdout.contains(&format!("from {value}")),
        "{}",
        log.stdout
    );
    p.run(&["state", "show", "wf.toml", &instance]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    p.run(&["runs", "wf.toml"]).expect(0);
    p.run(&["report", "wf.toml", "-o", "report.html"]).expect(0);
    assert!(p.read("report.html").contains("ünï-😀"));
    let destroy = p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(destroy.all().contains("4 deleted"), "{}", destroy.all());
}

/// A step name the language does not take (not ASCII) is refused with a
/// clear error that points at it, bare (TOML's own rule) or quoted (flow's
/// rule for names), and nothing is created.
#[test]
fn a_step_name_that_is_not_ascii_is_a_clear_error() {
    let p = Project::new();
    for (key, says) in [
        ("名前", "invalid unquoted key"),
        ("\"名前\"", "`名前` is not a valid name"),
    ] {
        p.write(
            "wf.toml",
            &format!(
                "\n[steps.{key}]\nprovider = \"exec\"\n[steps.{key}.inputs]\nrun = \"true\"\n"
            ),
        );
        let refused = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
        assert!(refused.stderr.contains(says), "{}", refused.stderr);
        assert!(refused.stderr.contains("wf.toml:2:8"), "{}", refused.stderr);
        assert!(!p.path().join(".flow").exists());
    }
}
