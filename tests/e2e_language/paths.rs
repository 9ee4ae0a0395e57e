//! Files a workflow names stay inside its folder unless `[workflow]
//! allow_paths` opens another (issue 17): a file beside the folder is
//! refused with the entry to add, read once it is added, and a link inside
//! the folder that leads out is judged by where it leads.

use super::support::Project;

/// An `exec` step that reads `path` with `file()` and prints it as its
/// output `text`.
fn reading(path: &str, allow: &str) -> String {
    format!(
        "[workflow]\nname = \"paths\"\n{allow}\n\n[steps.read]\nprovider = \"exec\"\n[steps.read.inputs]\nrun = \"echo text=${{trim(file(\\\"{path}\\\"))}} >> $FLOW_OUTPUT\"\n"
    )
}

#[test]
fn a_file_beside_the_folder_needs_allow_paths() {
    let p = Project::new();
    p.write("shared/model.txt", "weights-v1\n");
    p.write("wf/flow.toml", &reading("../shared/model.txt", ""));
    let refused = p
        .run(&["apply", "wf/flow.toml", "--auto-approve"])
        .expect(1);
    assert!(
        refused
            .stderr
            .contains("`../shared/model.txt` is outside the workflow's folder"),
        "{}",
        refused.all()
    );
    assert!(
        refused.stderr.contains("[\"../shared\"]"),
        "{}",
        refused.all()
    );
    assert!(p.state_files().is_empty(), "a refused workflow made state");

    p.write(
        "wf/flow.toml",
        &reading("../shared/model.txt", "allow_paths = [\"../shared\"]"),
    );
    let applied = p
        .run(&["apply", "wf/flow.toml", "--auto-approve"])
        .expect(0);
    let out = p.run(&["output", "wf/flow.toml", "read"]).expect(0);
    assert!(
        out.stdout.contains("weights-v1"),
        "{}\n{}",
        applied.all(),
        out.all()
    );
}

#[test]
fn a_link_inside_the_folder_is_judged_by_where_it_leads() {
    let p = Project::new();
    p.write("secret/token.txt", "hunter2\n");
    p.write("wf/flow.toml", &reading("token.txt", ""));
    std::os::unix::fs::symlink(
        p.path().join("secret/token.txt"),
        p.path().join("wf/token.txt"),
    )
    .unwrap();
    let refused = p.run(&["plan", "wf/flow.toml"]).expect(1);
    assert!(
        refused.stderr.contains("`token.txt` is outside"),
        "{}",
        refused.all()
    );
    assert!(
        refused.stderr.contains("resolves to ../secret/token.txt"),
        "{}",
        refused.all()
    );
    assert!(!refused.all().contains("hunter2"));
}
