//! A throwaway `sshd` on a high loopback port with generated keys, whose
//! sessions see a test cluster's `SLURM_CONF`, for the SSH path.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Daemons, Slurm, free_port, program, wait_for};

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
