//! A real Slurm for one test: Debian's `munged`, `slurmctld` and `slurmd`
//! started in the foreground on loopback, on free ports, from the
//! `slurm.conf` template `scripts/local-slurm` uses too
//! (scripts/local-cloud/slurm.conf.in: one node with this machine's CPUs,
//! accounting off, the controller keeping finished jobs for a day), all
//! killed on drop. And a
//! throwaway `sshd` on a high loopback port with generated keys, whose
//! sessions see the same `SLURM_CONF`, for the SSH path.
//!
//! `scripts/test` installs the packages (slurmctld, slurmd, slurm-client,
//! munge, openssh-server, openssh-client) when they are missing, with
//! `scripts/local-slurm --install`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The configuration `scripts/local-slurm` starts Slurm with too.
const CONF_TEMPLATE: &str = include_str!("../../scripts/local-cloud/slurm.conf.in");

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// The path of a system program, or a panic naming the package.
fn program(path: &str, package: &str) -> PathBuf {
    let p = PathBuf::from(path);
    assert!(
        p.exists(),
        "{path} is missing: install Debian's {package} (scripts/test does: apt-get install slurmctld slurmd slurm-client munge openssh-server)"
    );
    p
}

/// Children killed (and reaped) on drop, last started first.
#[derive(Default)]
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in self.0.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running one-node Slurm cluster.
pub struct Slurm {
    daemons: Daemons,
    dir: tempfile::TempDir,
    /// The node's name.
    pub node: String,
}

impl Slurm {
    /// Starts munged, slurmctld and slurmd and waits until the node is idle.
    pub fn start() -> Slurm {
        let munged = program("/usr/sbin/munged", "munge");
        let slurmctld = program("/usr/sbin/slurmctld", "slurmctld");
        let slurmd = program("/usr/sbin/slurmd", "slurmd");
        program("/usr/bin/sbatch", "slurm-client");
        let dir = tempfile::Builder::new()
            .prefix("flow-slurm")
            .tempdir()
            .expect("tempdir");
        let d = dir.path();
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        }
        let key: Vec<u8> = (0..1024).map(|_| rand::random::<u8>()).collect();
        std::fs::write(d.join("munge.key"), key).expect("write munge key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("munge.key"), std::fs::Permissions::from_mode(0o400))
            .expect("chmod munge key");
        let mut daemons = Daemons::default();
        let log = |name: &str| {
            std::fs::File::create(d.join("log").join(name)).expect("create daemon log")
        };
        daemons.0.push(
            Command::new(&munged)
                .arg("-F")
                .arg(format!("--key-file={}", d.join("munge.key").display()))
                .arg(format!("--socket={}", d.join("munge.sock").display()))
                .arg(format!("--pid-file={}", d.join("munged.pid").display()))
                .arg(format!("--seed-file={}", d.join("munge.seed").display()))
                .arg(format!("--log-file={}", d.join("log/munged.log").display()))
                .arg("--force")
                .stdout(log("munged.out"))
                .stderr(log("munged.err"))
                .spawn()
                .expect("start munged"),
        );
        wait_for(Duration::from_secs(10), "munged's socket", || {
            d.join("munge.sock").exists()
        });
        let node = format!("flow{}", free_port());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let conf = CONF_TEMPLATE
            .replace("@DIR@", &d.display().to_string())
            .replace("@CTLD_PORT@", &free_port().to_string())
            .replace("@SLURMD_PORT@", &free_port().to_string())
            .replace("@NODE@", &node)
            .replace("@CPUS@", &cpus.to_string());
        std::fs::write(d.join("slurm.conf"), conf).expect("write slurm.conf");
        let conf = d.join("slurm.conf");
        daemons.0.push(
            Command::new(&slurmctld)
                .args(["-D", "-i", "-f"])
                .arg(&conf)
                .stdout(log("slurmctld.out"))
                .stderr(log("slurmctld.err"))
                .spawn()
                .expect("start slurmctld"),
        );
        daemons.0.push(
            Command::new(&slurmd)
                .args(["-D", "-N", &node, "-f"])
                .arg(&conf)
                .stdout(log("slurmd.out"))
                .stderr(log("slurmd.err"))
                .spawn()
                .expect("start slurmd"),
        );
        let slurm = Slurm { daemons, dir, node };
        let started = Instant::now();
        loop {
            let out = slurm.command("sinfo").args(["-h", "-o", "%T"]).output();
            if out.as_ref().is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "idle"
            }) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "Slurm did not come up: sinfo says {:?}\n{}",
                out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()),
                slurm.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        slurm
    }

    /// The `slurm.conf` flow and Slurm's commands read (`SLURM_CONF`).
    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// The environment a process needs to use this cluster.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("SLURM_CONF".into(), self.conf().display().to_string())]
    }

    /// A Slurm command (`squeue`, `scontrol`, …) against this cluster.
    pub fn command(&self, name: &str) -> Command {
        let mut c = Command::new(name);
        c.env("SLURM_CONF", self.conf()).stdin(Stdio::null());
        c
    }

    /// What `name ARGS` prints.
    pub fn output(&self, name: &str, args: &[&str]) -> String {
        let out = self
            .command(name)
            .args(args)
            .output()
            .expect("run a Slurm command");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every job the controller knows, as `(id, name, state, comment)`.
    pub fn jobs(&self) -> Vec<(String, String, String, String)> {
        self.output("squeue", &["-h", "--states=all", "-o", "%i|%j|%T|%k"])
            .lines()
            .filter_map(|l| {
                let mut p = l.split('|');
                Some((
                    p.next()?.to_string(),
                    p.next()?.to_string(),
                    p.next()?.to_string(),
                    p.next()?.to_string(),
                ))
            })
            .collect()
    }

    /// The jobs called `name`.
    pub fn jobs_named(&self, name: &str) -> Vec<(String, String, String, String)> {
        self.jobs().into_iter().filter(|j| j.1 == name).collect()
    }

    /// The daemons' logs, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in [
            "slurmctld.log",
            "slurmd.log",
            "slurmctld.err",
            "slurmd.err",
            "munged.err",
        ] {
            let text =
                std::fs::read_to_string(self.dir.path().join("log").join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out.push_str(&format!("--- {name}\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The folder the daemons keep their files in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A throwaway sshd on loopback that lets one generated key in as the
/// current user; its sessions get `SLURM_CONF` of the given cluster.
pub struct Sshd {
    _daemon: Daemons,
    dir: tempfile::TempDir,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
}

impl Sshd {
    /// Starts sshd for `slurm`, with a new client key and host key.
    pub fn start(slurm: &Slurm) -> Sshd {
        let sshd = program("/usr/sbin/sshd", "openssh-server");
        let dir = tempfile::Builder::new()
            .prefix("flow-sshd")
            .tempdir()
            .expect("tempdir");
        let d = dir.path();
        for (file, kind) in [("host_key", "ed25519"), ("client_key", "ed25519")] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", kind, "-N", "", "-C", "flow-test", "-f"])
                .arg(d.join(file))
                .output()
                .expect("run ssh-keygen");
            assert!(out.status.success(), "ssh-keygen failed");
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys"))
            .expect("authorized_keys");
        // sshd wants its privilege separation folder.
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = free_port();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n\
                 SetEnv SLURM_CONF={conf}\n",
                d = d.display(),
                conf = slurm.conf().display()
            ),
        )
        .expect("write sshd_config");
        let log = std::fs::File::create(d.join("sshd.log")).expect("sshd log");
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let daemon = Daemons(vec![child]);
        wait_for(Duration::from_secs(10), "sshd to listen", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Sshd {
            _daemon: daemon,
            dir,
            port,
        }
    }

    /// The client's private key (OpenSSH format).
    pub fn client_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("client_key")).expect("client key")
    }

    /// The host's public key line (`ssh-ed25519 AAAA… flow-test`).
    pub fn host_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("host_key.pub"))
            .expect("host key")
            .trim()
            .to_string()
    }

    /// sshd's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

/// Polls `cond` every 50 ms until it holds; panics after `limit`.
fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
