//! workflows/local-demo.toml, run as its header shows (`flow plan`, `flow
//! apply`, `flow destroy` on the file) with no cloud account at all, and
//! what it claims checked: a 2,000-row dataset, validated; a training run
//! that fits y = 3x + 2 (its loss falls, its slope nears 3) and writes a
//! checkpoint per epoch into folders named after the run; the token, a
//! sensitive var, never printed or stored; nothing left to change after
//! apply; destroy removes what apply made.

use super::*;

#[test]
fn local_demo_applies_trains_keeps_its_token_out_and_destroys_with_no_cloud() {
    let p = Project::new();
    let text = std::fs::read_to_string(workflow("local-demo.toml")).expect("local-demo.toml");
    // The header's commands, exactly; the file copied so that its state
    // and its .demo/ folder are the scratch project's, not the repository's.
    for shown in [
        "flow plan    workflows/local-demo.toml",
        "flow apply   workflows/local-demo.toml",
        "flow destroy workflows/local-demo.toml",
    ] {
        assert!(text.contains(shown), "the header no longer shows `{shown}`");
    }
    p.write("workflows/local-demo.toml", &text);
    let token = "tok-3f9c0e4b7a1d";
    // No AWS anything: no endpoint, no credentials, no region.
    let run = |args: &[&str]| {
        let mut c = p.cmd(args);
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") {
                c.env_remove(k);
            }
        }
        c.env("DEMO_API_TOKEN", token);
        let child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run flow");
        support::finish(child)
    };
    let wf = "workflows/local-demo.toml";

    let plan = run(&["plan", wf]).expect(0);
    assert!(plan.stdout.contains("Plan: 5 to create"), "{}", plan.all());
    let apply = run(&["apply", wf, "--auto-approve"]).expect(0);
    let all = apply.all();
    assert!(all.contains("wrote 2000 rows"), "{all}");
    assert!(all.contains("dataset ok: 2000 rows"), "{all}");
    assert!(all.contains("Apply complete: 5 created"), "{all}");
    let loss = |epoch: u32| -> f64 {
        let prefix = format!("epoch {epoch} loss ");
        let line = all
            .lines()
            .find_map(|l| l.split_once(&prefix))
            .map(|(_, v)| v);
        line.unwrap_or_else(|| panic!("no `{prefix}` line:\n{all}"))
            .trim()
            .parse()
            .expect("a loss")
    };
    assert!(
        loss(20) < loss(1) / 100.0,
        "training did not bring the loss down:\n{all}"
    );

    let demo = p.path().join("workflows/.demo/demo");
    let demo = if demo.exists() {
        demo
    } else {
        p.path().join(".demo/demo")
    };
    let rows = std::fs::read_to_string(demo.join("data/train.csv")).expect("the dataset");
    assert_eq!(rows.lines().count(), 2000);
    for epoch in 1..=20 {
        let checkpoint = demo.join(format!("checkpoints/epoch-{epoch}.txt"));
        let text = std::fs::read_to_string(&checkpoint)
            .unwrap_or_else(|_| panic!("no checkpoint {}", checkpoint.display()));
        assert!(text.starts_with("a="), "{text}");
    }
    let output = |key: &str| {
        run(&["output", wf, key])
            .expect(0)
            .stdout
            .trim()
            .to_string()
    };
    let slope: f64 = output("report.slope").parse().expect("a slope");
    assert!(
        (slope - 3.0).abs() < 0.5,
        "the fit's slope is {slope}, the data's 3"
    );
    assert_eq!(output("validate.checked_rows"), "2000");
    assert_eq!(output("report.final_loss"), format!("{:.4}", loss(20)));

    // The sensitive token: in no output, no state file, no project file.
    assert!(!all.contains(token) && !plan.all().contains(token));
    for file in support::files_under(p.path()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(token),
            "the token is in {}",
            file.display()
        );
    }

    let again = run(&["plan", wf]).expect(0);
    assert!(
        again.stdout.contains("No changes. 5 steps are up to date."),
        "{}",
        again.all()
    );
    run(&["destroy", wf, "--auto-approve"]).expect(0);
    assert!(!demo.join("data").exists(), "destroy left the dataset");
    let left: Vec<_> = support::files_under(&demo.join("checkpoints"));
    assert!(left.is_empty(), "destroy left checkpoints: {left:?}");
}
