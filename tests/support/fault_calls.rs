//! What the fault proxy saw of each call: when it came, when it went on to
//! moto, when moto answered and with what status, and when (or whether)
//! the answer reached `flow`; where a kill at a given instant landed in it;
//! and the mutating calls under the names AWS documents.

use std::collections::BTreeMap;
use std::time::Instant;

/// One call the proxy saw, with the instants of its way through the proxy.
#[derive(Debug, Clone)]
pub struct Call {
    /// The operation (`CreateStack`, `batch:submitjob`, `eks:POST /clusters`).
    pub op: String,
    /// For a create, the object it names, if its kind names objects
    /// ([`create_key`]).
    pub key: Option<String>,
    /// When the request had arrived whole.
    pub received: Instant,
    /// When the proxy began to send it to moto: from then on moto has it
    /// (held short of its last byte for [`FaultProxy::hold_at_moto`]) and
    /// acts on it whatever becomes of `flow`. `None`: never sent, so moto
    /// never saw it (an injected error, a reset, or a client that went
    /// away while the proxy held the request).
    ///
    /// [`FaultProxy::hold_at_moto`]: super::FaultProxy::hold_at_moto
    pub sent: Option<Instant>,
    /// When moto's answer had come back whole.
    pub replied: Option<Instant>,
    /// moto's HTTP status, once it answered.
    pub status: Option<u16>,
    /// When an answer (moto's, or an injected error) was written to `flow`.
    pub answered: Option<Instant>,
    /// When the proxy gave up on the call without answering: a fault that
    /// loses the answer, or a client that was gone.
    pub dropped: Option<Instant>,
}

/// Where a kill landed in a call that was in flight at that instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Landing {
    /// The proxy held the request and had not sent it; it never went to
    /// moto. Nothing was done.
    BeforeMoto,
    /// Sent to moto, its answer not back yet: moto had the request and did
    /// it whatever became of `flow` (held short of its last byte by
    /// [`FaultProxy::hold_at_moto`], it did it after a kill inside the
    /// hold).
    ///
    /// [`FaultProxy::hold_at_moto`]: super::FaultProxy::hold_at_moto
    AtMoto,
    /// moto had answered; the answer had not reached `flow`. Done, and
    /// `flow` never knew.
    AfterAnswer,
    /// Held at the proxy at the kill, and sent anyway a moment later
    /// (the proxy had not yet seen the client go): moto acted on it after
    /// the kill. Counted apart, never as one of the above.
    SentAfterKill,
}

impl Landing {
    /// Every landing, in the table's order.
    pub const ALL: [Landing; 4] = [
        Landing::BeforeMoto,
        Landing::AtMoto,
        Landing::AfterAnswer,
        Landing::SentAfterKill,
    ];

    /// The table's column heading.
    pub fn heading(self) -> &'static str {
        match self {
            Landing::BeforeMoto => "before moto",
            Landing::AtMoto => "at moto",
            Landing::AfterAnswer => "after moto answered",
            Landing::SentAfterKill => "sent after the kill",
        }
    }
}

impl Call {
    /// Whether the proxy is done with the call: answered or dropped.
    pub fn settled(&self) -> bool {
        self.answered.is_some() || self.dropped.is_some()
    }

    /// Where a kill at `at` landed in this call; `None` if the call was not
    /// in flight then (not yet received, or already answered or dropped).
    /// Read it once the call is [settled](Call::settled).
    pub fn landing(&self, at: Instant) -> Option<Landing> {
        let before = |t: Option<Instant>| t.is_some_and(|t| t <= at);
        if self.received > at || before(self.answered) || before(self.dropped) {
            return None;
        }
        Some(match (self.sent, self.replied) {
            (None, _) => Landing::BeforeMoto,
            (Some(s), _) if s > at => Landing::SentAfterKill,
            (Some(_), r) if !before(r) => Landing::AtMoto,
            _ => Landing::AfterAnswer,
        })
    }

    /// Sent to moto and answered 2xx: moto did it.
    pub fn succeeded(&self) -> bool {
        self.sent.is_some() && self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// The call under the name AWS documents, if it changes anything.
    pub fn name(&self) -> Option<String> {
        call_name(&self.op)
    }
}

/// Every create call the AWS providers make, by the name AWS documents.
pub const CREATES: [&str; 9] = [
    "CreateStack",
    "CreateSecret",
    "CreateBucket",
    "PutObject",
    "CreateRepository",
    "CreateFileSystem",
    "SubmitJob",
    "CreateCluster",
    "CreateNodegroup",
];

/// A proxy operation under the name AWS documents, for mutating calls;
/// `None` for reads.
pub fn call_name(op: &str) -> Option<String> {
    let (method, path) = op
        .strip_prefix("s3:")
        .or_else(|| op.strip_prefix("eks:"))
        .and_then(|rest| rest.split_once(' '))
        .unwrap_or(("", ""));
    let query = path.contains('?');
    let path = path.split('?').next().unwrap_or(path);
    let depth = path.trim_matches('/').split('/').count();
    let name = match (op.split(':').next(), method) {
        (Some("s3"), "PUT") if depth == 1 && query => "PutBucketSettings",
        (Some("s3"), "PUT") if depth == 1 => "CreateBucket",
        (Some("s3"), "PUT") => "PutObject",
        (Some("s3"), "DELETE") if depth == 1 => "DeleteBucket",
        (Some("s3"), "DELETE") => "DeleteObject",
        (Some("s3"), "POST") if op.contains("?delete") => "DeleteObjects",
        (Some("eks"), "POST") if depth == 1 => "CreateCluster",
        (Some("eks"), "POST") if path.ends_with("/node-groups") => "CreateNodegroup",
        (Some("eks"), "DELETE") if depth == 2 => "DeleteCluster",
        (Some("eks"), "DELETE") => "DeleteNodegroup",
        _ if op == "batch:submitjob" => "SubmitJob",
        _ if op == "batch:terminatejob" => "TerminateJob",
        _ if [
            "Create", "Delete", "Put", "Update", "Tag", "Untag", "Execute",
        ]
        .iter()
        .any(|p| op.starts_with(p)) =>
        {
            op
        }
        _ => return None,
    };
    Some(name.to_string())
}

/// The object a create call names, when its kind names its objects
/// (a stack's, a secret's, a repository's, a cluster's name; a node group's
/// cluster and name; a bucket's or an object's path): moto folds a second
/// create of one name into the one object, or refuses it. `None` for the
/// kinds that make a new object for every create moto does (a file system,
/// a Batch job), and for other calls.
pub fn create_key(op: &str, body: &[u8]) -> Option<String> {
    let name = call_name(op)?;
    let json = || serde_json::from_slice::<serde_json::Value>(body).ok();
    let field = |v: serde_json::Value, f: &str| v[f].as_str().map(str::to_string);
    let path = || {
        let path = op.split_once(' ')?.1;
        Some(path.split('?').next().unwrap_or(path).to_string())
    };
    match name.as_str() {
        "CreateStack" => String::from_utf8_lossy(body)
            .split('&')
            .find_map(|p| p.strip_prefix("StackName="))
            .map(str::to_string),
        "CreateSecret" => field(json()?, "Name"),
        "CreateRepository" => field(json()?, "repositoryName"),
        "CreateCluster" => field(json()?, "name"),
        "CreateNodegroup" => Some(format!("{}/{}", path()?, field(json()?, "nodegroupName")?)),
        "CreateBucket" | "PutObject" => path(),
        _ => None,
    }
}

/// What the create calls of one kind did at moto.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Creates {
    /// Sent to moto.
    pub sent: usize,
    /// Done by moto (answered 2xx).
    pub done: usize,
    /// Of those done, the ones for an object an earlier one had made
    /// already (the same name): a replay moto did again onto that object
    /// (S3 in us-east-1 answers 200 to a bucket created again and
    /// overwrites an object; Secrets Manager answers a create retried with
    /// its token by the version it made).
    pub again: usize,
}

impl Creates {
    /// The objects made: each create done, less those done again onto an
    /// object already made. A count moto cannot fold: a file system or a
    /// job made twice counts twice, and so does an object of a name
    /// deleted and made again.
    pub fn made(&self) -> usize {
        self.done - self.again
    }
}

/// What the create calls of `calls` did at moto, by kind. A create done
/// again onto an object of the same name counts as made again if a delete
/// of that name was done in between.
pub fn creates(calls: &[Call]) -> BTreeMap<String, Creates> {
    let mut n: BTreeMap<String, Creates> = BTreeMap::new();
    let mut made: Vec<String> = Vec::new();
    for c in calls {
        let Some(name) = c.name() else { continue };
        if !CREATES.contains(&name.as_str()) {
            if name.starts_with("Delete") && c.succeeded() {
                // A delete of an object the test cannot place: whatever
                // is made after it is made anew.
                made.clear();
            }
            continue;
        }
        let count = n.entry(name.clone()).or_default();
        if c.sent.is_some() {
            count.sent += 1;
        }
        if c.succeeded() {
            count.done += 1;
            if let Some(key) = &c.key {
                let key = format!("{name} {key}");
                if made.contains(&key) {
                    count.again += 1;
                } else {
                    made.push(key);
                }
            }
        }
    }
    n
}
