//! Ownership: a secret made outside flow is refused and left alone.

use crate::support::aws::Aws;
use crate::support::moto::Moto;

/// An object under a step's name that the step did not create is refused,
/// in the one ownership wording with its next step, and left as it was.
#[test]
fn a_secret_made_outside_flow_is_refused_and_left_alone() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    moto.json_call(
        "secretsmanager",
        "secretsmanager.CreateSecret",
        r#"{"Name": "team-key", "SecretString": "made by hand"}"#,
    );
    a.p.write(
        "wf.toml",
        r#"
[workflow]
region = "us-east-1"

[steps.key]
provider = "secretsmanager.secret"
[steps.key.inputs]
name = "team-key"
generate = "ssh-ed25519"
"#,
    );
    let r = a.apply().expect(1);
    assert!(
        r.stdout
            .contains("secret `team-key` already exists and was not created by this step"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("help: choose another name in the workflow"),
        "{}",
        r.stdout
    );
    assert_eq!(moto.secrets(), vec!["team-key".to_string()]);
    assert_eq!(moto.secret_value("team-key"), "made by hand");
    let show = a.run(&["state", "show", "wf.toml", "key"]).expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(rec["applied"], false, "{rec}");
    assert!(
        rec["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("was not created by this step")),
        "{rec}"
    );
}
