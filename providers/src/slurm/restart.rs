//! A `slurm.job` that survives a node: each attempt submitted, followed
//! (a job that prints nothing for `hang_after` is cancelled as hung), and,
//! when it fails, its suspect nodes named, checked and drained by the
//! step's policy ([`fault`]); then the job is submitted again, excluding
//! the drained nodes and told the newest checkpoint (FLOW_RESUME_FROM), up
//! to `restarts` times.
//!
//! With policy `replace` (and `hyperpod_cluster` or `pcluster_cluster`)
//! the nodes found bad are replaced by their platform and waited for
//! before the next attempt ([`replaced`]).
//!
//! Every attempt is durable before and after its sbatch: attempt N > 1
//! carries `--comment=flow:<token>-aN` (the first, `flow:<token>`, as a
//! job that runs once), and the step's id records each attempt's job and
//! checkpoint ([`spec::encode`]), `-` for one being submitted. A resume
//! (kill -9 of flow anywhere) walks the recorded attempts, finds one whose
//! id was lost by its comment, and follows the attempt in flight instead
//! of submitting it again; a node flow drained already is not drained
//! twice.

mod fault;
mod replaced;
mod spec;

use std::sync::Arc;

use serde_json::{Value, json};

use super::control;
use super::output::Output;
use super::output_path::OutputPattern;
use super::remote::Remote;
use super::run::{self, Followed, Seen};
use super::script;
use crate::contract::{Applied, OpContext, ProviderError, Values};
use crate::fleet::restarts::Keep;
use crate::fleet::spec::Policy;
use crate::inputs;
use crate::slurm::replacement::{self, Replacing};

pub(crate) use spec::{INPUTS, Spec, last_job, problems};
use spec::{Recorded, decode, encode};

/// The output key that lists the attempts.
pub(crate) const ATTEMPTS: &str = "attempts";

/// One attempt as the step's outputs and messages tell it.
#[derive(Debug, Clone, Default)]
struct Attempt {
    number: u32,
    job_id: String,
    state: String,
    /// Why it failed (`None` for the one that succeeded).
    cause: Option<String>,
    /// What named its suspect nodes, or that nothing did (empty for the
    /// attempt that succeeded).
    suspects: String,
    suspect_nodes: Vec<String>,
    drained: Vec<String>,
    /// The bad nodes replaced by their platform (policy `replace`), each
    /// with the node in its place.
    replaced: Vec<Replacing>,
    resumed_from: Option<String>,
}

impl Attempt {
    /// As the `attempts` output holds it.
    fn json(&self) -> Value {
        json!({
            "attempt": self.number,
            "job_id": self.job_id,
            "state": self.state,
            "cause": self.cause,
            "suspects": (!self.suspects.is_empty()).then_some(&self.suspects),
            "suspect_nodes": self.suspect_nodes,
            "drained": self.drained,
            "replaced": self.replaced.iter().map(|r| json!({
                "node": r.node,
                "instance_id": r.instance_id,
                "by": r.by.as_ref().map(|b| &b.1),
                "by_instance_id": r.by.as_ref().map(|b| &b.0),
            })).collect::<Vec<_>>(),
            "resumed_from": self.resumed_from,
        })
    }

    /// One line: `job 12 FAILED: <cause>; <suspects>; drained gpu-2`.
    fn line(&self) -> String {
        let mut s = format!("job {} {}", self.job_id, self.state);
        if let Some(c) = &self.cause {
            s.push_str(&format!(": {c}; {}", self.suspects));
        }
        if !self.drained.is_empty() {
            s.push_str(&format!("; drained {}", self.drained.join(", ")));
        }
        if !self.replaced.is_empty() {
            let each: Vec<String> = self.replaced.iter().map(replaced::said).collect();
            s.push_str(&format!("; replaced {}", each.join(", ")));
        }
        if let Some(r) = &self.resumed_from {
            s.push_str(&format!(" (resumed from {r})"));
        }
        s
    }
}

/// How many attempts the step's id records.
pub(crate) fn attempts_in(id: &str) -> usize {
    decode(id).len()
}

/// Whether the id's last attempt is being submitted (no job id yet).
pub(crate) fn pending(id: &str) -> bool {
    decode(id).last().is_some_and(|a| a.job.is_none())
}

/// The comment token of attempt `n`: the operation's for the first.
fn attempt_token(token: &str, n: u32) -> String {
    match (token.is_empty(), n) {
        (true, _) => String::new(),
        (false, 1) => token.to_string(),
        (false, n) => format!("{token}-a{n}"),
    }
}

/// Tells the run history each attempt (`attempt_1 = "job 12 FAILED: …"`)
/// beside what the job measured.
fn tell(ctx: &OpContext, keep: &Keep, attempts: &[Attempt]) {
    let lines: Vec<(u32, String)> = attempts.iter().map(|a| (a.number, a.line())).collect();
    keep.tell(ctx.reporter.as_ref(), &lines);
}

/// The job of attempt `n` by its comment: at the controller, else in
/// accounting.
async fn by_comment(remote: &Remote, token: &str) -> Result<Option<String>, ProviderError> {
    if token.is_empty() {
        return Ok(None);
    }
    let comment = control::token_comment(token);
    match control::find_by_comment(remote, &comment).await? {
        Some(id) => Ok(Some(id)),
        None => control::accounted_by_comment(remote, &comment).await,
    }
}

/// Why a finished attempt failed, in a line.
fn cause(seen: &Seen, hung: Option<&str>) -> String {
    match hung {
        Some(why) => format!("hung: {why}, cancelled"),
        None => seen.ending(),
    }
}

/// Runs the step's job with restarts: from the attempts `known` (the
/// step's recorded id) records, following the one in flight, to a job that
/// succeeds or the last restart.
pub(crate) async fn drive(
    ctx: &OpContext,
    remote: &Remote,
    values: &Values,
    spec: &Spec,
    known: Option<&str>,
) -> Result<Applied, ProviderError> {
    let name = super::submission::job_label(ctx, values);
    let matchers = super::submission::matchers(values)?;
    let path = inputs::req_str(values, "script")?;
    let text = script::read(&ctx.workdir, &path).map_err(ProviderError::before_acting)?;
    let env = inputs::str_map(values, "environment")?;
    let args = inputs::str_list(values, "args")?;
    let keep = Arc::new(Keep::new(ctx.reporter.clone()));
    let mut recorded = known.map(decode).unwrap_or_default();
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut excluded: Vec<String> = Vec::new();
    let mut n: u32 = 1;
    loop {
        let token = attempt_token(&ctx.token, n);
        let mut options = super::submission::sbatch_args(values, &token)?;
        if !excluded.is_empty() {
            options.push(format!("--exclude={}", excluded.join(",")));
        }
        let prior = recorded.get(n as usize - 1).cloned();
        let (id, resumed_from) = match prior {
            Some(Recorded {
                job: Some(id),
                resumed_from,
                ..
            }) => (id, resumed_from),
            pending => {
                let resumed_from = match (pending, &spec.checkpoint_dir) {
                    (Some(p), _) => p.resumed_from,
                    (None, Some(dir)) if n > 1 => {
                        let found = fault::newest_checkpoint(remote, dir).await?;
                        if found.is_none() {
                            ctx.reporter.event(&format!(
                                "no checkpoint in {dir}: attempt {n} starts from the beginning"
                            ));
                        }
                        found
                    }
                    _ => None,
                };
                let at = (n - 1) as usize;
                recorded.truncate(at);
                recorded.push(Recorded {
                    job: None,
                    resumed_from: resumed_from.clone(),
                    replacing: Vec::new(),
                    hung: None,
                });
                let id = match by_comment(remote, &token).await? {
                    Some(id) => {
                        ctx.reporter.event(&format!(
                            "job {id} (attempt {n}) was already submitted by this operation: following it"
                        ));
                        id
                    }
                    None => {
                        // Durable before sbatch: the attempt and where it
                        // resumes from.
                        if n > 1 {
                            ctx.checkpoint.made(&encode(&recorded)).await?;
                        }
                        let mut env = env.clone();
                        env.insert("FLOW_ATTEMPT".into(), n.to_string());
                        if let Some(r) = &resumed_from {
                            env.insert("FLOW_RESUME_FROM".into(), r.clone());
                        }
                        let body = script::with_preamble(&text, &env, &args);
                        let id = control::submit(remote, &options, &body).await?;
                        ctx.reporter.event(&format!(
                            "job `{name}` ({id}): attempt {n} submitted on {}{}{}",
                            remote.describe(),
                            resumed_from
                                .as_ref()
                                .map_or(String::new(), |r| format!(", resuming from {r}")),
                            if excluded.is_empty() {
                                String::new()
                            } else {
                                format!(", excluding {}", excluded.join(","))
                            }
                        ));
                        id
                    }
                };
                recorded[at].job = Some(id.clone());
                ctx.checkpoint.made(&encode(&recorded)).await?;
                (id, resumed_from)
            }
        };
        let pattern = OutputPattern::of(&options, &text);
        let mut output = Output::default();
        let followed = Followed {
            name: &name,
            pattern: &pattern,
            id: &id,
            hang_after: spec.hang_after,
            no_loss: spec.no_loss,
            leave_cancel: true,
        };
        let at = (n - 1) as usize;
        if recorded[at].hung.is_some() {
            // Found hung by a run a kill ended, maybe before its cancel.
            if let Err(e) = super::control::cancel(remote, &id).await {
                ctx.reporter.log(&format!(
                    "cancelling job {id}, found hung before: {}",
                    e.message
                ));
            }
        }
        let mut ended = run::follow_watched(ctx, remote, &mut output, &followed).await?;
        if let Some(why) = ended.hung.clone().filter(|_| !ended.seen.finished()) {
            // Why it hung is durable before the cancel: a run resumed after
            // a kill tells this cause, not the CANCELLED it will find.
            recorded[at].hung = Some(why.clone());
            ctx.checkpoint.made(&encode(&recorded)).await?;
            ctx.reporter.event(&format!(
                "job `{name}` ({id}): {why}: cancelling it as hung"
            ));
            super::control::cancel(remote, &id).await?;
            let after = run::Followed {
                hang_after: None,
                no_loss: None,
                ..followed
            };
            ended = run::follow_watched(ctx, remote, &mut output, &after).await?;
        }
        // Found hung by this run or by the one a kill ended.
        ended.hung = ended.hung.or_else(|| recorded[at].hung.clone());
        let mut attempt = Attempt {
            number: n,
            job_id: id.clone(),
            state: ended.seen.state().to_string(),
            resumed_from,
            ..Attempt::default()
        };
        if ctx.destroying {
            return Ok(run::applied(&ended.seen, Values::new()));
        }
        if ended.hung.is_none() && ended.seen.succeeded() {
            attempts.push(attempt);
            let judged = run::verdict(&name, &ended.seen, &output, &matchers, keep.as_ref());
            tell(ctx, &keep, &attempts);
            let mut applied = judged?;
            applied.id = Some(encode(&recorded));
            let list: Vec<Value> = attempts.iter().map(Attempt::json).collect();
            applied.outputs.insert(ATTEMPTS.into(), Value::Array(list));
            return Ok(applied);
        }
        attempt.cause = Some(cause(&ended.seen, ended.hung.as_deref()));
        if ended.hung.is_some() {
            attempt.state = "HUNG".into();
        }
        ctx.reporter.event(&format!(
            "attempt {n} (job {id}) failed: {}",
            attempt.cause.as_deref().unwrap_or_default()
        ));
        // Replacements recorded before a kill: their nodes as found then
        // (a replaced node is gone from the cluster; looking again would
        // guess).
        let (mut suspects, listed) = if recorded[at].replacing.is_empty() {
            // A NODE_FAIL whose nodes Slurm lists none down is no reason to
            // replace them all.
            let all_when_none_down = spec.replace_through.is_none();
            let (mut suspects, listed) = fault::find(
                remote,
                &ctx.step,
                &ended.seen,
                output.text(),
                all_when_none_down,
            )
            .await?;
            fault::check(
                ctx,
                remote,
                spec,
                n,
                &mut suspects,
                &listed,
                fault::partition(values),
            )
            .await?;
            (suspects, listed)
        } else {
            (replaced::suspects_of(&recorded[at].replacing), Vec::new())
        };
        // Policy replace: when the job failed, and a NODE_FAIL whose nodes
        // Slurm lists none down now, the platform may have replaced the
        // dead node already (ParallelCluster's clustermgtd replaces a DOWN
        // static node unasked): a node of the job on an instance launched
        // since it started is that one.
        let started = match spec.replace_through {
            Some(_) if spec.policy == Policy::TakeOut => {
                fault::started_at(remote, &ended.seen).await
            }
            _ => None,
        };
        let mut already = Vec::new();
        if let (Some(through), Some(started)) = (&spec.replace_through, started)
            && recorded[at].replacing.is_empty()
            && suspects.bad.is_empty()
            && ended.seen.state() == "NODE_FAIL"
        {
            already =
                replacement::replaced_since(ctx, remote, through, &suspects.nodes, started).await?;
            suspects
                .bad
                .extend(already.iter().map(|r| (r.node.clone(), r.reason.clone())));
        }
        attempt.suspects = suspects.said();
        attempt.suspect_nodes = if suspects.unknown() {
            Vec::new()
        } else {
            suspects.named()
        };
        ctx.reporter
            .event(&format!("attempt {n}: {}", attempt.suspects));
        let last = n > spec.restarts;
        match (spec.policy, &spec.replace_through) {
            (Policy::TakeOut, Some(through)) if !suspects.bad.is_empty() => {
                let of = suspects.nodes.len().max(suspects.bad.len());
                let allowed = allowed_to_replace(spec.max_bad_fraction, of);
                if recorded[at].replacing.is_empty() && suspects.bad.len() > allowed {
                    attempts.push(attempt);
                    tell(ctx, &keep, &attempts);
                    let bad: Vec<&str> = suspects.bad.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(ProviderError::fatal(format!(
                        "job `{name}` stops at attempt {n}: {} of its {of} nodes found bad ({}), more than max_bad_fraction {} allows ({allowed}): none was replaced — {}",
                        bad.len(),
                        bad.join(", "),
                        spec.max_bad_fraction,
                        every(&attempts)
                    ))
                    .with_help("a fault this wide is rarely the nodes' own: look at the fabric and the cluster before replacing them (raise max_bad_fraction to allow it)"));
                }
                let replacer = replaced::Replacer {
                    ctx,
                    remote,
                    spec,
                    through,
                    partition: fault::partition(values),
                };
                attempt.replaced = replacer
                    .replace(&mut recorded, at, &id, &suspects.bad, started, already)
                    .await?;
                attempt.drained = attempt.replaced.iter().map(|r| r.node.clone()).collect();
            }
            (Policy::TakeOut, Some(_)) => {}
            (Policy::TakeOut, None) => {
                attempt.drained = fault::drain(ctx, remote, &id, &suspects.bad, &listed).await?;
                for d in &attempt.drained {
                    if !excluded.contains(d) {
                        excluded.push(d.clone());
                    }
                }
            }
            (Policy::Fail, _) if !suspects.bad.is_empty() => {
                attempts.push(attempt);
                tell(ctx, &keep, &attempts);
                let bad: Vec<&str> = suspects.bad.iter().map(|(n, _)| n.as_str()).collect();
                return Err(ProviderError::fatal(format!(
                    "job `{name}` stops at attempt {n}: node{} {} found bad and policy is fail — {}",
                    if bad.len() == 1 { "" } else { "s" },
                    bad.join(", "),
                    every(&attempts)
                ))
                .with_help("set `policy = \"drain\"` to drain the bad nodes and restart without them, or take them out by hand and apply again"));
            }
            (Policy::Fail, _) => {}
        }
        attempts.push(attempt);
        if last {
            tell(ctx, &keep, &attempts);
            let tail = match output.tail(5) {
                t if t.is_empty() => String::new(),
                t => format!(" — last lines: {t}"),
            };
            return Err(ProviderError::fatal(format!(
                "job `{name}` failed on every attempt ({} of {}): {}{tail}",
                attempts.len(),
                spec.restarts + 1,
                every(&attempts)
            ))
            .with_help("each attempt's output is in the step's log (`flow logs FILE STEP`); `flow runs FILE` lists the attempts"));
        }
        n += 1;
    }
}

/// How many of a failed attempt's `of` nodes policy `replace` may replace:
/// `max_bad_fraction` of them, and one always (a node that dies is what
/// restarts are for).
fn allowed_to_replace(max_bad_fraction: f64, of: usize) -> usize {
    ((max_bad_fraction * of as f64).floor() as usize).max(1)
}

/// Every attempt in a line: `attempt 1: job 12 FAILED: …; attempt 2: …`.
fn every(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|a| format!("attempt {}: {}", a.number, a.line()))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_may_always_be_replaced_more_only_within_the_fraction() {
        assert_eq!(allowed_to_replace(0.25, 2), 1);
        assert_eq!(allowed_to_replace(0.25, 16), 4);
        assert_eq!(allowed_to_replace(0.5, 4), 2);
        assert_eq!(allowed_to_replace(0.25, 0), 1);
    }

    #[test]
    fn each_attempt_has_its_own_comment_the_first_the_operations() {
        assert_eq!(attempt_token("tok", 1), "tok");
        assert_eq!(attempt_token("tok", 3), "tok-a3");
        assert_eq!(attempt_token("", 2), "");
    }

    #[test]
    fn an_attempt_reads_as_its_job_cause_and_what_it_did() {
        let a = Attempt {
            number: 1,
            job_id: "12".into(),
            state: "FAILED".into(),
            cause: Some(
                "ended FAILED, exit code 1:0: the script exited with a non-zero code".into(),
            ),
            suspects: "Xid 79 on gpu-2: NVRM: Xid (PCI:0000:10:1c): 79".into(),
            suspect_nodes: vec!["gpu-2".into()],
            drained: vec!["gpu-2".into()],
            replaced: Vec::new(),
            resumed_from: None,
        };
        assert_eq!(
            a.line(),
            "job 12 FAILED: ended FAILED, exit code 1:0: the script exited with a non-zero code; Xid 79 on gpu-2: NVRM: Xid (PCI:0000:10:1c): 79; drained gpu-2"
        );
        assert_eq!(a.json()["suspect_nodes"], json!(["gpu-2"]));
        assert_eq!(a.json()["resumed_from"], Value::Null);
        let hung = Seen {
            id: "13".into(),
            lines: control::parse_jobs("JobId=13 JobState=CANCELLED ExitCode=0:15"),
        };
        assert_eq!(
            cause(&hung, Some("no new output for 5s")),
            "hung: no new output for 5s, cancelled"
        );
        assert!(cause(&hung, None).starts_with("ended CANCELLED, exit code 0:15"));
    }
}
