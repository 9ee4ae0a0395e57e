use super::*;

/// Looks a waiter makes at an operation that ends `done` into the wait, and
/// how late the look that sees it ended comes (no clock: the schedule only).
fn simulate(expected: Option<Duration>, done: Duration) -> (u32, Duration) {
    let (mut t, mut last, mut looks) = (Duration::ZERO, Duration::ZERO, 1);
    while t < done {
        last = next_delay(expected, t, last, looks);
        t += last;
        looks += 1;
    }
    (looks, t - done)
}

/// What a waiter polling every 15 s makes over `done`: one look at once,
/// one per 15 s after.
fn budget(done: Duration) -> u32 {
    (done.as_secs_f64() / 15.0).ceil() as u32 + 1
}

const LENGTHS: [u64; 6] = [60, 90, 180, 300, 600, 900];

/// From 90 s up. Shorter operations have too small a budget for every near
/// look (a 60 s one may make 5 looks in all): they keep those at and after
/// the expected end (see `a_minute_long_operation_is_looked_at_from_its_expected_end`).
#[test]
fn an_end_near_the_expected_one_is_seen_within_three_percent() {
    for e in LENGTHS
        .map(Duration::from_secs)
        .into_iter()
        .filter(|e| *e >= Duration::from_secs(90))
    {
        for fraction in [0.93, 0.97, 1.0, 1.01, 1.04, 1.05] {
            let done = e.mul_f64(fraction);
            let (looks, lag) = simulate(Some(e), done);
            assert!(
                lag <= e.mul_f64(0.03),
                "{e:?} ending at {fraction}: seen {lag:?} late"
            );
            assert!(
                looks <= budget(done),
                "{e:?} ending at {fraction}: {looks} looks, a 15 s waiter {}",
                budget(done)
            );
        }
    }
}

/// A minute-long operation (a Batch compute environment's stack) has room
/// for four looks after the first one: one just before its expected end
/// and three at and after it, so an end up to 5 % late is seen within
/// 2.5 % of its length, and one up to 2.5 % early within 4 %.
#[test]
fn a_minute_long_operation_is_looked_at_from_its_expected_end() {
    let e = Duration::from_secs(60);
    for fraction in [1.0, 1.001, 1.01, 1.02, 1.04, 1.05] {
        let done = e.mul_f64(fraction);
        let (looks, lag) = simulate(Some(e), done);
        assert!(
            lag <= e.mul_f64(0.025) + Duration::from_millis(1),
            "ending at {fraction}: seen {lag:?} late"
        );
        assert!(
            looks <= budget(done),
            "ending at {fraction}: {looks} looks, a 15 s waiter {}",
            budget(done)
        );
    }
    for fraction in [0.975, 0.99] {
        let (_, lag) = simulate(Some(e), e.mul_f64(fraction));
        assert!(
            lag <= e.mul_f64(0.04),
            "ending at {fraction}: seen {lag:?} late"
        );
    }
}

#[test]
fn long_operations_cost_fewer_calls_than_a_fifteen_second_waiter() {
    for e in [300, 600, 900].map(Duration::from_secs) {
        let (looks, _) = simulate(Some(e), e);
        assert!(looks < budget(e), "{e:?}: {looks} looks");
    }
}

#[test]
fn early_and_late_ends_stay_within_the_budget() {
    for e in LENGTHS.map(Duration::from_secs) {
        for fraction in [0.1, 0.5, 0.8, 1.5, 3.0, 10.0] {
            let done = e.mul_f64(fraction);
            let (looks, lag) = simulate(Some(e), done);
            assert!(
                looks <= budget(done),
                "{e:?} ending at {fraction}: {looks} looks, a 15 s waiter {}",
                budget(done)
            );
            // An early end is seen by a coarse look, or at the latest when
            // the looks near the expected end begin; a late one within the
            // coarse spacing too.
            let coarse = (BUDGET * 2).max(e / 8);
            let window_start = Window::of(e).start;
            let seen = done + lag;
            assert!(
                lag <= coarse
                    || (fraction < 1.0 && seen <= window_start + Duration::from_millis(1)),
                "{e:?} ending at {fraction}: {lag:?} late"
            );
        }
    }
}

#[test]
fn unknown_lengths_grow_to_fifteen_seconds() {
    for secs in [5, 30, 120, 3600] {
        let done = Duration::from_secs(secs);
        let (looks, lag) = simulate(None, done);
        assert!(looks <= budget(done) + 5, "{secs} s: {looks} looks");
        assert!(lag <= BUDGET, "{secs} s: {lag:?} late");
    }
    assert_eq!(next_delay(None, Duration::ZERO, Duration::ZERO, 1), FIRST);
    assert_eq!(
        next_delay(None, Duration::from_secs(600), BUDGET, 9),
        BUDGET
    );
}

#[test]
fn the_scale_reads_fractions_and_refuses_nonsense() {
    assert_eq!(parse_scale("1/60"), Some(1.0 / 60.0));
    assert_eq!(parse_scale(" 0.5 "), Some(0.5));
    assert_eq!(parse_scale("1"), Some(1.0));
    // Below 1/600 a schedule would spin.
    for bad in ["0", "-1", "2", "1/0", "fast", "", "1/6000", "1e-6"] {
        assert_eq!(parse_scale(bad), None, "{bad}");
    }
    let d = Duration::from_secs(600);
    assert_eq!(scaled(d, 1.0 / 60.0), Duration::from_secs(10));
    assert_eq!(unscaled(Duration::from_secs(10), 1.0 / 60.0), d);
}

#[test]
fn stacks_last_as_long_as_their_slowest_resource_type() {
    let vpc =
        "Resources:\n  Nat:\n    Type: AWS::EC2::NatGateway\n  Vpc:\n    Type: AWS::EC2::VPC\n";
    assert_eq!(expected::stack(vpc), Duration::from_secs(180));
    assert_eq!(
        expected::stack("Type: AWS::SecretsManager::Secret"),
        expected::STACK_DEFAULT
    );
}

/// `"key" = seconds` lines of one `[section]` of bench/latency.toml.
fn table(section: &str) -> Vec<(String, u64)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/latency.toml");
    let text = std::fs::read_to_string(path).expect("bench/latency.toml");
    let mut inside = false;
    let mut rows = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if let (true, Some((key, value))) = (inside, line.split_once('=')) {
            let seconds = value.trim().parse().expect("seconds");
            rows.push((key.trim().trim_matches('"').to_string(), seconds));
        }
    }
    rows
}

#[test]
fn the_expected_lengths_are_the_latency_models() {
    let ops = table("operations");
    let of = |kind: &str| {
        ops.iter()
            .find(|(k, _)| k == kind)
            .map(|(_, s)| Duration::from_secs(*s))
    };
    assert_eq!(of("eks.cluster"), Some(expected::EKS_CLUSTER));
    assert_eq!(of("eks.nodegroup"), Some(expected::EKS_NODEGROUP));
    assert_eq!(of("fsx.lustre"), Some(expected::FSX_LUSTRE));
    let stacks = table("cloudformation");
    for (kind, secs) in &stacks {
        let want = Duration::from_secs(*secs);
        if kind == "default" {
            assert_eq!(want, expected::STACK_DEFAULT);
        } else {
            assert_eq!(
                expected::STACK_TYPES
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map(|(_, d)| *d),
                Some(want),
                "{kind}"
            );
        }
    }
    assert_eq!(stacks.len(), expected::STACK_TYPES.len() + 1);
}

#[test]
fn the_expected_delete_lengths_are_the_latency_models() {
    let deletes = table("deletes");
    let want = [
        ("cloudformation.stack", expected::STACK_DELETE),
        ("eks.cluster", expected::EKS_CLUSTER_DELETE),
        ("eks.nodegroup", expected::EKS_NODEGROUP_DELETE),
        ("fsx.lustre", expected::FSX_LUSTRE_DELETE),
    ];
    let got: Vec<(String, Duration)> = deletes
        .iter()
        .map(|(k, s)| (k.clone(), Duration::from_secs(*s)))
        .collect();
    assert_eq!(
        got,
        want.iter()
            .map(|(k, d)| (k.to_string(), *d))
            .collect::<Vec<_>>()
    );
}
