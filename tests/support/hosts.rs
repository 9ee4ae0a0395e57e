//! Local hosts for one test (`scripts/local-hosts --hold`): a sealed
//! network namespace (loopback and the bridge `flowbr0`, no route out) with
//! the host manager in it, which makes each EC2 instance of a moto started
//! inside a host at the instance's private address
//! (`scripts/local-cloud/cloud_hosts.py`). Everything ends on drop.
//!
//! A test joins the namespace with [`Hosts::enter`]: from then on, until
//! the guard drops, what the test's thread connects to and every process
//! it starts (moto, `flow`, `ssh`) is inside.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use crate::support::workspace_root;

/// A sealed network namespace with its host manager, ended on drop.
pub struct Hosts {
    child: Child,
    stdin: Option<ChildStdin>,
    /// A process inside the namespace (`/proc/PID/ns/net` is it).
    pub pid: u32,
    /// The manager's Unix socket: `FLOW_LOCAL_HOSTS` for moto.
    pub socket: PathBuf,
}

/// The test's thread inside the sealed namespace; back out on drop.
pub struct Inside {
    original: File,
}

impl Drop for Inside {
    fn drop(&mut self) {
        // SAFETY: setns(2) on a descriptor we own; no memory is touched.
        let rc = unsafe { libc::setns(self.original.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns back to the test's own network namespace");
    }
}

impl Hosts {
    /// Starts `scripts/local-hosts --hold` and waits until its manager
    /// answers. Fails, naming what is missing, when the harness cannot run
    /// (not root, no `unshare`, no sshd: it installs Debian's packages).
    pub fn start() -> Hosts {
        // SAFETY: geteuid(2) reads the caller's id.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "local hosts need root (network namespaces, a bridge, sshd): run the tests as root"
        );
        let script = workspace_root().join("scripts/local-hosts");
        let mut child = Command::new(&script)
            .arg("--hold")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", script.display()));
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read from scripts/local-hosts");
        let mut words = line.split_whitespace();
        let (Some(pid), Some(socket)) = (words.next(), words.next()) else {
            let status = child.wait().expect("wait scripts/local-hosts");
            panic!("scripts/local-hosts --hold did not start ({status}); its errors are above");
        };
        let stdin = child.stdin.take();
        Hosts {
            child,
            stdin,
            pid: pid.parse().expect("a PID"),
            socket: PathBuf::from(socket),
        }
    }

    /// The sealed namespace's `/proc/PID/ns/net`.
    pub fn netns(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.pid))
    }

    /// Moves the calling thread into the sealed namespace until the guard
    /// drops (only this thread, and what it starts, is inside). moto is
    /// installed first: nothing inside can reach the package index, so a
    /// first install from there fails on name resolution.
    pub fn enter(&self) -> Inside {
        crate::support::moto::moto_server();
        let original = File::open("/proc/thread-self/ns/net").expect("this thread's netns");
        let sealed = File::open(self.netns()).expect("the sealed netns");
        // SAFETY: setns(2) on descriptors we own; no memory is touched.
        let rc = unsafe { libc::setns(sealed.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "setns into the sealed namespace: {}",
            std::io::Error::last_os_error()
        );
        Inside { original }
    }

    /// One request to the host manager (see its docstring); its answer.
    pub fn call(&self, request: &serde_json::Value) -> serde_json::Value {
        let mut s = UnixStream::connect(&self.socket).expect("connect to the host manager");
        s.write_all(format!("{request}\n").as_bytes())
            .expect("send");
        let mut answer = String::new();
        s.read_to_string(&mut answer)
            .expect("read the manager's answer");
        serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not JSON: {answer}"))
    }

    /// The running hosts (the manager's HOST objects).
    pub fn list(&self) -> Vec<serde_json::Value> {
        let answer = self.call(&serde_json::json!({"op": "list"}));
        assert_eq!(answer["ok"], true, "{answer}");
        answer["hosts"].as_array().cloned().unwrap_or_default()
    }

    /// The running host at `ip`, if any.
    pub fn at(&self, ip: &str) -> Option<serde_json::Value> {
        self.list().into_iter().find(|h| h["ip"] == ip)
    }

    /// `ssh -i KEY USER@IP COMMAND`, from the calling thread (inside, once
    /// entered), the host's key checked against the one the manager made.
    pub fn ssh(&self, host: &serde_json::Value, key: &Path, command: &str) -> Output {
        let ip = host["ip"].as_str().expect("ip");
        let known = key.with_extension(format!("known-{ip}"));
        std::fs::write(
            &known,
            format!("{ip} {}\n", host["host_key"].as_str().unwrap_or("")),
        )
        .expect("write known_hosts");
        ssh_command(
            key,
            &known,
            &format!("{}@{ip}", host["user"].as_str().expect("user")),
        )
        .arg(command)
        .output()
        .expect("run ssh")
    }
}

/// `ssh` with a key, a known_hosts file, no prompts and a short timeout.
pub fn ssh_command(key: &Path, known_hosts: &Path, target: &str) -> Command {
    let mut c = Command::new("ssh");
    c.arg("-i")
        .arg(key)
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(["-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR", target])
        .stdin(Stdio::null());
    c
}

/// A new ed25519 key pair in `dir`: the private key's path (`.pub` beside).
pub fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .output()
        .expect("run ssh-keygen (Debian openssh-client)");
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    key
}

/// ImportKeyPair of `key`'s public half as `name` in the test cloud, as
/// `aws ec2 import-key-pair` sends it.
pub fn import_key_pair(moto: &crate::support::moto::Moto, name: &str, key: &Path) {
    use base64::Engine;
    let public = std::fs::read(key.with_extension("pub")).expect("public key");
    let material = base64::engine::general_purpose::STANDARD.encode(public);
    let encoded = material
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    moto.query_call(
        "ec2",
        &format!(
            "Action=ImportKeyPair&Version=2016-11-15&KeyName={name}&PublicKeyMaterial={encoded}"
        ),
    );
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Its stdin's end is the harness's cue to stop the hosts and go.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Installs Debian's `package` with apt-get when `command` is not on PATH,
/// as scripts/local-hosts installs openssh-server (call it before
/// [`Hosts::enter`]: inside the sealed namespace no package can be
/// fetched). Fails naming the command and the package when it cannot.
pub fn ensure_installed(command: &str, package: &str) {
    let on_path = |c: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(c).is_file()))
    };
    if on_path(command) {
        return;
    }
    eprintln!("installing Debian's {package} (for `{command}`)");
    let update = Command::new("apt-get").args(["update", "-qq"]).status();
    let install = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    assert!(
        update.is_ok() && install.as_ref().is_ok_and(|s| s.success()) && on_path(command),
        "`{command}` is missing and `apt-get install {package}` did not provide it ({install:?}): install Debian's {package}"
    );
}
