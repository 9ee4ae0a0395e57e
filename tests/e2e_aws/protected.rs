//! `lifecycle.prevent_destroy` on a step whose replacement depends on a
//! value known only after apply.

use crate::support::aws::Aws;
use crate::support::moto::Moto;

/// The ECR repositories moto holds, by name.
fn repositories(moto: &Moto) -> Vec<String> {
    let out = moto.json_call(
        "ecr",
        "AmazonEC2ContainerRegistry_V20150921.DescribeRepositories",
        "{}",
    );
    let mut names: Vec<String> = out["repositories"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["repositoryName"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// A protected repository whose name (which forces a replacement) comes
/// from a step that changes: the plan cannot know whether the name will
/// change, so it goes ahead and says what apply will do; apply leaves the
/// repository alone when the name stays, and refuses, deleting nothing,
/// when it changes.
#[test]
fn a_protected_step_replaced_only_if_a_later_value_changes_is_judged_at_apply() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    let wf = |name: &str, note: &str| {
        format!(
            r#"
[workflow]
region = "us-east-1"

[steps.naming]
provider = "null"
[steps.naming.inputs]
repo = "{name}"
note = "{note}"

[steps.repo]
provider = "ecr.repository"
lifecycle = {{ prevent_destroy = true }}
[steps.repo.inputs]
name = "${{steps.naming.outputs.repo}}"
"#
        )
    };
    a.p.write("wf.toml", &wf("models", "a"));
    a.apply().expect(0);
    assert_eq!(repositories(&moto), ["models"]);

    // `naming` changes but its `repo` does not: known only after apply.
    a.p.write("wf.toml", &wf("models", "b"));
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("forced by `name` if it changes (known after apply); lifecycle.prevent_destroy: apply stops, deleting nothing, if it does"),
        "{}",
        plan.stdout
    );
    let r = a.apply().expect(0);
    assert!(!r.stdout.contains("replaced"), "{}", r.all());
    assert_eq!(repositories(&moto), ["models"]);

    // Now the name changes: the repository would be replaced. Apply stops.
    a.p.write("wf.toml", &wf("weights", "b"));
    let r = a.apply().expect(1);
    assert!(
        r.all().contains(
            "must be replaced, but it has lifecycle.prevent_destroy: nothing was deleted"
        ),
        "{}",
        r.all()
    );
    assert_eq!(
        repositories(&moto),
        ["models"],
        "the protected repository was touched"
    );
    let show = a.run(&["state", "show", "wf.toml", "repo"]).expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(rec["applied"], true, "{rec}");
    assert_eq!(rec["resource_id"], "models", "{rec}");
}
