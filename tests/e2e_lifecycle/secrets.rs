//! Secrets: never in state, logs or output; digests of values, sealed
//! secrets.

use crate::support::Project;

#[test]
fn secrets_never_reach_state_logs_or_output() {
    let p = Project::new();
    let secret = "hf_SuperSecretToken_123";
    p.write(
        "wf.toml",
        r#"
[vars.hf_token]
sensitive = true
env = "HF_TOKEN"

[steps.login]
provider = "exec"
[steps.login.inputs]
run = "echo using token $TOKEN; echo echoed=$TOKEN >> $FLOW_OUTPUT"
env = { TOKEN = "${vars.hf_token}" }

[steps.echo]
provider = "null"
[steps.echo.inputs]
token = "${vars.hf_token}"
"#,
    );
    let env = [("HF_TOKEN", secret)];
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let outputs = p.run_env(&["output", "wf.toml", "--json"], &env).expect(0);
    let show = p
        .run_env(&["state", "show", "wf.toml", "login"], &env)
        .expect(0);
    for r in [&plan, &apply, &outputs, &show] {
        assert!(!r.all().contains(secret), "secret printed:\n{}", r.all());
    }
    assert!(
        apply.stdout.contains("using token (sensitive)"),
        "{}",
        apply.stdout
    );
    let files = p.state_files();
    assert!(!files.is_empty());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let hay = String::from_utf8_lossy(&bytes);
        assert!(!hay.contains(secret), "secret in {}", f.display());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", f.display());
    }
    // Unchanged secret: nothing to do. Changed secret: the digest differs.
    p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    let changed = p
        .run_env(
            &["plan", "wf.toml", "--detailed-exitcode"],
            &[("HF_TOKEN", "another-token-456")],
        )
        .expect(2);
    assert!(
        changed.stdout.contains("(sensitive) → (sensitive)"),
        "{}",
        changed.stdout
    );
}

#[test]
fn digests_are_values_and_secrets_stay_sealed() {
    let p = Project::new();
    // An image digest, as `docker push` prints it: a value, not a secret.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let secret = "secret-token-1";
    p.write(
        "wf.toml",
        &r#"
[vars.token]
sensitive = true
env = "API_TOKEN"

[steps.build]
provider = "exec"
[steps.build.inputs]
run = "echo digest=DIGEST >> $FLOW_OUTPUT; echo echoed=$TOKEN >> $FLOW_OUTPUT"
env = { TOKEN = "${vars.token}" }

[steps.deploy]
provider = "exec"
[steps.deploy.inputs]
run = "echo deploying $IMAGE"
env = { IMAGE = "${steps.build.outputs.digest}", REGION = "x", TOKEN = "${vars.token}" }
"#
        .replace("DIGEST", &digest),
    );
    let env = [("API_TOKEN", secret)];
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);

    // `flow output` shows the digest; the output carrying the secret stays masked.
    let o = p.run(&["output", "wf.toml", "--json"]).expect(0);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["build"]["digest"], digest.as_str(), "{}", o.stdout);
    assert_eq!(v["build"]["echoed"], "(sensitive)", "{}", o.stdout);
    let one = p.run(&["output", "wf.toml", "build.digest"]).expect(0);
    assert_eq!(one.stdout.trim(), digest, "{}", one.stdout);
    let text = p.run(&["output", "wf.toml"]).expect(0);
    assert!(
        text.stdout.contains(&format!("digest = {digest}")),
        "{}",
        text.stdout
    );

    // The digest passed on as an input is recorded and shown as it is; the
    // secret beside it is sealed (`sealed:hmac-sha256:`) and shown masked.
    let show = p.run(&["state", "show", "wf.toml", "deploy"]).expect(0);
    assert!(
        show.stdout.contains(&format!("\"IMAGE\": \"{digest}\"")),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout.contains("\"TOKEN\": \"(sensitive)\""),
        "{}",
        show.stdout
    );
    let sealed_in_state = p.state_files().iter().any(|f| {
        let bytes = std::fs::read(f).unwrap_or_default();
        String::from_utf8_lossy(&bytes).contains("sealed:hmac-sha256:")
    });
    assert!(sealed_in_state, "no seal found in state");
    // The seal is keyed: state holds no plain SHA-256 of the secret (which
    // a guess could be checked against), and the key is not in state but
    // in the user's config folder, readable by the user alone.
    let plain = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(format!("\"{secret}\"").as_bytes()))
    };
    let key_file = p.config_dir().join("fingerprint.key");
    let key = std::fs::read_to_string(&key_file).expect("the key was made");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&key_file).unwrap().permissions()
        ) & 0o777,
        0o600
    );
    for f in p.state_files() {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap_or_default()).into_owned();
        assert!(
            !text.contains(&plain),
            "an unkeyed digest of the secret in {}",
            f.display()
        );
        assert!(!text.contains(key.trim()), "the key in {}", f.display());
    }

    // Unchanged: nothing to do (the plain digest compares equal).
    p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    // A changed secret: the plan shows it as (sensitive) on both sides, and
    // the digest in the before-value as it is.
    let changed = p
        .run_env(
            &["plan", "wf.toml", "--detailed-exitcode"],
            &[("API_TOKEN", "secret-token-2")],
        )
        .expect(2);
    assert!(
        changed
            .stdout
            .contains(r#"env = {"TOKEN":"(sensitive)"} → {"TOKEN":"(sensitive)"}"#),
        "{}",
        changed.stdout
    );
    assert!(
        changed.stdout.contains(&format!(
            r#"{{"IMAGE":"{digest}","REGION":"x","TOKEN":"(sensitive)"}}"#
        )),
        "{}",
        changed.stdout
    );
    // Another user's key (another config folder) cannot tell whether the
    // secret is the same: the seal compares as changed.
    let other_user = p.path().join("other-user");
    let other = p
        .run_env(
            &["plan", "wf.toml", "--detailed-exitcode"],
            &[
                ("API_TOKEN", secret),
                ("FLOW_CONFIG_DIR", other_user.to_str().unwrap()),
            ],
        )
        .expect(2);
    assert!(other.stdout.contains("(sensitive)"), "{}", other.stdout);
    for r in [&o, &one, &text, &show, &changed, &other] {
        assert!(
            !r.all().contains("secret-token"),
            "secret printed:\n{}",
            r.all()
        );
    }
}

/// A secret written into an `exec` script (not only passed through `env`)
/// is in no process's command line while the script runs: `sh` reads the
/// script from a sealed in-memory file, its argv is `sh /dev/fd/3`. Every
/// process's `/proc/PID/cmdline` is read while the script sleeps; the
/// scan proves it saw the script running by finding its `sleep` there.
#[cfg(target_os = "linux")]
#[test]
fn a_secret_in_an_exec_script_is_in_no_command_line() {
    use base64::Engine as _;
    let p = Project::new();
    let secret = "hf_InTheScriptItself_987";
    let marker = p.path().join("slept");
    p.write(
        "wf.toml",
        &format!(
            r#"
[vars.hf_token]
sensitive = true
env = "HF_TOKEN"

[steps.login]
provider = "exec"
[steps.login.inputs]
run = "TOKEN='${{vars.hf_token}}'; sleep 7.3141; touch {}; echo length=${{#TOKEN}} >> $FLOW_OUTPUT"
"#,
            marker.display()
        ),
    );
    let child = p
        .cmd(&["apply", "wf.toml", "--auto-approve"])
        .env("HF_TOKEN", secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let forms = [
        secret.to_string(),
        base64::engine::general_purpose::STANDARD.encode(secret),
    ];
    let started = std::time::Instant::now();
    let mut saw_the_script = None;
    while !marker.exists() && started.elapsed() < std::time::Duration::from_secs(60) {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            for form in &forms {
                assert!(
                    !line.contains(form.as_str()),
                    "{form} in {:?}: {line}",
                    entry.path()
                );
            }
            if line.contains("sleep 7.3141") {
                saw_the_script = Some(entry.path());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        saw_the_script.is_some(),
        "the scan never saw the script's sleep running"
    );
    // The script ran with the secret it was given.
    let length = p.run_env(
        &["output", "wf.toml", "login.length"],
        &[("HF_TOKEN", secret)],
    );
    assert_eq!(length.stdout.trim(), secret.len().to_string());
}

/// A saved plan holds no secret, nor anything to check a guess against
/// without the user's key: the plan says which values to give again, apply
/// checks them against their keyed fingerprint, and refuses a different
/// value, a missing one, and a plan made under another key.
#[test]
fn a_saved_plan_holds_no_secret_and_names_what_to_give_again() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[vars.token]
sensitive = true
env = "API_TOKEN"

[steps.use]
provider = "exec"
[steps.use.inputs]
run = "test ${#TOKEN} = 6"
env = { TOKEN = "${vars.token}" }
"#,
    );
    let planned = p
        .run_env(
            &["plan", "wf.toml", "--out", "wf.plan"],
            &[("API_TOKEN", "abc123")],
        )
        .expect(0);
    assert!(
        planned
            .stdout
            .contains("The plan holds no secret: give token again at apply."),
        "{}",
        planned.stdout
    );
    let file = p.read("wf.plan");
    let plain = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"\"abc123\""))
    };
    assert!(!file.contains("abc123") && !file.contains(&plain), "{file}");
    assert!(!file.contains("\"salt\""), "{file}");
    assert!(
        file.contains("\"sensitive_digest\": \"hmac-sha256:"),
        "{file}"
    );

    let missing = p.run(&["apply", "wf.plan"]).expect(1);
    assert!(
        missing.stderr.contains("variable `token` has no value"),
        "{}",
        missing.stderr
    );
    let wrong = p
        .run_env(&["apply", "wf.plan"], &[("API_TOKEN", "abc124")])
        .expect(1);
    assert!(
        wrong
            .stderr
            .contains("sensitive variable `token` is not the value the plan was made with"),
        "{}",
        wrong.stderr
    );
    let other_user = p.path().join("other-user");
    let other = p
        .run_env(
            &["apply", "wf.plan"],
            &[
                ("API_TOKEN", "abc123"),
                ("FLOW_CONFIG_DIR", other_user.to_str().unwrap()),
            ],
        )
        .expect(1);
    assert!(
        other
            .stderr
            .contains("the plan was made with fingerprint key"),
        "{}",
        other.stderr
    );
    p.run_env(&["apply", "wf.plan"], &[("API_TOKEN", "abc123")])
        .expect(0);
    for r in [&planned, &missing, &wrong, &other] {
        assert!(!r.all().contains("abc123"), "{}", r.all());
    }
}

/// A fingerprint key others can read is refused before anything is read or
/// written, with the command that fixes it; a garbled one too.
#[test]
fn a_fingerprint_key_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    p.write(
        "wf.toml",
        "[steps.a]\nprovider = \"exec\"\n[steps.a.inputs]\nrun = \"true\"\n",
    );
    p.run(&["plan", "wf.toml"]).expect(0);
    let key = p.config_dir().join("fingerprint.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(
        open.stderr.contains("is readable by others (mode 644)")
            && open
                .stderr
                .contains(&format!("chmod 600 {}", key.display())),
        "{}",
        open.stderr
    );
    assert!(!p.path().join(".flow").exists(), "state was made");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&key, "garbage\n").unwrap();
    let garbled = p.run(&["plan", "wf.toml"]).expect(1);
    assert!(
        garbled.stderr.contains("is not 64 hex digits"),
        "{}",
        garbled.stderr
    );
}
