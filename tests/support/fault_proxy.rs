//! A small HTTP/1.1 proxy of the tests' own between `flow` and moto, to show
//! what moto cannot: throttling, transient server errors, broken
//! connections, slow answers, and operations still in progress. It injects
//! faults at a set rate or by a schedule, rewrites answers, and counts what
//! it injected and what it forwarded. It can hold a call at three places
//! (before sending it to moto, at moto short of its last byte, and after
//! moto answered) and keeps the instants of each call's way through it, so
//! a test that kills `flow` can say where the kill landed.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

pub use super::fault_answers::Fault;
use super::fault_answers::{Protocol, error_response};

#[path = "fault_calls.rs"]
mod calls;
#[path = "fault_wire.rs"]
mod wire;

// Not every test binary uses each.
#[allow(unused_imports)]
pub use calls::{CREATES, Call, Creates, Landing, call_name, create_key, creates};
use wire::{Request, client_stays, read_request, reset, respond};

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
    before: Vec<(String, Duration)>,
    at_moto: Vec<(String, Duration)>,
    hold: Vec<(String, Duration)>,
    stall: Duration,
    seed: u64,
    turn: usize,
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
    /// yet). A client that goes away meanwhile never gets it: the answer is
    /// dropped at once. Rules add up; the first that matches an operation
    /// applies (for each of the three holds apart).
    pub fn hold(&self, op: &str, delay: Duration) {
        self.shared
            .rules
            .lock()
            .unwrap()
            .hold
            .push((op.into(), delay));
    }

    /// Holds requests of operation `op` for `delay` before sending them
    /// to moto. A client that goes away meanwhile (killed) never has its
    /// request sent: moto never sees it.
    pub fn hold_before(&self, op: &str, delay: Duration) {
        let mut r = self.shared.rules.lock().unwrap();
        r.before.push((op.into(), delay));
    }

    /// Sends requests of operation `op` to moto short of their last byte,
    /// and that byte `delay` later, whatever becomes of the client: moto
    /// holds the request, and acts on it only once it is whole.
    pub fn hold_at_moto(&self, op: &str, delay: Duration) {
        let mut r = self.shared.rules.lock().unwrap();
        r.at_moto.push((op.into(), delay));
    }

    /// Every call the proxy saw, with the instants of its way through it.
    pub fn calls(&self) -> Vec<Call> {
        self.calls_from(0)
    }

    /// The calls from the `from`th on.
    pub fn calls_from(&self, from: usize) -> Vec<Call> {
        let counts = self.shared.counts.lock().unwrap();
        counts.calls.get(from..).unwrap_or_default().to_vec()
    }

    /// The calls received before `at` and not answered or dropped by then
    /// (sent to moto or not): what a process killed at `at` was waiting for.
    pub fn in_flight_at(&self, at: Instant) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.landing(at).is_some())
            .map(|c| c.op)
            .collect()
    }

    /// Waits (at most `limit`) until the proxy is done with every call from
    /// the `from`th on that came before `at`: answered, or dropped. Then
    /// each of them has all the instants it will ever have, and where a
    /// kill at `at` landed in it is settled. `false` if it was not so in
    /// time.
    pub fn settle(&self, from: usize, at: Instant, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            let open = self
                .calls_from(from)
                .iter()
                .any(|c| c.received <= at && !c.settled());
            if !open {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// How long a [`Fault::Stalled`] answer is held before the connection drops.
    pub fn stall_for(&self, delay: Duration) {
        self.shared.rules.lock().unwrap().stall = delay;
    }

    /// Stops injecting, rewriting and holding (at any of the three places).
    pub fn calm(&self) {
        let mut r = self.shared.rules.lock().unwrap();
        r.rate = 0.0;
        r.schedule.clear();
        r.rewrites.clear();
        r.before.clear();
        r.at_moto.clear();
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

/// Serves one client connection, request after request.
async fn serve(client: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let (read, mut write) = client.into_split();
    let mut reader = BufReader::new(read);
    while let Some(req) = read_request(&mut reader).await? {
        let op = req.operation();
        let call = {
            let mut counts = shared.counts.lock().unwrap();
            counts.calls.push(Call {
                key: create_key(&op, &req.body),
                op: op.clone(),
                received: Instant::now(),
                sent: None,
                replied: None,
                status: None,
                answered: None,
                dropped: None,
            });
            counts.calls.len() - 1
        };
        let end = handle(&shared, call, &op, &req, &mut reader, &mut write).await;
        let now = Some(Instant::now());
        note(&shared, call, |c| match end {
            Ok(End::Answered) => c.answered = now,
            _ => c.dropped = now,
        });
        match end {
            Ok(End::Answered) => {}
            Ok(End::Reset) => return reset(reader, write),
            Ok(End::Gone) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How the proxy was done with a call.
enum End {
    /// An answer was written to the client.
    Answered,
    /// No answer: the connection is to be reset.
    Reset,
    /// The client went away first.
    Gone,
}

/// Records something about call number `call`.
fn note(shared: &Shared, call: usize, f: impl FnOnce(&mut Call)) {
    if let Some(c) = shared.counts.lock().unwrap().calls.get_mut(call) {
        f(c);
    }
}

/// The delay of the first rule in `list` that matches `op`.
fn held(list: &[(String, Duration)], op: &str) -> Option<Duration> {
    list.iter()
        .find(|(held, _)| op.contains(held.as_str()))
        .map(|(_, delay)| *delay)
}

/// One request, call number `call` of operation `op`: injects its fault,
/// or holds it, sends it to moto and gives the answer back.
async fn handle(
    shared: &Shared,
    call: usize,
    op: &str,
    req: &Request,
    reader: &mut BufReader<OwnedReadHalf>,
    write: &mut OwnedWriteHalf,
) -> std::io::Result<End> {
    let fault = if req.method_and_path().1.starts_with("/moto-api") {
        None
    } else {
        choose(shared, op)
    };
    if let Some(fault) = fault {
        let mut counts = shared.counts.lock().unwrap();
        *counts.injected.entry(fault).or_default() += 1;
        counts.faulted.push((op.to_string(), fault));
    }
    match fault {
        Some(Fault::Reset) => return Ok(End::Reset),
        Some(Fault::Slow) => {
            let delay = shared.rules.lock().unwrap().slow;
            tokio::time::sleep(delay).await;
        }
        Some(Fault::Lost | Fault::Truncated | Fault::Stalled) | None => {}
        Some(f) => {
            write.write_all(&error_response(f, req.protocol())).await?;
            return Ok(End::Answered);
        }
    }
    let (before, at_moto, after) = {
        let r = shared.rules.lock().unwrap();
        (held(&r.before, op), held(&r.at_moto, op), held(&r.hold, op))
    };
    if let Some(delay) = before
        && !client_stays(reader, delay).await
    {
        return Ok(End::Gone);
    }
    shared.counts.lock().unwrap().forwarded.push(op.to_string());
    let answer = forward(shared, call, req, at_moto).await?;
    match fault {
        // Every lost answer: moto acted on the request.
        Some(Fault::Lost) => return Ok(End::Reset),
        Some(Fault::Truncated) => {
            // The head promises the whole body; half of it comes. An
            // answer without a body (S3's PutObject) is cut in its head:
            // whole but for its body, it would be no lost answer at all.
            let split = answer
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map_or(0, |i| i + 4);
            let cut = match answer.len() - split {
                0 => split / 2,
                body => split + body / 2,
            };
            write.write_all(&answer[..cut]).await?;
            return Ok(End::Reset);
        }
        Some(Fault::Stalled) => {
            let stall = shared.rules.lock().unwrap().stall;
            tokio::time::sleep(stall).await;
            return Ok(End::Reset);
        }
        _ => {}
    }
    let answer = rewrite(shared, op, answer);
    if let Some(delay) = after
        && !client_stays(reader, delay).await
    {
        return Ok(End::Gone);
    }
    write.write_all(&answer).await?;
    Ok(End::Answered)
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

/// Sends `req` (call number `call`) to moto on a fresh connection, its
/// last byte `at_moto` later if given, and reads the whole answer,
/// returned with a `Content-Length` (never chunked) for the client.
async fn forward(
    shared: &Shared,
    call: usize,
    req: &Request,
    at_moto: Option<Duration>,
) -> std::io::Result<Vec<u8>> {
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
    note(shared, call, |c| c.sent = Some(Instant::now()));
    match at_moto {
        Some(delay) => {
            // moto cannot act on a request short of its last byte.
            let (last, most) = out.split_last().expect("a request has a head");
            up.write_all(most).await?;
            tokio::time::sleep(delay).await;
            up.write_all(&[*last]).await?;
        }
        None => up.write_all(&out).await?,
    }
    let mut raw = Vec::new();
    up.read_to_end(&mut raw).await?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head from moto"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    note(shared, call, |c| {
        c.replied = Some(Instant::now());
        c.status = status;
    });
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = super::moto::dechunk(&body);
    }
    Ok(respond(&head, &body))
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
