//! kill -9 inside every create and delete call, counted at the proxy.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::aws::{Aws, BATCH_CHAIN};
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::Moto;
use crate::support::{finish, signal};

/// What the kill chain adds to the Batch chain (two stacks, a generated
/// key, a multi-node job): a bucket and an upload, FSx, and an EKS cluster
/// with a node group, so that it makes every create call flow has.
const KILL_EXTRA: &str = r#"
[steps.data]
provider = "s3.bucket"
[steps.data.inputs]
name = "flow-kill-data"

[steps.upload]
provider = "s3.sync"
[steps.upload.inputs]
source = "data"
destination = "s3://${steps.data.outputs.name}/in/"

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
subnet_ids = ["${steps.vpc.outputs.SubnetId}"]

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
name = "kill"
subnet_ids = ["subnet-0a", "subnet-0b"]
role_arn = "arn:aws:iam::123456789012:role/eks"

[steps.gpu]
provider = "eks.nodegroup"
[steps.gpu.inputs]
cluster = "${steps.eks.outputs.name}"
name = "gpu"
instance_types = ["p5.48xlarge"]
subnet_ids = ["subnet-0b"]
desired_size = 1
max_size = 2
node_role_arn = "arn:aws:iam::123456789012:role/nodes"
"#;

/// The kill chain's workflow.
pub(crate) fn kill_chain() -> String {
    format!("{BATCH_CHAIN}{KILL_EXTRA}")
}

/// The create calls the kill test must land in.
const CREATES: [&str; 8] = [
    "CreateStack",
    "CreateSecret",
    "CreateBucket",
    "PutObject",
    "CreateFileSystem",
    "SubmitJob",
    "CreateCluster",
    "CreateNodegroup",
];

/// A proxy operation under the name AWS documents, for mutating calls;
/// `None` for reads.
fn call_name(op: &str) -> Option<String> {
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

/// How many times each mutating call was forwarded to moto from `from` on.
fn forwarded_since(proxy: &FaultProxy, from: usize) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for op in proxy.counts().forwarded.iter().skip(from) {
        if let Some(name) = call_name(op) {
            *n.entry(name).or_default() += 1;
        }
    }
    n
}

/// Runs `args` and kills it with SIGKILL `after` its start; the mutating
/// calls in flight at that instant (or "(between calls)").
fn kill_after(a: &Aws, proxy: &FaultProxy, args: &[&str], after: Duration) -> Vec<String> {
    let child = a.spawn(args);
    std::thread::sleep(after);
    let at = Instant::now();
    signal(&child, libc::SIGKILL);
    finish(child);
    let calls: Vec<String> = proxy
        .in_flight_at(at)
        .iter()
        .filter_map(|op| call_name(op))
        .collect();
    if calls.is_empty() {
        vec!["(between calls)".to_string()]
    } else {
        calls
    }
}

/// Everything the chain makes, as moto has it: nothing may be left after
/// a destroy, and never two of anything after an apply.
fn objects(moto: &Moto) -> Vec<String> {
    let mut all: Vec<String> = moto.stacks();
    all.extend(moto.secrets());
    all.extend(
        moto.file_systems()
            .iter()
            .map(|_| "file system".to_string()),
    );
    let buckets = moto.rest_call("s3", "GET", "/", "").1;
    for bucket in crate::support::moto::between_all(&buckets, "<Name>", "</Name>") {
        all.extend(moto.objects(&bucket, ""));
        all.push(format!("bucket {bucket}"));
    }
    let clusters = moto.rest_call("eks", "GET", "/clusters", "").1;
    let clusters: serde_json::Value = serde_json::from_str(&clusters).unwrap_or_default();
    for c in clusters["clusters"].as_array().cloned().unwrap_or_default() {
        let c = c.as_str().unwrap_or_default().to_string();
        let groups = moto
            .rest_call("eks", "GET", &format!("/clusters/{c}/node-groups"), "")
            .1;
        let groups: serde_json::Value = serde_json::from_str(&groups).unwrap_or_default();
        for g in groups["nodegroups"].as_array().cloned().unwrap_or_default() {
            all.push(format!("node group {}", g.as_str().unwrap_or_default()));
        }
        all.push(format!("cluster {c}"));
    }
    all.sort();
    all
}

/// kill -9 at uniformly spread instants of an apply and of a destroy of the
/// whole chain, each create and delete answer held back 250 ms after moto
/// acted on it (the object exists; flow does not know yet). The instants
/// are stratified: run i is killed at (i + u) / 30 of the unkilled run's
/// time, u uniform, so every part of the run is hit. The proxy's log says
/// which call each kill landed in; every create call is hit. After each
/// kill the command runs again unkilled: never a second create of
/// anything, counted at the proxy and in moto; the plan converges; destroy
/// leaves nothing.
#[test]
fn kill_9_inside_every_create_call_makes_no_duplicate_and_leaves_no_orphan() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("data/a.txt", "a\n");
    a.p.write("data/b.txt", "b\n");
    a.p.write("wf.toml", &kill_chain());
    for op in [
        "CreateStack",
        "CreateSecret",
        "CreateFileSystem",
        "batch:submitjob",
        "s3:PUT",
        "eks:POST",
        "DeleteStack",
        "DeleteSecret",
        "DeleteFileSystem",
        "s3:DELETE",
        "eks:DELETE",
    ] {
        proxy.hold(op, Duration::from_millis(250));
    }
    // Two stacks and two files; one of everything else.
    let expected: BTreeMap<String, usize> = CREATES
        .iter()
        .map(|c| {
            let n = if matches!(*c, "PutObject" | "CreateStack") {
                2
            } else {
                1
            };
            (c.to_string(), n)
        })
        .collect();

    let start = Instant::now();
    a.apply().expect(0);
    let apply_time = start.elapsed();
    let made = objects(&moto);
    let start = Instant::now();
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let destroy_time = start.elapsed();
    assert!(objects(&moto).is_empty(), "{:?}", objects(&moto));

    let mut rng: u64 = 0x5eed_1234;
    let mut uniform = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let runs = 30;
    let mut apply_kills: BTreeMap<String, usize> = BTreeMap::new();
    let mut destroy_kills: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..runs {
        let from = proxy.counts().forwarded.len();
        let at = apply_time.mul_f64((i as f64 + uniform()) / runs as f64);
        for call in kill_after(&a, &proxy, &["apply", "wf.toml", "--auto-approve"], at) {
            *apply_kills.entry(call).or_default() += 1;
        }
        a.apply().expect(0);
        a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
        let creates: BTreeMap<String, usize> = forwarded_since(&proxy, from)
            .into_iter()
            .filter(|(k, _)| CREATES.contains(&k.as_str()))
            .collect();
        assert_eq!(
            creates, expected,
            "run {i}: a create was sent twice (or not at all)"
        );
        assert_eq!(
            objects(&moto),
            made,
            "run {i}: moto holds other objects than one apply makes"
        );

        let at = destroy_time.mul_f64((i as f64 + uniform()) / runs as f64);
        for call in kill_after(&a, &proxy, &["destroy", "wf.toml", "--auto-approve"], at) {
            *destroy_kills.entry(call).or_default() += 1;
        }
        a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
        assert!(
            objects(&moto).is_empty(),
            "run {i}: orphans after destroy: {:?}",
            objects(&moto)
        );
    }
    let table = |kills: &BTreeMap<String, usize>| {
        kills
            .iter()
            .map(|(call, n)| format!("  {call:<18} {n}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    eprintln!(
        "unkilled apply {apply_time:.1?}, destroy {destroy_time:.1?}\nkills during apply, by the call in flight:\n{}\nkills during destroy:\n{}",
        table(&apply_kills),
        table(&destroy_kills)
    );
    for call in CREATES {
        assert!(
            apply_kills.get(call).is_some_and(|n| *n > 0),
            "no kill landed inside {call}:\n{}",
            table(&apply_kills)
        );
    }
    assert!(
        destroy_kills.keys().any(|k| k.starts_with("Delete")),
        "no kill landed inside a delete call:\n{}",
        table(&destroy_kills)
    );
}
