//! The local cloud over HTTPS for pcluster's tests: pcluster makes its
//! bucket with its TLS-only policy (`aws:SecureTransport`), which the local
//! cloud evaluates (scripts/local-cloud/cloud_pcluster_s3policy.py), so
//! pcluster and flow talk to it over TLS (scripts/local-cloud/
//! cloud_https.py), trusting a test CA made here through `AWS_CA_BUNDLE`.
//! The harness's own calls (`Moto::query_call` and the like) stay on the
//! plain HTTP port.

use std::net::TcpStream;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::support::aws::Aws;
use super::support::moto::Moto;
use super::support::wait_until;

/// A test CA and a certificate it signed for `address` (and 127.0.0.1),
/// made in `dir`: (CA certificate, certificate, key).
pub(super) fn test_ca(dir: &Path, address: &str) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        dir.join("san.ext"),
        format!(
            "subjectAltName=IP:{address},IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .expect("write san.ext");
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=flow test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=local cloud",
        "-keyout",
        "cloud.key",
        "-out",
        "cloud.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "cloud.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "cloud.pem",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("cloud.pem"),
        dir.join("cloud.key"),
    )
}

/// A moto that also answers over HTTPS on a port of 127.0.0.1.
pub(super) struct Cloud {
    /// The server (its plain HTTP port for the harness's calls).
    pub moto: Moto,
    /// `https://127.0.0.1:PORT`.
    pub https: String,
    /// The test CA's certificate.
    pub ca: PathBuf,
    _tls: tempfile::TempDir,
}

impl Cloud {
    /// Starts it with `env` in the server's environment too.
    pub fn start(env: &[(&str, &str)]) -> Cloud {
        let tls = tempfile::Builder::new()
            .prefix("tls")
            .tempdir()
            .expect("tempdir");
        let (ca, cert, key) = test_ca(tls.path(), "127.0.0.1");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let address = format!("127.0.0.1:{port}");
        let mut all: Vec<(&str, &str)> = env.to_vec();
        let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
        all.extend([
            ("FLOW_LOCAL_CLOUD_HTTPS", address.as_str()),
            ("FLOW_LOCAL_CLOUD_TLS_CERT", &cert),
            ("FLOW_LOCAL_CLOUD_TLS_KEY", &key),
        ]);
        let moto = Moto::start_with(&all);
        wait_until(
            Duration::from_secs(60),
            "the local cloud's HTTPS port",
            || TcpStream::connect(&address).is_ok(),
        );
        Cloud {
            moto,
            https: format!("https://{address}"),
            ca,
            _tls: tls,
        }
    }

    /// A project whose `flow` (and the `pcluster` it runs) talks to the
    /// HTTPS port, trusting the test CA.
    pub fn aws(&self) -> Aws {
        let mut a = Aws::new(&self.moto, Some(&self.https));
        a.env.push((
            "AWS_CA_BUNDLE".into(),
            self.ca.to_string_lossy().into_owned(),
        ));
        a
    }
}

impl Deref for Cloud {
    type Target = Moto;

    fn deref(&self) -> &Moto {
        &self.moto
    }
}
