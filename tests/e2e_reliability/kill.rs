//! kill -9 at random instants, each followed by a resume, and SIGTERM
//! while a step runs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::{self, Project, finish, signal};

/// Twelve steps in four layers; every exec step records the operation token
/// it ran with. A step may run more than once only when a kill interrupted
/// it, and then always with the same token: one distinct token per step
/// means nothing was ever created twice. Each step's destroy notes its
/// start in `destroying.log` and its end in `destroyed.log`.
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
            let pause = 1 + (layer + i) % 3;
            out.push_str(&format!(
                "[steps.{name}.inputs]\nrun = \"echo $FLOW_OPERATION_TOKEN >> tokens-{name}.log; sleep 0.{pause}; echo done=1 >> $FLOW_OUTPUT\"\ndestroy = \"echo {name} >> destroying.log; sleep 0.{pause}; echo {name} >> destroyed.log\"\n",
            ));
        }
    }
    out
}

/// What the kills of [`kill_and_resume`] did.
#[derive(Debug, Default)]
struct Kills {
    /// Killed once a step had started in that run: kills that count.
    mid_way: usize,
    /// Killed in start-up, before any step had started in that run.
    in_start_up: usize,
    /// The runs that ended by themselves first: wait, exit code and last
    /// line (to say why, when too few were killed mid-way).
    ended: Vec<String>,
}

/// Runs `flow ARGS` `kills` times, each killed -9 at a random instant
/// (20 - 420 ms in) unless it ended first. A kill counts as mid-way only
/// if `started` (a count of the steps' marks: a step writes its mark
/// first thing) grew between the run's start and the instant before the
/// kill; otherwise it landed in start-up (reading the workflow and state,
/// planning), and is counted apart.
fn kill_and_resume(
    p: &Project,
    args: &[&str],
    kills: usize,
    seed: u64,
    started: impl Fn() -> usize,
) -> Kills {
    let mut rng = seed;
    let mut out = Kills::default();
    for _ in 0..kills {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = 20 + (rng >> 33) % 400;
        let marks = started();
        let child = p.spawn(args);
        std::thread::sleep(Duration::from_millis(wait));
        if child.try_wait_ok() {
            let run = finish(child);
            let all = run.all();
            out.ended.push(format!(
                "after {wait} ms: exit {}, {}",
                run.code,
                all.lines().last().unwrap_or("")
            ));
            continue;
        }
        // Read before the kill: a step's shell may outlive flow and write
        // its mark after it.
        let mid_way = started() > marks;
        signal(&child, libc::SIGKILL);
        finish(child);
        match mid_way {
            true => out.mid_way += 1,
            false => out.in_start_up += 1,
        }
    }
    out
}

/// Lines in the files of `p` named `names`, together.
fn lines(p: &Project, names: &[String]) -> usize {
    names.iter().map(|n| p.lines(n)).sum()
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

/// 40 kills of apply and 15 of destroy, each resumed: a kill counts only
/// once a step had started in its run (kills in start-up, which took up to
/// 300 ms of a debug build on a busy two-core machine, are counted apart);
/// at least 10 of apply's and 5 of destroy's must.
#[test]
fn kill_9_at_random_instants_never_creates_twice_and_converges() {
    let p = Project::new();
    p.write("wf.toml", &layered());
    let steps: Vec<String> = (0..4)
        .flat_map(|layer| (0..3).map(move |i| format!("s{layer}{i}")))
        .collect();
    let tokens: Vec<String> = steps.iter().map(|s| format!("tokens-{s}.log")).collect();
    let apply = kill_and_resume(&p, &["apply", "wf.toml", "--auto-approve"], 40, 7, || {
        lines(&p, &tokens)
    });
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
    for name in &steps {
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

    // Destroy, killed as well, ends with nothing left and each destroy
    // command run to its end for every step.
    let destroying = ["destroying.log".to_string()];
    let destroy = kill_and_resume(
        &p,
        &["destroy", "wf.toml", "--auto-approve"],
        15,
        11,
        || lines(&p, &destroying),
    );
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

    eprintln!(
        "apply: {} of 40 runs killed mid-way, {} in start-up, {} ended first\ndestroy: {} of 15 killed mid-way, {} in start-up, {} ended first",
        apply.mid_way,
        apply.in_start_up,
        apply.ended.len(),
        destroy.mid_way,
        destroy.in_start_up,
        destroy.ended.len()
    );
    assert!(
        apply.mid_way >= 10,
        "only {} of 40 applies were killed mid-way; {apply:?}",
        apply.mid_way
    );
    assert!(
        destroy.mid_way >= 5,
        "only {} of 15 destroys were killed mid-way; {destroy:?}",
        destroy.mid_way
    );
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
