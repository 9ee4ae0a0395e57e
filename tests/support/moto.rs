//! A moto server (PyPI `moto[server]`, which speaks the real AWS wire
//! protocols) for one test: installed into `<workspace>/.venv` on first use
//! (one installer at a time, under a file lock), started on a free
//! 127.0.0.1 port, configured for Batch without Docker, killed on drop.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::workspace_root;

/// The moto version the tests are written against: the requirements file
/// `scripts/local-aws` installs from too (the same `.venv` and marker).
const REQUIREMENTS: &str = include_str!("../../scripts/local-cloud/requirements.txt");

/// The Batch compute emulator, killed on drop.
pub struct BatchCompute {
    child: Child,
    /// What it printed: one line per job it ran.
    pub log: PathBuf,
}

impl Drop for BatchCompute {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running moto server.
pub struct Moto {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Holds an exclusive `flock` on a file until dropped.
struct FileLock(File);

impl FileLock {
    fn acquire(path: &Path) -> FileLock {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .expect("open lock file");
        use std::os::fd::AsRawFd;
        // SAFETY: flock(2) on a descriptor we own; no memory is touched.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock failed");
        FileLock(file)
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The path of `moto_server`, installing moto into `<workspace>/.venv` if
/// it is not there yet.
pub fn moto_server() -> PathBuf {
    let venv = workspace_root().join(".venv");
    let server = venv.join("bin/moto_server");
    let ready = venv.join(".moto-ready");
    let installed = || std::fs::read_to_string(&ready).is_ok_and(|r| r == REQUIREMENTS);
    if installed() && server.exists() {
        return server;
    }
    std::fs::create_dir_all(&venv).expect("create .venv");
    let _lock = FileLock::acquire(&venv.join(".install.lock"));
    if installed() && server.exists() {
        return server;
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    if !venv.join("bin/pip").exists() {
        let status = Command::new(&python)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv");
        assert!(status.success(), "python3 -m venv failed");
    }
    // PIP_FIND_LINKS and other pip settings from the environment apply; the
    // default index stays on.
    let out = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "-r"])
        .arg(workspace_root().join("scripts/local-cloud/requirements.txt"))
        .output()
        .expect("run pip");
    assert!(
        out.status.success(),
        "installing {} failed:\n{}{}",
        REQUIREMENTS.trim(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&ready, REQUIREMENTS).expect("mark .venv ready");
    server
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

impl Moto {
    /// Starts a moto server of this test's own, and waits until it answers.
    pub fn start() -> Moto {
        Moto::start_with(&[])
    }

    /// [`Moto::start`] with the latency model of `bench/latency.toml`
    /// (`scripts/local-cloud/latency_model.py`), its lengths divided by `scale`.
    pub fn start_with_latency(scale: u32) -> Moto {
        let table = workspace_root().join("bench/latency.toml");
        Moto::start_with(&[
            ("FLOW_LATENCY_MODEL", &table.to_string_lossy()),
            ("FLOW_LATENCY_SCALE", &scale.to_string()),
        ])
    }

    /// What the latency model saw: every call by operation, and each
    /// resource it held (`GET /moto-api/flow-latency/report`).
    pub fn latency_report(&self) -> serde_json::Value {
        let (status, body) = self.http("GET", "/moto-api/flow-latency/report", &[], b"");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// [`Moto::start`] with these variables in the server's environment.
    pub fn start_with(env: &[(&str, &str)]) -> Moto {
        let server = moto_server();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("moto")
                .tempdir()
                .expect("tempdir");
            let log = dir.path().join("moto.log");
            let port = free_port();
            let out = File::create(&log).expect("moto log");
            // moto's server through scripts/local-cloud/moto_server.py, which
            // adds what moto's CloudFormation lacks to delete a VPC stack.
            let child = Command::new(server.with_file_name("python"))
                .arg(workspace_root().join("scripts/local-cloud/moto_server.py"))
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("dup log"))
                .stderr(out)
                .spawn()
                .expect("start moto_server");
            let mut moto = Moto {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                log,
                _dir: dir,
            };
            if moto.wait_ready(Duration::from_secs(60)) {
                let (status, body) = moto.http(
                    "POST",
                    "/moto-api/config",
                    &[("Content-Type", "application/json")],
                    br#"{"batch":{"use_docker":false}}"#,
                );
                assert!((200..300).contains(&status), "moto config: {status} {body}");
                return moto;
            }
            // Lost the port to someone else, or moto died: try another
            // (dropping `moto` kills what was started).
        }
        panic!("moto_server did not start");
    }

    /// Whether the server answers within `limit` (false if it exited).
    fn wait_ready(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok((200, _)) = try_http(self.addr, "GET", "/moto-api/data.json", &[], b"") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Starts the local cloud's Batch compute emulator
    /// (`scripts/local-cloud/batch_compute.py`) against this server: jobs
    /// that end get what their program prints in their log stream. Killed
    /// when the returned guard drops.
    pub fn batch_compute(&self) -> BatchCompute {
        self.batch_compute_with(&[])
    }

    /// [`Moto::batch_compute`] with these variables in the emulator's
    /// environment (`FLOW_TEST_FAULTS`: the fault table of the nodes of
    /// multi-node jobs, `scripts/local-cloud/batch_nodes.py`).
    pub fn batch_compute_with(&self, env: &[(&str, &str)]) -> BatchCompute {
        let root = workspace_root();
        let log = self._dir.path().join("batch-compute.log");
        let out = File::create(&log).expect("batch compute log");
        let child = Command::new(root.join(".venv/bin/python"))
            .arg(root.join("scripts/local-cloud/batch_compute.py"))
            .args(["--endpoint", &self.endpoint()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup log"))
            .stderr(out)
            .spawn()
            .expect("start batch_compute.py");
        BatchCompute { child, log }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment for `flow` to use this server (or `endpoint`, a proxy
    /// in front of it): the standard AWS variables only, with dummy
    /// credentials, no IMDS and no shared config files.
    pub fn env_for(&self, endpoint: &str) -> Vec<(String, String)> {
        let none = self._dir.path().join("no-such-aws-file");
        let none = none.to_string_lossy().into_owned();
        [
            ("AWS_ENDPOINT_URL", endpoint.to_string()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_SESSION_TOKEN", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("AWS_CONFIG_FILE", none.clone()),
            ("AWS_SHARED_CREDENTIALS_FILE", none),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// [`Moto::env_for`] this server itself.
    pub fn env(&self) -> Vec<(String, String)> {
        self.env_for(&self.endpoint())
    }

    /// One HTTP request to the server; panics if it cannot be made.
    pub fn http(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        try_http(self.addr, method, path, headers, body).expect("HTTP to moto")
    }

    /// An AWS API call in a JSON protocol (`X-Amz-Target`), unsigned but
    /// scoped to `service` as moto routes it.
    pub fn json_call(&self, service: &str, target: &str, body: &str) -> serde_json::Value {
        let (status, text) = self.try_json_call(service, target, body);
        assert_eq!(status, 200, "{target}: {text}");
        serde_json::from_str(&text).expect("JSON answer")
    }

    /// [`Moto::json_call`] answering status and body, for calls expected to fail.
    pub fn try_json_call(&self, service: &str, target: &str, body: &str) -> (u16, String) {
        let auth = authorization(service);
        self.http(
            "POST",
            "/",
            &[
                ("X-Amz-Target", target),
                ("Content-Type", "application/x-amz-json-1.1"),
                ("Authorization", &auth),
            ],
            body.as_bytes(),
        )
    }

    /// An active capacity reservation (or, with `block`, a capacity block)
    /// in the local cloud (scripts/local-cloud/capacity_reservations.py),
    /// under the id a published file names, ending after `days` (never with
    /// `None`).
    pub fn capacity_reservation(
        &self,
        id: &str,
        instance_type: &str,
        zone: &str,
        count: u32,
        block: bool,
        days: Option<u64>,
    ) {
        let mut params = format!(
            "Action=CreateCapacityReservation&Version=2016-11-15&InstanceType={instance_type}&InstancePlatform=Linux%2FUNIX&AvailabilityZone={zone}&InstanceCount={count}&TagSpecifications.1.ResourceType=capacity-reservation&TagSpecifications.1.Tag.1.Key=flow-local-cloud%3Aid&TagSpecifications.1.Tag.1.Value={id}"
        );
        if block {
            params.push_str("&TagSpecifications.1.Tag.2.Key=flow-local-cloud%3Areservation-type&TagSpecifications.1.Tag.2.Value=capacity-block");
        }
        if let Some(days) = days {
            let end = std::time::SystemTime::now() + std::time::Duration::from_secs(days * 86_400);
            let end = humantime::format_rfc3339_seconds(end);
            params.push_str(&format!("&EndDateType=limited&EndDate={end}"));
        }
        let xml = self.query_call("ec2", &params);
        assert!(xml.contains(id), "{xml}");
    }

    /// The EC2 instance node `index` of multi-node job `job` ran on: the
    /// node's interface address (DescribeJobs `JOBID#N`), then the
    /// instance holding that address (DescribeNetworkInterfaces).
    pub fn instance_of_batch_node(&self, job: &str, index: usize) -> String {
        let (status, body) = self.rest_call(
            "batch",
            "POST",
            "/v1/describejobs",
            &serde_json::json!({"jobs": [format!("{job}#{index}")]}).to_string(),
        );
        assert_eq!(status, 200, "{body}");
        let node: serde_json::Value = serde_json::from_str(&body).unwrap();
        let address = node["jobs"][0]["container"]["networkInterfaces"][0]["privateIpv4Address"]
            .as_str()
            .unwrap_or_else(|| panic!("no address for node {index}: {body}"))
            .to_string();
        let xml = self.query_call(
            "ec2",
            &format!(
                "Action=DescribeNetworkInterfaces&Version=2016-11-15&Filter.1.Name=addresses.private-ip-address&Filter.1.Value.1={address}"
            ),
        );
        between_all(&xml, "<instanceId>", "</instanceId>")
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no instance at {address}: {xml}"))
    }

    /// An AWS API call in the query protocol (CloudFormation), returning the XML.
    pub fn query_call(&self, service: &str, params: &str) -> String {
        let auth = authorization(service);
        let (status, text) = self.http(
            "POST",
            "/",
            &[
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Authorization", &auth),
            ],
            params.as_bytes(),
        );
        assert_eq!(status, 200, "{params}: {text}");
        text
    }

    /// A REST call (S3, Batch), returning status and body.
    pub fn rest_call(&self, service: &str, method: &str, path: &str, body: &str) -> (u16, String) {
        let auth = authorization(service);
        self.http(
            method,
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    }

    /// The names of the live CloudFormation stacks.
    pub fn stacks(&self) -> Vec<String> {
        let xml = self.query_call("cloudformation", "Action=DescribeStacks&Version=2010-05-15");
        between_all(&xml, "<StackName>", "</StackName>")
    }

    /// The ids of the FSx file systems.
    pub fn file_systems(&self) -> Vec<String> {
        let v = self.json_call(
            "fsx",
            "AWSSimbaAPIService_v20180301.DescribeFileSystems",
            "{}",
        );
        v["FileSystems"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["FileSystemId"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The keys under `prefix` in `bucket`.
    pub fn objects(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, xml) = self.rest_call(
            "s3",
            "GET",
            &format!("/{bucket}?list-type=2&prefix={prefix}"),
            "",
        );
        assert_eq!(status, 200, "{xml}");
        between_all(&xml, "<Key>", "</Key>")
    }

    /// The content of an object.
    pub fn object(&self, bucket: &str, key: &str) -> String {
        let (status, body) = self.rest_call("s3", "GET", &format!("/{bucket}/{key}"), "");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The names of the secrets.
    pub fn secrets(&self) -> Vec<String> {
        let v = self.json_call("secretsmanager", "secretsmanager.ListSecrets", "{}");
        v["SecretList"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["Name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A secret's current value.
    pub fn secret_value(&self, name: &str) -> String {
        let v = self.json_call(
            "secretsmanager",
            "secretsmanager.GetSecretValue",
            &format!(r#"{{"SecretId":"{name}"}}"#),
        );
        v["SecretString"].as_str().unwrap_or_default().to_string()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // Our own child, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `Authorization` header that routes an unsigned request to `service`
/// (moto does not check signatures).
pub fn authorization(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"
    )
}

/// Every piece of `text` between `open` and `close`.
pub fn between_all(text: &str, open: &str, close: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(close) else { break };
        out.push(after[..j].to_string());
        rest = &after[j + close.len()..];
    }
    out
}

/// One HTTP/1.1 request with `Connection: close`; the status and body.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The payload of a chunked body.
pub fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[(size + 2).min(raw.len())..];
    }
    out
}
