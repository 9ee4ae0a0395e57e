//! A real Kubernetes API server for one test: Debian's `kube-apiserver`
//! v1.20.2 (built once by `scripts/kube-apiserver` into a cache outside the
//! repository) storing in Debian's etcd, both on free 127.0.0.1 ports, with
//! a CA and serving certificate made by `openssl`, a static bearer token
//! and a kubeconfig. Both processes are killed on drop.
//!
//! No kubelet, scheduler or operator runs, so a [`Driver`] plays their part
//! through the real API: it marks Deployments available, DaemonSets and
//! StatefulSets ready, claims bound, finalizes terminating namespaces, and
//! runs Jobs, PyTorchJobs and MPIJobs by creating their pods and writing `/status`.
//! The pods' "logs" are their containers' termination messages (there is
//! no kubelet to serve `pods/log`), which is what the provider falls back
//! to; test manifests choose them with annotations:
//!
//! - `test.flow/logs`: the text of the first pod's log (without it, what the
//!   local cloud emulates for the program the first container runs: see
//!   `scripts/local-cloud/outputs/`);
//! - `test.flow/outcome: Failed`: the last pod exits 1 and the job fails.
//!
//! `FLOW_SKIP_KUBE=1` skips these tests (printing why) on machines that
//! cannot build the API server; `FLOW_KUBE_APISERVER` names a binary to use
//! instead of the script's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

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
    eks_identities: Arc<Mutex<Vec<String>>>,
}

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Also accept EKS tokens (`k8s-aws-v1.…`), as EKS's authenticator
    /// does: a token webhook checks that the token is a presigned STS
    /// `GetCallerIdentity` URL signing `x-k8s-aws-id`, sends that call to
    /// this moto server's STS, and maps the caller's ARN to an admin user.
    pub eks_sts: Option<std::net::SocketAddr>,
    /// The cluster name the webhook sends as `x-k8s-aws-id` (the
    /// authenticator's configured cluster id; a token signed for another
    /// cluster fails STS's signature check on real AWS — moto does not check).
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
        "scripts/kube-apiserver failed (set FLOW_SKIP_KUBE=1 to skip the Kubernetes tests on a machine that cannot build it)"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Whether the Kubernetes tests are to be skipped; prints why.
pub fn skip() -> bool {
    if std::env::var("FLOW_SKIP_KUBE").is_ok_and(|v| v == "1") {
        // Straight to stderr, past the test harness's capture, so the skip shows.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: FLOW_SKIP_KUBE=1 (no kube-apiserver on this machine; scripts/kube-apiserver builds one)"
        );
        return true;
    }
    false
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
    /// Starts etcd and the API server and waits until it is ready; None
    /// (after printing why) when the tests are skipped.
    pub fn start() -> Option<KubeServer> {
        Self::start_with(Options::default())
    }

    /// [`KubeServer::start`] with options.
    pub fn start_with(options: Options) -> Option<KubeServer> {
        if skip() {
            return None;
        }
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
            let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
            let eks_identities: Arc<Mutex<Vec<String>>> = Arc::default();
            let mut extra = Vec::new();
            if let Some(sts) = options.eks_sts {
                let url = eks_webhook(sts, options.eks_cluster.clone(), eks_identities.clone());
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
                    "--authorization-mode=AlwaysAllow".into(),
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
                eks_identities,
            };
            if server.wait_ready(Duration::from_secs(90)) {
                server.driver = Some(Driver::start(server.client.clone()));
                return Some(server);
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
        self.eks_identities.lock().unwrap().clone()
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

/// A kubeconfig for `url` with the test token.
pub fn kubeconfig_text(url: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    token: {TOKEN}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n    namespace: default\ncurrent-context: test\n"
    )
}

/// Plays the controllers and kubelets the test cluster lacks.
pub struct Driver {
    stop: Arc<AtomicBool>,
    held: Arc<Mutex<HashSet<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Driver {
    fn start(client: kube::Client) -> Driver {
        let stop = Arc::new(AtomicBool::new(false));
        let held: Arc<Mutex<HashSet<String>>> = Arc::default();
        let (s, h) = (stop.clone(), held.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                while !s.load(Ordering::SeqCst) {
                    let held = h.lock().unwrap().clone();
                    tick(&client, &held).await;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            });
        });
        Driver {
            stop,
            held,
            thread: Some(thread),
        }
    }

    /// Leaves objects named `name` (any kind) as they are until released.
    pub fn hold(&self, name: &str) {
        self.held.lock().unwrap().insert(name.to_string());
    }

    /// Lets the driver finish objects named `name`.
    pub fn release(&self, name: &str) {
        self.held.lock().unwrap().remove(name);
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn list(client: &kube::Client, r: &ApiResource) -> Vec<DynamicObject> {
    Api::<DynamicObject>::all_with(client.clone(), r)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

async fn set_status(client: &kube::Client, r: &ApiResource, obj: &DynamicObject, status: Value) {
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = if ns.is_empty() {
        Api::all_with(client.clone(), r)
    } else {
        Api::namespaced_with(client.clone(), &ns, r)
    };
    let _ = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await;
}

fn generation(o: &DynamicObject) -> i64 {
    o.metadata.generation.unwrap_or(1)
}

/// One pass over everything the driver looks after.
async fn tick(client: &kube::Client, held: &HashSet<String>) {
    let skip = |o: &DynamicObject| {
        o.metadata.deletion_timestamp.is_some()
            || o.metadata.name.as_ref().is_some_and(|n| held.contains(n))
    };
    let deployments = ar("apps", "v1", "Deployment", "deployments");
    for d in list(client, &deployments).await {
        if skip(&d) || d.data["status"]["observedGeneration"].as_i64() == Some(generation(&d)) {
            continue;
        }
        let n = d.data["spec"]["replicas"].as_i64().unwrap_or(1);
        set_status(client, &deployments, &d, json!({
            "observedGeneration": generation(&d), "replicas": n, "updatedReplicas": n,
            "readyReplicas": n, "availableReplicas": n,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
        }))
        .await;
    }
    let daemonsets = ar("apps", "v1", "DaemonSet", "daemonsets");
    for d in list(client, &daemonsets).await {
        if skip(&d) || d.data["status"]["observedGeneration"].as_i64() == Some(generation(&d)) {
            continue;
        }
        set_status(client, &daemonsets, &d, json!({
            "observedGeneration": generation(&d), "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
            "numberReady": 2, "updatedNumberScheduled": 2, "numberAvailable": 2, "numberMisscheduled": 0
        }))
        .await;
    }
    let statefulsets = ar("apps", "v1", "StatefulSet", "statefulsets");
    for s in list(client, &statefulsets).await {
        if skip(&s) || s.data["status"]["observedGeneration"].as_i64() == Some(generation(&s)) {
            continue;
        }
        let n = s.data["spec"]["replicas"].as_i64().unwrap_or(1);
        set_status(
            client,
            &statefulsets,
            &s,
            json!({
                "observedGeneration": generation(&s), "replicas": n, "readyReplicas": n,
                "currentReplicas": n, "updatedReplicas": n
            }),
        )
        .await;
    }
    let pvcs = ar("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims");
    for c in list(client, &pvcs).await {
        if !skip(&c) && c.data["status"]["phase"].as_str() != Some("Bound") {
            set_status(client, &pvcs, &c, json!({"phase": "Bound"})).await;
        }
    }
    finalize_namespaces(client).await;
    let jobs = ar("batch", "v1", "Job", "jobs");
    for j in list(client, &jobs).await {
        let pods = j.data["spec"]["completions"].as_i64().unwrap_or(1).max(1);
        run_job(client, &jobs, &j, held, "job-name", &[("", pods)]).await;
    }
    for (kind, plural, specs) in [
        ("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"),
        ("MPIJob", "mpijobs", "mpiReplicaSpecs"),
    ] {
        let r = ar("kubeflow.org", "v1", kind, plural);
        for j in list(client, &r).await {
            let specs = j.data["spec"][specs]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let mut replicas: Vec<(String, i64)> = specs
                .iter()
                .map(|(k, v)| (k.to_lowercase(), v["replicas"].as_i64().unwrap_or(1)))
                .collect();
            replicas.sort_by_key(|(k, _)| {
                if k == "master" || k == "launcher" {
                    0
                } else {
                    1
                }
            });
            let replicas: Vec<(&str, i64)> =
                replicas.iter().map(|(k, n)| (k.as_str(), *n)).collect();
            run_job(
                client,
                &r,
                &j,
                held,
                "training.kubeflow.org/job-name",
                &replicas,
            )
            .await;
        }
    }
}

/// Namespaces stuck in `Terminating` lose their finalizer (the namespace
/// controller's part) once flow has deleted what they held.
async fn finalize_namespaces(client: &kube::Client) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    for ns in list.items {
        if ns.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let name = ns.metadata.name.clone().unwrap_or_default();
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "spec": {"finalizers": []}});
        let req = http::Request::put(format!("/api/v1/namespaces/{name}/finalize"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let _ = client.request_text(req).await;
    }
}

/// Runs a job: pods `NAME[-REPLICA]-I` Running, then (unless held)
/// terminated, then the job's status.
async fn run_job(
    client: &kube::Client,
    r: &ApiResource,
    job: &DynamicObject,
    held: &HashSet<String>,
    label: &str,
    replicas: &[(&str, i64)],
) {
    if job.metadata.deletion_timestamp.is_some() {
        return;
    }
    let done = job.data["status"]["conditions"]
        .as_array()
        .is_some_and(|c| {
            c.iter().any(|c| {
                matches!(
                    c["type"].as_str(),
                    Some("Complete" | "Succeeded" | "Failed")
                )
            })
        });
    if done {
        return;
    }
    let name = job.metadata.name.clone().unwrap_or_default();
    let ns = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let notes = job.metadata.annotations.clone().unwrap_or_default();
    let failed = notes
        .get("test.flow/outcome")
        .is_some_and(|o| o == "Failed");
    let log = notes
        .get("test.flow/logs")
        .cloned()
        .unwrap_or_else(|| emulated_output(&job.data));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let mut names = Vec::new();
    for (kind, n) in replicas {
        for i in 0..*n {
            let pod = if kind.is_empty() {
                format!("{name}-{i}")
            } else {
                format!("{name}-{kind}-{i}")
            };
            names.push((pod, kind.to_string(), i));
        }
    }
    let container = first_container(&job.data)
        .and_then(|c| c["name"].as_str())
        .unwrap_or("main")
        .to_string();
    let finishing = !held.contains(&name);
    let last = names.len().saturating_sub(1);
    for (idx, (pod, kind, i)) in names.iter().enumerate() {
        let existing = pods.get_opt(pod).await.ok().flatten();
        if existing.is_none() {
            let body: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "metadata": {"name": pod, "labels": {label: name, "training.kubeflow.org/replica-type": kind,
                    "training.kubeflow.org/replica-index": i.to_string()}},
                "spec": {"containers": [{"name": container, "image": "test/image"}]}
            }))
            .unwrap();
            if pods.create(&PostParams::default(), &body).await.is_err() {
                return;
            }
        }
        let (phase, state) = if !finishing {
            (
                "Running",
                json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
            )
        } else if failed && idx == last {
            (
                "Failed",
                json!({"terminated": {"exitCode": 1, "reason": "Error", "message": log}}),
            )
        } else {
            let text = if idx == 0 {
                log.clone()
            } else {
                format!("{pod} done")
            };
            (
                "Succeeded",
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": text}}),
            )
        };
        let status = json!({"status": {"phase": phase, "containerStatuses": [{
            "name": container, "image": "test/image", "imageID": "", "ready": phase == "Running",
            "restartCount": 0, "state": state}]}});
        let _ = pods
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
    let now = "2026-01-01T00:00:00Z";
    let status = if !finishing {
        if r.kind == "Job" {
            json!({"active": names.len(), "startTime": now})
        } else {
            json!({"conditions": [
                {"type": "Created", "status": "True", "reason": "Created"},
                {"type": "Running", "status": "True", "reason": "Running"}], "startTime": now})
        }
    } else if r.kind == "Job" {
        if failed {
            json!({"failed": 1, "startTime": now, "conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
        } else {
            json!({"succeeded": names.len(), "startTime": now, "completionTime": now,
                "conditions": [{"type": "Complete", "status": "True"}]})
        }
    } else if failed {
        json!({"conditions": [
            {"type": "Created", "status": "True", "reason": "Created"},
            {"type": "Running", "status": "False", "reason": "Running"},
            {"type": "Failed", "status": "True", "reason": format!("{}Failed", r.kind),
             "message": format!("{} {name} is failed because 1 Worker replica(s) failed.", r.kind)}]})
    } else {
        json!({"conditions": [
            {"type": "Created", "status": "True", "reason": "Created"},
            {"type": "Running", "status": "False", "reason": "Running"},
            {"type": "Succeeded", "status": "True", "reason": format!("{}Succeeded", r.kind),
             "message": format!("{} {name} is successfully completed.", r.kind)}], "completionTime": now})
    };
    set_status(client, r, job, status).await;
}

/// The first container of a Job's pod template, or of a Kubeflow job's
/// first replica (the launcher or master when there is one).
fn first_container(job: &Value) -> Option<&Value> {
    if let Some(c) = job.pointer("/spec/template/spec/containers/0") {
        return Some(c);
    }
    let specs = job["spec"]
        .as_object()?
        .iter()
        .find(|(k, _)| k.ends_with("ReplicaSpecs"))?
        .1
        .as_object()?;
    let first = ["Launcher", "Master"]
        .iter()
        .find_map(|k| specs.get(*k))
        .or_else(|| specs.values().next())?;
    first.pointer("/template/spec/containers/0")
}

/// What the job's program prints, as the local cloud emulates it: the
/// text of `scripts/local-cloud/outputs/PROGRAM.txt` for the first PROGRAM
/// named in the first container's command, args or environment values (the same files the
/// Batch compute emulator uses), `${NAME}` filled from the container's
/// environment; "done" for programs it does not know.
fn emulated_output(job: &Value) -> String {
    let Some(c) = first_container(job) else {
        return "done".into();
    };
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|k| c[*k].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let env: std::collections::BTreeMap<String, String> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
        .collect();
    let mut line = words.join(" ");
    for value in env.values() {
        line.push(' ');
        line.push_str(value);
    }
    let dir = workspace_root().join("scripts/local-cloud/outputs");
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    programs.sort();
    for path in programs {
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".txt"))
        else {
            continue;
        };
        if line.contains(name) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // `${NAME}` from the container's environment, as manifests fill
            // placeholders from `values`.
            return flow_providers::kube::fill("output", &text, &env).unwrap_or(text);
        }
    }
    "done".into()
}

/// Starts the EKS token webhook (see [`Options::eks_sts`]); returns its URL.
fn eks_webhook(
    sts: std::net::SocketAddr,
    cluster: String,
    identities: Arc<Mutex<Vec<String>>>,
) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind webhook");
    let url = format!("http://{}/authenticate", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut raw = Vec::new();
            let mut buf = [0u8; 8192];
            let body = loop {
                let n = s.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                raw.extend_from_slice(&buf[..n]);
                let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if raw.len() >= end + 4 + len {
                    break Some(raw[end + 4..end + 4 + len].to_vec());
                }
            };
            let Some(body) = body else { continue };
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let token = review["spec"]["token"].as_str().unwrap_or_default();
            let status = match verify_eks_token(sts, &cluster, token) {
                Ok(arn) => {
                    identities.lock().unwrap().push(arn.clone());
                    json!({"authenticated": true, "user": {"username": arn, "groups": ["system:masters"]}})
                }
                Err(e) => json!({"authenticated": false, "error": e}),
            };
            let answer = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}).to_string();
            let _ = s.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}", answer.len())
                    .as_bytes(),
            );
        }
    });
    url
}

/// What EKS's authenticator checks of a token, then the STS call it makes;
/// the caller's ARN.
fn verify_eks_token(
    sts: std::net::SocketAddr,
    cluster: &str,
    token: &str,
) -> Result<String, String> {
    use base64::Engine;
    let body = token
        .strip_prefix("k8s-aws-v1.")
        .ok_or("not an EKS token")?;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|e| format!("not base64url: {e}"))?;
    let url = String::from_utf8(url).map_err(|_| "not UTF-8")?;
    let rest = url.strip_prefix("https://sts.").ok_or("not an STS URL")?;
    let (host, query) = rest.split_once("/?").ok_or("no query")?;
    if !host.ends_with(".amazonaws.com") {
        return Err(format!("unexpected host sts.{host}"));
    }
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
    };
    if param("Action") != Some("GetCallerIdentity") {
        return Err("not GetCallerIdentity".into());
    }
    if param("X-Amz-SignedHeaders").is_none_or(|h| !h.contains("x-k8s-aws-id")) {
        return Err("x-k8s-aws-id is not signed".into());
    }
    if param("X-Amz-Expires")
        .and_then(|e| e.parse::<u32>().ok())
        .is_none_or(|e| e > 900)
    {
        return Err("bad expiry".into());
    }
    param("X-Amz-Signature").ok_or("unsigned")?;
    let auth = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=0";
    let (status, xml) = super::moto::try_http(
        sts,
        "GET",
        &format!("/?{query}"),
        &[("x-k8s-aws-id", cluster), ("Authorization", auth)],
        b"",
    )
    .map_err(|e| format!("STS: {e}"))?;
    if status != 200 {
        return Err(format!("STS answered {status}: {xml}"));
    }
    super::moto::between_all(&xml, "<Arn>", "</Arn>")
        .into_iter()
        .next()
        .ok_or_else(|| format!("no Arn in {xml}"))
}
