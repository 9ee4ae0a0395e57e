//! A bad Slurm node replaced by its platform, for `slurm.node_check` and
//! `slurm.job`'s restarts (policy `replace`): SageMaker HyperPod's
//! BatchReplaceClusterNodes ([`hyperpod`], `hyperpod_cluster`) or
//! ParallelCluster's clustermgtd, which replaces a static node set DOWN
//! ([`pcluster`], `pcluster_cluster`). Here: the inputs that name the
//! cluster (read, and checked for validate the same for both kinds), a
//! replacement as a step's id records it, and the one call that asks the
//! platform (once: see [`hyperpod::send`] and [`pcluster::send`]) and waits
//! for the new node.

pub(super) mod hyperpod;
pub(super) mod pcluster;

use std::time::Duration;

use serde_json::Value;

use super::nodes::SlurmNode;
use super::remote::Remote;
use crate::contract::{InputValue, OpContext, Problem, ProviderError, Values, known_inputs};
use crate::fleet::spec::Platform;

/// One bad node being replaced.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Replacing {
    /// Its Slurm name.
    pub node: String,
    /// Its instance, being replaced.
    pub instance_id: String,
    /// Its instance group, the new instance's too (HyperPod); the node's
    /// address on its old instance (ParallelCluster, [`pcluster`]).
    pub group: String,
    /// When BatchReplaceClusterNodes (or the DOWN) was about to go out,
    /// seconds since the epoch: the new instance is launched after it.
    pub since: u64,
    /// Whether HyperPod answered the call (Slurm took the DOWN).
    pub sent: bool,
    /// Why it was found bad (`by: reason` of its verdict), kept for a
    /// resumed run's outputs.
    pub reason: String,
    /// Once the new node is in service: its instance and its Slurm name
    /// (what `slurm.job` records, so a resume does not wait again).
    pub by: Option<(String, String)>,
}

impl Replacing {
    /// As a step's id holds it: `NODE=INSTANCE@GROUP@SINCE[+]@REASON`,
    /// then `@NEW-INSTANCE@NEW-NODE` once replaced; the reason escaped
    /// (no `%|,=@+` in it), so that ids can join records with `|` and `,`.
    pub fn encoded(&self) -> String {
        let mut s = format!(
            "{}={}@{}@{}{}@{}",
            self.node,
            self.instance_id,
            self.group,
            self.since,
            if self.sent { "+" } else { "" },
            escape(&self.reason)
        );
        if let Some((instance, node)) = &self.by {
            s.push_str(&format!("@{instance}@{node}"));
        }
        s
    }

    /// [`Replacing::encoded`] undone; `None` for text that is not one.
    pub fn decoded(text: &str) -> Option<Replacing> {
        let (node, rest) = text.split_once('=')?;
        let mut fields = rest.split('@');
        let (instance_id, group, since) = (fields.next()?, fields.next()?, fields.next()?);
        let reason = unescape(fields.next().unwrap_or_default());
        let by = match (fields.next(), fields.next()) {
            (Some(i), Some(n)) if !i.is_empty() && !n.is_empty() => {
                Some((i.to_string(), n.to_string()))
            }
            _ => None,
        };
        Some(Replacing {
            node: node.to_string(),
            instance_id: instance_id.to_string(),
            group: group.to_string(),
            since: since.trim_end_matches('+').parse().ok()?,
            sent: since.ends_with('+'),
            reason,
            by,
        })
    }
}

/// The old instance of a node the platform replaced on its own before flow
/// looked (no longer listed, or no longer at the node's address).
pub(super) const UNKNOWN: &str = "-";

/// A replacement carried out: the node and the one now in its place.
#[derive(Debug, Clone)]
pub(super) struct Replaced {
    /// What was replaced.
    pub was: Replacing,
    /// The new instance.
    pub instance_id: String,
    /// The new node, as Slurm lists it.
    pub node: SlurmNode,
}

/// `text` with the ids' separators (`%|,=@+`) escaped as `%XX`.
pub(super) fn escape(text: &str) -> String {
    crate::fleet::id_text::escape(text, &['|', ',', '=', '@', '+'])
}

pub(super) use crate::fleet::id_text::unescape;

/// Seconds since the epoch.
pub(super) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whose replacement policy `replace` asks for, and of which cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Through {
    /// A SageMaker HyperPod cluster (name or ARN): BatchReplaceClusterNodes.
    HyperPod(String),
    /// A ParallelCluster cluster (its name): clustermgtd replaces a static
    /// node set DOWN.
    ParallelCluster(String),
}

impl Through {
    /// What replacing a node through it does, for the plan.
    pub fn plan_text(&self, limit: Duration) -> String {
        match self {
            Through::HyperPod(cluster) => format!(
                "its instance replaced through HyperPod cluster `{cluster}` (BatchReplaceClusterNodes, once), the new node waited for (up to {})",
                humantime::format_duration(limit)
            ),
            Through::ParallelCluster(cluster) => format!(
                "its instance replaced by ParallelCluster cluster `{cluster}` (the node set DOWN, once: clustermgtd terminates it and launches another under the node's name), the node waited for on its new instance (up to {})",
                humantime::format_duration(limit)
            ),
        }
    }
}

/// The inputs of policy `replace`.
pub(super) const INPUTS: [&str; 3] = ["hyperpod_cluster", "pcluster_cluster", "replace_timeout"];

/// How long a replacement may take unless `replace_timeout` says.
pub(super) const DEFAULT_REPLACE_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// `replace_timeout`: a duration (`"30m"`).
fn duration_of(v: &Value) -> Result<Duration, Problem> {
    v.as_str()
        .and_then(|t| humantime::parse_duration(t).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Problem::at(
                "replace_timeout",
                format!("{v} is not a duration (e.g. \"30m\")"),
            )
        })
}

/// What a step asks of the replacement, read for an apply: the cluster a
/// bad node is replaced through (policy `replace` with `hyperpod_cluster`
/// or `pcluster_cluster`; `None` otherwise, where `replace` is then
/// refused as the platform refuses it) and how long it may take.
pub(super) fn read(v: &Values) -> Result<(Option<Through>, Duration), ProviderError> {
    let limit = v
        .get("replace_timeout")
        .filter(|t| !t.is_null())
        .map(duration_of)
        .transpose()
        .map_err(|p| ProviderError::invalid(p.message).before_acting())?
        .unwrap_or(DEFAULT_REPLACE_TIMEOUT);
    if v.get("policy").and_then(Value::as_str) != Some("replace") {
        return Ok((None, limit));
    }
    let named = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
    };
    let through = named("hyperpod_cluster")
        .map(Through::HyperPod)
        .or_else(|| named("pcluster_cluster").map(Through::ParallelCluster));
    Ok((through, limit))
}

/// `v` with its policy `drain`: what `replace` does first.
pub(super) fn as_drain(v: &Values) -> Values {
    let mut v = v.clone();
    v.insert("policy".into(), Value::String("drain".into()));
    v
}

/// The problems of the shared inputs of `platform` (policy, check, …) with
/// those of policy `replace`, for validate: `replace` is taken (as a
/// drain, then the replacement) only with `hyperpod_cluster` or
/// `pcluster_cluster` given, refused otherwise saying which to name; both
/// given, or a `replace_timeout` without `replace` or not a duration, are
/// problems at their entries.
pub(super) fn problems(platform: &Platform, inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let known = known_inputs(inputs);
    let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
    // The cluster may be known only after apply (another step's output):
    // that it is given is enough here.
    let names = |k: &str| {
        has(k)
            && known
                .get(k)
                .is_none_or(|c| c.as_str().is_some_and(|c| !c.is_empty()))
    };
    let replace = known.get("policy").and_then(Value::as_str) == Some("replace");
    let replacing = replace && (names("hyperpod_cluster") || names("pcluster_cluster"));
    let mut out = if replacing {
        let drained: Vec<(String, InputValue)> = inputs
            .iter()
            .filter(|(k, _)| k != "policy")
            .cloned()
            .collect();
        platform.problems(&drained)
    } else {
        platform.problems(inputs)
    };
    if replace && !replacing {
        for p in out.iter_mut().filter(|p| p.path == ["policy"]) {
            let help = p.help.take().unwrap_or_default();
            p.help = Some(format!(
                "{help}; on SageMaker HyperPod, name the cluster in `hyperpod_cluster` and `replace` replaces the drained node through BatchReplaceClusterNodes; on ParallelCluster, name it in `pcluster_cluster` and its clustermgtd replaces the drained static node"
            ));
        }
    }
    if has("hyperpod_cluster") && has("pcluster_cluster") {
        out.push(
            Problem::at(
                "pcluster_cluster",
                "give `hyperpod_cluster` or `pcluster_cluster`, not both: a node is replaced by one platform",
            )
            .with_help("`hyperpod_cluster` names a SageMaker HyperPod cluster, `pcluster_cluster` a ParallelCluster cluster"),
        );
    }
    if let Some(t) = known.get("replace_timeout") {
        if let Err(p) = duration_of(t) {
            out.push(p);
        } else if !replace {
            out.push(Problem::at(
                "replace_timeout",
                "`replace_timeout` is for policy `replace`: nothing is replaced under this policy",
            ));
        }
    }
    out
}

/// The first half of a platform's `send`: of the replacements not yet
/// sent, those whose node `taken` says the platform took already (the
/// answer to an earlier call was lost to a kill) are said and marked sent;
/// the rest are stamped with the time and recorded with `record` before the
/// platform is asked. Their indices, to ask for.
pub(super) async fn claim<F, Fut>(
    ctx: &OpContext,
    replacing: &mut [Replacing],
    taken: impl Fn(&Replacing) -> bool,
    record: &F,
) -> Result<Vec<usize>, ProviderError>
where
    F: Fn(Vec<Replacing>) -> Fut,
    Fut: std::future::Future<Output = Result<(), ProviderError>>,
{
    let mut ask = Vec::new();
    for (i, r) in replacing.iter_mut().enumerate().filter(|(_, r)| !r.sent) {
        if taken(r) {
            ctx.reporter.event(&format!(
                "node {} ({}) is already being replaced: not asking again",
                r.node, r.instance_id
            ));
            r.sent = true;
        } else {
            ask.push(i);
        }
    }
    if !ask.is_empty() {
        let since = now();
        for r in replacing.iter_mut().filter(|r| !r.sent) {
            r.since = since;
        }
        record(replacing.to_vec()).await?;
    }
    Ok(ask)
}

/// The second half: every replacement marked sent, and recorded.
pub(super) async fn all_sent<F, Fut>(
    mut replacing: Vec<Replacing>,
    record: &F,
) -> Result<Vec<Replacing>, ProviderError>
where
    F: Fn(Vec<Replacing>) -> Fut,
    Fut: std::future::Future<Output = Result<(), ProviderError>>,
{
    for r in &mut replacing {
        r.sent = true;
    }
    record(replacing.clone()).await?;
    Ok(replacing)
}

/// The instances of the bad `names` in the cluster `through` names, each
/// with why it is bad (`reason_of`), found before any node is touched: an
/// error naming a node the cluster does not have. With `launched_before`
/// (a job's start, seconds since the epoch), an instance launched later is
/// not the one the job ran on (ParallelCluster keeps a replaced node's
/// name: see [`pcluster::instances_of`]); a node the platform is replacing
/// on its own is recorded as asked for (see [`hyperpod::instances_of`]).
pub(super) async fn instances_of(
    ctx: &OpContext,
    remote: &Remote,
    through: &Through,
    names: &[String],
    reason_of: impl Fn(&str) -> String,
    launched_before: Option<u64>,
) -> Result<Vec<Replacing>, ProviderError> {
    match through {
        Through::HyperPod(cluster) => {
            hyperpod::instances_of(ctx, cluster, names, reason_of, launched_before).await
        }
        Through::ParallelCluster(cluster) => {
            let fleet = pcluster::Fleet::new(ctx, cluster).await?;
            pcluster::instances_of(ctx, remote, &fleet, names, reason_of, launched_before).await
        }
    }
}

/// The nodes of `names` the platform is replacing, or has replaced, on its
/// own since `started` (a failed job's start), each recorded as asked for:
/// on ParallelCluster, clustermgtd replaces a static node Slurm set DOWN (a
/// node that died) unasked, and may be done before flow looks; on
/// HyperPod, automatic node recovery (`NodeRecovery = "Automatic"`)
/// replaces a faulty node, its instance `ShuttingDown`, then gone and out
/// of Slurm's configuration, the new one under a new hostname.
pub(super) async fn replaced_since(
    ctx: &OpContext,
    remote: &Remote,
    through: &Through,
    names: &[String],
    started: u64,
) -> Result<Vec<Replacing>, ProviderError> {
    match through {
        Through::HyperPod(cluster) => hyperpod::replaced_since(ctx, cluster, names, started).await,
        Through::ParallelCluster(cluster) => {
            let fleet = pcluster::Fleet::new(ctx, cluster).await?;
            pcluster::replaced_since(remote, &fleet, names, started).await
        }
    }
}

/// Has the platform replace `replacing` (asked for once, each record made
/// durable with `record` before and after the call), then waits for every
/// new node to be in service (at most `limit`): the replacements as sent,
/// and the new nodes in their order.
pub(super) async fn replace<F, Fut>(
    ctx: &OpContext,
    remote: &Remote,
    through: &Through,
    partition: Option<&str>,
    replacing: Vec<Replacing>,
    limit: Duration,
    record: F,
) -> Result<(Vec<Replacing>, Vec<Replaced>), ProviderError>
where
    F: Fn(Vec<Replacing>) -> Fut,
    Fut: std::future::Future<Output = Result<(), ProviderError>>,
{
    match through {
        Through::HyperPod(cluster) => {
            let sent = hyperpod::send(ctx, cluster, replacing, record).await?;
            let done = hyperpod::wait(ctx, remote, cluster, partition, &sent, limit).await?;
            Ok((sent, done))
        }
        Through::ParallelCluster(cluster) => {
            let fleet = pcluster::Fleet::new(ctx, cluster).await?;
            let sent = pcluster::send(ctx, remote, &fleet, replacing, record).await?;
            let done = pcluster::wait(ctx, remote, &fleet, partition, &sent, limit).await?;
            Ok((sent, done))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::known;

    #[test]
    fn a_replacement_reads_back_as_written_its_new_node_too() {
        let mut r = Replacing {
            node: "ip-10-1-0-5".into(),
            instance_id: "i-0123456789abcdef0".into(),
            group: "worker-group-1".into(),
            since: 1_764_300_000,
            sent: true,
            reason: "NODE_FAIL: Slurm ended the job for node ip-10-1-0-5 (a|b=c@d+e,f 100%)".into(),
            by: None,
        };
        assert_eq!(
            r.encoded(),
            "ip-10-1-0-5=i-0123456789abcdef0@worker-group-1@1764300000+\
             @NODE_FAIL: Slurm ended the job for node ip-10-1-0-5 (a%7Cb%3Dc%40d%2Be%2Cf 100%25)"
        );
        assert_eq!(Replacing::decoded(&r.encoded()), Some(r.clone()));
        r.by = Some(("i-0fedcba".into(), "ip-10-1-0-9".into()));
        assert!(r.encoded().ends_with("100%25)@i-0fedcba@ip-10-1-0-9"));
        assert_eq!(Replacing::decoded(&r.encoded()), Some(r));
        assert_eq!(Replacing::decoded("c1"), None);
    }

    #[test]
    fn replace_takes_a_named_cluster_and_refuses_otherwise() {
        const P: Platform = Platform {
            kind: "slurm.job",
            take_out: "drain",
            take_out_means: "drained",
            elsewhere: ("cordon", "EKS's"),
            replace_later: "replacing",
            job_keys: &["script"],
            job_needs: &["script"],
            job_needs_text: "`script`",
        };
        let paths = |j: serde_json::Value| {
            problems(&P, &known(j))
                .into_iter()
                .map(|p| p.path.join("."))
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
        };
        assert_eq!(paths(json!({"policy": "replace"})), ["policy"]);
        assert!(paths(json!({"policy": "replace", "hyperpod_cluster": "ml"})).is_empty());
        assert_eq!(
            paths(json!({"policy": "replace", "hyperpod_cluster": "a",
                "pcluster_cluster": "b", "replace_timeout": "soon"})),
            ["pcluster_cluster", "replace_timeout"]
        );
        assert_eq!(
            paths(json!({"policy": "drain", "replace_timeout": "20m"})),
            ["replace_timeout"]
        );
        let v = |j: serde_json::Value| serde_json::from_value::<Values>(j).unwrap();
        assert_eq!(
            read(&v(json!({"policy": "replace", "pcluster_cluster": "p5",
                "replace_timeout": "20m"})))
            .unwrap(),
            (
                Some(Through::ParallelCluster("p5".into())),
                Duration::from_secs(1200)
            )
        );
        assert_eq!(
            read(&v(json!({"policy": "drain", "hyperpod_cluster": "ml"}))).unwrap(),
            (None, DEFAULT_REPLACE_TIMEOUT)
        );
    }
}
