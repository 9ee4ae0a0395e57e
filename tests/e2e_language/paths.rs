//! Files a workflow names stay inside its folder unless `[workflow]
//! allow_paths` opens another (issue 17): a file beside the folder is
//! refused with the entry to add, read once it is added, and a link inside
//! the folder that leads out is judged by where it leads; s3.sync (on moto)
//! skips symbolic links unless `follow_symlinks`, and never follows one out.

use super::support::Project;
use super::support::aws::Aws;
use super::support::moto::Moto;

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

/// A bucket and an s3.sync of `data` into it.
const SYNC: &str = r#"
[workflow]
name = "sync"
region = "us-east-1"

[steps.data]
provider = "s3.bucket"
[steps.data.inputs]
name = "flow-links"

[steps.upload]
provider = "s3.sync"
depends_on = ["data"]
[steps.upload.inputs]
source = "data"
destination = "s3://flow-links/train/"
"#;

/// s3.sync skips symbolic links and says so; with `follow_symlinks` it
/// sends a link to a file inside the folder and refuses one that leads out,
/// before anything is sent.
#[test]
fn s3_sync_skips_links_unless_told_and_never_follows_one_out() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("data/a.txt", "alpha\n");
    a.p.write("secret.txt", "hunter2\n");
    std::os::unix::fs::symlink("a.txt", a.p.path().join("data/alias.txt")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", a.p.path().join("data/out.txt")).unwrap();
    a.p.write("wf.toml", SYNC);
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("skipped 2 symbolic links"),
        "{}",
        plan.all()
    );
    let applied = a.apply().expect(0);
    assert!(
        applied.stdout.contains("skipped 2 symbolic links"),
        "{}",
        applied.all()
    );
    assert_eq!(moto.objects("flow-links", "train/"), ["train/a.txt"]);

    let follow = SYNC.replace(
        "source = \"data\"",
        "source = \"data\"\nfollow_symlinks = true",
    );
    a.p.write("wf.toml", &follow);
    let refused = a.apply().expect(1);
    assert!(
        refused.stderr.contains("`out.txt` is a symbolic link to "),
        "{}",
        refused.all()
    );
    assert!(!refused.all().contains("hunter2"));
    assert_eq!(moto.objects("flow-links", "train/"), ["train/a.txt"]);

    std::fs::remove_file(a.p.path().join("data/out.txt")).unwrap();
    a.apply().expect(0);
    let mut keys = moto.objects("flow-links", "train/");
    keys.sort();
    assert_eq!(keys, ["train/a.txt", "train/alias.txt"]);
    assert_eq!(moto.object("flow-links", "train/alias.txt"), "alpha\n");
}

/// A template path known only at apply (another step's output) is judged
/// then, before anything is asked of AWS: refused, it leaves no operation
/// to check again, and no stack.
#[test]
fn a_path_known_only_at_apply_is_refused_before_acting() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    // Aws::new writes vpc.yaml beside the project's files: outside `wf/`.
    a.p.write(
        "wf/wf.toml",
        r#"
[workflow]
name = "late"
region = "us-east-1"

[steps.pick]
provider = "exec"
[steps.pick.inputs]
run = "echo template=../vpc.yaml >> $FLOW_OUTPUT"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "late"
template = "${steps.pick.outputs.template}"
"#,
    );
    let refused = a.run(&["apply", "wf/wf.toml", "--auto-approve"]).expect(1);
    assert!(
        refused
            .all()
            .contains("`../vpc.yaml` is outside the workflow's folder"),
        "{}",
        refused.all()
    );
    assert!(moto.stacks().is_empty());
    let plan = a.run(&["plan", "wf/wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("create — the last attempt failed"),
        "{}",
        plan.all()
    );
    assert!(
        !plan.stdout.contains("reads what it left"),
        "a refused path left an operation to check again: {}",
        plan.all()
    );
}
