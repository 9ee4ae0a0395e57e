//! A real Slurm for one test: Debian's `munged`, `slurmctld` and `slurmd`
//! started in the foreground on loopback, on free ports, from the
//! `slurm.conf` template `scripts/local-slurm` uses too
//! (scripts/local-cloud/slurm.conf.in: one node with this machine's CPUs,
//! accounting off, the controller keeping finished jobs for a day), all
//! killed on drop. [`Features`] add what a test needs beyond that:
//! accounting (a throwaway MariaDB and Debian's `slurmdbd`, so `sacct`
//! answers as on a cluster that keeps accounting), memory limits enforced
//! by cgroups, a short `SlurmdTimeout`, a short `MinJobAge`, several nodes
//! (one slurmd each, all on this host: Debian builds Slurm with
//! multiple-slurmd, so `slurmd -N NAME` runs one node of many). And a
//! throwaway `sshd` on a high loopback port with generated keys, whose
//! sessions see the same `SLURM_CONF`, for the SSH path.
//!
//! `scripts/test` installs the packages (slurmctld, slurmd, slurm-client,
//! munge, slurmdbd, mariadb-server-core, mariadb-client-core,
//! openssh-server, openssh-client) when they are missing, with
//! `scripts/local-slurm --install`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod slurmctld_log;
pub mod sshd;

/// The configuration `scripts/local-slurm` starts Slurm with too.
const CONF_TEMPLATE: &str = include_str!("../../scripts/local-cloud/slurm.conf.in");

/// A port that was free a moment ago, and never handed out before in this
/// process: the system may give one port to two binds in a row, and two
/// daemons of one cluster on one port answer for each other (a 16-node
/// fleet's gpu-6 and gpu-12 once did: gpu-12's slurmd could not bind, gpu-6
/// ran gpu-12's job, and Slurm waited for its end for ever).
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a free port")
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The path of a system program, or a panic naming the package.
fn program(path: &str, package: &str) -> PathBuf {
    let p = PathBuf::from(path);
    assert!(
        p.exists(),
        "{path} is missing: install Debian's {package} (scripts/test does it: scripts/local-slurm --install)"
    );
    p
}

/// What a test's Slurm has beyond the plain one-node cluster.
#[derive(Debug, Clone, Default)]
pub struct Features {
    /// Accounting through slurmdbd on a throwaway MariaDB, job comments
    /// kept (`AccountingStoreFlags=job_comment`): `sacct` lists every job,
    /// the finished and forgotten ones too.
    pub accounting: bool,
    /// `--mem` enforced by task/cgroup on the cgroup v1 memory controller,
    /// so a job over it ends `OUT_OF_MEMORY`.
    pub memory_limits: bool,
    /// Seconds before the controller sets a silent node down
    /// (`SlurmdTimeout`; Slurm's default is 300).
    pub slurmd_timeout: Option<u32>,
    /// Seconds the controller keeps a finished job (`MinJobAge`; the
    /// template's is a day). The controller purges every 60 s or so.
    pub min_job_age: Option<u32>,
    /// Several nodes instead of one: `names` (each its own slurmd on
    /// this host, on its own port, one CPU each), all with `features`
    /// (`Feature=`, e.g. ParallelCluster's `static,p4d.24xlarge`).
    pub nodes: Option<Fleet>,
}

/// The nodes of a several-node cluster (see [`Features::nodes`]).
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// The nodes' names.
    pub names: Vec<String>,
    /// Their features, comma-separated (empty for none).
    pub features: String,
}

/// `conf` with the line `key=…` set to `key=value` (added when absent).
fn set_line(conf: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key}=");
    let mut found = false;
    let mut out: Vec<String> = conf
        .lines()
        .map(|l| {
            if l.starts_with(&prefix) {
                found = true;
                format!("{key}={value}")
            } else {
                l.to_string()
            }
        })
        .collect();
    if !found {
        out.push(format!("{key}={value}"));
    }
    out.join("\n") + "\n"
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
    /// Where slurmd is in `daemons`.
    slurmd: usize,
    dir: tempfile::TempDir,
    /// The node's name (the first node's, on a several-node cluster).
    pub node: String,
    /// Every node's name.
    pub nodes: Vec<String>,
}

impl Slurm {
    /// Starts munged, slurmctld and slurmd and waits until the node is idle.
    pub fn start() -> Slurm {
        Slurm::start_with(Features::default())
    }

    /// Starts munged (and MariaDB and slurmdbd, for accounting), slurmctld
    /// and slurmd with `features`, and waits until the node is idle.
    pub fn start_with(features: Features) -> Slurm {
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
        let mut conf = CONF_TEMPLATE
            .replace("@DIR@", &d.display().to_string())
            .replace("@CTLD_PORT@", &free_port().to_string())
            .replace("@SLURMD_PORT@", &free_port().to_string())
            .replace("@NODE@", &node)
            .replace("@CPUS@", &cpus.to_string());
        let dbd_port = free_port();
        if features.accounting {
            for (key, value) in [
                (
                    "AccountingStorageType",
                    "accounting_storage/slurmdbd".into(),
                ),
                ("AccountingStorageHost", "127.0.0.1".into()),
                ("AccountingStoragePort", dbd_port.to_string()),
                // The munge socket slurmctld and the commands reach slurmdbd with.
                (
                    "AccountingStoragePass",
                    d.join("munge.sock").display().to_string(),
                ),
                ("AccountingStoreFlags", "job_comment".into()),
                ("JobAcctGatherType", "jobacct_gather/linux".into()),
            ] {
                conf = set_line(&conf, key, &value);
            }
        }
        if features.memory_limits {
            assert!(
                Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists(),
                "memory limits need the cgroup v1 memory controller at /sys/fs/cgroup/memory, \
                 which this machine does not mount"
            );
            conf = set_line(&conf, "TaskPlugin", "task/cgroup");
            conf = set_line(&conf, "SelectTypeParameters", "CR_Core_Memory");
            // Jobs that ask for no memory get 100 MB a CPU, not the whole node.
            conf = set_line(&conf, "DefMemPerCPU", "100");
            conf = conf.replace(" State=UNKNOWN", " RealMemory=1024 State=UNKNOWN");
            std::fs::write(
                d.join("cgroup.conf"),
                "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n\
                 ConstrainRAMSpace=yes\nConstrainSwapSpace=yes\n",
            )
            .expect("write cgroup.conf");
        }
        let names = match &features.nodes {
            Some(fleet) => {
                conf = fleet_conf(&conf, d, fleet);
                fleet.names.clone()
            }
            None => vec![node.clone()],
        };
        if let Some(secs) = features.slurmd_timeout {
            conf = set_line(&conf, "SlurmdTimeout", &secs.to_string());
        }
        if let Some(secs) = features.min_job_age {
            conf = set_line(&conf, "MinJobAge", &secs.to_string());
        }
        std::fs::write(d.join("slurm.conf"), conf).expect("write slurm.conf");
        let conf = d.join("slurm.conf");
        if features.accounting {
            start_accounting(d, &mut daemons, dbd_port);
        }
        daemons.0.push(
            Command::new(&slurmctld)
                .args(["-D", "-i", "-f"])
                .arg(&conf)
                .env("SLURM_CONF", &conf)
                .stdout(log("slurmctld.out"))
                .stderr(log("slurmctld.err"))
                .spawn()
                .expect("start slurmctld"),
        );
        let first_slurmd = daemons.0.len();
        for (i, name) in names.iter().enumerate() {
            let suffix = if i == 0 {
                String::new()
            } else {
                format!("-{name}")
            };
            daemons.0.push(
                Command::new(&slurmd)
                    .args(["-D", "-N", name, "-f"])
                    .arg(&conf)
                    .env("SLURM_CONF", &conf)
                    .stdout(log(&format!("slurmd{suffix}.out")))
                    .stderr(log(&format!("slurmd{suffix}.err")))
                    .spawn()
                    .expect("start slurmd"),
            );
        }
        let mut slurm = Slurm {
            daemons,
            slurmd: first_slurmd,
            dir,
            node: names[0].clone(),
            nodes: names,
        };
        let started = Instant::now();
        loop {
            // A slurmd that could not start (its port taken by another
            // program) must not be answered for by another: stop here.
            let exited = slurm.daemons.0[first_slurmd..]
                .iter_mut()
                .enumerate()
                .find_map(|(i, child)| child.try_wait().ok().flatten().map(|s| (i, s)));
            if let Some((i, status)) = exited {
                let name = &slurm.nodes[i];
                let log = slurm
                    .dir
                    .path()
                    .join("log")
                    .join(format!("slurmd-{name}.log"));
                panic!(
                    "slurmd of node {name} exited ({status}) while Slurm came up; its log ends:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            let out = slurm.command("sinfo").args(["-h", "-o", "%T"]).output();
            if out.as_ref().is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "idle"
            }) {
                break;
            }
            // Generous: with accounting, slurmctld registers with slurmdbd
            // first, and on a loaded 2-core machine running other Slurms
            // that took over 30 s once (the resume test, 2026-11-28).
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "Slurm did not come up in 90 s: sinfo says {:?}\n{}",
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

    /// Every job accounting recorded under `name`, finished and forgotten
    /// ones too, as `(id, state, comment)` (a cluster started with
    /// [`Features::accounting`]).
    pub fn accounted_named(&self, name: &str) -> Vec<(String, String, String)> {
        self.output(
            "sacct",
            &[
                "-X",
                "-n",
                "-P",
                "-a",
                "-S",
                "now-1days",
                "--name",
                name,
                "-o",
                "JobID,State,Comment",
            ],
        )
        .lines()
        .filter_map(|l| {
            let mut p = l.split('|');
            Some((
                p.next()?.to_string(),
                p.next()?.to_string(),
                p.next()?.to_string(),
            ))
        })
        .collect()
    }

    /// Kills slurmd (-9), as a node that dies: its jobs' processes live on,
    /// the controller hears nothing from the node.
    pub fn kill_slurmd(&mut self) {
        let first = self.node.clone();
        self.kill_slurmd_of(&first);
    }

    /// Kills node `name`'s slurmd (-9), as [`Slurm::kill_slurmd`] does the
    /// first node's.
    pub fn kill_slurmd_of(&mut self, name: &str) {
        let i = self
            .nodes
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("{name} is not a node of {:?}", self.nodes));
        let child = &mut self.daemons.0[self.slurmd + i];
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The daemons' logs, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let first = format!("slurmd-{}.log", self.node);
        for name in [
            first.as_str(),
            "slurmdbd.log",
            "mariadb.err",
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

/// `conf` with one `NodeName` line per node of `fleet` instead of the
/// template's one node: each slurmd on its own port, with its own spool
/// folder, pid file and log (`%n`, the node's name).
fn fleet_conf(conf: &str, dir: &Path, fleet: &Fleet) -> String {
    let feature = if fleet.features.is_empty() {
        String::new()
    } else {
        format!(" Feature={}", fleet.features)
    };
    let mut out = Vec::new();
    for line in conf.lines() {
        if !line.starts_with("NodeName=") {
            out.push(line.to_string());
            continue;
        }
        for name in &fleet.names {
            std::fs::create_dir_all(dir.join("spool").join(name)).expect("mkdir spool");
            out.push(format!(
                "NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs=1{feature} State=UNKNOWN",
                free_port()
            ));
        }
    }
    let mut conf = out.join("\n") + "\n";
    let d = dir.display();
    conf = set_line(&conf, "SlurmdSpoolDir", &format!("{d}/spool/%n"));
    conf = set_line(&conf, "SlurmdPidFile", &format!("{d}/slurmd-%n.pid"));
    set_line(&conf, "SlurmdLogFile", &format!("{d}/log/slurmd-%n.log"))
}

/// Starts a throwaway MariaDB (its files in `dir/db`, on a loopback port,
/// no grant tables: nothing but this test reaches it) and slurmdbd over
/// it on `dbd_port`, adding both to `daemons`.
fn start_accounting(dir: &Path, daemons: &mut Daemons, dbd_port: u16) {
    program("/usr/sbin/slurmdbd", "slurmdbd");
    let mariadbd = program("/usr/sbin/mariadbd", "mariadb-server-core");
    program("/usr/bin/my_print_defaults", "mariadb-client-core");
    let log = |name: &str| std::fs::File::create(dir.join("log").join(name)).expect("create log");
    let db = dir.join("db");
    let installed = Command::new("/usr/bin/mariadb-install-db")
        .args(["--no-defaults", "--user=root", "--skip-test-db"])
        .arg(format!("--datadir={}", db.display()))
        .stdout(log("mariadb-install.out"))
        .stderr(log("mariadb-install.err"))
        .status()
        .expect("run mariadb-install-db");
    assert!(
        installed.success(),
        "mariadb-install-db failed (see its log in {})",
        dir.display()
    );
    let db_port = free_port();
    let socket = dir.join("mariadb.sock");
    daemons.0.push(
        Command::new(&mariadbd)
            .args([
                "--no-defaults",
                "--user=root",
                "--bind-address=127.0.0.1",
                "--skip-grant-tables",
                "--innodb-buffer-pool-size=32M",
                "--innodb-lock-wait-timeout=900",
            ])
            .arg(format!("--port={db_port}"))
            .arg(format!("--datadir={}", db.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("mariadb.pid").display()))
            .arg(format!(
                "--log-error={}",
                dir.join("log/mariadb.err").display()
            ))
            .stdout(log("mariadb.out"))
            .stderr(log("mariadb.out2"))
            .spawn()
            .expect("start mariadbd"),
    );
    wait_for(Duration::from_secs(30), "MariaDB to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", db_port)).is_ok()
    });
    let conf = format!(
        "AuthType=auth/munge\nAuthInfo=socket={d}/munge.sock\nDbdHost=localhost\n\
         DbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n\
         StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n\
         StoragePort={db_port}\nStorageUser=root\nStorageLoc=slurm_acct_db\n\
         PidFile={d}/slurmdbd.pid\nLogFile={d}/log/slurmdbd.log\n",
        d = dir.display()
    );
    // slurmdbd reads slurmdbd.conf beside SLURM_CONF, and only when private.
    let path = dir.join("slurmdbd.conf");
    std::fs::write(&path, conf).expect("write slurmdbd.conf");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .expect("chmod slurmdbd.conf");
    daemons.0.push(
        Command::new("/usr/sbin/slurmdbd")
            .arg("-D")
            .env("SLURM_CONF", dir.join("slurm.conf"))
            .stdout(log("slurmdbd.out"))
            .stderr(log("slurmdbd.err"))
            .spawn()
            .expect("start slurmdbd"),
    );
    wait_for(Duration::from_secs(30), "slurmdbd to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", dbd_port)).is_ok()
    });
}

impl Drop for Slurm {
    /// Kills what the cluster's jobs left running (a job's processes carry
    /// `SLURM_CONF`, and so do the daemons' own children): a node that was
    /// killed leaves its job's `slurmstepd` and script behind.
    fn drop(&mut self) {
        let marker = format!("SLURM_CONF={}", self.conf().display());
        let me = std::process::id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let own = self.daemons.0.iter().any(|c| c.id() == pid);
            if pid == me || own {
                continue;
            }
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            if environ
                .split(|b| *b == 0)
                .any(|var| var == marker.as_bytes())
            {
                // SAFETY: kill(2) on a pid read from /proc; no memory is touched.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
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
