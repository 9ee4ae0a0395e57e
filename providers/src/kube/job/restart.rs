//! A `kube.job` that survives a node: each attempt created, followed (one
//! that logs no new line for `hang_after`, or no new loss for
//! `hang_without_loss`, is hung), and, when it fails or hangs, its suspect
//! nodes named from Kubernetes' word and its logs ([`suspects`]), checked
//! with `check` and taken out by `policy` (kube.node_check's code:
//! [`crate::kube::node_check::for_job`]); then the failed attempt is
//! deleted with its pods and the next one created, up to `restarts` times.
//!
//! Attempt N is its own job: the manifest's name for the first, `NAME-aN`
//! after, annotated with the operation's token (`TOKEN-aN` after the
//! first). A job's name is unique in its namespace, so the API server
//! itself refuses a second job for one attempt; the step's id
//! ([`record`]) is durable before each create (the attempt, `-`), after it
//! (its uid) and once it ended and its nodes were dealt with (its line).
//! A resume (kill -9 of flow anywhere) walks the recorded attempts, skips
//! those with a line, and follows the job of the attempt in flight or
//! creates it; a node cordoned already is cordoned again to no effect. With
//! policy replace the replacement under way is in the id before any
//! instance is terminated ([`record::Pending`]): a resume carries it out
//! from there, terminating only an instance Auto Scaling still has in
//! service, and names each new node as an uninterrupted run does.

mod checkpoint;
mod fault;
mod record;
mod resume;
mod spec;
mod suspects;
mod watch;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{Ended, JobState, Run, STEP_ANNOTATION, annotation, failed};
use crate::contract::{Applied, ProviderError};
use crate::fleet::restarts::Keep;
use crate::fleet::spec::Policy;
use crate::kube::node_check::for_job;
use crate::kube::objects::{Kinds, Record};
use crate::kube::render::Doc;
use record::{Attempt, Recorded, attempt_name, attempt_token, decode, encode, every};

pub(super) use resume::read;
pub(crate) use spec::{INPUTS, Spec, input_specs, problems};
pub(super) use watch::Watch;

/// The output key that lists the attempts.
pub(crate) const ATTEMPTS: &str = "attempts";

/// The attempt's job: the manifest's, named and annotated for attempt `n`,
/// each container told `FLOW_ATTEMPT` (and `FLOW_CHECKPOINT_DIR`, and the
/// checkpoint to resume from as `FLOW_RESUME_FROM`).
fn attempt_doc(base: &Doc, n: u32, token: &str, spec: &Spec, resume: Option<&str>) -> Doc {
    let mut doc = base.clone();
    let meta = &mut doc.object["metadata"];
    meta["name"] = json!(attempt_name(base.name(), n));
    meta["annotations"][super::super::TOKEN_ANNOTATION] = json!(token);
    let mut env = vec![json!({"name": "FLOW_ATTEMPT", "value": n.to_string()})];
    if let Some(dir) = &spec.checkpoint_dir {
        env.push(json!({"name": "FLOW_CHECKPOINT_DIR", "value": dir}));
    }
    if let Some(from) = resume {
        env.push(json!({"name": "FLOW_RESUME_FROM", "value": from}));
    }
    for t in for_job::pod_templates(&mut doc.object) {
        let containers = t
            .pointer_mut("/spec/containers")
            .and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            let list = c
                .as_object_mut()
                .map(|c| c.entry("env").or_insert_with(|| json!([])));
            if let Some(Value::Array(list)) = list {
                list.retain(|e| !env.iter().any(|f| f["name"] == e["name"]));
                list.extend(env.iter().cloned());
            }
        }
    }
    doc
}

/// The nodes `pods` ran on, sorted.
fn nodes_of(pods: &[Pod]) -> Vec<String> {
    let mut out: Vec<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// One restarting run of the step.
struct Driver<'r, 'a> {
    run: &'r Run<'a>,
    spec: &'r Spec,
    kinds: Kinds,
    client: ::kube::Client,
    base: Doc,
    recorded: Vec<Recorded>,
    attempts: Vec<Attempt>,
    keep: Arc<Keep>,
}

impl Driver<'_, '_> {
    /// Records the id, durably.
    async fn record(&self) -> Result<(), ProviderError> {
        self.run.ctx.checkpoint.made(&encode(&self.recorded)).await
    }

    /// Tells the run history each attempt.
    fn tell(&self) {
        let lines: Vec<(u32, String)> =
            self.attempts.iter().map(|a| (a.number, a.line())).collect();
        self.keep.tell(self.run.ctx.reporter.as_ref(), &lines);
    }

    /// Deletes attempt `n`'s job if it is there and this operation's.
    async fn delete_attempt(&mut self, n: u32) -> Result<(), ProviderError> {
        let doc = attempt_doc(&self.base, n, "", self.spec, None);
        let mut record = Kinds::record_of(&doc);
        if let Some(o) = self.kinds.get(&record).await?
            && annotation(&o, super::super::TOKEN_ANNOTATION)
                == Some(attempt_token(&self.run.ctx.token, n).as_str())
        {
            record.uid = o.metadata.uid.clone().unwrap_or_default();
            self.run.delete_job(&mut self.kinds, &record).await?;
        }
        Ok(())
    }

    /// Deletes the later attempts' jobs (`NAME-a2` …) an earlier run of the
    /// step left (the one that succeeded stays until the step runs again),
    /// so that they hold no node's GPUs; the first attempt's is dealt with
    /// by [`Driver::start`].
    async fn clear_earlier(&mut self) -> Result<(), ProviderError> {
        let ctx = self.run.ctx;
        for k in 2..=self.spec.restarts + 1 {
            let doc = attempt_doc(&self.base, k, "", self.spec, None);
            let mut record = Kinds::record_of(&doc);
            if let Some(o) = self.kinds.get(&record).await?
                && annotation(&o, STEP_ANNOTATION) == Some(ctx.step.as_str())
                && annotation(&o, super::super::TOKEN_ANNOTATION)
                    != Some(attempt_token(&ctx.token, k).as_str())
            {
                ctx.reporter.log(&format!(
                    "deleting {} left by an earlier run",
                    record.label()
                ));
                record.uid = o.metadata.uid.clone().unwrap_or_default();
                self.run.delete_job(&mut self.kinds, &record).await?;
            }
        }
        Ok(())
    }

    /// Creates attempt `n`'s job, or finds the one this operation created.
    /// `None` when the job the id records for it is gone (deleted as hung
    /// by an interrupted run, or by someone): it is never made again.
    async fn start(&mut self, n: u32) -> Result<Option<Record>, ProviderError> {
        let ctx = self.run.ctx;
        let token = attempt_token(&ctx.token, n);
        let at = (n - 1) as usize;
        let resume = self.recorded[at].resumed_from.clone();
        let doc = attempt_doc(&self.base, n, &token, self.spec, resume.as_deref());
        let mut record = Kinds::record_of(&doc);
        let existing = self.kinds.get(&record).await?;
        if existing.is_none() && self.recorded[at].uid.is_some() {
            ctx.reporter.event(&format!(
                "{} (attempt {n}) is gone: it is not started again",
                record.label()
            ));
            return Ok(None);
        }
        match existing {
            Some(o) if annotation(&o, super::super::TOKEN_ANNOTATION) == Some(token.as_str()) => {
                ctx.reporter.event(&format!(
                    "{} (attempt {n}) was already started by this operation: following it",
                    record.label()
                ));
                record.uid = o.metadata.uid.unwrap_or_default();
                return Ok(Some(record));
            }
            Some(o) if annotation(&o, STEP_ANNOTATION) == Some(ctx.step.as_str()) => {
                ctx.reporter.log(&format!(
                    "deleting {} left by an earlier run",
                    record.label()
                ));
                record.uid = o.metadata.uid.clone().unwrap_or_default();
                self.run.delete_job(&mut self.kinds, &record).await?;
            }
            Some(_) => return Err(crate::ownership::not_own(&record.label())),
            None => {}
        }
        let record = self.kinds.apply(&doc).await?.0;
        ctx.reporter.event(&format!(
            "started {} (attempt {n}){}",
            record.label(),
            resume.map_or(String::new(), |r| format!(", resuming from {r}"))
        ));
        Ok(Some(record))
    }

    /// The newest entry of `dir`, listed by a Job that mounts the
    /// training's volumes (see [`checkpoint`]), for attempt `n`.
    async fn newest_checkpoint(
        &mut self,
        n: u32,
        dir: &str,
    ) -> Result<Option<String>, ProviderError> {
        let ctx = self.run.ctx;
        let token = format!("{}-ckpt-a{n}", ctx.token);
        let Some(doc) = checkpoint::lister(&self.base, dir, n, &token, &ctx.step) else {
            return Ok(None);
        };
        let mut record = Kinds::record_of(&doc);
        match self.kinds.get(&record).await? {
            Some(o) if annotation(&o, super::super::TOKEN_ANNOTATION) == Some(token.as_str()) => {
                record.uid = o.metadata.uid.unwrap_or_default();
            }
            Some(o) if annotation(&o, STEP_ANNOTATION) == Some(ctx.step.as_str()) => {
                record.uid = o.metadata.uid.clone().unwrap_or_default();
                self.run.delete_job(&mut self.kinds, &record).await?;
                record = self.kinds.apply(&doc).await?.0;
            }
            Some(_) => return Err(crate::ownership::not_own(&record.label())),
            None => record = self.kinds.apply(&doc).await?.0,
        }
        ctx.reporter.event(&format!(
            "listing {dir} for attempt {n}'s checkpoint ({})",
            record.label()
        ));
        let ended = self
            .run
            .follow_until(&mut self.kinds, &record, None)
            .await?;
        self.run.delete_job(&mut self.kinds, &record).await?;
        let found = match &ended.state {
            JobState::Failed(why) => {
                ctx.reporter.event(&format!(
                    "listing {dir} failed ({}): attempt {n} starts from the beginning",
                    failed(&record, why, &ended.pods).message
                ));
                return Ok(None);
            }
            _ => crate::fleet::suspects::newest(&ended.text),
        };
        ctx.reporter.event(&match &found {
            Some(f) => format!("newest checkpoint in {dir}: {f}"),
            None => format!("no checkpoint in {dir}: attempt {n} starts from the beginning"),
        });
        Ok(found)
    }

    /// From the attempts recorded to one that succeeds or the last restart.
    async fn drive(&mut self) -> Result<Applied, ProviderError> {
        let base_name = self.base.name().to_string();
        if self.recorded.is_empty() {
            self.clear_earlier().await?;
        }
        let mut n: u32 = 1;
        loop {
            let at = (n - 1) as usize;
            if let Some(line) = self.recorded.get(at).and_then(|r| r.line.clone()) {
                self.attempts.push(Attempt {
                    number: n,
                    job: attempt_name(&base_name, n),
                    earlier: Some(line),
                    ..Attempt::default()
                });
                n += 1;
                continue;
            }
            if self.recorded.len() <= at {
                self.recorded.push(Recorded::default());
                self.record().await?;
            }
            if n > 1 {
                // A kill may have left the attempt before it.
                self.delete_attempt(n - 1).await?;
            }
            let (record, ended) = match self.start(n).await? {
                Some(record) => {
                    if self.recorded[at].uid.as_deref() != Some(record.uid.as_str()) {
                        self.recorded[at].uid = Some(record.uid.clone());
                        self.record().await?;
                    }
                    let mut watch = Watch::new(self.spec);
                    let ended = self
                        .run
                        .follow_until(&mut self.kinds, &record, Some(&mut watch))
                        .await?;
                    (record, ended)
                }
                None => {
                    let doc = attempt_doc(&self.base, n, "", self.spec, None);
                    // Deleted as hung by the interrupted run (its nodes,
                    // cause and the log lines naming a node recorded), or
                    // by someone (its nodes unknown).
                    let log = self.recorded[at].hung_log.clone();
                    let gone = Ended {
                        state: JobState::Failed(
                            "its job is gone (deleted by someone): its nodes are unknown".into(),
                        ),
                        hung: match &log {
                            Some(l) => Some(l.why.clone()),
                            None => self.recorded[at].hung_on.as_ref().map(|_| {
                                "found hung by the interrupted run, which deleted it".into()
                            }),
                        },
                        pods: Vec::new(),
                        text: log.map(|l| l.lines.join("\n")).unwrap_or_default(),
                    };
                    (Kinds::record_of(&doc), gone)
                }
            };
            if ended.hung.is_none() && ended.state == JobState::Succeeded {
                self.attempts.push(Attempt {
                    number: n,
                    job: record.name.clone(),
                    state: "Succeeded".into(),
                    nodes: nodes_of(&ended.pods),
                    resumed_from: self.recorded[at].resumed_from.clone(),
                    ..Attempt::default()
                });
                let judged = self.run.judged(&record, &ended, self.keep.as_ref());
                self.tell();
                let mut applied = judged?;
                applied.id = Some(encode(&self.recorded));
                let list: Vec<Value> = self.attempts.iter().map(Attempt::json).collect();
                applied.outputs.insert(ATTEMPTS.into(), Value::Array(list));
                return Ok(applied);
            }
            let (mut attempt, bad, too_many) = self.fault(n, &record, &ended).await?;
            attempt.resumed_from = self.recorded[at].resumed_from.clone();
            self.recorded[at].line = Some(attempt.line());
            self.recorded[at].pending = None;
            self.attempts.push(attempt);
            let stop = if too_many {
                Some(
                    ProviderError::fatal(format!(
                        "job `{base_name}` stops at attempt {n}: {} of its {} nodes found bad ({}), more than max_bad_fraction {} — none was taken out; {}",
                        bad.len(),
                        self.attempts.last().map_or(0, |a| a.nodes.len()),
                        bad.join(", "),
                        self.spec.common.max_bad_fraction,
                        every(&self.attempts)
                    ))
                    .with_help("look at the nodes (a network partition or a zone's outage shows so); take them out by hand, or raise max_bad_fraction, and apply again"),
                )
            } else if self.spec.common.policy == Policy::Fail && !bad.is_empty() {
                Some(
                    ProviderError::fatal(format!(
                        "job `{base_name}` stops at attempt {n}: node{} {} found bad and policy is fail — {}",
                        if bad.len() == 1 { "" } else { "s" },
                        bad.join(", "),
                        every(&self.attempts)
                    ))
                    .with_help("set `policy = \"cordon\"` (or \"replace\") to take the bad nodes out and restart without them, or cordon them by hand and apply again"),
                )
            } else if n > self.spec.restarts {
                Some(
                    ProviderError::fatal(format!(
                        "job `{base_name}` failed on every attempt ({} of {}): {}",
                        self.attempts.len(),
                        self.spec.restarts + 1,
                        every(&self.attempts)
                    ))
                    .with_help("each attempt's logs are in the step's log (`flow logs FILE STEP`); `flow runs FILE` lists the attempts"),
                )
            } else {
                None
            };
            if let Some(e) = stop {
                self.record().await?;
                self.run.delete_job(&mut self.kinds, &record).await?;
                self.tell();
                return Err(e);
            }
            // Durable before the failed attempt is deleted: its line, and
            // the next attempt as being created, with its checkpoint.
            let resumed_from = match self.spec.checkpoint_dir.clone() {
                Some(dir) => self.newest_checkpoint(n + 1, &dir).await?,
                None => None,
            };
            self.recorded.push(Recorded {
                resumed_from,
                ..Recorded::default()
            });
            self.record().await?;
            self.run.delete_job(&mut self.kinds, &record).await?;
            n += 1;
        }
    }
}

/// What the restart inputs need of the job itself, for validate: a
/// `checkpoint_dir` on one of its containers' volumes (elsewhere it dies
/// with its pod, and no attempt could resume from it).
pub(super) fn job_problems(
    job: &Doc,
    known: &crate::contract::Values,
) -> Vec<crate::contract::Problem> {
    let Some(dir) = known.get("checkpoint_dir").and_then(Value::as_str) else {
        return Vec::new();
    };
    if !dir.starts_with('/') || checkpoint::mounted(job, dir) {
        return Vec::new();
    }
    vec![crate::contract::Problem::at(
        "checkpoint_dir",
        format!("`checkpoint_dir` {dir} is on no volume of {} {}'s containers: checkpoints there die with their pod", job.kind(), job.name()),
    )
    .with_help("mount the training's shared volume (an FSx for Lustre claim, say) in its container and name a folder under its mountPath")]
}

/// Runs the step's job with restarts, from the attempts `known` (the step's
/// recorded id) records.
pub(super) async fn drive(
    run: &Run<'_>,
    spec: &Spec,
    known: Option<&str>,
) -> Result<Applied, ProviderError> {
    let client = run.conn.client().await?;
    let mut kinds = Kinds::new(client.clone());
    let base = run
        .doc(&mut kinds)
        .await
        .map_err(ProviderError::before_acting)?;
    let mut driver = Driver {
        run,
        spec,
        kinds,
        client,
        base,
        recorded: known.map(decode).unwrap_or_default(),
        attempts: Vec::new(),
        keep: Arc::new(Keep::new(run.ctx.reporter.clone())),
    };
    driver.drive().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_is_its_own_job_told_its_number() {
        let base = Doc {
            source: "t#1".into(),
            object: json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "train", "annotations": {"flow.dev/token": "tok"}},
                "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
                    {"name": "pytorch", "env": [{"name": "FLOW_ATTEMPT", "value": "9"}]}]}}}}}}),
        };
        let spec = Spec::from_values(
            &serde_json::from_value(json!({"restarts": 1, "checkpoint_dir": "/ckpt"})).unwrap(),
        )
        .unwrap()
        .unwrap();
        let d = attempt_doc(&base, 2, "tok-a2", &spec, Some("/ckpt/e4"));
        assert_eq!(d.name(), "train-a2");
        assert_eq!(
            d.object["metadata"]["annotations"]["flow.dev/token"],
            "tok-a2"
        );
        assert_eq!(
            d.object
                .pointer("/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env")
                .unwrap(),
            &json!([{"name": "FLOW_ATTEMPT", "value": "2"}, {"name": "FLOW_CHECKPOINT_DIR", "value": "/ckpt"},
                {"name": "FLOW_RESUME_FROM", "value": "/ckpt/e4"}])
        );
    }
}
