//! When to look again at a long cloud operation, knowing how long it
//! usually takes: rarely while it cannot be done yet, often around its
//! expected end, so the end is noticed within a few percent of the
//! operation's length without more calls than a waiter polling every 15 s.
//!
//! The expected lengths are real ones (minutes). `FLOW_TIME_SCALE` (a factor
//! such as `1/60` or `0.0167`, for tests and benchmarks only) shrinks every
//! wait of the schedule by that factor, matching the test cloud's latency
//! model (bench/latency.toml), which divides the same lengths by 60.

use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that scales every pacing wait (tests and bench only).
pub const TIME_SCALE_ENV: &str = "FLOW_TIME_SCALE";

/// How long operations usually take, in real time; the same figures, with
/// their sources, as `bench/latency.toml`.
pub mod expected {
    use std::time::Duration;

    /// An EKS control plane, CREATING to ACTIVE.
    pub const EKS_CLUSTER: Duration = Duration::from_secs(600);
    /// A managed node group, CREATING to ACTIVE.
    pub const EKS_NODEGROUP: Duration = Duration::from_secs(300);
    /// An FSx for Lustre file system, CREATING to AVAILABLE.
    pub const FSX_LUSTRE: Duration = Duration::from_secs(600);

    /// Stack lengths by the slowest resource type a template holds.
    pub const STACK_TYPES: &[(&str, Duration)] = &[
        ("AWS::EC2::NatGateway", Duration::from_secs(180)),
        ("AWS::Batch::ComputeEnvironment", Duration::from_secs(60)),
        ("AWS::EKS::Cluster", EKS_CLUSTER),
        ("AWS::EKS::Nodegroup", EKS_NODEGROUP),
        ("AWS::FSx::FileSystem", FSX_LUSTRE),
        ("AWS::IAM::Role", Duration::from_secs(30)),
        ("AWS::IAM::OIDCProvider", Duration::from_secs(15)),
        ("AWS::EC2::LaunchTemplate", Duration::from_secs(10)),
    ];

    /// A stack, DELETE_IN_PROGRESS until gone (an estimate: no published figure).
    pub const STACK_DELETE: Duration = Duration::from_secs(60);
    /// An EKS control plane, DELETING until gone (an estimate).
    pub const EKS_CLUSTER_DELETE: Duration = Duration::from_secs(240);
    /// A managed node group, DELETING until gone (an estimate).
    pub const EKS_NODEGROUP_DELETE: Duration = Duration::from_secs(180);
    /// An FSx for Lustre file system, DELETING until gone (an estimate).
    pub const FSX_LUSTRE_DELETE: Duration = Duration::from_secs(180);

    /// A stack whose template holds none of [`STACK_TYPES`].
    pub const STACK_DEFAULT: Duration = Duration::from_secs(60);

    /// How long a stack of `template` (YAML or JSON) usually takes to create:
    /// as long as its slowest resource type.
    pub fn stack(template: &str) -> Duration {
        STACK_TYPES
            .iter()
            .filter(|(kind, _)| template.contains(kind))
            .map(|(_, d)| *d)
            .max()
            .unwrap_or(STACK_DEFAULT)
    }
}

/// The first pause when the length is unknown.
pub const FIRST: Duration = Duration::from_secs(2);
/// The pause with no expectation once it has grown, and after an overrun: a
/// waiter polling every 15 s is the budget of calls.
pub const BUDGET: Duration = Duration::from_secs(15);

/// The pause between looks near the expected end, as a fraction of the
/// expected length: an end there is noticed at most this late.
const NEAR: f64 = 0.025;
/// Looks come every [`NEAR`] from this many near-pauses before the expected
/// end…
const BEFORE: u32 = 3;
/// …to this many after it; later every [`BUDGET`] (or [`NEAR`] if longer).
const AFTER: u32 = 2;

/// The looks near an operation's expected end.
struct Window {
    /// The first near look.
    start: Duration,
    /// The last near look.
    end: Duration,
    /// How many near looks come before the expected end.
    before: u32,
    /// The looks a 15-s waiter makes by `end`, the first one included.
    budget_to_end: u32,
}

impl Window {
    /// The window of an operation expected to last `expected`. One too
    /// short for every near look (under about 86 s, where 1.05 × its length
    /// is under 90 s) gives up those before its
    /// expected end first, and keeps those at and after it: an end a little
    /// late is then seen within 2.5 %, where the budget would otherwise
    /// hold the next look back 15 s.
    fn of(expected: Duration) -> Window {
        let near = expected.mul_f64(NEAR);
        let end = expected + near * AFTER;
        let budget_to_end = (end.as_secs_f64() / BUDGET.as_secs_f64()) as u32 + 1;
        let before = BEFORE.min(budget_to_end.saturating_sub(1 + AFTER + 1));
        Window {
            start: expected.saturating_sub(near * before),
            end,
            before,
            budget_to_end,
        }
    }
}

/// The pause before the next look, `elapsed` into a wait for an operation
/// expected to last `expected` (`None`: unknown), the last pause having been
/// `last` (zero before the first) and `looks` looks made so far (the first,
/// at once, included). All in real (unscaled) time.
///
/// Known length: one look every eighth of it (at least 30 s apart) until
/// shortly before the expected end (less before it, for operations under
/// about 86 s),
/// then every 2.5 % of it until shortly after, then every 15 s; and never look number k before 15·k s, so a
/// wait never makes more looks than a waiter polling every 15 s (the coarse
/// looks early on save what the near-end looks spend). Unknown: 2 s growing
/// by half up to 15 s.
pub fn next_delay(
    expected: Option<Duration>,
    elapsed: Duration,
    last: Duration,
    looks: u32,
) -> Duration {
    let Some(expected) = expected.filter(|e| !e.is_zero()) else {
        return (last + last / 2).clamp(FIRST, BUDGET);
    };
    let near = expected.mul_f64(NEAR);
    let Window {
        start: window_start,
        end: window_end,
        before,
        budget_to_end: budget_to_window_end,
    } = Window::of(expected);
    let paced = if elapsed < window_start {
        // Coarse looks only as far as the budget up to the window's end
        // leaves room for every near look.
        let near_looks = before + AFTER + 1;
        let coarse_allowed = budget_to_window_end.saturating_sub(1 + near_looks);
        let to_window = window_start - elapsed;
        if looks > coarse_allowed {
            to_window
        } else {
            let coarse = (BUDGET * 2).max(expected / 8);
            coarse.min(to_window).max(near)
        }
    } else if elapsed < window_end {
        near
    } else {
        BUDGET.max(near)
    };
    paced.max((BUDGET * looks).saturating_sub(elapsed))
}

/// The smallest factor taken: 1/600 (a 15 s pause stays 25 ms).
pub const MIN_SCALE: f64 = 1.0 / 600.0;

/// The factor `FLOW_TIME_SCALE` sets (1 without it), read once. It is
/// honoured only with `AWS_ENDPOINT_URL` set (the test cloud): against
/// AWS itself a shrunk schedule would only spend the account's API rate.
pub fn time_scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| {
        if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
            return 1.0;
        }
        std::env::var(TIME_SCALE_ENV)
            .ok()
            .and_then(|v| parse_scale(&v))
            .unwrap_or(1.0)
    })
}

/// `0.5`, or `1/60`; from [`MIN_SCALE`] to 1, else `None`.
pub fn parse_scale(text: &str) -> Option<f64> {
    let text = text.trim();
    let value = match text.split_once('/') {
        Some((n, d)) => n.trim().parse::<f64>().ok()? / d.trim().parse::<f64>().ok()?,
        None => text.parse::<f64>().ok()?,
    };
    (value.is_finite() && (MIN_SCALE..=1.0).contains(&value)).then_some(value)
}

/// A real-time pause as the wait sleeps it, under `scale`.
pub fn scaled(delay: Duration, scale: f64) -> Duration {
    delay.mul_f64(scale)
}

/// Time spent under `scale`, as real time.
pub fn unscaled(spent: Duration, scale: f64) -> Duration {
    spent.div_f64(scale)
}

#[cfg(test)]
mod tests;
