//! The secret scan: one secret, used every way a workflow can use it, and
//! every place flow prints or writes searched for it in clear and in every
//! encoded form (see `support::secret_scan`), each kind of place with a
//! control flow itself wrote there.

use crate::support::Project;
use crate::support::secret_scan::{Kind, SecretScan, fingerprint};

/// A secret with characters that JSON, URLs and shells each escape.
const SECRET: &str = r#"s3cr3t-"Qu0ted" & 'single' +/=x9"#;

/// The secret reaches an exec step through `env`, through the language's
/// functions (base64encode, jsonencode) and its own script, which prints it
/// in clear, base64, URL-encoded, JSON-escaped and shell-quoted, writes it
/// to its outputs and passes a gate; a later step takes those outputs; a
/// failing step quotes it in its error; `make`'s destroy script runs with
/// its outputs. Every command a user runs on the workflow is captured, with
/// the command lines and environments of flow and its descendants sampled
/// while it runs; every file under the project is read before the destroy
/// and after it. Each kind of place has a control flow wrote there: the
/// secret's fingerprint under the key flow made, the operation tokens flow
/// handed the scripts (read back from state), the run's id and inputs
/// digest (read back from the history), and the script's `sh /dev/fd/3`.
#[test]
fn a_secret_used_every_way_is_in_nothing_flow_printed_or_wrote() {
    let p = Project::new();
    let wf = r#"
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
bash -c 'printf "printf-q: %q\\n" "$TOKEN"'
echo "json: $TOKEN_JSON"
echo "b64: $TOKEN_B64"
echo "op: $FLOW_OPERATION_TOKEN"
sleep 1
echo "token=$TOKEN" >> "$FLOW_OUTPUT"
echo "b64=$TOKEN_B64" >> "$FLOW_OUTPUT"
echo "op=$FLOW_OPERATION_TOKEN" >> "$FLOW_OUTPUT"
echo "busbw=17.5" >> "$FLOW_OUTPUT"
"""
destroy = 'echo "destroying what $FLOW_OUTPUT_OP made"; sleep 1'
env = { TOKEN = "${vars.token}", TOKEN_B64 = "${base64encode(vars.token)}", TOKEN_JSON = "${jsonencode({ t = vars.token })}" }
expect = { busbw = ">= 10" }

[steps.take]
provider = "exec"
[steps.take.inputs]
run = "echo took $T and $B; sleep 1"
env = { T = "${steps.make.outputs.token}", B = "${steps.make.outputs.b64}" }
"#;
    let fail = r#"
[workflow]
name = "leaks-fail"

[vars.token]
sensitive = true
env = "LEAK_TOKEN"

[steps.broken]
provider = "exec"
[steps.broken.inputs]
run = 'echo "about to fail holding $T"; echo "op: $FLOW_OPERATION_TOKEN"; sleep 1; exit 3'
env = { T = "${vars.token}" }
"#;
    p.write("wf.toml", wf);
    p.write("fail.toml", fail);
    let mut scan = SecretScan::new();
    scan.input("wf.toml", wf)
        .input("fail.toml", fail)
        // The test gives flow the secret; the workflow passes it to scripts.
        .secret_env(
            &["LEAK_TOKEN"],
            &["TOKEN", "TOKEN_B64", "TOKEN_JSON", "T", "B"],
        );
    let said = |scan: &mut SecretScan, label: &str, args: &[&str], code: i32| {
        let mut cmd = p.cmd(args);
        cmd.env("LEAK_TOKEN", SECRET);
        scan.command(label, cmd).expect(code)
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
    let applied = said(
        &mut scan,
        "apply --json",
        &["apply", "wf.plan", "--json"],
        0,
    );
    assert!(
        applied.stdout.lines().count() > 3 && applied.stdout.contains('{'),
        "JSON events: {}",
        applied.stdout
    );
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
    // The operation tokens flow made, read back from state: `make`'s as
    // its script recorded it, `broken`'s from its intent, kept after the
    // failure.
    let op = said(
        &mut scan,
        "output make.op",
        &["output", "wf.toml", "make.op"],
        0,
    )
    .stdout
    .trim()
    .to_string();
    said(&mut scan, "state list", &["state", "list", "wf.toml"], 0);
    said(
        &mut scan,
        "state show",
        &["state", "show", "wf.toml", "make"],
        0,
    );
    let broken = said(
        &mut scan,
        "state show broken",
        &["state", "show", "fail.toml", "broken"],
        0,
    );
    let broken: serde_json::Value = serde_json::from_str(&broken.stdout).expect("JSON");
    let failed_op = broken["in_flight"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    said(&mut scan, "runs", &["runs", "wf.toml"], 0);
    let runs = said(&mut scan, "runs --json", &["runs", "wf.toml", "--json"], 0);
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let run = &runs[0];
    assert_eq!(run["step"], "make", "{runs}");
    said(
        &mut scan,
        "report",
        &["report", "wf.toml", "-o", "report.html"],
        0,
    );
    said(&mut scan, "graph", &["graph", "wf.toml"], 0);
    scan.tree_as_of("before destroy", p.path(), |_| false);
    said(
        &mut scan,
        "destroy",
        &["destroy", "wf.toml", "--auto-approve"],
        0,
    );
    scan.tree_as_of("after destroy", p.path(), |_| false);

    // Controls: what flow itself wrote into each kind of place.
    let sealed = fingerprint(&p.config_dir(), SECRET);
    let run_id = run["id"].as_str().unwrap_or_default();
    let digest = run["inputs_digest"].as_str().unwrap_or_default();
    let script = "sh /dev/fd/3";
    scan.control(Kind::State, "the secret's fingerprint", &sealed)
        .control(Kind::Backups, "the secret's fingerprint", &sealed)
        .control(Kind::SavedPlan, "the secret's fingerprint", &sealed)
        .control(Kind::State, "make's operation token", &op)
        .control(Kind::State, "broken's operation token", &failed_op)
        .control(Kind::StepLogs, "make's operation token", &op)
        .control(Kind::StepLogs, "broken's operation token", &failed_op)
        .control(Kind::RunHistory, "make's run id", run_id)
        .control(Kind::RunHistory, "make's inputs digest", digest)
        .control(Kind::Report, "make's run id", run_id)
        // What flow printed of what it made, each read back through
        // another command (the apply's JSON events show a script's latest
        // line only four times a second: no sure control).
        .control_in(Kind::Output, "logs make", "make's operation token", &op)
        .control_in(Kind::Output, "runs", "make's run id", run_id)
        .control_in(
            Kind::Output,
            "failing apply",
            "broken's operation token",
            &failed_op,
        );
    for (command, token) in [
        ("apply --json", format!("FLOW_OPERATION_TOKEN={op}")),
        ("failing apply", format!("FLOW_OPERATION_TOKEN={failed_op}")),
        ("destroy", format!("FLOW_OUTPUT_OP={op}")),
    ] {
        scan.control_in(
            Kind::Cmdline,
            command,
            "a descendant of flow running a step's script",
            script,
        )
        .control_in(
            Kind::Environ,
            command,
            "what flow put into the script's environment",
            token,
        );
    }
    scan.assert_clean(SECRET);
}
