//! kube.manifest's `files` from URLs, served by a std `TcpListener` on
//! loopback (issue 17): plain http refused unless its entry says
//! `insecure = true`, redirects followed, and a `sha256` pin that a changed
//! body fails with both digests, before anything reaches the cluster.

use std::io::{Read, Write};

use sha2::{Digest, Sha256};

use crate::support::Project;
use crate::support::kube::KubeServer;

/// The manifest the server serves at `/plugins/cm.yaml`.
const BODY: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-url}\ndata: {a: b}\n";

/// A server on 127.0.0.1 answering every request (`/old.yaml` redirects to
/// `/plugins/cm.yaml`, which serves [`BODY`]); its port.
fn serve() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let reply = if head.starts_with("GET /old.yaml") {
                "HTTP/1.1 301 Moved\r\nLocation: /plugins/cm.yaml\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
                    BODY.len()
                )
            };
            let _ = s.write_all(reply.as_bytes());
        }
    });
    port
}

/// What a run printed, as one line: diagnostics wrap long lines.
fn said(run: &crate::support::Run) -> String {
    run.all()
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A workflow of one kube.manifest step whose `files` is `entry`.
fn workflow(kubeconfig: &str, entry: &str) -> String {
    format!(
        "[steps.cm]\nprovider = \"kube.manifest\"\n[steps.cm.inputs]\nkubeconfig = \"{kubeconfig}\"\nfiles = [{entry}]\n"
    )
}

/// Manifests fetched from a URL (as the device plugins are published):
/// plain http is refused offline unless the entry says `insecure = true`;
/// then the redirect is followed and the object applied.
#[test]
fn manifests_from_a_url() {
    let k = KubeServer::start();
    let port = serve();
    let p = Project::new();
    let url = format!("http://127.0.0.1:{port}/old.yaml");
    p.write(
        "wf.toml",
        &workflow(&k.kubeconfig_path(), &format!("\"{url}\"")),
    );
    let refused = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(
        said(&refused).contains("is plain http"),
        "{}",
        refused.all()
    );
    assert!(
        said(&refused).contains("insecure = true"),
        "{}",
        refused.all()
    );
    assert!(p.state_files().is_empty(), "a refused workflow made state");
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/from-url")
            .is_none()
    );

    p.write(
        "wf.toml",
        &workflow(
            &k.kubeconfig_path(),
            &format!("{{ url = \"{url}\", insecure = true }}"),
        ),
    );
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(
        k.get("/api/v1/namespaces/default/configmaps/from-url")
            .unwrap()["data"]["a"],
        "b"
    );
}

/// A pinned URL whose body is not the one pinned fails with both digests
/// and applies nothing; the right pin applies.
#[test]
fn a_pin_that_does_not_match_applies_nothing() {
    let k = KubeServer::start();
    let port = serve();
    let p = Project::new();
    let url = format!("http://127.0.0.1:{port}/plugins/cm.yaml");
    let wrong = "0".repeat(64);
    let right = hex::encode(Sha256::digest(BODY.as_bytes()));
    let pinned = |pin: &str| {
        workflow(
            &k.kubeconfig_path(),
            &format!("{{ url = \"{url}\", insecure = true, sha256 = \"{pin}\" }}"),
        )
    };
    p.write("wf.toml", &pinned(&wrong));
    let failed = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let mismatch = format!("has sha256 {right}, but its entry pins sha256 {wrong}");
    assert!(said(&failed).contains(&mismatch), "{}", failed.all());
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/from-url")
            .is_none()
    );
    // Nothing was recorded as made: the plan still creates it.
    let plan = p.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(plan.stdout.contains("1 to create"), "{}", plan.all());

    p.write("wf.toml", &pinned(&right));
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/from-url")
            .is_some()
    );
}
