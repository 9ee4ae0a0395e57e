//! The test cloud's latency model (bench/latency.toml, operations that take
//! their real length divided by 60) behind the fault proxy throttling a
//! fifth of all calls: flow waits as long as it must, starts no operation
//! twice, and a step whose operation outlasts its `timeout` keeps its intent
//! for the next apply to wait on.

mod support;

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
