//! Running a flow command while sampling what other local users could see
//! of it: `/proc/PID/cmdline` and `/proc/PID/environ` of the flow process
//! and of each of its descendants (found by walking the parent links of
//! `/proc/*/stat` down from flow's pid), never of other processes on the
//! machine, from the moment it starts (stopped at its `exec`) until it
//! exits.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Whose process a sample is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The flow process itself, or a fork of it that has not run its
    /// program yet (its image is still flow's).
    Flow,
    /// A process flow started, or one of theirs.
    Descendant,
}

/// One distinct thing seen: a process's command line (arguments joined
/// by spaces) and environment (`NAME=value` lines).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Seen {
    /// Its pid.
    pub pid: u32,
    /// Flow's, or a descendant's.
    pub role: Role,
    /// `/proc/PID/cmdline`, NULs as spaces.
    pub cmdline: Vec<u8>,
    /// `/proc/PID/environ`, NULs as newlines.
    pub environ: Vec<u8>,
}

/// What a sampled command printed and what the sampler saw while it ran.
pub struct Sampled {
    /// Its exit status and output.
    pub output: Output,
    /// The flow process's pid.
    pub pid: u32,
    /// How many times the tree was read.
    pub samples: usize,
    /// How many samples read the flow process's command line and
    /// environment (0 only if it exited before the first).
    pub flow_reads: usize,
    /// Each distinct process state seen, in the order first seen.
    pub seen: Vec<Seen>,
}

/// Runs `cmd` to the end, sampling its process tree every few
/// milliseconds. The process stops at its `exec` (it asks to be traced, so
/// the kernel stops it before flow's first instruction) and is read there
/// and let go: a command that ends within a millisecond is sampled too.
pub fn run(mut cmd: Command) -> Sampled {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: PTRACE_TRACEME is one system call, safe between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let null = std::ptr::null_mut::<libc::c_void>();
            if libc::ptrace(libc::PTRACE_TRACEME, 0 as libc::pid_t, null, null) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn flow (traced until its exec)");
    let pid = child.id();
    stopped_at_exec(pid);
    let flow_cmdline = read(pid, "cmdline");
    let flow_exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut sampler = Sampler {
        root: pid,
        flow_cmdline,
        flow_exe,
        known: HashSet::new(),
        seen: Vec::new(),
        samples: 0,
        flow_reads: 0,
    };
    sampler.sample();
    // SAFETY: detaching the child this thread traces; it runs on, untraced.
    let detached = unsafe {
        let null = std::ptr::null_mut::<libc::c_void>();
        libc::ptrace(libc::PTRACE_DETACH, pid as libc::pid_t, null, null)
    };
    assert_eq!(detached, 0, "could not let flow go after its exec");
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output().expect("wait for flow"));
    });
    let output = loop {
        sampler.sample();
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(output) => break output,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the flow waiter stopped"),
        }
    };
    waiter.join().expect("waiter");
    Sampled {
        output,
        pid,
        samples: sampler.samples,
        flow_reads: sampler.flow_reads,
        seen: sampler.seen,
    }
}

/// Waits for the traced child `pid` to stop at its exec.
fn stopped_at_exec(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid on our own child, into a local.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    assert!(
        rc == pid as libc::pid_t && libc::WIFSTOPPED(status),
        "flow ({pid}) did not stop at its exec (waitpid {rc}, status {status:#x})"
    );
}

struct Sampler {
    root: u32,
    flow_cmdline: Option<Vec<u8>>,
    flow_exe: Option<std::path::PathBuf>,
    known: HashSet<Seen>,
    seen: Vec<Seen>,
    samples: usize,
    flow_reads: usize,
}

impl Sampler {
    /// Reads the command line and environment of the root and of each
    /// process below it now.
    fn sample(&mut self) {
        self.samples += 1;
        for p in tree(self.root) {
            let (Some(cmdline), Some(environ)) = (read(p, "cmdline"), read(p, "environ")) else {
                continue;
            };
            // A zombie (or a process gone) reads as empty.
            if cmdline.is_empty() {
                continue;
            }
            // A fork of flow before its exec still shows flow's image.
            let same_image = Some(&cmdline) == self.flow_cmdline.as_ref()
                && std::fs::read_link(format!("/proc/{p}/exe")).ok() == self.flow_exe;
            let role = if p == self.root || same_image {
                Role::Flow
            } else {
                Role::Descendant
            };
            if p == self.root {
                self.flow_reads += 1;
            }
            let s = Seen {
                pid: p,
                role,
                cmdline: joined(cmdline, b' '),
                environ: joined(environ, b'\n'),
            };
            if self.known.insert(s.clone()) {
                self.seen.push(s);
            }
        }
    }
}

/// `environ` (`NAME=value` lines) with the value of each variable named in
/// `names` replaced by a note that the test allowed it.
pub fn without_values(environ: &[u8], names: &[String]) -> Vec<u8> {
    let mut out = Vec::with_capacity(environ.len());
    for line in environ.split(|b| *b == b'\n') {
        let name = line.split(|b| *b == b'=').next().unwrap_or_default();
        if names.iter().any(|n| n.as_bytes() == name) {
            out.extend_from_slice(name);
            out.extend_from_slice(b"=(may hold the secret: the test or workflow passes it)");
        } else {
            out.extend_from_slice(line);
        }
        out.push(b'\n');
    }
    out
}

/// `root` and every process below it now, by the parent links of
/// `/proc/*/stat`.
fn tree(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = parent(pid) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            out.extend(kids.iter().filter(|k| **k != root));
        }
        i += 1;
    }
    out
}

/// The parent pid in `/proc/PID/stat`: the field after the state, which
/// follows the command name in parentheses (which may hold spaces and
/// parentheses itself).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = String::from_utf8_lossy(&stat[close + 1..]).into_owned();
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn read(pid: u32, what: &str) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/{what}")).ok()
}

/// NUL-separated fields joined by `sep`, without the trailing NUL.
fn joined(mut bytes: Vec<u8>, sep: u8) -> Vec<u8> {
    if bytes.last() == Some(&0) {
        bytes.pop();
    }
    for b in bytes.iter_mut().filter(|b| **b == 0) {
        *b = sep;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell's children and grandchildren are seen with their command
    /// lines and environments; a process outside the tree is not.
    #[test]
    fn the_tree_of_the_command_is_sampled_and_nothing_else() {
        let mut outside = Command::new("sleep")
            .arg("3.25")
            .spawn()
            .expect("spawn sleep");
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "sh -c 'sleep 0.3; true' & sleep 0.31; wait; echo done",
        ])
        .env("SAMPLER_MARK", "marked-value-77");
        let sampled = run(cmd);
        let _ = outside.kill();
        let _ = outside.wait();
        assert_eq!(String::from_utf8_lossy(&sampled.output.stdout), "done\n");
        assert!(sampled.flow_reads > 0 && sampled.samples > 10);
        let lines: Vec<String> = sampled
            .seen
            .iter()
            .map(|s| String::from_utf8_lossy(&s.cmdline).into_owned())
            .collect();
        assert!(lines.iter().any(|l| l == "sleep 0.3"), "{lines:?}");
        assert!(lines.iter().any(|l| l == "sleep 0.31"), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains("3.25")), "{lines:?}");
        let grandchild = sampled
            .seen
            .iter()
            .find(|s| s.cmdline == b"sleep 0.3")
            .unwrap();
        assert_eq!(grandchild.role, Role::Descendant);
        let env = String::from_utf8_lossy(&grandchild.environ).into_owned();
        assert!(
            env.lines().any(|l| l == "SAMPLER_MARK=marked-value-77"),
            "{env}"
        );
        let hidden = without_values(&grandchild.environ, &["SAMPLER_MARK".into()]);
        assert!(!String::from_utf8_lossy(&hidden).contains("marked-value-77"));
    }
}
