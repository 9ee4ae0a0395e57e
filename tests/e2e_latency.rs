//! The test cloud's latency model (bench/latency.toml, operations that take
//! their real length divided by 60) behind the fault proxy throttling a
//! fifth of all calls: flow waits as long as it must, starts no operation
//! twice, and a step whose operation outlasts its `timeout` keeps its intent
//! for the next apply to wait on. throttle.rs: refresh under the model's
//! per-API rate limits. s3.rs: the model's S3 latency and throughput.

#[path = "e2e_latency/s3.rs"]
mod s3;
mod support;
#[path = "e2e_latency/throttle.rs"]
mod throttle;

use support::aws::Aws;
use support::fault_proxy::{Fault, FaultProxy};
use support::moto::Moto;

/// A VPC stack, then FSx for Lustre in its subnet (ten seconds in the model).
fn workflow(fs_timeout: &str) -> String {
    format!(
        r#"
[workflow]
name = "latency"

[steps.net]
provider = "cloudformation.stack"
timeout = "2m"
[steps.net.inputs]
stack_name = "net"
template = "vpc.yaml"

[steps.fs]
provider = "fsx.lustre"
timeout = "{fs_timeout}"
[steps.fs.inputs]
storage_capacity = 1200
deployment_type = "PERSISTENT_2"
per_unit_storage_throughput = 250
subnet_ids = ["${{steps.net.outputs.SubnetId}}"]
"#
    )
}

#[test]
fn throttled_slow_operations_start_once_and_a_timeout_keeps_the_intent() {
    let moto = Moto::start_with_latency(60);
    let proxy = FaultProxy::start(moto.addr);
    proxy.faults(0.2, &[Fault::Throttle], None);
    let mut a = Aws::new(&moto, Some(&proxy.endpoint()));
    a.env.push(("FLOW_TIME_SCALE".into(), "1/60".into()));

    // FSx takes 10 s here; its step gives up after 3 s and keeps its intent.
    a.p.write("wf.toml", &workflow("3s"));
    let first = a.apply().expect(1);
    let show = a.run(&["state", "show", "wf.toml", "fs"]).expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).expect("JSON");
    assert_eq!(
        rec["in_flight"]["operation"],
        "create",
        "{rec}\n{}",
        first.all()
    );
    assert!(rec["in_flight"]["token"].is_string(), "{rec}");

    // A longer timeout: the next apply waits for the same file system.
    a.p.write("wf.toml", &workflow("2m"));
    let second = a.apply().expect(0);
    let report = moto.latency_report();
    let counts = proxy.counts();
    assert!(proxy.injected(Fault::Throttle) > 0, "{counts:?}");
    assert_eq!(proxy.forwarded("CreateStack"), 1, "{counts:?}");
    assert_eq!(
        proxy.forwarded("CreateFileSystem"),
        1,
        "{counts:?}\n{}",
        second.all()
    );
    assert_eq!(moto.file_systems().len(), 1);
    // The model held both, and flow saw each ready, once.
    let held = report["held"].as_array().expect("held");
    assert_eq!(held.len(), 2, "{report}");
    for h in held {
        assert!(h["first_seen_ready"].is_number(), "{h}");
    }
}

/// Deletes take time as AWS's do: after DeleteFileSystem and DeleteStack
/// reached moto (which removes at once), the model keeps answering
/// DELETING and DELETE_IN_PROGRESS for its `[deletes]` lengths (3 s and
/// 1 s here); flow's destroy waits both out, one after the other, and
/// notices each end.
#[test]
fn deletes_take_their_length_and_destroy_waits_them_out() {
    let moto = Moto::start_with_latency(60);
    let mut a = Aws::new(&moto, None);
    a.env.push(("FLOW_TIME_SCALE".into(), "1/60".into()));
    a.p.write("wf.toml", &workflow("2m"));
    a.apply().expect(0);
    let fs = moto.file_systems();
    assert_eq!(fs.len(), 1, "{fs:?}");

    let started = std::time::Instant::now();
    let destroy = a.spawn(&["destroy", "wf.toml", "--auto-approve"]);
    let deleting = |kind: &str| {
        moto.latency_report()["held"]
            .as_array()
            .expect("held")
            .iter()
            .any(|h| h["kind"] == kind)
    };
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the file system's delete held",
        || deleting("fsx.lustre delete"),
    );
    // The delete reached moto: its file system is gone from moto's own
    // store, while its describe answers DELETING.
    let (status, body) = moto.try_json_call(
        "fsx",
        "AWSSimbaAPIService_v20180301.DescribeFileSystems",
        &format!(r#"{{"FileSystemIds": ["{}"]}}"#, fs[0]),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""Lifecycle": "DELETING""#), "{body}");
    let auth = support::moto::authorization("fsx");
    let (status, own) = moto.http(
        "POST",
        "/",
        &[
            (
                "X-Amz-Target",
                "AWSSimbaAPIService_v20180301.DescribeFileSystems",
            ),
            ("Content-Type", "application/x-amz-json-1.1"),
            ("Authorization", &auth),
            ("X-Flow-Model", "off"),
        ],
        b"{}",
    );
    assert_eq!(status, 200, "{own}");
    assert!(
        !own.contains(&fs[0]),
        "moto itself still holds {}: {own}",
        fs[0]
    );
    // While the stack's delete is held, a stack of the same name cannot be
    // made again, as on AWS (moto, which deleted it at once, would).
    support::wait_until(
        std::time::Duration::from_secs(30),
        "the stack's delete held",
        || deleting("cloudformation.stack delete"),
    );
    let auth = support::moto::authorization("cloudformation");
    let (status, again) = moto.http(
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Authorization", &auth),
        ],
        b"Action=CreateStack&Version=2010-05-15&StackName=net&TemplateBody=%7B%22Resources%22%3A%7B%22H%22%3A%7B%22Type%22%3A%22AWS%3A%3ACloudFormation%3A%3AWaitConditionHandle%22%7D%7D%7D",
    );
    assert_eq!(status, 400, "{again}");
    assert!(again.contains("AlreadyExistsException"), "{again}");
    let destroyed = support::finish(destroy);
    let took = started.elapsed();
    assert_eq!(destroyed.code, 0, "{}", destroyed.all());

    // Both deletes held for their lengths, each looked at while in progress
    // and seen ended; destroy took at least both, in order.
    let report = moto.latency_report();
    let held: Vec<&serde_json::Value> = report["held"]
        .as_array()
        .expect("held")
        .iter()
        .filter(|h| h["kind"].as_str().unwrap().ends_with(" delete"))
        .collect();
    assert_eq!(held.len(), 2, "{report}");
    for h in &held {
        assert!(h["looks"].as_u64().unwrap() >= 2, "{h}");
        assert!(h["first_seen_ready"].is_number(), "{h}");
    }
    let fs_delete = held
        .iter()
        .find(|h| h["kind"] == "fsx.lustre delete")
        .expect("fs");
    let stack_delete = held
        .iter()
        .find(|h| h["kind"] == "cloudformation.stack delete")
        .expect("stack");
    assert!(
        stack_delete["created"].as_f64() >= fs_delete["first_seen_ready"].as_f64(),
        "the stack's delete began before the file system was gone: {report}"
    );
    assert!(took >= std::time::Duration::from_secs(4), "{took:?}");
    assert!(moto.file_systems().is_empty());
    assert!(moto.stacks().is_empty(), "{:?}", moto.stacks());
}
