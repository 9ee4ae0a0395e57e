//! A full disk under the state, and a wall clock that jumps back.

use std::collections::BTreeSet;

use crate::support::{self, Project};

/// The state folder on a 6 MiB tmpfs (in a user and mount namespace of
/// the test's own, where flow runs: `support::disk`). A step fills that disk while it runs
/// and outputs a 1 MB value, so recording its result needs new blocks and
/// fails with ENOSPC (a small record would fit in the log segment sled has
/// already written): the apply fails with one line
/// naming the full disk, the state still opens, the step recorded before is
/// kept with its outputs, and once space is back the next apply converges.
#[test]
fn enospc_fails_one_clear_line_and_loses_nothing() {
    let disk = support::disk::SmallDisk::mount("6m");
    let p = Project::new();
    let state = disk.path().join("state");
    let state_arg = state.display().to_string();
    let filler = disk.path().join("filler");
    p.write(
        "wf.toml",
        &format!(
            r#"
[steps.kept]
provider = "exec"
[steps.kept.inputs]
run = "echo kept >> runs.log; echo v=1 >> $FLOW_OUTPUT"

[steps.filler]
provider = "exec"
depends_on = ["kept"]
[steps.filler.inputs]
run = "echo $FLOW_OPERATION_TOKEN >> filler-tokens.log; if [ ! -f space-is-back ]; then dd if=/dev/zero of={} bs=64k 2>dd.err; true; fi; echo w=2 >> $FLOW_OUTPUT; printf 'big=' >> $FLOW_OUTPUT; head -c 1000000 /dev/zero | tr '\\0' x >> $FLOW_OUTPUT; echo >> $FLOW_OUTPUT"
"#,
            filler.display()
        ),
    );
    let apply = |p: &Project| {
        disk.run(
            p,
            &[
                "apply",
                "wf.toml",
                "--auto-approve",
                "--state-dir",
                &state_arg,
            ],
        )
    };

    let full = apply(&p).expect(1);
    assert!(disk.free() < 64 * 1024, "the step did not fill the disk");
    assert!(
        p.read("dd.err").contains("No space left on device"),
        "dd did not hit ENOSPC: {}",
        p.read("dd.err")
    );
    // One line names the cause, once; no panic, no backtrace.
    let said = full.all();
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("is full (ENOSPC)"))
        .map(str::trim)
        .collect();
    assert_eq!(lines.len(), 1, "{}", full.all());
    assert!(
        lines.iter().all(|l| l.contains(&state_arg)),
        "{}",
        full.all()
    );
    assert!(!full.all().contains("panicked"), "{}", full.all());
    eprintln!("the failing apply said:\n{}", full.all());

    // The state opens on the full disk, and nothing recorded is lost.
    let listed = disk
        .run(&p, &["state", "list", "wf.toml", "--state-dir", &state_arg])
        .expect(0);
    let kept_line = listed
        .stdout
        .lines()
        .find(|l| l.contains("kept"))
        .unwrap_or_else(|| panic!("`kept` is gone: {}", listed.stdout));
    assert!(kept_line.contains("applied"), "{}", listed.stdout);
    let out = disk
        .run(
            &p,
            &["output", "wf.toml", "kept.v", "--state-dir", &state_arg],
        )
        .expect(0);
    assert_eq!(out.stdout.trim(), "1");
    eprintln!("the state after the failure:\n{}", listed.stdout);

    // Space comes back: the next apply converges without running `kept`
    // again, and `filler` goes on with the operation it had started.
    disk.remove(&filler);
    p.write("space-is-back", "");
    apply(&p).expect(0);
    disk.run(
        &p,
        &[
            "plan",
            "wf.toml",
            "--detailed-exitcode",
            "--state-dir",
            &state_arg,
        ],
    )
    .expect(0);
    assert_eq!(p.read("runs.log"), "kept\n");
    let out = disk
        .run(
            &p,
            &["output", "wf.toml", "filler.w", "--state-dir", &state_arg],
        )
        .expect(0);
    assert_eq!(out.stdout.trim(), "2");
    let tokens: BTreeSet<String> = p
        .read("filler-tokens.log")
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(tokens.len(), 1, "filler was started afresh: {tokens:?}");
}

/// The small disk is real and small: writing past its size fails with
/// ENOSPC inside its namespace, and nothing of it shows outside (so a test
/// that forgot to run a command inside would see an empty folder).
#[test]
fn the_small_disk_fills_inside_its_namespace_and_is_unseen_outside() {
    let disk = support::disk::SmallDisk::mount("1m");
    assert!(disk.free() <= 1024 * 1024, "{}", disk.free());
    let dd = format!(
        "dd if=/dev/zero of='{}/f' bs=64k count=64 2>&1; true",
        disk.path().display()
    );
    let said = disk.sh(&dd);
    assert!(said.contains("No space left on device"), "{said}");
    assert!(disk.free() < 64 * 1024, "{}", disk.free());
    assert!(!disk.path().join("f").exists(), "the mount shows outside");
}

/// The wall clock jumps back an hour between applies (an LD_PRELOAD library
/// shifts it for `flow`): every apply converges, and backups, which are
/// named with the wall clock, are still kept (as many as the workflow's
/// `keep_backups` says) and listed by serial, so the ones taken after the
/// jump are not mistaken for the oldest and pruned. The run history keeps
/// every run, in the order they ran.
#[test]
fn a_clock_jumping_back_an_hour_loses_no_backup_and_converges() {
    if let Err(why) = support::clock::library() {
        panic!("the clock-shift library cannot be built: {why}");
    }
    let p = Project::new();
    let wf = |i: usize| {
        format!(
            "[workflow.state]\nkeep_backups = 15\n\n[steps.a]\nprovider = \"exec\"\n[steps.a.inputs]\nrun = \"echo x={i} >> $FLOW_OUTPUT; date +%s >> clock.log\"\npass_env = [\"LD_PRELOAD\", \"FLOW_TEST_CLOCK_SHIFT\"]\nexpect = {{ x = \">= 0\" }}\n"
        )
    };
    let mut taken = Vec::new();
    for (phase, shift) in [(0, 0i64), (1, -3600)] {
        for i in 0..12 {
            p.write("wf.toml", &wf(phase * 100 + i));
            let env = if shift == 0 {
                Vec::new()
            } else {
                support::clock::shifted(shift)
            };
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
                .expect(0);
            p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
                .expect(0);
            taken.push(newest_backup_name(&p));
        }
    }
    // The clock did jump: what the step saw, and what the backups say.
    let seen: Vec<i64> = p
        .read("clock.log")
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(
        seen[12] < seen[11] - 3000,
        "the clock did not go back: {seen:?}"
    );
    let (before, after) = (backup_secs(&taken[11]), backup_secs(&taken[12]));
    assert!(after < before, "{} then {}", taken[11], taken[12]);

    // 24 backups taken, 15 kept (`keep_backups = 15`): the 15 highest
    // serials, newest first, all 12 taken after the jump among them.
    let listed = backups(&p);
    assert_eq!(listed.len(), 15, "{listed:?}");
    let serials: Vec<u64> = listed.iter().map(|(s, _)| *s).collect();
    let mut sorted = serials.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(serials, sorted, "not listed by serial");
    for name in &taken[12..] {
        assert!(
            listed.iter().any(|(_, n)| n == name),
            "{name} was pruned: {listed:?}"
        );
    }
    let out = p.run(&["output", "wf.toml", "a.x"]).expect(0);
    assert_eq!(out.stdout.trim(), "111");

    // The run history holds all 24 runs, each once, in the order they ran
    // (appended), although the later 12 started "earlier".
    let runs: Vec<serde_json::Value> = p
        .read(".flow/wf/runs.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 24);
    let ids: BTreeSet<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 24, "run ids repeat");
    assert!(
        runs[12]["started"].as_str() < runs[11]["started"].as_str(),
        "{} then {}",
        runs[11]["started"],
        runs[12]["started"]
    );
    let listed = p.run(&["runs", "wf.toml"]).expect(0);
    let last = listed.stdout.lines().rfind(|l| !l.trim().is_empty());
    assert!(
        last.is_some_and(|l| l.contains("x=111")),
        "{}",
        listed.stdout
    );
}

/// `flow state backups` as (serial, file name), in the order listed.
fn backups(p: &Project) -> Vec<(u64, String)> {
    let listed = p.run(&["state", "backups", "wf.toml"]).expect(0);
    listed
        .stdout
        .lines()
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let name = std::path::Path::new(cols[2])
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (cols[1].parse().unwrap(), name)
        })
        .collect()
}

fn newest_backup_name(p: &Project) -> String {
    backups(p).first().expect("a backup").1.clone()
}

/// `state-<serial>-<secs>.json` → secs.
fn backup_secs(name: &str) -> u64 {
    name.trim_end_matches(".json")
        .rsplit('-')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
