//! End-to-end: state that tells the truth. An intent survives any failure
//! after which the provider may have acted, and the next apply reads what
//! the recorded token did before creating anything; plans read the real
//! objects and show what changed outside flow. Against moto, with the
//! tests' fault proxy where moto cannot show a behaviour (an answer lost on
//! the way back).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::aws::Aws;
use support::fault_proxy::{Fault, FaultProxy};
use support::moto::Moto;
use support::{finish, signal};

const SECRET: &str = r#"
[workflow]
region = "us-east-1"

[steps.key]
provider = "secretsmanager.secret"
retries = 1
[steps.key.inputs]
name = "team-key"
generate = "ssh-ed25519"
"#;

/// The step's record as `flow state show` prints it.
fn record(a: &Aws, step: &str) -> serde_json::Value {
    let show = a.run(&["state", "show", "wf.toml", step]).expect(0);
    serde_json::from_str(&show.stdout).expect("state show prints JSON")
}

/// CreateSecret reaches moto and its answer is lost; every later call of the
/// apply fails before reaching moto, so retries run out. The intent (with
/// its token) stays; the next apply finds the secret by that token and
/// adopts it: one secret, one CreateSecret, no conflict.
#[test]
fn a_create_whose_answer_was_lost_is_adopted_by_the_next_apply() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", SECRET);
    // The first look finds no secret; the create reaches moto and its answer
    // is lost; every call after that is cut off before moto.
    proxy.schedule("DescribeSecret", &[None]);
    proxy.schedule("CreateSecret", &[Some(Fault::Lost)]);
    proxy.faults(1.0, &[Fault::Reset], None);
    let first = a.apply().expect(1);
    let counts = proxy.counts();
    // The request reached moto once, and its answer never came back.
    assert_eq!(proxy.injected(Fault::Lost), 1, "{counts:?}");
    assert_eq!(proxy.forwarded("CreateSecret"), 1, "{counts:?}");
    assert_eq!(moto.secrets(), ["team-key"]);
    let rec = record(&a, "key");
    assert_eq!(rec["status"], "failed", "{rec}");
    let token = rec["in_flight"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("the intent was dropped: {rec}\n{}", first.all()))
        .to_string();
    assert_eq!(rec["in_flight"]["operation"], "create", "{rec}");
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("the last create failed; apply first reads what it left"),
        "{}",
        plan.stdout
    );

    proxy.calm();
    let second = a.apply().expect(0);
    assert!(
        second.stdout.contains("1 created") || second.stdout.contains("1 replaced"),
        "{}",
        second.stdout
    );
    let log = a.p.read(".flow/wf/logs/key.log");
    assert!(
        log.contains(&format!(
            "reconciling an interrupted create (token {token})"
        )) && log.contains("adopting it"),
        "{log}"
    );
    assert_eq!(proxy.forwarded("CreateSecret"), 1, "{:?}", proxy.counts());
    assert_eq!(moto.secrets(), ["team-key"]);
    let described = moto.json_call(
        "secretsmanager",
        "secretsmanager.DescribeSecret",
        r#"{"SecretId": "team-key"}"#,
    );
    let tags = described["Tags"].as_array().cloned().unwrap_or_default();
    assert!(
        tags.iter()
            .any(|t| t["Key"] == "flow:token" && t["Value"] == token.as_str()),
        "{described}"
    );
    let rec = record(&a, "key");
    assert_eq!(rec["applied"], true, "{rec}");
    assert!(rec["in_flight"].is_null(), "{rec}");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// A refusal that proves nothing was created (a 400 answer to CreateSecret,
/// which never reached moto) drops the intent: the next plan is a plain
/// create, and the next apply starts under a new token.
#[test]
fn a_refused_create_drops_its_intent() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("wf.toml", SECRET);
    proxy.schedule("CreateSecret", &[Some(Fault::Refused)]);
    let run = a.apply().expect(1);
    assert!(run.stdout.contains("ValidationException"), "{}", run.stdout);
    assert_eq!(proxy.forwarded("CreateSecret"), 0, "{:?}", proxy.counts());
    assert!(moto.secrets().is_empty());
    let rec = record(&a, "key");
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(rec["in_flight"].is_null(), "{rec}");
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("the last attempt failed"),
        "{}",
        plan.stdout
    );
    a.apply().expect(0);
    assert_eq!(proxy.forwarded("CreateSecret"), 1, "{:?}", proxy.counts());
    assert_eq!(moto.secrets(), ["team-key"]);
}

const DRIFTING: &str = r#"
[workflow]
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.app]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.app.inputs]
stack_name = "flow-app"
template = "app.yaml"
parameters = { VpcStack = "flow-vpc" }

[steps.key]
provider = "secretsmanager.secret"
[steps.key.inputs]
name = "team-key"
value = "not-a-real-secret-5150"
tags = { team = "ml" }
"#;

/// A stack deleted by hand and a secret retagged in the console: plan reads
/// both, shows them in the drift sections (text and JSON), exits 2 with
/// --detailed-exitcode and writes nothing; `apply --refresh-only` records
/// them; `apply` puts them back; the plan after that is clean.
#[test]
fn changes_made_outside_flow_are_shown_recorded_and_undone() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", DRIFTING);
    a.apply().expect(0);
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    moto.query_call("cloudformation", "Action=DeleteStack&StackName=flow-app");
    moto.json_call(
        "secretsmanager",
        "secretsmanager.TagResource",
        r#"{"SecretId": "team-key", "Tags": [{"Key": "team", "Value": "infra"}]}"#,
    );
    let before = record(&a, "app");
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    let out = &plan.stdout;
    assert!(
        out.contains(
            "Changed outside flow:\n  ~ key  (secretsmanager.secret)\n      tags : {\"team\":\"ml\"} → {\"team\":\"infra\"}\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "Deleted outside flow:\n  - app  (cloudformation.stack) — planned for create again"
        ),
        "{out}"
    );
    assert!(out.contains("create — deleted outside flow"), "{out}");
    assert!(out.contains("update — changed outside flow"), "{out}");
    assert!(!out.contains("not-a-real-secret"), "{out}");
    // A plan never writes state.
    assert_eq!(record(&a, "app"), before);

    let json = a.run(&["plan", "wf.toml", "--json"]).expect(0);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let drift = doc["drift"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<(String, String)> = drift
        .iter()
        .map(|d| (d["step"].to_string(), d["drift"].to_string()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("\"key\"".to_string(), "\"changed\"".to_string()),
            ("\"app\"".to_string(), "\"deleted\"".to_string())
        ],
        "{drift:?}"
    );

    // Recorded as found, and nothing in the cloud changes.
    let only = a
        .run(&["apply", "wf.toml", "--refresh-only", "--auto-approve"])
        .expect(0);
    assert!(
        only.stdout
            .contains("Refresh complete: 2 steps recorded as found."),
        "{}",
        only.stdout
    );
    assert_eq!(record(&a, "app")["applied"], false);
    assert_eq!(record(&a, "key")["inputs"]["tags"]["team"], "infra");
    assert_eq!(moto.stacks(), ["flow-vpc"]);
    // Recorded drift is not shown again; what apply will do is.
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(!plan.stdout.contains("outside flow:"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("Plan: 1 to create, 1 to update"),
        "{}",
        plan.stdout
    );

    // Apply puts both back, and then nothing is left to do.
    a.apply().expect(0);
    let mut stacks = moto.stacks();
    stacks.sort();
    assert_eq!(stacks, ["flow-app", "flow-vpc"]);
    let described = moto.json_call(
        "secretsmanager",
        "secretsmanager.DescribeSecret",
        r#"{"SecretId": "team-key"}"#,
    );
    let team: Vec<&serde_json::Value> = described["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["Key"] == "team")
        .map(|t| &t["Value"])
        .collect();
    assert_eq!(team, ["ml"], "{described}");
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);
}

/// With no endpoint to reach, refresh stops with one line per provider kind
/// naming what to set and the offline plan as the way out, no SDK error
/// chain; the offline plan works and state is untouched.
#[test]
fn refresh_without_a_reachable_endpoint_says_what_to_set() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write("wf.toml", DRIFTING);
    a.apply().expect(0);
    let before = record(&a, "key");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let env: Vec<(String, String)> = moto.env_for(&dead);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plan = a.p.run_env(&["plan", "wf.toml"], &env).expect(1);
    let all = plan.all();
    assert!(all.contains("refresh could not reach the cloud"), "{all}");
    assert!(
        all.contains(
            "cloudformation.stack (2 steps): the endpoint does not answer; set `AWS_PROFILE`"
        ),
        "{all}"
    );
    assert!(all.contains("secretsmanager.secret (1 step)"), "{all}");
    assert!(all.contains("--refresh=false"), "{all}");
    assert!(!all.contains("dispatch failure"), "{all}");
    a.p.run_env(&["plan", "wf.toml", "--refresh=false"], &env)
        .expect(0);
    assert_eq!(record(&a, "key"), before);
}

/// A template body as a query-string value.
fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const TOPIC: &str = r#"{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}"#;
const TWO_TOPICS: &str = r#"{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}, "Other": {"Type": "AWS::SNS::Topic"}}}"#;

const ADOPTING: &str = r#"
[workflow]
region = "us-east-1"

[steps.topic]
provider = "cloudformation.stack"
[steps.topic.inputs]
stack_name = "made-by-hand"
template = "topic.json"

[steps.key]
provider = "secretsmanager.secret"
import = "team-key"
[steps.key.inputs]
name = "team-key"
value = "made by hand"
tags = { team = "ml" }
"#;

/// A stack and a secret made by hand, as a team that followed the runbook
/// has them: `flow import` adopts the stack, `import = "ID"` the secret;
/// neither is changed by adopting it, and the next plan shows only how they
/// differ from the workflow. Wrong IDs are refused and leave state alone.
#[test]
fn objects_made_by_hand_are_adopted_not_created_again() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    moto.query_call(
        "cloudformation",
        &format!(
            "Action=CreateStack&StackName=made-by-hand&TemplateBody={}",
            form_encode(TOPIC)
        ),
    );
    moto.json_call(
        "secretsmanager",
        "secretsmanager.CreateSecret",
        r#"{"Name": "team-key", "SecretString": "made by hand", "Tags": [{"Key": "team", "Value": "infra"}]}"#,
    );
    a.p.write("topic.json", TOPIC);
    a.p.write("wf.toml", ADOPTING);

    // Wrong IDs: another object's name, one that does not exist, a step
    // that cannot import. State is not even created.
    let wrong = a.run(&["import", "wf.toml", "topic", "team-key"]).expect(1);
    assert!(
        wrong
            .stderr
            .contains("there is no stack `team-key` to import"),
        "{}",
        wrong.all()
    );
    let other = a
        .run(&["import", "wf.toml", "key", "made-by-hand"])
        .expect(1);
    assert!(
        other.all().contains("there is no secret `made-by-hand` to import")
            || other
                .all()
                .contains("the step's inputs name secret `team-key`, but the ID to import names `made-by-hand`"),
        "{}",
        other.all()
    );
    assert!(!a.p.path().join(".flow/wf/db").exists());

    // The plan shows what it will adopt and what it will create.
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains("(secretsmanager.secret)  import — adopts `team-key`, changing nothing"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("Plan: 1 to import, 1 to create"),
        "{}",
        plan.stdout
    );

    let imported = a
        .run(&["import", "wf.toml", "topic", "made-by-hand"])
        .expect(0);
    assert!(
        imported
            .stdout
            .contains("Imported `made-by-hand` into step `topic`"),
        "{}",
        imported.stdout
    );
    let rec = record(&a, "topic");
    assert_eq!(rec["applied"], true, "{rec}");
    assert!(
        rec["resource_id"]
            .as_str()
            .unwrap()
            .contains("made-by-hand"),
        "{rec}"
    );
    let again = a
        .run(&["import", "wf.toml", "topic", "made-by-hand"])
        .expect(1);
    assert!(
        again.all().contains("step `topic` already holds"),
        "{}",
        again.all()
    );

    let apply = a.apply().expect(0);
    assert!(apply.stdout.contains("1 imported"), "{}", apply.stdout);
    assert_eq!(moto.stacks(), ["made-by-hand"]);
    assert_eq!(moto.secrets(), ["team-key"]);
    assert_eq!(moto.secret_value("team-key"), "made by hand");

    // Only the real difference is left: the tag set by hand.
    let plan = a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(2);
    assert!(
        plan.stdout
            .contains("tags : {\"team\":\"ml\"} → {\"team\":\"infra\"}"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout.contains("Plan: 0 to create, 1 to update"),
        "{}",
        plan.stdout
    );
    assert!(
        !plan.stdout.contains("topic  (cloudformation.stack)"),
        "{}",
        plan.stdout
    );

    // The workflow's template differs from the one the stack was made with.
    a.p.write("topic.json", TWO_TOPICS);
    let plan = a.run(&["plan", "wf.toml"]).expect(0);
    assert!(plan.stdout.contains("~ topic"), "{}", plan.stdout);
}

/// `import` on a step whose kind has nothing to adopt is refused before
/// anything runs, at its place in the file.
#[test]
fn import_on_a_task_is_refused_where_it_is_written() {
    let moto = Moto::start();
    let a = Aws::new(&moto, None);
    a.p.write(
        "wf.toml",
        "[steps.hello]\nprovider = \"exec\"\nimport = \"x\"\n[steps.hello.inputs]\nrun = \"true\"\n",
    );
    let run = a.run(&["validate", "wf.toml"]).expect(1);
    assert!(
        run.stderr.contains("`exec` steps cannot be imported"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("wf.toml:3:10"), "{}", run.stderr);
}

/// Every create call flow makes against AWS, in one chain: two stacks, a
/// generated key, a multi-node Batch job, a bucket and an upload, FSx, and
/// an EKS cluster with a node group.
const KILL_CHAIN: &str = r#"
[workflow]
name = "kill"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.batch]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.batch.inputs]
stack_name = "flow-batch"
template = "batch.yaml"
capabilities = ["CAPABILITY_NAMED_IAM"]
parameters = { VPCStackParameter = "flow-vpc" }

[steps.ssh]
provider = "secretsmanager.secret"
[steps.ssh.inputs]
name = "flow-batch-ssh-key"
generate = "ssh-ed25519"

[steps.nccl]
provider = "batch.job"
[steps.nccl.inputs]
job_name = "nccl-test-2node"
job_queue = "${steps.batch.outputs.DistributedDeepLearningJQ}"
job_definition = "${steps.batch.outputs.JobDefinitionMultiInstance}"
num_nodes = 2
environment = { SSH_PUBLIC_KEY = "${steps.ssh.outputs.public_key}" }
timeout = "1h"

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
    for bucket in support::moto::between_all(&buckets, "<Name>", "</Name>") {
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
    a.p.write("wf.toml", KILL_CHAIN);
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

/// Stacks, a bucket and an upload, a secret, a repository and FSx, with the
/// workflow's default retries (no `retries` anywhere).
const LOSSY: &str = r#"
[workflow]
name = "lossy"
region = "us-east-1"

[steps.vpc]
provider = "cloudformation.stack"
[steps.vpc.inputs]
stack_name = "flow-vpc"
template = "vpc.yaml"

[steps.app]
provider = "cloudformation.stack"
depends_on = ["vpc"]
[steps.app.inputs]
stack_name = "flow-app"
template = "app.yaml"
parameters = { VpcStack = "flow-vpc" }

[steps.data]
provider = "s3.bucket"
[steps.data.inputs]
name = "flow-lossy-data"

[steps.upload]
provider = "s3.sync"
[steps.upload.inputs]
source = "data"
destination = "s3://${steps.data.outputs.name}/in/"

[steps.hf]
provider = "secretsmanager.secret"
[steps.hf.inputs]
name = "hf-token"
value = "not-a-token-0123456789"

[steps.images]
provider = "ecr.repository"
[steps.images.inputs]
name = "nccl-tests"

[steps.fsx]
provider = "fsx.lustre"
[steps.fsx.inputs]
storage_capacity = 1200
subnet_ids = ["${steps.vpc.outputs.SubnetId}"]
"#;

/// One call in ten reaches moto and then loses its answer: dropped, cut off
/// halfway through the body, or held past the SDK's attempt timeout. With
/// the default retries the apply converges, every step ends with exactly
/// one object, and destroy removes them all under the same faults.
#[test]
fn answers_lost_after_the_request_reached_the_server_make_no_duplicate() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let mut a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.env.push(("FLOW_AWS_ATTEMPT_TIMEOUT".into(), "1s".into()));
    for i in 0..4 {
        a.p.write(&format!("data/f{i}.txt"), &format!("file {i}\n"));
    }
    a.p.write("wf.toml", LOSSY);
    proxy.stall_for(Duration::from_secs(2));
    let kinds = [Fault::Lost, Fault::Truncated, Fault::Stalled];
    // The creates that make duplicates in real life lose their first
    // answer for sure; every other call one time in ten.
    proxy.schedule("CreateFileSystem", &[Some(Fault::Lost)]);
    proxy.schedule("CreateStack", &[Some(Fault::Truncated)]);
    proxy.schedule("CreateSecret", &[Some(Fault::Stalled)]);
    proxy.faults(0.10, &kinds, None);
    let apply = a.apply();
    let counts = proxy.counts();
    assert_eq!(apply.code, 0, "{}\n{counts:?}", apply.all());
    for kind in kinds {
        assert!(proxy.injected(kind) > 0, "no {kind:?} injected: {counts:?}");
    }
    // Every fault here forwarded the request first: moto acted on it.
    eprintln!(
        "{} answers lost of {} calls forwarded: {:?}",
        counts.faulted.len(),
        counts.forwarded.len(),
        counts.faulted
    );
    for create in ["CreateFileSystem", "CreateStack", "CreateSecret"] {
        assert!(
            counts.faulted.iter().any(|(op, _)| op == create),
            "{create}: {:?}",
            counts.faulted
        );
    }

    proxy.calm();
    let mut stacks = moto.stacks();
    stacks.sort();
    assert_eq!(stacks, ["flow-app", "flow-vpc"]);
    assert_eq!(moto.file_systems().len(), 1, "a second file system");
    assert_eq!(moto.objects("flow-lossy-data", "in/").len(), 4);
    assert_eq!(moto.secrets(), ["hf-token"]);
    let repos = moto.json_call(
        "ecr",
        "AmazonEC2ContainerRegistry_V20150921.DescribeRepositories",
        "{}",
    );
    assert_eq!(
        repos["repositories"].as_array().map(Vec::len),
        Some(1),
        "{repos}"
    );
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    proxy.faults(0.10, &kinds, None);
    let destroy = a.run(&["destroy", "wf.toml", "--auto-approve"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    proxy.calm();
    assert!(moto.stacks().is_empty());
    assert!(moto.file_systems().is_empty());
    assert!(moto.secrets().is_empty());
}

/// SubmitJob has no idempotency token, so a retry after a lost answer is
/// the classic duplicate job. The SDK does not retry it; the engine's retry
/// looks for the job by the operation's token first and follows it.
#[test]
fn a_submitted_job_whose_answer_was_lost_is_not_submitted_again() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.p.write("data/a.txt", "a\n");
    a.p.write("wf.toml", KILL_CHAIN);
    proxy.schedule("batch:submitjob", &[Some(Fault::Lost)]);
    let apply = a.run(&["apply", "wf.toml", "--auto-approve", "--target", "nccl"]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert_eq!(proxy.injected(Fault::Lost), 1);
    assert_eq!(
        proxy.forwarded("batch:submitjob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    let log = a.p.read(".flow/wf/logs/nccl.log");
    assert!(
        log.contains("was already submitted by this operation"),
        "{log}"
    );
}
