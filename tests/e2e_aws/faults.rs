//! Throttling and server errors injected by the fault proxy: the apply
//! still converges.

use std::time::Duration;

use crate::support::aws::{Aws, MANY, assert_many_made_once, destroy_many_under_faults};
use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::moto::Moto;

#[test]
fn throttling_and_server_errors_injected_and_the_apply_still_converges() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let a = Aws::new(&moto, Some(&proxy.endpoint()));
    for i in 0..4 {
        a.p.write(&format!("data/f{i}.txt"), &format!("file {i}\n"));
    }
    a.p.write("wf.toml", MANY);
    proxy.slow_by(Duration::from_millis(300));
    let kinds = [
        Fault::Throttle,
        Fault::TooMany,
        Fault::Internal,
        Fault::Unavailable,
        Fault::Reset,
        Fault::Slow,
    ];
    proxy.faults(0.35, &kinds, None);
    let apply = a.apply();
    let counts = proxy.counts();
    assert_eq!(apply.code, 0, "{}\n{counts:?}", apply.all());
    for kind in kinds {
        assert!(proxy.injected(kind) > 0, "no {kind:?} injected: {counts:?}");
    }
    assert!(
        apply.stdout.contains("Apply complete: 7 created"),
        "{}",
        apply.stdout
    );

    // Every object exactly once despite the retries.
    proxy.calm();
    assert_many_made_once(&moto, &proxy);
    assert_eq!(
        moto.secret_value("hf-token"),
        "hf_not_really_a_token_0123456789"
    );
    for f in a.p.state_files() {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("hf_not_really"),
            "{} holds the secret",
            f.display()
        );
    }
    a.run(&["plan", "wf.toml", "--detailed-exitcode"]).expect(0);

    // Destroy converges through faults too.
    destroy_many_under_faults(&a, &moto, &proxy, 0.25, &kinds);
}
