//! A small HTTP/1.1 proxy of the tests' own between `flow` and moto, to show
//! what moto cannot: throttling, transient server errors, broken
//! connections, slow answers, and operations still in progress. It injects
//! faults at a set rate or by a schedule, rewrites answers, and counts what
//! it injected and what it forwarded.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub use super::fault_answers::Fault;
use super::fault_answers::{Protocol, error_response};

/// What to do with the answers to one operation.
#[derive(Debug, Clone)]
struct Rewrite {
    op: String,
    from: String,
    to: String,
    times: u32,
}

/// The proxy's rules.
#[derive(Debug, Default)]
struct Rules {
    rate: f64,
    kinds: Vec<Fault>,
    only: Option<String>,
    schedule: VecDeque<(String, Option<Fault>)>,
    slow: Duration,
    rewrites: Vec<Rewrite>,
    hold: Vec<(String, Duration)>,
    stall: Duration,
    seed: u64,
    turn: usize,
}

/// One call the proxy saw.
#[derive(Debug, Clone)]
pub struct Call {
    /// The operation (`CreateStack`, `batch:submitjob`, `eks:POST /clusters`).
    pub op: String,
    /// When the request had arrived whole.
    pub received: Instant,
    /// When its answer was written, if it was.
    pub answered: Option<Instant>,
}

/// Notes that call number `call` was answered now.
fn answered(shared: &Shared, call: usize) {
    if let Some(c) = shared.counts.lock().unwrap().calls.get_mut(call) {
        c.answered = Some(Instant::now());
    }
}

/// What the proxy did.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Every call, in the order received.
    pub calls: Vec<Call>,
    /// Each injected fault with the operation it hit, in order.
    pub faulted: Vec<(String, Fault)>,
    /// Faults injected, by kind.
    pub injected: HashMap<Fault, u32>,
    /// Operations forwarded to moto, in order.
    pub forwarded: Vec<String>,
    /// Answers rewritten.
    pub rewritten: u32,
}

struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Rules>,
    counts: Mutex<Counts>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FaultProxy {
    /// A proxy on a free 127.0.0.1 port forwarding to `upstream`, injecting nothing yet.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("proxy runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::new(Rules {
                seed: 0x9E37_79B9_7F4A_7C15,
                slow: Duration::from_secs(2),
                stall: Duration::from_secs(10),
                ..Rules::default()
            }),
            counts: Mutex::new(Counts::default()),
        });
        let s = shared.clone();
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = serve(client, s).await;
                });
            }
        });
        FaultProxy {
            addr,
            shared,
            runtime: Some(runtime),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Injects one of `kinds` (in turn) into a fraction `rate` of requests,
    /// those whose operation contains `only` if given; deterministic.
    pub fn faults(&self, rate: f64, kinds: &[Fault], only: Option<&str>) {
        let mut r = self.shared.rules.lock().unwrap();
        r.rate = rate;
        r.kinds = kinds.to_vec();
        r.only = only.map(str::to_string);
    }

    /// For the next requests of operation `op` (a substring), in order: each
    /// entry injects that fault, or forwards for `None`.
    pub fn schedule(&self, op: &str, plan: &[Option<Fault>]) {
        let mut r = self.shared.rules.lock().unwrap();
        r.schedule.extend(plan.iter().map(|f| (op.to_string(), *f)));
    }

    /// How long a [`Fault::Slow`] request waits.
    pub fn slow_by(&self, delay: Duration) {
        self.shared.rules.lock().unwrap().slow = delay;
    }

    /// Replaces `from` by `to` in the next `times` answers to operation `op`
    /// (a stack shown still in progress, say).
    pub fn rewrite(&self, op: &str, from: &str, to: &str, times: u32) {
        self.shared.rules.lock().unwrap().rewrites.push(Rewrite {
            op: op.into(),
            from: from.into(),
            to: to.into(),
            times,
        });
    }

    /// Holds the answers to operation `op` for `delay` after moto gave them
    /// (the operation is done on the far side; the caller does not know
    /// yet). Rules add up; the first that matches an operation applies.
    pub fn hold(&self, op: &str, delay: Duration) {
        self.shared
            .rules
            .lock()
            .unwrap()
            .hold
            .push((op.into(), delay));
    }

    /// Every call the proxy saw, with when it came and when it was answered.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.counts.lock().unwrap().calls.clone()
    }

    /// The calls received before `at` and not answered by then (forwarded
    /// or not): what a process killed at `at` was waiting for.
    pub fn in_flight_at(&self, at: Instant) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.received <= at && c.answered.is_none_or(|a| a > at))
            .map(|c| c.op)
            .collect()
    }

    /// How long a [`Fault::Stalled`] answer is held before the connection drops.
    pub fn stall_for(&self, delay: Duration) {
        self.shared.rules.lock().unwrap().stall = delay;
    }

    /// Stops injecting, rewriting and holding.
    pub fn calm(&self) {
        let mut r = self.shared.rules.lock().unwrap();
        r.rate = 0.0;
        r.schedule.clear();
        r.rewrites.clear();
        r.hold.clear();
    }

    /// What the proxy did so far.
    pub fn counts(&self) -> Counts {
        self.shared.counts.lock().unwrap().clone()
    }

    /// Faults of `kind` injected so far.
    pub fn injected(&self, kind: Fault) -> u32 {
        self.counts().injected.get(&kind).copied().unwrap_or(0)
    }

    /// Requests forwarded whose operation contains `op`.
    pub fn forwarded(&self, op: &str) -> usize {
        self.counts()
            .forwarded
            .iter()
            .filter(|o| o.contains(op))
            .count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// One request as read from the client.
struct Request {
    head: String,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    fn method_and_path(&self) -> (&str, &str) {
        let mut parts = self.head.split_whitespace();
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
    }

    /// The AWS operation, as far as the proxy can tell.
    fn operation(&self) -> String {
        if let Some(target) = self.header("x-amz-target") {
            return target.rsplit('.').next().unwrap_or(target).to_string();
        }
        let body = String::from_utf8_lossy(&self.body);
        if let Some(action) = body.split('&').find_map(|p| p.strip_prefix("Action=")) {
            return action.to_string();
        }
        let (method, path) = self.method_and_path();
        if let Some(op) = path.strip_prefix("/v1/") {
            return format!("batch:{}", op.split('?').next().unwrap_or(op));
        }
        if path.starts_with("/clusters") {
            return format!("eks:{method} {}", path.split('?').next().unwrap_or(path));
        }
        format!("s3:{method} {path}")
    }

    fn protocol(&self) -> Protocol {
        if self.header("x-amz-target").is_some() {
            Protocol::Json
        } else if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"))
        {
            // EC2's query API answers errors in its own shape.
            if String::from_utf8_lossy(&self.body).contains("Version=2016-11-15") {
                Protocol::Ec2
            } else {
                Protocol::Query
            }
        } else if self.method_and_path().1.starts_with("/v1/") {
            Protocol::RestJson
        } else {
            Protocol::RestXml
        }
    }
}

/// Reads one request (head and body) from the client; `None` at the end.
async fn read_request(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> std::io::Result<Option<Request>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            if head.is_empty() {
                continue;
            }
            break;
        }
        head.push_str(&line);
    }
    let mut req = Request {
        head,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        // Forward the chunked body as it came.
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line).await?;
            req.body.extend_from_slice(size_line.as_bytes());
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if size == 0 {
                loop {
                    let mut trailer = String::new();
                    reader.read_line(&mut trailer).await?;
                    req.body.extend_from_slice(trailer.as_bytes());
                    if trailer == "\r\n" || trailer.is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            req.body.extend_from_slice(&chunk);
        }
    } else if let Some(len) = req
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok())
    {
        let mut body = vec![0; len];
        reader.read_exact(&mut body).await?;
        req.body = body;
    }
    Ok(Some(req))
}

/// Serves one client connection, request after request.
async fn serve(client: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let (read, mut write) = client.into_split();
    let mut reader = BufReader::new(read);
    while let Some(req) = read_request(&mut reader).await? {
        let op = req.operation();
        let call = {
            let mut counts = shared.counts.lock().unwrap();
            counts.calls.push(Call {
                op: op.clone(),
                received: Instant::now(),
                answered: None,
            });
            counts.calls.len() - 1
        };
        let fault = if req.method_and_path().1.starts_with("/moto-api") {
            None
        } else {
            choose(&shared, &op)
        };
        if let Some(fault) = fault {
            let mut counts = shared.counts.lock().unwrap();
            *counts.injected.entry(fault).or_default() += 1;
            counts.faulted.push((op.clone(), fault));
        }
        if let Some(lost @ (Fault::Lost | Fault::Truncated | Fault::Stalled)) = fault {
            shared.counts.lock().unwrap().forwarded.push(op.clone());
            let answer = forward(&shared, &req).await?;
            match lost {
                Fault::Truncated => {
                    // The head promises the whole body; half of it comes.
                    let split = answer
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map_or(0, |i| i + 4);
                    let cut = split + (answer.len() - split) / 2;
                    write.write_all(&answer[..cut]).await?;
                }
                Fault::Stalled => {
                    let stall = shared.rules.lock().unwrap().stall;
                    tokio::time::sleep(stall).await;
                }
                _ => {}
            }
            return reset(reader, write);
        }
        match fault {
            Some(Fault::Reset) => return reset(reader, write),
            Some(Fault::Slow) => {
                let delay = shared.rules.lock().unwrap().slow;
                tokio::time::sleep(delay).await;
            }
            Some(f) => {
                write.write_all(&error_response(f, req.protocol())).await?;
                answered(&shared, call);
                continue;
            }
            None => {}
        }
        shared.counts.lock().unwrap().forwarded.push(op.clone());
        let answer = forward(&shared, &req).await?;
        let answer = rewrite(&shared, &op, answer);
        let hold = shared
            .rules
            .lock()
            .unwrap()
            .hold
            .iter()
            .find(|(held, _)| op.contains(held.as_str()))
            .map(|(_, delay)| *delay);
        if let Some(delay) = hold {
            tokio::time::sleep(delay).await;
        }
        write.write_all(&answer).await?;
        answered(&shared, call);
    }
    Ok(())
}

/// Closes the client's connection with a reset: no answer, ever.
fn reset(
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    write: tokio::net::tcp::OwnedWriteHalf,
) -> std::io::Result<()> {
    let stream = reader
        .into_inner()
        .reunite(write)
        .map_err(std::io::Error::other)?;
    // A zero linger makes the close a reset, and never blocks.
    #[allow(deprecated)]
    stream.set_linger(Some(Duration::ZERO))?;
    drop(stream);
    Ok(())
}

/// Decides the fault for a request of operation `op`, if any.
fn choose(shared: &Shared, op: &str) -> Option<Fault> {
    let mut r = shared.rules.lock().unwrap();
    if let Some(i) = r.schedule.iter().position(|(o, _)| op.contains(o.as_str())) {
        return r.schedule.remove(i).and_then(|(_, f)| f);
    }
    if r.rate <= 0.0
        || r.kinds.is_empty()
        || r.only.as_ref().is_some_and(|o| !op.contains(o.as_str()))
    {
        return None;
    }
    // xorshift64*: deterministic for a given sequence of requests.
    r.seed ^= r.seed >> 12;
    r.seed ^= r.seed << 25;
    r.seed ^= r.seed >> 27;
    let x = r.seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
    let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
    if unit >= r.rate {
        return None;
    }
    let kind = r.kinds[r.turn % r.kinds.len()];
    r.turn += 1;
    Some(kind)
}

/// Sends `req` to moto on a fresh connection and reads the whole answer,
/// returned with a `Content-Length` (never chunked) for the client.
async fn forward(shared: &Shared, req: &Request) -> std::io::Result<Vec<u8>> {
    let mut up = TcpStream::connect(shared.upstream).await?;
    let mut head: Vec<&str> = req
        .head
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    head.push("Connection: close");
    let mut out = head.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&req.body);
    up.write_all(&out).await?;
    let mut raw = Vec::new();
    up.read_to_end(&mut raw).await?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head from moto"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = super::moto::dechunk(&body);
    }
    Ok(respond(&head, &body))
}

/// An answer with head lines `head` (framing headers replaced) and `body`.
fn respond(head: &str, body: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&str> = head
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            !l.starts_with("content-length:")
                && !l.starts_with("transfer-encoding:")
                && !l.starts_with("connection:")
        })
        .collect();
    let length = format!("Content-Length: {}", body.len());
    lines.push(&length);
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

/// Applies the first matching rewrite rule to an answer.
fn rewrite(shared: &Shared, op: &str, answer: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (from, to) = {
        let mut r = shared.rules.lock().unwrap();
        let Some(rule) = r
            .rewrites
            .iter_mut()
            .find(|w| w.times > 0 && op.contains(&w.op) && text.contains(&w.from))
        else {
            return answer;
        };
        rule.times -= 1;
        (rule.from.clone(), rule.to.clone())
    };
    shared.counts.lock().unwrap().rewritten += 1;
    let split = text.find("\r\n\r\n").unwrap_or(0);
    let (head, body) = (&text[..split], &text[split + 4..]);
    respond(head, body.replace(&from, &to).as_bytes())
}
