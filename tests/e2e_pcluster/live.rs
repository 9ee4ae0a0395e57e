//! A live cluster on the local cloud: `pcluster` 3.16.1's own template,
//! created by moto's CloudFormation with what scripts/local-cloud/
//! cloud_pcluster_*.py adds (alarms, pcluster's cleanup custom resources,
//! the head node's wait condition and compute fleet status, deletes in
//! CloudFormation's order). Each test drives the `flow` binary as a user
//! does and looks at the local cloud behind pcluster's back.

use std::time::{Duration, Instant};

use super::https::Cloud;
use super::support::aws::Aws;
use super::support::moto::{Moto, between_all};
use super::support::{finish, wait_until};
use super::{moto_config, prepared, workflow};

/// A project on `moto` with the cluster's workflow (MaxCount `max`,
/// `stop_compute_fleet` as given) and its environment.
fn project(moto: &Cloud, max: u32, stop: bool) -> (Aws, Vec<(String, String)>, String) {
    let (pcluster, values) = prepared(moto);
    let a = moto.aws();
    a.p.write("cluster.yaml", &moto_config());
    let values = values.replace(
        r#"PLACEHOLDER_MAX_INSTANCES = "2""#,
        &format!(r#"PLACEHOLDER_MAX_INSTANCES = "{max}""#),
    );
    a.p.write("wf.toml", &with_stop(&workflow(&values), stop));
    let mut env = a.env.clone();
    env.push(("FLOW_PCLUSTER".into(), pcluster));
    (a, env, values)
}

fn with_stop(wf: &str, stop: bool) -> String {
    wf.replace(
        "suppress_validators = [\"ALL\"]",
        &format!("suppress_validators = [\"ALL\"]\nstop_compute_fleet = {stop}"),
    )
}

fn run(a: &Aws, env: &[(String, String)], args: &[&str]) -> super::support::Run {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    a.p.run_env(args, &env)
}

fn record(a: &Aws, env: &[(String, String)]) -> serde_json::Value {
    let show = run(a, env, &["state", "show", "wf.toml", "cluster"]).expect(0);
    serde_json::from_str(&show.stdout).expect("state show JSON")
}

/// Prints the moto server's log (its tracebacks: an HTTP 500 in pcluster's
/// output is one) when the test fails; the log's directory goes with it.
pub(super) struct LogOnFailure<'a>(pub(super) &'a Moto);

impl Drop for LogOnFailure<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let log = std::fs::read_to_string(&self.0.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(200);
        eprintln!(
            "--- moto log ({}), last {} lines ---\n{}",
            self.0.log.display(),
            lines.len() - from,
            lines[from..].join("\n")
        );
    }
}

/// The stacks named `name` that CloudFormation holds and has not deleted.
fn live_stacks(moto: &Moto, name: &str) -> usize {
    let xml = moto.query_call("cloudformation", "Action=ListStacks&Version=2010-05-15");
    between_all(&xml, "<member>", "</member>")
        .iter()
        .filter(|m| m.contains(&format!("<StackName>{name}</StackName>")))
        .filter(|m| !m.contains("DELETE_COMPLETE"))
        .count()
}

/// The instances of the cluster (tag `parallelcluster:cluster-name`) that
/// are not terminated.
fn live_instances(moto: &Moto, cluster: &str) -> usize {
    let xml = moto.query_call(
        "ec2",
        &format!(
            "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag:parallelcluster:cluster-name&Filter.1.Value.1={cluster}&Filter.2.Name=instance-state-name&Filter.2.Value.1=pending&Filter.2.Value.2=running&Filter.2.Value.3=stopped"
        ),
    );
    between_all(&xml, "<instanceId>", "</instanceId>").len()
}

/// What the stack left in the services its template uses.
fn leftovers(moto: &Moto) -> Vec<String> {
    let mut left = Vec::new();
    let alarms = moto.query_call("monitoring", "Action=DescribeAlarms&Version=2010-08-01&AlarmTypes.member.1=MetricAlarm&AlarmTypes.member.2=CompositeAlarm");
    left.extend(between_all(&alarms, "<AlarmName>", "</AlarmName>"));
    let enis = moto.query_call("ec2", "Action=DescribeNetworkInterfaces&Version=2016-11-15");
    left.extend(between_all(
        &enis,
        "<networkInterfaceId>",
        "</networkInterfaceId>",
    ));
    let tables = moto.json_call("dynamodb", "DynamoDB_20120810.ListTables", "{}");
    for t in tables["TableNames"].as_array().into_iter().flatten() {
        left.push(t.as_str().unwrap_or("").to_string());
    }
    let (_, zones) = moto.http("GET", "/2013-04-01/hostedzone", &[], b"");
    left.extend(between_all(&zones, "<Name>", "</Name>"));
    left
}

/// Create to CREATE_COMPLETE, a plan with nothing to do, a queue change
/// through pcluster's update with the compute fleet stopped and started
/// again, refresh, import into another project, and a destroy that leaves
/// nothing of the cluster. Each step fails if the local cloud or flow
/// stops short: e.g. without cloud_pcluster_cfn.py CreateStack is refused
/// ("references undefined resource HeadNodeHealthAlarm…"), without the head
/// node's fleet status the stop never reaches STOPPED, without the ordered
/// delete the hosted zone and ENI stay.
#[test]
fn a_cluster_is_created_updated_through_a_fleet_stop_imported_and_destroyed() {
    let moto = Cloud::start(&[]);
    let _log = LogOnFailure(&moto);
    let (a, env, values) = project(&moto, 2, true);
    let started = Instant::now();
    let apply = run(&a, &env, &["apply", "--auto-approve", "wf.toml"]);
    eprintln!("pcluster apply (create): {:?}", started.elapsed());
    assert_eq!(apply.code, 0, "{}", apply.all());
    let rec = record(&a, &env);
    assert_eq!(rec["status"], "applied", "{rec}");
    let out = &rec["outputs"];
    assert_eq!(out["status"], "CREATE_COMPLETE", "{rec}");
    assert_eq!(out["compute_fleet_status"], "RUNNING", "{rec}");
    // The head node: what the host layer will back.
    assert!(
        out["head_node_instance_id"]
            .as_str()
            .unwrap()
            .starts_with("i-"),
        "{rec}"
    );
    assert!(!out["head_node_ip"].as_str().unwrap().is_empty(), "{rec}");
    assert_eq!(live_stacks(&moto, "flow-p5"), 1);
    assert_eq!(live_instances(&moto, "flow-p5"), 1, "the head node");

    // Nothing to do.
    let plan = run(&a, &env, &["plan", "--detailed-exitcode", "wf.toml"]);
    assert_eq!(plan.code, 0, "{}", plan.all());

    // MaxCount 2 → 1: pcluster needs the fleet stopped; flow stops it,
    // updates, and starts it again.
    a.p.write(
        "wf.toml",
        &with_stop(
            &workflow(&values.replace(
                r#"PLACEHOLDER_MAX_INSTANCES = "2""#,
                r#"PLACEHOLDER_MAX_INSTANCES = "1""#,
            )),
            true,
        ),
    );
    let plan = run(&a, &env, &["plan", "--detailed-exitcode", "wf.toml"]).expect(2);
    assert!(
        plan.stdout
            .contains("queues change: flow stops the compute fleet, updates, and starts it again"),
        "{}",
        plan.stdout
    );
    let update = run(&a, &env, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(update.code, 0, "{}", update.all());
    let all = update.all();
    for said in [
        "stopping the compute fleet for the update",
        "MaxCount \"2\" → \"1\"",
        "starting the compute fleet again",
    ] {
        assert!(all.contains(said), "{said:?} missing from\n{all}");
    }
    let out = record(&a, &env)["outputs"].clone();
    assert_eq!(out["status"], "UPDATE_COMPLETE", "{out}");
    // Recorded once the fleet runs again, not as it was before the start.
    assert_eq!(out["compute_fleet_status"], "RUNNING", "{out}");
    let plan = run(&a, &env, &["plan", "--detailed-exitcode", "wf.toml"]);
    assert_eq!(plan.code, 0, "{}", plan.all());

    // Another project adopts the live cluster and has nothing to do.
    let b = moto.aws();
    b.p.write("cluster.yaml", &moto_config());
    b.p.write("wf.toml", &a.p.read("wf.toml"));
    run(&b, &env, &["import", "wf.toml", "cluster", "flow-p5"]).expect(0);
    let imported = record(&b, &env);
    assert_eq!(
        imported["outputs"]["status"], "UPDATE_COMPLETE",
        "{imported}"
    );
    assert_eq!(
        imported["outputs"]["head_node_instance_id"], out["head_node_instance_id"],
        "{imported}"
    );
    let plan = run(&b, &env, &["plan", "--detailed-exitcode", "wf.toml"]);
    assert_eq!(plan.code, 0, "{}", plan.all());

    // Destroy: the stack, its instances, alarms, table, zone and ENI go.
    let destroy = run(&a, &env, &["destroy", "--auto-approve", "wf.toml"]);
    assert_eq!(destroy.code, 0, "{}", destroy.all());
    assert_eq!(live_stacks(&moto, "flow-p5"), 0);
    assert_eq!(live_instances(&moto, "flow-p5"), 0);
    assert_eq!(leftovers(&moto), Vec::<String>::new());
    // Refresh in the importing project sees it gone and plans it anew.
    let plan = run(&b, &env, &["plan", "--detailed-exitcode", "wf.toml"]).expect(2);
    assert!(plan.all().contains("create"), "{}", plan.all());
}

/// An update pcluster refuses (MaxCount down with the fleet running, and
/// flow not allowed to stop it): pcluster's message at the setting's line
/// and column, and nothing applied: the cluster keeps its configuration
/// and its fleet runs; state still records the old inputs.
#[test]
fn an_update_pcluster_refuses_is_named_at_its_line_and_nothing_is_half_applied() {
    let moto = Cloud::start(&[]);
    let _log = LogOnFailure(&moto);
    let (a, env, values) = project(&moto, 2, false);
    run(&a, &env, &["apply", "--auto-approve", "wf.toml"]).expect(0);
    a.p.write(
        "wf.toml",
        &with_stop(
            &workflow(&values.replace(
                r#"PLACEHOLDER_MAX_INSTANCES = "2""#,
                r#"PLACEHOLDER_MAX_INSTANCES = "1""#,
            )),
            false,
        ),
    );
    let refused = run(&a, &env, &["apply", "--auto-approve", "wf.toml"]).expect(1);
    let all = refused.all();
    let line = moto_config()
        .lines()
        .position(|l| l.contains("MaxCount: PLACEHOLDER_MAX_INSTANCES"))
        .unwrap()
        + 1;
    assert!(
        all.contains(&format!(
            "cluster.yaml:{line}:11: Scheduling.SlurmQueues[compute-gpu].ComputeResources[distributed-ml].MaxCount: All compute nodes must be stopped"
        )),
        "{all}"
    );
    assert!(all.contains("stop_compute_fleet = true"), "{all}");
    // The step input to change, at its line in the workflow.
    let wf_line =
        a.p.read("wf.toml")
            .lines()
            .position(|l| l.starts_with("stop_compute_fleet"))
            .unwrap()
            + 1;
    assert!(all.contains(&format!("wf.toml:{wf_line}:")), "{all}");
    let rec = record(&a, &env);
    assert_eq!(rec["outputs"]["status"], "CREATE_COMPLETE", "{rec}");
    assert_eq!(rec["outputs"]["compute_fleet_status"], "RUNNING", "{rec}");
    assert!(rec["in_flight"].is_null(), "{rec}");
    // The plan still has the update to make.
    run(&a, &env, &["plan", "--detailed-exitcode", "wf.toml"]).expect(2);
}

/// kill -9 of flow inside create, inside update (the fleet stopped) and
/// inside delete; each apply or destroy run again ends with one cluster,
/// converged (fleet running, nothing to plan), then none.
#[test]
fn kill_9_inside_create_update_and_delete_then_apply_again_converges() {
    let moto = Cloud::start(&[]);
    let _log = LogOnFailure(&moto);
    let (a, env, values) = project(&moto, 2, true);
    let spawn = |args: &[&str]| {
        let mut c = a.p.cmd(args);
        for (k, v) in &env {
            c.env(k, v);
        }
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn flow")
    };
    // Create: killed once CloudFormation holds the stack.
    let mut first = spawn(&["apply", "--auto-approve", "wf.toml"]);
    wait_until(Duration::from_secs(120), "the cluster's stack", || {
        live_stacks(&moto, "flow-p5") == 1
    });
    first.kill().unwrap();
    let killed = finish(first);
    assert_ne!(killed.code, 0, "{}", killed.all());
    let again = run(&a, &env, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert_eq!(live_stacks(&moto, "flow-p5"), 1);
    assert_eq!(record(&a, &env)["outputs"]["status"], "CREATE_COMPLETE");

    // Update: killed once the fleet was asked to stop.
    a.p.write(
        "wf.toml",
        &with_stop(
            &workflow(&values.replace(
                r#"PLACEHOLDER_MAX_INSTANCES = "2""#,
                r#"PLACEHOLDER_MAX_INSTANCES = "1""#,
            )),
            true,
        ),
    );
    let fleet = || {
        let item = moto.json_call(
            "dynamodb",
            "DynamoDB_20120810.GetItem",
            r#"{"TableName": "parallelcluster-flow-p5", "Key": {"Id": {"S": "COMPUTE_FLEET"}}}"#,
        );
        item["Item"]["Data"]["M"]["status"]["S"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let mut second = spawn(&["apply", "--auto-approve", "wf.toml"]);
    wait_until(Duration::from_secs(120), "the fleet stopping", || {
        fleet() != "RUNNING"
    });
    second.kill().unwrap();
    finish(second);
    let again = run(&a, &env, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(again.code, 0, "{}", again.all());
    let out = record(&a, &env)["outputs"].clone();
    assert_eq!(out["status"], "UPDATE_COMPLETE", "{out}");
    assert_eq!(out["compute_fleet_status"], "RUNNING", "{out}");
    assert_eq!(fleet(), "RUNNING");
    assert_eq!(live_stacks(&moto, "flow-p5"), 1);
    let plan = run(&a, &env, &["plan", "--detailed-exitcode", "wf.toml"]);
    assert_eq!(plan.code, 0, "{}", plan.all());

    // Delete: killed once the stack is going or gone.
    let mut third = spawn(&["destroy", "--auto-approve", "wf.toml"]);
    wait_until(Duration::from_secs(120), "the stack's delete", || {
        live_stacks(&moto, "flow-p5") == 0
    });
    third.kill().unwrap();
    finish(third);
    let again = run(&a, &env, &["destroy", "--auto-approve", "wf.toml"]);
    assert_eq!(again.code, 0, "{}", again.all());
    assert_eq!(live_instances(&moto, "flow-p5"), 0);
    assert_eq!(leftovers(&moto), Vec::<String>::new());
}

/// An existing FSx for Lustre file system, made in the local cloud as AWS
/// makes one: its id has AWS's shape (`fs-` + 17 hex, which pcluster's
/// schema requires: moto's own `fs-` + 8 is refused as "String does not
/// match expected pattern"), and the cluster mounts it at /fsx and reaches
/// CREATE_COMPLETE.
#[test]
fn an_fsx_file_system_of_aws_shape_is_taken_by_the_cluster() {
    let moto = Cloud::start(&[]);
    let _log = LogOnFailure(&moto);
    let (a, env, values) = project(&moto, 2, false);
    let subnet = values
        .split("PLACEHOLDER_PRIVATE_SUBNET = \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the private subnet in the values")
        .to_string();
    let made = moto.json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.CreateFileSystem",
        &format!(
            r#"{{"FileSystemType": "LUSTRE", "StorageCapacity": 1200, "SubnetIds": ["{subnet}"], "LustreConfiguration": {{"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250}}}}"#
        ),
    );
    let id = made["FileSystem"]["FileSystemId"]
        .as_str()
        .unwrap_or_else(|| panic!("no FileSystemId in {made}"))
        .to_string();
    assert!(
        id.len() == 20 && id.starts_with("fs-") && id[3..].chars().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(
        made["FileSystem"]["DNSName"],
        format!("{id}.fsx.us-east-1.amazonaws.com"),
        "{made}"
    );
    a.p.write(
        "cluster.yaml",
        &format!(
            "{}SharedStorage:\n  - MountDir: /fsx\n    Name: fsx\n    StorageType: FsxLustre\n    FsxLustreSettings:\n      FileSystemId: {id}\n",
            moto_config()
        ),
    );
    let plan = run(&a, &env, &["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout
            .contains(&format!("shared storage: FsxLustre at /fsx ({id})")),
        "{}",
        plan.stdout
    );
    let apply = run(&a, &env, &["apply", "--auto-approve", "wf.toml"]);
    assert_eq!(apply.code, 0, "{}", apply.all());
    assert_eq!(record(&a, &env)["outputs"]["status"], "CREATE_COMPLETE");
}
