//! The unit tests of `secret_scan`.

use super::*;

#[test]
fn every_form_is_found_and_others_are_not() {
    let secret = "hf_s3cret 'tok'";
    let mut scan = SecretScan::new();
    scan.text("plain", "nothing here, said by flow-made-12345");
    scan.control(Kind::Output, "a word flow printed", "flow-made-12345");
    scan.assert_clean(secret);
    for (form, bytes) in forms(secret) {
        let mut hit = SecretScan::new();
        hit.text("t", &format!("x{}y", String::from_utf8_lossy(&bytes)));
        hit.without_control(Kind::Output, "a unit test");
        let caught = std::panic::catch_unwind(|| hit.assert_clean(secret));
        assert!(caught.is_err(), "{form} not caught");
    }
    let inside = base64::engine::general_purpose::STANDARD.encode(format!("ab{secret}cd"));
    let mut hit = SecretScan::new();
    hit.text("t", &inside);
    hit.without_control(Kind::Output, "a unit test");
    assert!(std::panic::catch_unwind(|| hit.assert_clean(secret)).is_err());
}

fn failure(scan: &SecretScan) -> String {
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scan.assert_clean("never-there-secret")
    }));
    let err = caught.expect_err("the scan passed");
    err.downcast_ref::<String>().cloned().unwrap_or_default()
}

/// A scan that did not read a kind of place fails naming it: here the
/// step logs, whose control (an operation token) is in no place.
#[test]
fn a_missing_control_fails_naming_the_place_kind() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join(".flow/wf");
    std::fs::create_dir_all(state.join("logs")).unwrap();
    std::fs::create_dir_all(state.join("backups")).unwrap();
    std::fs::write(state.join("serial"), "00000000000000000004").unwrap();
    std::fs::write(state.join("db"), "token 5113a01f04bf20c04ab89ae21c043cc8").unwrap();
    std::fs::write(
        state.join("runs.jsonl"),
        r#"{"id":"20261127T1726Z-make-8197a8"}"#,
    )
    .unwrap();
    std::fs::write(state.join("backups/state-1-2.json"), "{}").unwrap();
    let mut scan = SecretScan::new();
    scan.tree(dir.path(), |_| false)
        .control(
            Kind::State,
            "the operation token",
            "5113a01f04bf20c04ab89ae21c043cc8",
        )
        .control(Kind::RunHistory, "the run id", "20261127T1726Z-make-8197a8")
        .control(
            Kind::Backups,
            "the fingerprint",
            "hmac-sha256:03adab26:c3b7",
        )
        .control(
            Kind::StepLogs,
            "the operation token",
            "5113a01f04bf20c04ab89ae21c043cc8",
        );
    let said = failure(&scan);
    assert!(
        said.contains("the scan read no step logs: control the operation token (`5113a01f04bf20c04ab89ae21c043cc8`) not found in any of 0 places"),
        "{said}"
    );
    assert!(
        said.contains("the scan read no state backups: control the fingerprint"),
        "{said}"
    );
    assert!(!said.contains("read no state files"), "{said}");
    assert!(!said.contains("read no run history"), "{said}");

    // With the log read, only the backup's control is missing.
    std::fs::write(
        state.join("logs/make.log"),
        "op: 5113a01f04bf20c04ab89ae21c043cc8",
    )
    .unwrap();
    let mut scan = SecretScan::new();
    scan.tree(dir.path(), |_| false)
        .control(
            Kind::StepLogs,
            "the operation token",
            "5113a01f04bf20c04ab89ae21c043cc8",
        )
        .without_control(Kind::State, "a unit test")
        .without_control(Kind::RunHistory, "a unit test")
        .control(
            Kind::Backups,
            "the fingerprint",
            "hmac-sha256:03adab26:c3b7",
        );
    let said = failure(&scan);
    assert!(said.contains("the scan read no state backups"), "{said}");
    assert!(said.contains("not found in any of 1 places"), "{said}");
    assert!(!said.contains("step logs"), "{said}");
}

/// A kind held with no control, and a control the test's own input
/// holds, both fail.
#[test]
fn a_control_from_an_input_or_a_kind_without_one_fails() {
    let mut scan = SecretScan::new();
    scan.text("apply", "busbw=17.5 measured")
        .input("wf.toml", "echo busbw=17.5")
        .control(Kind::Output, "the bandwidth", "busbw=17.5")
        .place(Kind::Report, "files", "report.html", b"<html>");
    let said = failure(&scan);
    assert!(
        said.contains("control the bandwidth (`busbw=17.5`) is in the test's input wf.toml"),
        "{said}"
    );
    assert!(
        said.contains("the scan holds 1 places of reports and no control for them"),
        "{said}"
    );
}

/// Files are sorted into kinds by where they are and how they begin.
#[test]
fn files_are_sorted_into_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let state = root.join("state");
    for sub in ["logs", "backups", "db"] {
        std::fs::create_dir_all(state.join(sub)).unwrap();
    }
    let files = [
        ("state/db/db", "x", Kind::State),
        ("state/last-run.json", "{}", Kind::State),
        ("state/logs/a%2Eb.log", "x", Kind::StepLogs),
        ("state/backups/state-1-2.json", "{}", Kind::Backups),
        ("state/runs.jsonl", "{}", Kind::RunHistory),
        (
            "wf.plan",
            "{\n  \"format\": \"flow-plan\",",
            Kind::SavedPlan,
        ),
        ("report.html", "<!DOCTYPE html><html>", Kind::Report),
        ("wf.toml", "[workflow]", Kind::Other),
    ];
    for (name, text, kind) in files {
        let path = root.join(name);
        std::fs::write(&path, text).unwrap();
        assert_eq!(Kind::of_file(root, &path, text.as_bytes()), kind, "{name}");
    }
}

/// RFC 4231, test case 2.
#[test]
fn hmac_is_rfc_4231() {
    assert_eq!(
        hmac_sha256(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}

/// The backslash-escaped form is the one bash's `printf %q` writes (the
/// leaks test's script prints it that way).
#[test]
fn the_printf_q_form_is_what_bash_prints() {
    let secret = r#"s3cr3t-"Qu0ted" & 'single' +/=x9"#;
    let out = std::process::Command::new("bash")
        .args(["-c", r#"printf '%q' "$1""#, "bash", secret])
        .output()
        .expect("run bash");
    let printed = out.stdout;
    assert!(
        forms(secret)
            .iter()
            .any(|(name, bytes)| name.starts_with("backslash-escaped") && *bytes == printed),
        "{}",
        String::from_utf8_lossy(&printed)
    );
}
