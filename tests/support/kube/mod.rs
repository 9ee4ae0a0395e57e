//! A real Kubernetes API server for one test: Debian's `kube-apiserver`
//! v1.20.2 (built once by `scripts/kube-apiserver` into a cache outside the
//! repository) storing in Debian's etcd, both on free 127.0.0.1 ports, with
//! a CA and serving certificate made by `openssl`, a static bearer token
//! and a kubeconfig. Both processes are killed on drop.
//!
//! No kubelet, scheduler or operator runs, so a [`Driver`] plays their part
//! through the real API: it marks Deployments available, DaemonSets and
//! StatefulSets ready, claims bound, finalizes terminating namespaces, and
//! runs Jobs, PyTorchJobs and MPIJobs by creating their pods and writing `/status`,
//! keeps PodDisruptionBudgets' status as the disruption controller would, and
//! removes pods deleted off a node as its kubelet would.
//! The pods' "logs" are their containers' termination messages (there is
//! no kubelet to serve `pods/log`), which is what the provider falls back
//! to; test manifests choose them with annotations:
//!
//! - `test.flow/logs`: the text of the first pod's log (without it, what the
//!   local cloud emulates for the program the first container runs: see
//!   `scripts/local-cloud/outputs/`);
//! - `test.flow/outcome: Failed`: the last pod exits 1 and the job fails.
//!
//! The server authorizes with RBAC. With [`Options::eks_sts`] it also
//! authenticates EKS tokens as EKS does (see `eks_token.rs`): the caller's
//! IAM identity maps to the user `flow-e2e-admin` in a group bound to
//! `cluster-admin`, and [`KubeServer::describe_in_eks`] makes the test
//! cloud's DescribeCluster answer with this server's endpoint and CA, so
//! that flow reaches it as it reaches a cluster on AWS.
//!
//! `FLOW_KUBE_APISERVER` names a binary to use instead of the script's; a
//! machine that can neither build nor find one fails these tests, naming
//! what is missing (no test passes by not running).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::Api;
use serde_json::Value;

mod disruption;
mod driver;
mod eks_token;
pub mod emulated;
pub mod kubelets;
pub mod pace;
pub mod pod_logs;
pub mod training;

pub use driver::Driver;
use eks_token::{Webhook, eks_webhook};

use super::workspace_root;

/// The bearer token the test server accepts.
pub const TOKEN: &str = "flow-e2e-token";

/// A running API server and etcd.
pub struct KubeServer {
    etcd: Child,
    apiserver: Child,
    dir: tempfile::TempDir,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// A kubeconfig for it (context `test`, namespace `default`).
    pub kubeconfig: PathBuf,
    /// The CA's PEM.
    pub ca_pem: String,
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    driver: Option<Driver>,
    eks: Arc<Webhook>,
    eks_sts: Option<std::net::SocketAddr>,
}

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Also accept EKS tokens (`k8s-aws-v1.…`) signed with the credentials
    /// of this test cloud (moto at this address) as EKS does: a token
    /// webhook verifies the presigned STS `GetCallerIdentity` URL and its
    /// SigV4 signature as aws-iam-authenticator and STS do, and maps the
    /// caller to the user `flow-e2e-admin` (see `eks_token.rs`);
    /// [`KubeServer::describe_in_eks`] tells this cloud's EKS about the server.
    pub eks_sts: Option<std::net::SocketAddr>,
    /// The cluster this server is (the authenticator's cluster id): the
    /// webhook checks the token's signed `x-k8s-aws-id` against it, so a
    /// token signed for another cluster is refused.
    pub eks_cluster: String,
}

/// The kube-apiserver binary: `FLOW_KUBE_APISERVER`, else what
/// `scripts/kube-apiserver` builds or finds in its cache.
pub fn apiserver_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("FLOW_KUBE_APISERVER") {
        return PathBuf::from(p);
    }
    let script = workspace_root().join("scripts/kube-apiserver");
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/kube-apiserver");
    assert!(
        out.status.success(),
        "scripts/kube-apiserver failed: it builds a kube-apiserver from Debian's `kubernetes` source package with Debian's Go and installs etcd-server (apt-get, as root); its output above names what is missing"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes a CA, a serving certificate for 127.0.0.1 and a service-account key in `dir`.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=flow-test-ca",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kube-apiserver",
        ],
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
    openssl(dir, &["genrsa", "-out", "sa.key", "2048"]);
    openssl(dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
}

impl KubeServer {
    /// Starts etcd and the API server and waits until it is ready; panics
    /// naming what is missing when it cannot.
    pub fn start() -> KubeServer {
        Self::start_with(Options::default())
    }

    /// The audit events of writes to jobs (batch Jobs, Kubeflow jobs) so
    /// far: `verb`, `objectRef`, `responseStatus.code` (201: created).
    pub fn job_writes(&self) -> Vec<Value> {
        self.audit()
            .into_iter()
            .filter(|e| e["objectRef"]["resource"] != "nodes")
            .collect()
    }

    /// The audit events of changes to Node `name` itself (a cordon, a
    /// taint; not its `/status`) so far, as [`KubeServer::job_writes`].
    pub fn node_writes(&self, name: &str) -> Vec<Value> {
        self.audit()
            .into_iter()
            .filter(|e| e["objectRef"]["resource"] == "nodes" && e["objectRef"]["name"] == name)
            .collect()
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// [`KubeServer::start`] with options.
    pub fn start_with(options: Options) -> KubeServer {
        let binary = apiserver_binary();
        let etcd_bin = ["/usr/bin/etcd"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| "etcd".into());
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("flow-kube")
                .tempdir()
                .expect("tempdir");
            let d = dir.path();
            certificates(d);
            std::fs::write(
                d.join("tokens.csv"),
                format!("{TOKEN},admin,admin,\"system:masters\"\n"),
            )
            .unwrap();
            // The API server's own record of every write to a job, for
            // tests that count creations (the audit log,
            // https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/).
            std::fs::write(d.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
            let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
            let eks = Arc::new(Webhook {
                cluster: options.eks_cluster.clone(),
                ..Webhook::default()
            });
            let mut extra = Vec::new();
            if options.eks_sts.is_some() {
                let url = eks_webhook(eks.clone());
                std::fs::write(
                    d.join("webhook.kubeconfig"),
                    format!("apiVersion: v1\nkind: Config\nclusters:\n- name: eks\n  cluster:\n    server: {url}\nusers:\n- name: apiserver\n  user: {{}}\ncontexts:\n- name: eks\n  context: {{cluster: eks, user: apiserver}}\ncurrent-context: eks\n"),
                )
                .unwrap();
                extra.push(format!(
                    "--authentication-token-webhook-config-file={}",
                    d.join("webhook.kubeconfig").display()
                ));
                extra.push("--authentication-token-webhook-version=v1".to_string());
                extra.push("--authentication-token-webhook-cache-ttl=0s".to_string());
            }
            let etcd = Command::new(&etcd_bin)
                .args([
                    "--data-dir",
                    &d.join("etcd").to_string_lossy(),
                    "--listen-client-urls",
                    &format!("http://127.0.0.1:{etcd_port}"),
                    "--advertise-client-urls",
                    &format!("http://127.0.0.1:{etcd_port}"),
                    "--listen-peer-urls",
                    &format!("http://127.0.0.1:{peer_port}"),
                    "--initial-advertise-peer-urls",
                    &format!("http://127.0.0.1:{peer_port}"),
                    "--initial-cluster",
                    &format!("default=http://127.0.0.1:{peer_port}"),
                ])
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(d.join("etcd.log")).unwrap())
                .stderr(std::fs::File::create(d.join("etcd.err")).unwrap())
                .spawn()
                .expect("start etcd");
            let file = |n: &str| d.join(n).to_string_lossy().into_owned();
            let apiserver = Command::new(&binary)
                .args([
                    format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                    format!("--secure-port={api_port}"),
                    "--bind-address=127.0.0.1".into(),
                    "--advertise-address=127.0.0.1".into(),
                    format!("--tls-cert-file={}", file("server.crt")),
                    format!("--tls-private-key-file={}", file("server.key")),
                    format!("--token-auth-file={}", file("tokens.csv")),
                    // As EKS: nobody but the static admin is in system:masters.
                    "--authorization-mode=RBAC".into(),
                    // EKS runs privileged pods (device plugins, CSI drivers).
                    "--allow-privileged=true".into(),
                    format!("--service-account-key-file={}", file("sa.pub")),
                    format!("--service-account-signing-key-file={}", file("sa.key")),
                    "--service-account-issuer=https://kubernetes.default.svc".into(),
                    "--service-cluster-ip-range=10.0.0.0/24".into(),
                    // No controllers run: PVC deletion would wait forever on
                    // its protection finalizer, pods on a service account.
                    "--disable-admission-plugins=StorageObjectInUseProtection,ServiceAccount"
                        .into(),
                    "--enable-priority-and-fairness=false".into(),
                    "--watch-cache=false".into(),
                    format!("--audit-policy-file={}", file("audit-policy.yaml")),
                    format!("--audit-log-path={}", file("audit.log")),
                ])
                .args(&extra)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(d.join("apiserver.log")).unwrap())
                .stderr(std::fs::File::create(d.join("apiserver.err")).unwrap())
                .spawn()
                .expect("start kube-apiserver");
            let url = format!("https://127.0.0.1:{api_port}");
            let ca_pem = std::fs::read_to_string(d.join("ca.crt")).unwrap();
            let kubeconfig = d.join("kubeconfig");
            std::fs::write(&kubeconfig, kubeconfig_text(&url, &ca_pem)).unwrap();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let client = rt.block_on(async {
                let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .unwrap();
                kube::Client::try_from(cfg).unwrap()
            });
            let mut server = KubeServer {
                etcd,
                apiserver,
                dir,
                url,
                kubeconfig,
                ca_pem,
                rt,
                client,
                driver: None,
                eks,
                eks_sts: options.eks_sts,
            };
            if server.wait_ready(Duration::from_secs(90)) {
                if server.eks_sts.is_some() {
                    server.bind_eks_admins();
                }
                server.driver = Some(Driver::start(server.client.clone()));
                return server;
            }
            eprintln!("kube-apiserver did not become ready:\n{}", server.logs());
        }
        panic!("kube-apiserver did not start");
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if matches!(self.apiserver.try_wait(), Ok(Some(_)))
                || matches!(self.etcd.try_wait(), Ok(Some(_)))
            {
                return false;
            }
            let ready = self.rt.block_on(async {
                let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
                let ok = self
                    .client
                    .request_text(req)
                    .await
                    .is_ok_and(|t| t.trim() == "ok");
                let default_ns =
                    Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
                        .get_opt("default")
                        .await
                        .is_ok_and(|n| n.is_some());
                ok && default_ns
            });
            if ready {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// The API server's and etcd's stderr, for failure messages.
    pub fn logs(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        let tail = |s: String| {
            s.lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!(
            "--- apiserver\n{}\n--- etcd\n{}",
            tail(read("apiserver.err")),
            tail(read("etcd.err"))
        )
    }

    /// The kubeconfig's path as text, for workflow files.
    pub fn kubeconfig_path(&self) -> String {
        self.kubeconfig.to_string_lossy().into_owned()
    }

    /// The object at API path `path` (`/api/v1/namespaces/default/services/web`), if any.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.rt.block_on(async {
            let req = http::Request::get(path).body(Vec::new()).unwrap();
            match self.client.request::<Value>(req).await {
                Ok(v) => Some(v),
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                Err(e) => panic!("GET {path}: {e}"),
            }
        })
    }

    /// Changes the object at `path` as a person with kubectl would (a JSON
    /// merge patch, under the field manager `kubectl-edit`).
    pub fn merge_patch(&self, path: &str, patch: &Value) {
        self.rt.block_on(async {
            let req = http::Request::patch(format!("{path}?fieldManager=kubectl-edit"))
                .header("Content-Type", "application/merge-patch+json")
                .body(serde_json::to_vec(patch).unwrap())
                .unwrap();
            self.client
                .request::<Value>(req)
                .await
                .unwrap_or_else(|e| panic!("PATCH {path}: {e}"));
        })
    }

    /// Creates the object `body` at collection path `path`
    /// (`/api/v1/namespaces/default/pods`).
    pub fn post(&self, path: &str, body: &Value) {
        self.rt.block_on(async {
            let req = http::Request::post(path)
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(body).unwrap())
                .unwrap();
            self.client
                .request::<Value>(req)
                .await
                .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        })
    }

    /// Deletes the object at `path`.
    pub fn delete(&self, path: &str) {
        self.rt.block_on(async {
            let req = http::Request::delete(path).body(Vec::new()).unwrap();
            self.client
                .request::<Value>(req)
                .await
                .unwrap_or_else(|e| panic!("DELETE {path}: {e}"));
        })
    }

    /// `metadata.uid` of the object at `path`.
    pub fn uid(&self, path: &str) -> Option<String> {
        self.get(path)
            .and_then(|v| v["metadata"]["uid"].as_str().map(str::to_string))
    }

    /// The IAM identities the EKS token webhook let in, in order.
    pub fn eks_identities(&self) -> Vec<String> {
        self.eks.identities.lock().unwrap().clone()
    }

    /// Why the EKS token webhook refused tokens, in order.
    pub fn eks_refusals(&self) -> Vec<String> {
        self.eks.refusals.lock().unwrap().clone()
    }

    /// Makes the EKS token webhook judge tokens `by` later than now (a
    /// token presented that long after it was signed).
    pub fn eks_judge_later(&self, by: Duration) {
        *self.eks.later.lock().unwrap() = by;
    }

    /// Makes the EKS token webhook flip one bit of each token before it
    /// judges it (a token altered on its way), or stop doing so.
    pub fn eks_alter_tokens(&self, alter: bool) {
        self.eks
            .alter
            .store(alter, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes the test cloud's EKS describe the cluster `name` (made before
    /// or after this call) with this server's https endpoint and CA, as
    /// AWS describes a cluster's API server (see
    /// scripts/local-cloud/eks_endpoints.py); needs [`Options::eks_sts`].
    pub fn describe_in_eks(&self, name: &str) {
        let moto = self.eks_sts.expect("started with Options::eks_sts");
        let body = serde_json::json!({
            "name": name,
            "endpoint": self.url,
            "certificateAuthority": self.ca_base64(),
        })
        .to_string();
        let (status, answer) = super::moto::try_http(
            moto,
            "POST",
            "/moto-api/flow-eks/endpoint",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .expect("register the EKS endpoint with the test cloud");
        assert_eq!(status, 200, "{answer}");
    }

    /// Binds the group EKS identities map to (`eks_token::ADMIN_GROUP`) to
    /// `cluster-admin`, as an access entry with AmazonEKSClusterAdminPolicy
    /// does on EKS (done at start with [`Options::eks_sts`]).
    pub fn bind_eks_admins(&self) {
        self.post(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            &serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "flow-e2e-admins"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": eks_token::ADMIN_GROUP}],
            }),
        );
    }

    /// The CA as an EKS `certificateAuthority.data` (base64 of the PEM).
    pub fn ca_base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The status driver.
    pub fn driver(&self) -> &Driver {
        self.driver.as_ref().expect("driver running")
    }
}

impl Drop for KubeServer {
    fn drop(&mut self) {
        if let Some(d) = self.driver.take() {
            d.stop();
        }
        // Our own children, by their handles.
        let _ = self.apiserver.kill();
        let _ = self.apiserver.wait();
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
    }
}

/// The audit policy: writes to jobs at the Metadata level, nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete]
    resources:
      - group: batch
        resources: [jobs]
      - group: kubeflow.org
        resources: [pytorchjobs, mpijobs]
  - level: Metadata
    verbs: [update, patch]
    resources:
      - group: \"\"
        resources: [nodes]
  - level: None
";

/// A kubeconfig for `url` with the test token.
pub fn kubeconfig_text(url: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    token: {TOKEN}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n    namespace: default\ncurrent-context: test\n"
    )
}
