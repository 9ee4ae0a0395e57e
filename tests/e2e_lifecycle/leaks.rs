//! The secret scan: one secret, used every way a workflow can use it, and
//! every place flow prints or writes searched for it in clear and in every
//! encoded form (see `support::secret_scan`).

use std::time::{Duration, Instant};

use crate::support::Project;
use crate::support::secret_scan::{SecretScan, command_lines, forms};

/// A secret with characters that JSON, URLs and shells each escape.
const SECRET: &str = r#"s3cr3t-"Qu0ted" & 'single' +/=x9"#;

/// The secret reaches an exec step through `env`, through the language's
/// functions (base64encode, jsonencode) and its own script, which prints it
/// in clear, base64, URL-encoded, JSON-escaped and shell-quoted, writes it
/// to its outputs and passes a gate; a later step takes those outputs; a
/// failing step quotes it in its error. Every command a user runs on the
/// workflow is captured, every file under the project is read, and the
/// command lines of all processes are sampled while the scripts run.
#[test]
fn a_secret_used_every_way_is_in_nothing_flow_printed_or_wrote() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "leaks"

[vars.token]
sensitive = true
env = "LEAK_TOKEN"

[steps.make]
provider = "exec"
[steps.make.inputs]
run = """
echo "clear: $TOKEN"
printf '%s' "$TOKEN" | base64
python3 -c 'import os, urllib.parse; print("url:", urllib.parse.quote(os.environ["TOKEN"], safe=""))'
python3 -c 'import os, shlex; print("shlex:", shlex.quote(os.environ["TOKEN"]))'
printf 'printf-q: %q\\n' "$TOKEN"
echo "json: $TOKEN_JSON"
echo "b64: $TOKEN_B64"
sleep 1
echo "token=$TOKEN" >> "$FLOW_OUTPUT"
echo "b64=$TOKEN_B64" >> "$FLOW_OUTPUT"
echo "busbw=17.5" >> "$FLOW_OUTPUT"
"""
env = { TOKEN = "${vars.token}", TOKEN_B64 = "${base64encode(vars.token)}", TOKEN_JSON = "${jsonencode({ t = vars.token })}" }
expect = { busbw = ">= 10" }

[steps.take]
provider = "exec"
[steps.take.inputs]
run = "echo took $T and $B; sleep 1"
env = { T = "${steps.make.outputs.token}", B = "${steps.make.outputs.b64}" }
"#,
    );
    p.write(
        "fail.toml",
        r#"
[workflow]
name = "leaks-fail"

[vars.token]
sensitive = true
env = "LEAK_TOKEN"

[steps.broken]
provider = "exec"
[steps.broken.inputs]
run = 'echo "about to fail holding $T"; exit 3'
env = { T = "${vars.token}" }
"#,
    );
    let env = [("LEAK_TOKEN", SECRET)];
    let mut scan = SecretScan::new();
    let said = |scan: &mut SecretScan, label: &str, args: &[&str], code: i32| {
        let run = p.run_env(args, &env).expect(code);
        scan.run(label, &run);
    };
    said(&mut scan, "validate", &["validate", "wf.toml"], 0);
    said(&mut scan, "plan", &["plan", "wf.toml"], 0);
    said(&mut scan, "plan --json", &["plan", "wf.toml", "--json"], 0);
    said(
        &mut scan,
        "plan --out",
        &["plan", "wf.toml", "--out", "wf.plan"],
        0,
    );

    // The apply runs in the background while every process's command line
    // is sampled; the samples must include the scripts' own processes.
    let mut child = {
        let mut c = p.cmd(&["apply", "wf.plan", "--json"]);
        c.env("LEAK_TOKEN", SECRET)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().expect("spawn flow apply")
    };
    let mut samples = 0;
    let mut saw_script = false;
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        assert!(started.elapsed() < Duration::from_secs(60), "apply hangs");
        for (pid, line) in command_lines() {
            let text = String::from_utf8_lossy(&line);
            saw_script |= text.starts_with("sh /dev/fd/") || text.starts_with("sleep 1");
            for (form, bytes) in forms(SECRET) {
                assert!(
                    !line.windows(bytes.len()).any(|w| w == bytes),
                    "the secret ({form}) is in /proc/{pid}/cmdline: {text}"
                );
            }
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let applied = crate::support::finish(child).expect(0);
    assert!(
        saw_script,
        "no sample caught a script running ({samples} samples)"
    );
    assert!(
        applied.stdout.lines().count() > 3 && applied.stdout.contains('{'),
        "JSON events: {}",
        applied.stdout
    );
    scan.run("apply --json", &applied);

    said(
        &mut scan,
        "failing apply",
        &["apply", "fail.toml", "--auto-approve"],
        1,
    );
    said(&mut scan, "logs make", &["logs", "wf.toml", "make"], 0);
    said(
        &mut scan,
        "logs broken",
        &["logs", "fail.toml", "broken"],
        0,
    );
    said(&mut scan, "output", &["output", "wf.toml"], 0);
    said(
        &mut scan,
        "output --json",
        &["output", "wf.toml", "--json"],
        0,
    );
    said(&mut scan, "state list", &["state", "list", "wf.toml"], 0);
    said(
        &mut scan,
        "state show",
        &["state", "show", "wf.toml", "make"],
        0,
    );
    said(&mut scan, "runs", &["runs", "wf.toml"], 0);
    said(&mut scan, "runs --json", &["runs", "wf.toml", "--json"], 0);
    said(
        &mut scan,
        "report",
        &["report", "wf.toml", "-o", "report.html"],
        0,
    );
    said(&mut scan, "graph", &["graph", "wf.toml"], 0);
    said(
        &mut scan,
        "destroy",
        &["destroy", "wf.toml", "--auto-approve"],
        0,
    );
    scan.tree(p.path(), |_| false);

    // Controls: the scan read state, logs, the report and the history.
    assert!(scan.sees("busbw"), "the scan read no run history");
    assert!(scan.sees("<svg"), "the scan read no report");
    assert!(
        scan.sees("about to fail holding"),
        "the scan read no failure"
    );
    assert!(scan.sees("printf-q:"), "the scan read no step log");
    scan.assert_clean(SECRET);
}
