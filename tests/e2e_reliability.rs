//! End-to-end reliability: kill -9 at random instants with resume after each,
//! damaged state with recovery from backups, a full disk, a wall clock that
//! jumps back, SIGTERM mid-step, and a plan that leaves an old state as it is.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::{Project, finish, signal};

/// Twelve steps in four layers; every exec step records the operation token
/// it ran with. A step may run more than once only when a kill interrupted
/// it, and then always with the same token: one distinct token per step
/// means nothing was ever created twice.
fn layered() -> String {
    let mut out = String::from("[workflow]\nname = \"kill-anywhere\"\n");
    for layer in 0..4 {
        for i in 0..3 {
            let name = format!("s{layer}{i}");
            out.push_str(&format!("\n[steps.{name}]\nprovider = \"exec\"\n"));
            if layer > 0 {
                out.push_str(&format!(
                    "depends_on = [\"s{}{}\", \"s{}{}\"]\n",
                    layer - 1,
                    i,
                    layer - 1,
                    (i + 1) % 3
                ));
            }
            out.push_str(&format!(
                "[steps.{name}.inputs]\nrun = \"echo $FLOW_OPERATION_TOKEN >> tokens-{name}.log; sleep 0.{}; echo done=1 >> $FLOW_OUTPUT\"\ndestroy = \"echo {name} >> destroyed.log\"\n",
                1 + (layer + i) % 3
            ));
        }
    }
    out
}

/// Runs `flow ARGS` `kills` times, each killed -9 at a random instant
/// (20 - 420 ms in) unless it ended first. Returns how many were killed
/// mid-way, and for each run that ended by itself its wait, exit code and
/// last line (to say why, when too few were killed).
fn kill_and_resume(p: &Project, args: &[&str], kills: usize, seed: u64) -> (usize, Vec<String>) {
    let mut rng = seed;
    let mut killed = 0;
    let mut ended = Vec::new();
    for _ in 0..kills {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = 20 + (rng >> 33) % 400;
        let child = p.spawn(args);
        std::thread::sleep(Duration::from_millis(wait));
        match child.try_wait_ok() {
            true => {
                let run = finish(child);
                let all = run.all();
                ended.push(format!(
                    "after {wait} ms: exit {}, {}",
                    run.code,
                    all.lines().last().unwrap_or("")
                ));
            }
            false => {
                signal(&child, libc::SIGKILL);
                finish(child);
                killed += 1;
            }
        }
    }
    (killed, ended)
}

trait TryWaitOk {
    fn try_wait_ok(&self) -> bool;
}

impl TryWaitOk for std::process::Child {
    /// Whether the process already exited (without reaping it).
    fn try_wait_ok(&self) -> bool {
        // SAFETY: waitid with WNOWAIT only inspects the child's state.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                self.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            ) == 0
                && info.si_pid() != 0
        }
    }
}

#[test]
fn kill_9_at_random_instants_never_creates_twice_and_converges() {
    let p = Project::new();
    p.write("wf.toml", &layered());
    let (killed, ended) = kill_and_resume(&p, &["apply", "wf.toml", "--auto-approve"], 30, 7);
    assert!(
        killed >= 10,
        "only {killed} of 30 runs were killed mid-way; the others:\n{}",
        ended.join("\n")
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    for layer in 0..4 {
        for i in 0..3 {
            let name = format!("s{layer}{i}");
            let tokens: BTreeSet<String> = p
                .read(&format!("tokens-{name}.log"))
                .lines()
                .map(String::from)
                .collect();
            assert_eq!(
                tokens.len(),
                1,
                "{name} ran with several tokens: {tokens:?}"
            );
        }
    }

    // Destroy, killed as well, ends with nothing left and each destroy
    // command run for every step.
    kill_and_resume(&p, &["destroy", "wf.toml", "--auto-approve"], 10, 11);
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let listed = p.run(&["state", "list", "wf.toml"]).expect(0);
    assert!(
        listed.stdout.contains("State is empty"),
        "{}",
        listed.stdout
    );
    let destroyed: BTreeMap<String, usize> =
        p.read("destroyed.log")
            .lines()
            .fold(BTreeMap::new(), |mut m, l| {
                *m.entry(l.to_string()).or_default() += 1;
                m
            });
    assert_eq!(destroyed.len(), 12, "{destroyed:?}");
}

#[test]
fn damaged_state_gives_a_clear_error_and_a_way_out() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.a]
provider = "null"
[steps.a.inputs]
x = 1

[steps.b]
provider = "null"
[steps.b.inputs]
y = "${steps.a.outputs.x}"
"#,
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.write("wf.toml", &p.read("wf.toml").replace("x = 1", "x = 2"));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);

    // Cut the database file short, as a full disk or a bad copy would.
    let db = p.path().join(".flow/wf/db/db");
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(512).unwrap();
    drop(f);

    let broken = p.run(&["plan", "wf.toml"]).expect(1);
    assert!(broken.stderr.contains("damaged"), "{}", broken.stderr);
    assert!(
        broken.stderr.contains("flow state restore"),
        "{}",
        broken.stderr
    );
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(apply.stderr.contains("damaged"), "{}", apply.stderr);

    let newest = p.newest_backup("wf.toml");
    let restored = p.run(&["state", "restore", "wf.toml", &newest]).expect(0);
    assert!(
        restored.stdout.contains("Restored 2 steps"),
        "{}",
        restored.stdout
    );
    // The newest backup was taken before the second apply: `a` has x = 1,
    // so the plan updates it again, and nothing else is lost.
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("~ a"), "{}", plan.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// The state folder on a 6 MiB tmpfs. A step fills that disk while it runs
/// and outputs a 1 MB value, so recording its result needs new blocks and
/// fails with ENOSPC (a small record would fit in the log segment sled has
/// already written): the apply fails with one line
/// naming the full disk, the state still opens, the step recorded before is
/// kept with its outputs, and once space is back the next apply converges.
#[test]
fn enospc_fails_one_clear_line_and_loses_nothing() {
    let Some(disk) = support::disk::SmallDisk::mount("6m") else {
        return;
    };
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
        p.run(&[
            "apply",
            "wf.toml",
            "--auto-approve",
            "--state-dir",
            &state_arg,
        ])
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
    let listed = p
        .run(&["state", "list", "wf.toml", "--state-dir", &state_arg])
        .expect(0);
    let kept_line = listed
        .stdout
        .lines()
        .find(|l| l.contains("kept"))
        .unwrap_or_else(|| panic!("`kept` is gone: {}", listed.stdout));
    assert!(kept_line.contains("applied"), "{}", listed.stdout);
    let out = p
        .run(&["output", "wf.toml", "kept.v", "--state-dir", &state_arg])
        .expect(0);
    assert_eq!(out.stdout.trim(), "1");
    eprintln!("the state after the failure:\n{}", listed.stdout);

    // Space comes back: the next apply converges without running `kept`
    // again, and `filler` goes on with the operation it had started.
    std::fs::remove_file(&filler).unwrap();
    p.write("space-is-back", "");
    apply(&p).expect(0);
    p.run(&[
        "plan",
        "wf.toml",
        "--detailed-exitcode",
        "--state-dir",
        &state_arg,
    ])
    .expect(0);
    assert_eq!(p.read("runs.log"), "kept\n");
    let out = p
        .run(&["output", "wf.toml", "filler.w", "--state-dir", &state_arg])
        .expect(0);
    assert_eq!(out.stdout.trim(), "2");
    let tokens: BTreeSet<String> = p
        .read("filler-tokens.log")
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(tokens.len(), 1, "filler was started afresh: {tokens:?}");
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

/// SIGTERM while a step runs: the first lets it finish and starts nothing
/// new; a second one abandons it, with its intent kept in the state. The
/// next apply re-issues that step's operation with the same token and
/// converges.
#[test]
fn sigterm_during_apply_keeps_the_intent_and_the_next_apply_converges() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"
[steps.first]
provider = "exec"
[steps.first.inputs]
run = "echo first >> runs.log"

[steps.slow]
provider = "exec"
depends_on = ["first"]
[steps.slow.inputs]
run = "echo $FLOW_OPERATION_TOKEN >> slow-tokens.log; if [ ! -f quick ]; then sleep 30; fi; echo slow >> runs.log"

[steps.after]
provider = "exec"
depends_on = ["slow"]
[steps.after.inputs]
run = "echo after >> runs.log"
"#,
    );
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    support::wait_until(Duration::from_secs(20), "`slow` to start", || {
        p.lines("slow-tokens.log") == 1
    });
    signal(&child, libc::SIGTERM);
    // The first SIGTERM waits for `slow`; it is still running.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!child.try_wait_ok(), "flow exited on the first SIGTERM");
    signal(&child, libc::SIGTERM);
    let stopped = finish(child);
    assert_ne!(stopped.code, 0, "{}", stopped.all());
    eprintln!(
        "SIGTERM landed while `slow` ran; flow said:\n{}",
        stopped.all()
    );
    assert_eq!(p.read("runs.log"), "first\n", "{}", stopped.all());

    let listed = p.run(&["state", "list", "wf.toml"]).expect(0);
    let slow = listed
        .stdout
        .lines()
        .find(|l| l.contains("slow"))
        .unwrap_or_else(|| panic!("no record of `slow`: {}", listed.stdout));
    assert!(slow.contains("create…"), "the intent was not kept: {slow}");
    assert!(!listed.stdout.contains("after"), "{}", listed.stdout);
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("resumes an interrupted create"),
        "{}",
        plan.stdout
    );

    p.write("quick", "");
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert_eq!(p.read("runs.log"), "first\nslow\nafter\n");
    let tokens: Vec<String> = p
        .read("slow-tokens.log")
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0], tokens[1], "the resume used another token");
}

/// `flow plan` on a state in an older schema (schema 1, put in place with
/// `flow state restore` from a backup that says so): the plan reads it
/// through the migrations, and leaves every file of the state byte for byte
/// as it was; no backup, no new serial. The next apply, which has nothing
/// to change, migrates it: its only backup is the one taken before that.
#[test]
fn plan_on_an_old_schema_state_changes_no_byte_of_it() {
    let p = Project::new();
    let wf = |x: u32| format!("[steps.a]\nprovider = \"null\"\n[steps.a.inputs]\nx = {x}\n");
    p.write("wf.toml", &wf(1));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.write("wf.toml", &wf(2));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    // The backup taken before the second apply holds `a` with x = 1: put
    // it back, saying schema 1 (whose records are the same for `a`).
    let mut doc: serde_json::Value =
        serde_json::from_str(&p.read(&p.newest_backup("wf.toml"))).unwrap();
    assert_eq!(doc["steps"].as_array().unwrap().len(), 1, "{doc}");
    doc["schema_version"] = 1.into();
    p.write("old.json", &doc.to_string());
    p.run(&["state", "restore", "wf.toml", "old.json"])
        .expect(0);
    p.write("wf.toml", &wf(1));
    let state = p.path().join(".flow/wf");

    let snapshot = || -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut files: Vec<_> = support::files_under(&state)
            .into_iter()
            .filter(|f| f.file_name().is_some_and(|n| n != "lock"))
            .map(|f| {
                let bytes = std::fs::read(&f).unwrap();
                (f, bytes)
            })
            .collect();
        files.sort();
        files
    };
    let before = snapshot();
    let backups_before = support::files_under(&state.join("backups")).len();
    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.all());
    let after = snapshot();
    assert_eq!(
        before.iter().map(|(f, _)| f).collect::<Vec<_>>(),
        after.iter().map(|(f, _)| f).collect::<Vec<_>>(),
        "plan added or removed files"
    );
    for ((file, a), (_, b)) in before.iter().zip(&after) {
        assert!(a == b, "plan changed {}", file.display());
    }

    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("No changes"), "{}", apply.all());
    assert_eq!(
        support::files_under(&state.join("backups")).len(),
        backups_before + 1,
        "apply migrates, after a backup"
    );
}

/// A state folder whose db/ was deleted, with its watermark and backups
/// still there, is refused by every command, naming the restore and the
/// way to start afresh; no file of the state folder changes. Restoring the newest backup
/// brings it back.
#[test]
fn a_deleted_database_is_refused_not_taken_for_a_new_state() {
    let p = Project::new();
    p.write(
        "wf.toml",
        "[steps.a]\nprovider = \"exec\"\n[steps.a.inputs]\nrun = \"echo a >> runs.log\"\n",
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let db = p.path().join(".flow/wf/db");
    std::fs::remove_dir_all(&db).unwrap();
    let contents = || -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut files: Vec<_> = p
            .state_files()
            .into_iter()
            .map(|f| {
                let bytes = std::fs::read(&f).unwrap();
                (f, bytes)
            })
            .collect();
        files.sort();
        files
    };
    let before = contents();
    for args in [
        &["apply", "wf.toml", "--auto-approve"][..],
        &["plan", "wf.toml"][..],
        &["state", "list", "wf.toml"][..],
    ] {
        let refused = p.run(args).expect(1);
        let text = refused.stderr.clone();
        assert!(text.contains("has no database (db/ is missing)"), "{text}");
        assert!(text.contains("flow state restore"), "{text}");
        assert!(text.contains("delete the whole state folder"), "{text}");
        assert!(!db.exists(), "{args:?} created a database");
        assert!(contents() == before, "{args:?} changed the state folder");
    }
    assert_eq!(p.read("runs.log"), "a\n", "the step ran again");

    let newest = p.newest_backup("wf.toml");
    p.run(&["state", "restore", "wf.toml", &newest]).expect(0);
    // The only backup was taken before the first apply, so `a` is created
    // again; the state converges.
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}
