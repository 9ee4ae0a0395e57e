//! The official `pcluster` CLI for the tests that drive it (e2e_pcluster,
//! e2e_hosts' custom AMI on a cluster): installed by
//! `scripts/install-pcluster` into .venv/pcluster, and a local cloud made
//! ready for `pcluster create-cluster` by
//! tests/fixtures/pcluster/prepare_moto.py.

use std::path::Path;
use std::process::Command;

use super::moto::Moto;
use super::workspace_root;

/// `scripts/install-pcluster`: pcluster's path (installing it once). Call
/// it before entering a sealed namespace: nothing inside can reach the
/// package index.
pub fn install() -> String {
    let out = Command::new(workspace_root().join("scripts/install-pcluster"))
        .output()
        .expect("run scripts/install-pcluster");
    assert!(
        out.status.success(),
        "install-pcluster failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What prepare_moto.py made in `moto` for a cluster: a subnet, and the
/// AMI it picked for `Image.CustomAmi`.
pub struct Prepared {
    /// The `pcluster` path.
    pub pcluster: String,
    /// A subnet of a new VPC, in the region's first zone.
    pub subnet: String,
    /// One of Amazon's AMIs in moto's catalogue.
    pub ami: String,
}

/// Runs tests/fixtures/pcluster/prepare_moto.py against `moto` with
/// pcluster's own Python (installing pcluster first when missing).
pub fn prepare(moto: &Moto) -> Prepared {
    let pcluster = install();
    let python = Path::new(&pcluster).with_file_name("python");
    let mut cmd = Command::new(python);
    cmd.arg(workspace_root().join("tests/fixtures/pcluster/prepare_moto.py"));
    for (k, v) in moto.env() {
        cmd.env(k, v);
    }
    // The boto3 pcluster pins reads AWS_DEFAULT_REGION, not AWS_REGION.
    cmd.env("AWS_DEFAULT_REGION", "us-east-1");
    let out = cmd.output().expect("run prepare_moto.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let id = |k: &str| ids[k].as_str().expect("an id").to_string();
    Prepared {
        subnet: id("subnet"),
        ami: id("ami"),
        pcluster,
    }
}
