//! End-to-end reliability: kill -9 at random instants with resume after each,
//! damaged state with recovery from backups.

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

fn kill_and_resume(p: &Project, args: &[&str], kills: usize, seed: u64) -> usize {
    let mut rng = seed;
    let mut killed = 0;
    for _ in 0..kills {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = 20 + (rng >> 33) % 400;
        let child = p.spawn(args);
        std::thread::sleep(Duration::from_millis(wait));
        match child.try_wait_ok() {
            true => {
                finish(child);
            }
            false => {
                signal(&child, libc::SIGKILL);
                finish(child);
                killed += 1;
            }
        }
    }
    killed
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
    let killed = kill_and_resume(&p, &["apply", "wf.toml", "--auto-approve"], 30, 7);
    assert!(killed >= 10, "only {killed} of 30 runs were killed mid-way");
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
