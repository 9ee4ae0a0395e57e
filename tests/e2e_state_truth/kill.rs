//! kill -9 inside every create and delete call, at each place a call can
//! be when `flow` dies: held before moto, at moto, or answered by moto and
//! not yet given back; counted at the proxy.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::kill_aim::{Aim, Table, kill};
use crate::support::aws::{Aws, BATCH_CHAIN, creates_table, inventory, made};
use crate::support::fault_proxy::{Call, Creates, FaultProxy, creates};
use crate::support::moto::Moto;

/// What the kill chain adds to the Batch chain (two stacks, a generated
/// key, a multi-node job): a bucket and an upload, an ECR repository, FSx,
/// and an EKS cluster with a node group, so that it makes every create
/// call the AWS providers have.
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

[steps.images]
provider = "ecr.repository"
[steps.images.inputs]
name = "kill-images"

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

/// The create calls of one apply of the chain: two stacks, two files, one
/// of everything else.
const CREATES: [(&str, usize); 9] = [
    ("CreateBucket", 1),
    ("CreateCluster", 1),
    ("CreateFileSystem", 1),
    ("CreateNodegroup", 1),
    ("CreateRepository", 1),
    ("CreateSecret", 1),
    ("CreateStack", 2),
    ("PutObject", 2),
    ("SubmitJob", 1),
];

/// The delete calls of one destroy of the chain (the job has ended by
/// then: nothing to terminate).
const DELETES: [&str; 8] = [
    "DeleteBucket",
    "DeleteCluster",
    "DeleteFileSystem",
    "DeleteNodegroup",
    "DeleteObject",
    "DeleteRepository",
    "DeleteSecret",
    "DeleteStack",
];

/// What one apply of the chain makes, as [`inventory`] lists it.
const MADE: [&str; 10] = [
    "bucket flow-kill-data",
    "cluster kill",
    "file system",
    "node group kill/gpu",
    "object flow-kill-data/in/a.txt",
    "object flow-kill-data/in/b.txt",
    "repository kill-images",
    "secret flow-batch-ssh-key",
    "stack flow-batch",
    "stack flow-vpc",
];

/// The operations held, as the proxy names them: every create and delete.
const HELD: [&str; 14] = [
    "CreateStack",
    "CreateSecret",
    "CreateRepository",
    "CreateFileSystem",
    "batch:submitjob",
    "batch:terminatejob",
    "s3:PUT",
    "s3:DELETE",
    "eks:POST",
    "eks:DELETE",
    "DeleteStack",
    "DeleteSecret",
    "DeleteRepository",
    "DeleteFileSystem",
];

/// Kills at random instants of each command; then kills aimed into each
/// create and delete kind that none of them hit before moto or at moto.
const RANDOM: usize = 20;
/// At most this many aimed runs.
const AIMED: usize = 40;

/// The create calls of `calls` sent to moto, by kind.
fn sent(calls: &[Call]) -> BTreeMap<String, usize> {
    creates(calls)
        .into_iter()
        .filter(|(_, c)| c.sent > 0)
        .map(|(kind, c)| (kind, c.sent))
        .collect()
}

/// The mutating calls of `calls` by name, once each.
fn kinds(calls: &[Call]) -> Vec<String> {
    let mut k: Vec<String> = calls.iter().filter_map(Call::name).collect();
    k.sort();
    k.dedup();
    k
}

/// kill -9 inside every create and delete call of the chain, at both places
/// where it matters: before the request reached moto (moto never does it)
/// and while moto has it (moto does it after `flow` died). The proxy holds
/// every create and delete 100 ms before sending it, sends it short of its
/// last byte and the last byte 100 ms later, and holds moto's answer
/// 150 ms (moto did it; `flow` does not know yet), and keeps the instants
/// of each call, so each kill's place in each call is known, not guessed.
/// (A kill can find several calls running at once.)
///
/// From an empty account, each run kills `flow apply`, resumes it, checks;
/// kills `flow destroy`, resumes it, checks. The first 20 runs kill at
/// stratified uniform instants ((i + u)/20 of an unkilled run's time); then
/// runs aim their kill into each create and delete kind not yet hit before
/// moto or at moto, by watching the proxy. The tables are printed; every
/// kind has both. After every apply: every object made by the creates moto
/// did exactly once (counted at the proxy, which moto cannot fold: a file
/// system or a job made twice counts twice), every create sent exactly
/// once; the same objects as one unkilled apply makes; `plan
/// --detailed-exitcode` exits 0. After every destroy: nothing of any kind
/// left. Every listing must answer, or the test fails.
#[test]
fn kill_9_inside_every_create_call_makes_no_duplicate_and_leaves_no_orphan() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("data/a.txt", "a\n");
    a.p.write("data/b.txt", "b\n");
    a.p.write("wf.toml", &kill_chain());
    for op in HELD {
        proxy.hold_before(op, Duration::from_millis(100));
        proxy.hold_at_moto(op, Duration::from_millis(100));
        proxy.hold(op, Duration::from_millis(150));
    }
    let expected: BTreeMap<String, usize> =
        CREATES.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    let create_kinds: Vec<&str> = CREATES.iter().map(|(k, _)| *k).collect();

    let start = Instant::now();
    a.apply().expect(0);
    let apply_time = start.elapsed();
    assert_eq!(made(&proxy.calls()), expected);
    assert_eq!(inventory(&moto), MADE);
    let from = proxy.calls().len();
    let start = Instant::now();
    a.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let destroy_time = start.elapsed();
    let destroyed = kinds(&proxy.calls_from(from));
    for delete in DELETES {
        assert!(
            destroyed.iter().any(|k| k == delete),
            "{delete}: {destroyed:?}"
        );
    }
    assert_eq!(inventory(&moto), Vec::<String>::new());

    let mut rng: u64 = 0x5eed_1234;
    let mut uniform = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let apply_args = ["apply", "wf.toml", "--auto-approve"];
    let destroy_args = ["destroy", "wf.toml", "--auto-approve"];
    let (mut applies, mut destroys) = (Table::default(), Table::default());
    let (mut aimed_applies, mut aimed_destroys) = (0, 0);
    let mut totals: BTreeMap<String, Creates> = BTreeMap::new();
    for i in 0..RANDOM + AIMED {
        let (apply_aim, destroy_aim) = if i < RANDOM {
            let stratum = |t: Duration, u: f64| t.mul_f64((i as f64 + u) / RANDOM as f64);
            (
                Some(Aim::After(stratum(apply_time, uniform()))),
                Some(Aim::After(stratum(destroy_time, uniform()))),
            )
        } else {
            let aim = |(kind, landing)| Aim::Into(kind, landing);
            (
                applies.missing(&create_kinds).map(aim),
                destroys.missing(&DELETES).map(aim),
            )
        };
        if apply_aim.is_none() && destroy_aim.is_none() {
            break;
        }
        if i >= RANDOM {
            eprintln!("run {i}: apply killed {apply_aim:?}, destroy {destroy_aim:?}");
        }
        let from = proxy.calls().len();
        if let Some(aim) = &apply_aim {
            aimed_applies += matches!(aim, Aim::Into(..)) as usize;
            applies.add(&kill(&a, &proxy, &apply_args, aim));
        }
        a.apply().expect(0);
        a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
        let calls = proxy.calls_from(from);
        for (kind, c) in creates(&calls) {
            let all = totals.entry(kind).or_default();
            all.sent += c.sent;
            all.done += c.done;
            all.again += c.again;
        }
        assert_eq!(
            made(&calls),
            expected,
            "run {i} ({apply_aim:?}): an object made twice (or never) at moto"
        );
        assert_eq!(
            sent(&calls),
            expected,
            "run {i} ({apply_aim:?}): a create sent to moto again"
        );
        assert_eq!(
            inventory(&moto),
            MADE,
            "run {i} ({apply_aim:?}): moto holds other objects than one apply makes"
        );

        if let Some(aim) = &destroy_aim {
            aimed_destroys += matches!(aim, Aim::Into(..)) as usize;
            destroys.add(&kill(&a, &proxy, &destroy_args, aim));
        }
        a.run(&destroy_args).expect(0);
        assert_eq!(
            inventory(&moto),
            Vec::<String>::new(),
            "run {i} ({destroy_aim:?}): left after destroy"
        );
    }
    eprintln!(
        "unkilled apply {apply_time:.1?}, destroy {destroy_time:.1?}; {RANDOM} kills of each at random instants, then {aimed_applies} into apply's calls and {aimed_destroys} into destroy's\n{}\n\n{}\n\nthe creates of every killed and resumed apply together:\n{}",
        applies.render("apply, by the call in flight and where the kill found it"),
        destroys.render("destroy"),
        creates_table(&totals)
    );
    if let Some((kind, landing)) = applies.missing(&create_kinds) {
        panic!("no kill landed in {kind} {}", landing.heading());
    }
    if let Some((kind, landing)) = destroys.missing(&DELETES) {
        panic!("no kill landed in {kind} {}", landing.heading());
    }
}
