//! The kubelets' log endpoint, for trainings that print while they run.
//!
//! The API server answers `pods/log` by asking the kubelet of the pod's
//! node: HTTPS to the node's address (`status.addresses`, `InternalIP`
//! when there is no `Hostname`) on its `status.daemonEndpoints
//! .kubeletEndpoint.Port`, path `/containerLogs/NAMESPACE/POD/CONTAINER`,
//! the query as given (`follow=true`: the log as it grows, until the
//! container ends). With no `--kubelet-certificate-authority` (as this
//! test server is started) it does not verify the kubelet's certificate
//! (https://kubernetes.io/docs/concepts/architecture/control-plane-node-communication/#apiserver-to-kubelet).
//!
//! [`KubeServer::serve_pod_logs`] starts one such endpoint on 127.0.0.1
//! for the nodes a test names and points their Nodes at it: each pod there
//! prints what the test's [`Voice`] says, one line a beat, for as long as
//! the pod is `Running`; then the stream ends, as a kubelet ends a
//! followed log when its container exits. A pod that is not running when
//! asked gives an empty log (the provider then reads its container's
//! termination message, as before).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;

use super::KubeServer;

/// What a running pod prints: `(pod, node, i)` → its `i`th line (from 0,
/// one a beat), or `None` for nothing this beat.
pub type Voice = dyn Fn(&str, &str, usize) -> Option<String> + Send + Sync;

impl KubeServer {
    /// Serves the logs of the pods on `nodes` (see the module's comment):
    /// one line of `voice` a `beat` while each runs.
    pub fn serve_pod_logs(&self, nodes: &[String], beat: Duration, voice: Arc<Voice>) {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(self.dir.path().join("server.crt"))
                .expect("server.crt")
                .collect::<Result<_, _>>()
                .expect("server.crt");
        let key = PrivateKeyDer::from_pem_file(self.dir.path().join("server.key")).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("the kubelet's certificate");
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the kubelets' port");
        let port = listener.local_addr().unwrap().port();
        let client = self.client.clone();
        let rt = self.rt.handle().clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { continue };
                let (config, voice, client, rt) =
                    (config.clone(), voice.clone(), client.clone(), rt.clone());
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, s);
                    let running = |ns: &str, pod: &str| {
                        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
                        rt.block_on(api.get_opt(pod)).ok().flatten().and_then(|p| {
                            let on = p.spec.as_ref()?.node_name.clone()?;
                            let phase = p.status.as_ref()?.phase.clone()?;
                            (phase == "Running").then_some(on)
                        })
                    };
                    answer(&mut tls, beat, voice.as_ref(), &running);
                });
            }
        });
        for node in nodes {
            self.merge_patch(
                &format!("/api/v1/nodes/{node}/status"),
                &json!({"status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}),
            );
        }
    }
}

/// Answers one `GET /containerLogs/NS/POD/CONTAINER` on `s`: the pod's
/// lines while `running(ns, pod)` names its node, as a chunked stream.
fn answer<S: Read + Write>(
    s: &mut S,
    beat: Duration,
    voice: &Voice,
    running: &dyn Fn(&str, &str) -> Option<String>,
) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&raw).to_string();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, _container] = parts[..] else {
        let _ = s
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if s.write_all(head.as_bytes())
        .and_then(|_| s.flush())
        .is_err()
    {
        return;
    }
    let mut i = 0;
    while let Some(node) = running(ns, pod) {
        if let Some(line) = voice(pod, &node, i) {
            let line = format!("{line}\n");
            let chunk = format!("{:x}\r\n{line}\r\n", line.len());
            if s.write_all(chunk.as_bytes())
                .and_then(|_| s.flush())
                .is_err()
            {
                return;
            }
        }
        i += 1;
        std::thread::sleep(beat);
    }
    let _ = s.write_all(b"0\r\n\r\n").and_then(|_| s.flush());
}
