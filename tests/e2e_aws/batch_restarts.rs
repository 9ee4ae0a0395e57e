//! `batch.job` with `restarts` and `checkpoint_s3`: a training that
//! survives a node, through the `flow` binary against moto.
//!
//! The local cloud gives moto's multi-node jobs their nodes, each on an
//! EC2 instance (scripts/local-cloud/cloud_batch_mnp.py), lets node N's
//! host die in the next K jobs (`#N dies K` in the fault table the server
//! reads: its job FAILED "Host EC2 (instance i-…) terminated.", its
//! instance terminated, the job FAILED), and runs `train EPOCHS` on the
//! main node (batch_training.py: a checkpoint put in S3 per epoch,
//! resuming after the one FLOW_RESUME_FROM names). The assertions are on
//! what Batch, EC2, S3 and CloudWatch Logs say happened, and on what flow
//! named, checked against them.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::aws::Aws;
use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::{BatchCompute, Moto, between_all};
use crate::support::{finish, signal, wait_until};

const BUCKET: &str = "ckpt";

/// The Batch stacks of the Batch chain and a two-node training on their
/// queue with `restarts`.
fn workflow(restarts: u32) -> String {
    format!(
        r#"
[workflow]
name = "batch-train"
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
parameters = {{ VPCStackParameter = "flow-vpc" }}

[steps.train]
provider = "batch.job"
[steps.train.inputs]
job_name = "train"
job_queue = "${{steps.batch.outputs.DistributedDeepLearningJQ}}"
job_definition = "trainer"
num_nodes = 2
command = ["train", "6"]
restarts = {restarts}
checkpoint_s3 = "s3://{BUCKET}/run-1/"
success_pattern = "training done"
"#
    )
}

/// moto and the Batch compute emulator reading the test's fault table,
/// the project, the trainer's multi-node job definition and the bucket.
struct Trainer {
    moto: Moto,
    proxy: Option<FaultProxy>,
    _compute: BatchCompute,
    a: Aws,
    _dir: tempfile::TempDir,
}

impl Trainer {
    /// With `faults` planted, `restarts` allowed; through a fault proxy
    /// with `proxy`.
    fn start(faults: &str, restarts: u32, proxy: bool) -> Trainer {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("faults");
        std::fs::write(&table, faults).unwrap();
        let env = [("FLOW_TEST_FAULTS", table.to_str().unwrap())];
        let moto = Moto::start_with(&env);
        let proxy = proxy.then(|| FaultProxy::start(moto.addr));
        let compute = moto.batch_compute_with(&env);
        let a = Aws::new(&moto, proxy.as_ref().map(|p| p.endpoint()).as_deref());
        a.p.write("wf.toml", &workflow(restarts));
        let (status, body) = moto.rest_call(
            "batch",
            "POST",
            "/v1/registerjobdefinition",
            &json!({
                "jobDefinitionName": "trainer",
                "type": "multinode",
                "nodeProperties": {"numNodes": 2, "mainNode": 0, "nodeRangeProperties": [
                    {"targetNodes": "0:", "container": {
                        "image": "public.ecr.aws/hpc-cloud/nccl-tests:latest",
                        "vcpus": 96, "memory": 1000000, "command": ["true"]}}]}
            })
            .to_string(),
        );
        assert_eq!(status, 200, "{body}");
        let (status, body) = moto.rest_call("s3", "PUT", &format!("/{BUCKET}"), "");
        assert_eq!(status, 200, "{body}");
        Trainer {
            moto,
            proxy,
            _compute: compute,
            a,
            _dir: dir,
        }
    }

    /// The jobs Batch lists named `name` (any status), as DescribeJobs
    /// answers them.
    fn jobs(&self, name: &str) -> Vec<Value> {
        let queue = self
            .a
            .run(&["output", "wf.toml", "batch.DistributedDeepLearningJQ"])
            .expect(0);
        let (status, body) = self.moto.rest_call(
            "batch",
            "POST",
            "/v1/listjobs",
            &json!({"jobQueue": queue.stdout.trim(),
                "filters": [{"name": "JOB_NAME", "values": [name]}]})
            .to_string(),
        );
        assert_eq!(status, 200, "{body}");
        let list: Value = serde_json::from_str(&body).unwrap();
        let ids: Vec<String> = list["jobSummaryList"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["jobName"] == name)
            .map(|j| j["jobId"].as_str().unwrap().to_string())
            .collect();
        ids.iter().map(|id| self.describe(id)).collect()
    }

    /// DescribeJobs' answer for `id` (a job or a node, `JOBID#N`).
    fn describe(&self, id: &str) -> Value {
        let (status, body) = self.moto.rest_call(
            "batch",
            "POST",
            "/v1/describejobs",
            &json!({"jobs": [id]}).to_string(),
        );
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["jobs"][0].clone()
    }

    /// What the main node of job `id` printed (its own stream).
    fn main_log(&self, id: &str) -> String {
        let node = self.describe(&format!("{id}#0"));
        let stream = node["container"]["logStreamName"]
            .as_str()
            .unwrap()
            .to_string();
        let mut text = String::new();
        wait_until(Duration::from_secs(20), "the main node's log", || {
            let (status, body) = self.moto.try_json_call(
                "logs",
                "Logs_20140328.GetLogEvents",
                &json!({"logGroupName": "/aws/batch/job", "logStreamName": stream,
                    "startFromHead": true})
                .to_string(),
            );
            if status != 200 {
                return false;
            }
            let v: Value = serde_json::from_str(&body).unwrap();
            text = v["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| format!("{}\n", e["message"].as_str().unwrap()))
                .collect();
            !text.is_empty()
        });
        text
    }

    /// EC2's state of `instance`.
    fn instance_state(&self, instance: &str) -> String {
        let xml = self.moto.query_call(
            "ec2",
            &format!("Action=DescribeInstances&Version=2016-11-15&InstanceId.1={instance}"),
        );
        let at = xml.find("<instanceState>").expect("an instance state");
        between_all(&xml[at..], "<name>", "</name>")[0].clone()
    }

    /// The run history's values of the newest run of the training.
    fn last_run(&self) -> Value {
        let runs = self.a.run(&["runs", "wf.toml", "--json"]).expect(0);
        let runs: Value = serde_json::from_str(&runs.stdout).expect("JSON");
        runs.as_array()
            .and_then(|r| r.iter().rfind(|r| r["step"] == "train"))
            .map(|r| r["values"].clone())
            .unwrap_or_else(|| panic!("no run of the training in {runs}"))
    }
}

/// The value of `name` in a container's environment.
fn env_of(container: &Value, name: &str) -> Option<String> {
    container["environment"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

/// The last checkpoint a log says was saved.
fn last_saved(log: &str) -> String {
    log.lines()
        .rev()
        .find_map(|l| l.strip_prefix("saved checkpoint "))
        .unwrap_or_else(|| panic!("no checkpoint saved in:\n{log}"))
        .to_string()
}

/// Node 1's host dies in the first attempt: that attempt is FAILED naming
/// node 1 and the instance Batch and EC2 say it lost; the second is a new
/// job told to resume from the newest checkpoint the first saved, which
/// it does, and succeeds; `flow runs` and the `attempts` output show both.
#[test]
fn a_node_that_dies_mid_training_is_named_and_the_training_resumes_from_its_checkpoint() {
    let t = Trainer::start("#1 dies 1\n", 2, false);
    let out = t.a.apply().expect(0).all();
    assert!(
        out.contains("up to 2 restarts") || out.contains("Apply complete"),
        "{out}"
    );

    // Batch: attempt 1 FAILED, its node 1 on a host that EC2 terminated.
    let first = t.jobs("train");
    assert_eq!(first.len(), 1, "{first:?}");
    let first_id = first[0]["jobId"].as_str().unwrap().to_string();
    assert_eq!(first[0]["status"], "FAILED", "{}", first[0]);
    let node = t.describe(&format!("{first_id}#1"));
    let reason = node["statusReason"].as_str().unwrap().to_string();
    let lost = reason
        .strip_prefix("Host EC2 (instance ")
        .and_then(|r| r.strip_suffix(") terminated."))
        .unwrap_or_else(|| panic!("node 1 did not lose its host: {node}"))
        .to_string();
    assert_eq!(t.instance_state(&lost), "terminated");

    // Attempt 2: one new job, told the newest checkpoint attempt 1 saved
    // (its own log's last), resumed from it, succeeded on a new instance.
    let second = t.jobs("train-a2");
    assert_eq!(second.len(), 1, "{second:?}");
    let second_id = second[0]["jobId"].as_str().unwrap().to_string();
    assert_eq!(second[0]["status"], "SUCCEEDED", "{}", second[0]);
    let saved = last_saved(&t.main_log(&first_id));
    let main = t.describe(&format!("{second_id}#0"));
    assert_eq!(
        env_of(&main["container"], "FLOW_RESUME_FROM"),
        Some(saved.clone())
    );
    assert_eq!(
        env_of(&main["container"], "FLOW_ATTEMPT").as_deref(),
        Some("2")
    );
    let listed: Vec<String> = t
        .moto
        .objects(BUCKET, "run-1/")
        .into_iter()
        .map(|k| format!("s3://{BUCKET}/{k}"))
        .collect();
    assert!(listed.contains(&saved), "{listed:?}");
    let log2 = t.main_log(&second_id);
    assert!(log2.contains(&format!("resumed from {saved}")), "{log2}");
    assert_ne!(t.moto.instance_of_batch_node(&second_id, 1), lost);

    // flow named the node and its instance, and tells both attempts.
    let attempts: Value = serde_json::from_str(
        &t.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0)
            .stdout,
    )
    .unwrap();
    assert_eq!(attempts.as_array().unwrap().len(), 2, "{attempts}");
    assert_eq!(attempts[0]["job_id"], first_id.as_str());
    assert_eq!(attempts[0]["status"], "FAILED");
    assert_eq!(
        attempts[0]["failed_nodes"],
        json!([format!("node 1 ({lost}): {reason}")]),
        "{attempts}"
    );
    assert_eq!(attempts[1]["job_id"], second_id.as_str());
    assert_eq!(attempts[1]["resumed_from"], saved.as_str());
    let run = t.last_run();
    assert_eq!(run["attempts"], json!(2), "{run}");
    let line1 = run["attempt_1"].as_str().unwrap();
    assert!(
        line1.contains(&first_id) && line1.contains(&format!("node 1 ({lost})")),
        "{run}"
    );
    let line2 = run["attempt_2"].as_str().unwrap();
    assert!(
        line2.contains("SUCCEEDED") && line2.contains(&saved),
        "{run}"
    );
}

/// kill -9 of flow while attempt 2's SubmitJob answer is held (moto made
/// the job; flow never heard): the next apply finds that job by its
/// token and follows it. Exactly one job for attempt 2, resumed, done.
#[test]
fn kill_9_during_a_restart_s_submit_makes_no_second_job() {
    let t = Trainer::start("#1 dies 1\n", 2, true);
    let proxy = t.proxy.as_ref().unwrap();
    t.a.run(&["apply", "wf.toml", "--auto-approve", "--target", "batch"])
        .expect(0);
    // The checkpoint listing comes between the two attempts: held, so the
    // hold on SubmitJob is set before attempt 2's is sent.
    proxy.hold(&format!("s3:GET /{BUCKET}"), Duration::from_secs(2));
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "the checkpoint listing", || {
        proxy.forwarded(&format!("s3:GET /{BUCKET}")) >= 1
    });
    proxy.hold("batch:submitjob", Duration::from_secs(120));
    wait_until(
        Duration::from_secs(60),
        "attempt 2's SubmitJob at moto",
        || proxy.forwarded("batch:submitjob") >= 2,
    );
    signal(&child, libc::SIGKILL);
    finish(child);
    assert_eq!(t.jobs("train-a2").len(), 1, "moto made attempt 2's job");
    // The intent had attempt 2 as being submitted, with its checkpoint,
    // before its SubmitJob: no job id for it yet.
    let show = t.a.run(&["state", "show", "wf.toml", "train"]).expect(0);
    let rec: Value = serde_json::from_str(&show.stdout).unwrap();
    let id = rec["in_flight"]["id"].as_str().unwrap_or_default();
    assert!(id.contains(&format!(",-@s3://{BUCKET}/run-1/")), "{rec}");

    proxy.calm();
    let out = t.a.apply().expect(0).all();
    let second = t.jobs("train-a2");
    assert_eq!(second.len(), 1, "one job for attempt 2: {second:?}");
    assert!(
        out.contains("was already submitted by this operation"),
        "{out}"
    );
    assert_eq!(second[0]["status"], "SUCCEEDED");
    assert_eq!(
        proxy.forwarded("batch:submitjob"),
        2,
        "{:?}",
        proxy.counts().forwarded
    );
    let id = second[0]["jobId"].as_str().unwrap();
    assert!(t.main_log(id).contains("resumed from s3://"), "resumed");
    assert_eq!(t.last_run()["attempts"], json!(2));
}

/// Node 1 dies in every attempt: with one restart the step fails after
/// two jobs, its error naming each attempt with its lost instance.
#[test]
fn restarts_exhausted_name_every_attempt() {
    let t = Trainer::start("#1 dies 5\n", 1, false);
    let out = t.a.apply().expect(1).all();
    let jobs: Vec<Value> = ["train", "train-a2"]
        .iter()
        .flat_map(|n| t.jobs(n))
        .collect();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(t.jobs("train-a3").is_empty());
    assert!(out.contains("failed on every attempt (2 of 2)"), "{out}");
    for (n, job) in jobs.iter().enumerate() {
        let id = job["jobId"].as_str().unwrap();
        let reason = t.describe(&format!("{id}#1"))["statusReason"].clone();
        let instance = reason
            .as_str()
            .and_then(|r| r.strip_prefix("Host EC2 (instance "))
            .and_then(|r| r.strip_suffix(") terminated."))
            .unwrap_or_else(|| panic!("{reason}"));
        assert!(
            out.contains(&format!("attempt {}: job ", n + 1))
                && out.contains(&format!("({id}) FAILED"))
                && out.contains(&format!("node 1 ({instance})")),
            "{out}"
        );
    }
}

/// Node 1 hangs in the first attempt (its rank answers no more; the main
/// node prints NCCL's warning naming it, then nothing): after
/// `hang_after` flow terminates the job (Batch ends it FAILED with flow's
/// reason), names node 1 and its instance from NCCL's line, and attempt 2
/// resumes from the newest checkpoint attempt 1 saved.
#[test]
fn a_hung_attempt_is_terminated_and_the_training_resumes() {
    let t = Trainer::start("#1 hangs 1\n", 1, false);
    t.a.p.write(
        "wf.toml",
        &workflow(1).replace("success_pattern", "hang_after = \"3s\"\nsuccess_pattern"),
    );
    let out = t.a.apply().expect(0).all();
    let first = t.jobs("train");
    assert_eq!(first.len(), 1, "{first:?}");
    let first_id = first[0]["jobId"].as_str().unwrap().to_string();
    assert_eq!(first[0]["status"], "FAILED", "{}", first[0]);
    let reason = first[0]["statusReason"].as_str().unwrap();
    assert_eq!(reason, "flow: hung: no new line in its log for 3s", "{out}");
    let hung_instance = t.moto.instance_of_batch_node(&first_id, 1);
    let saved = last_saved(&t.main_log(&first_id));
    let second = t.jobs("train-a2");
    assert_eq!(second.len(), 1, "{second:?}");
    let second_id = second[0]["jobId"].as_str().unwrap().to_string();
    assert_eq!(second[0]["status"], "SUCCEEDED");
    let main = t.describe(&format!("{second_id}#0"));
    assert_eq!(
        env_of(&main["container"], "FLOW_RESUME_FROM"),
        Some(saved.clone())
    );
    assert!(
        t.main_log(&second_id)
            .contains(&format!("resumed from {saved}"))
    );

    let attempts: Value = serde_json::from_str(
        &t.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0)
            .stdout,
    )
    .unwrap();
    assert_eq!(attempts[0]["status"], "HUNG", "{attempts}");
    assert_eq!(attempts[0]["cause"], "no new line in its log for 3s");
    let suspects = attempts[0]["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "{attempts}");
    let s = suspects[0].as_str().unwrap();
    assert!(
        s.starts_with(&format!(
            "suspect node 1 ({hung_instance}): NCCL names peer "
        )),
        "{attempts}"
    );
    assert_eq!(attempts[1]["status"], "SUCCEEDED");
}

/// Node 1 stalls the collective while the main node goes on printing
/// NCCL's warnings (so no quiet log for `hang_after`): with
/// `hang_without_loss` and `parse = "torchrun"`, no new loss for 3 s is a
/// hang; the job is terminated, and attempt 2 resumes and succeeds.
#[test]
fn a_training_that_prints_but_logs_no_loss_is_hung() {
    let t = Trainer::start("#1 stalls 1\n", 1, false);
    t.a.p.write(
        "wf.toml",
        &workflow(1).replace(
            "success_pattern",
            "hang_without_loss = \"3s\"\nparse = \"torchrun\"\nsuccess_pattern",
        ),
    );
    t.a.apply().expect(0);
    let first = t.jobs("train");
    let first_id = first[0]["jobId"].as_str().unwrap().to_string();
    assert_eq!(first[0]["status"], "FAILED", "{}", first[0]);
    let reason = first[0]["statusReason"].as_str().unwrap();
    assert!(
        reason.starts_with("flow: hung: no new loss for 3s (after "),
        "{reason}"
    );
    // The log went on after the last loss: a quiet-log rule would not
    // have seen a hang yet.
    let log = t.main_log(&first_id);
    let last_loss = log.rfind("| Loss: ").unwrap();
    assert!(log[last_loss..].matches("NCCL WARN").count() >= 2, "{log}");
    let second = t.jobs("train-a2");
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0]["status"], "SUCCEEDED");
    let attempts: Value = serde_json::from_str(
        &t.a.run(&["output", "wf.toml", "train.attempts", "--json"])
            .expect(0)
            .stdout,
    )
    .unwrap();
    assert_eq!(attempts[0]["status"], "HUNG", "{attempts}");
    assert_eq!(attempts[1]["resumed_from"], last_saved(&log).as_str());
}

/// kill -9 of flow while its TerminateJob of a hung attempt is answered
/// (held after Batch took it): the intent had the attempt as hung before
/// the call, so the next apply counts it HUNG, terminates nothing again
/// and submits attempt 2 once.
#[test]
fn kill_9_while_terminating_a_hung_attempt_terminates_once() {
    let t = Trainer::start("#1 hangs 1\n", 1, true);
    let proxy = t.proxy.as_ref().unwrap();
    t.a.p.write(
        "wf.toml",
        &workflow(1).replace("success_pattern", "hang_after = \"3s\"\nsuccess_pattern"),
    );
    proxy.hold("batch:terminatejob", Duration::from_secs(120));
    let child = t.a.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(
        Duration::from_secs(60),
        "the hung job's TerminateJob",
        || proxy.forwarded("batch:terminatejob") >= 1,
    );
    signal(&child, libc::SIGKILL);
    finish(child);
    let show = t.a.run(&["state", "show", "wf.toml", "train"]).expect(0);
    let rec: Value = serde_json::from_str(&show.stdout).unwrap();
    let id = rec["in_flight"]["id"].as_str().unwrap_or_default();
    assert!(id.contains("~no new line in its log for 3s"), "{rec}");

    proxy.calm();
    t.a.apply().expect(0);
    assert_eq!(
        proxy.forwarded("batch:terminatejob"),
        1,
        "{:?}",
        proxy.counts().forwarded
    );
    assert_eq!(t.jobs("train").len(), 1);
    let second = t.jobs("train-a2");
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0]["status"], "SUCCEEDED");
    let run = t.last_run();
    assert!(
        run["attempt_1"]
            .as_str()
            .unwrap()
            .contains("HUNG: no new line"),
        "{run}"
    );
}

/// `checkpoint_s3` that is not an s3:// URI, without `restarts`, and
/// `restarts` out of range: refused by validate at their lines.
#[test]
fn bad_restart_inputs_are_refused_at_validate() {
    let p = crate::support::Project::new();
    let wf = workflow(2).replace("checkpoint_s3 = \"s3://", "checkpoint_s3 = \"/fsx/");
    p.write("wf.toml", &wf);
    let line = wf
        .lines()
        .position(|l| l.starts_with("checkpoint_s3"))
        .unwrap()
        + 1;
    let out = p.run(&["validate", "wf.toml"]).expect(1).all();
    assert!(out.contains("is not an s3:// URI"), "{out}");
    assert!(out.contains(&format!("wf.toml:{line}:")), "{out}");

    let wf = workflow(2).replace("restarts = 2\n", "");
    p.write("wf.toml", &wf);
    let out = p.run(&["validate", "wf.toml"]).expect(1).all();
    assert!(out.contains("the step has no `restarts`"), "{out}");

    let wf = workflow(101);
    p.write("wf.toml", &wf);
    let line = wf.lines().position(|l| l.starts_with("restarts")).unwrap() + 1;
    let out = p.run(&["validate", "wf.toml"]).expect(1).all();
    assert!(
        out.contains("`restarts` 101 is not a count from 0 to 100"),
        "{out}"
    );
    assert!(out.contains(&format!("wf.toml:{line}:")), "{out}");
}
