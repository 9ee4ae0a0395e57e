//! Jobs pinned to nodes, run a batch at a time: each a copy of the step's
//! `check` or `pairs` manifest, named for its node(s), its pods held to
//! them, followed to its end; what its pods printed comes back.

use std::sync::Arc;

use ::kube::api::{Api, DeleteParams, ListParams};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::super::errors;
use super::super::job_object::{JobState, is_job, job_state, pod_selector};
use super::super::logs::Follower;
use super::super::objects::{KUBE_PACE, Kinds, Record};
use super::super::render::{Doc, Sources};
use crate::aws::poll::Waiter;
use crate::contract::{OpContext, ProviderError, Values};
use crate::fleet::report::Ran;

/// The label the nodes' hostnames are under (what `kubelet` sets).
pub(super) const HOSTNAME: &str = "kubernetes.io/hostname";

/// The annotation naming the step that made a job.
const STEP_ANNOTATION: &str = "flow.dev/step";

/// The annotation naming the nodes a job runs on.
const NODES_ANNOTATION: &str = "flow.dev/nodes";

/// One job to run: where, and the placeholders filled for it.
#[derive(Debug, Clone)]
pub(super) struct Pinned {
    /// Its name's suffix (`node-3`, `r2-p0`).
    pub suffix: String,
    /// The hostnames of the nodes its pods must run on.
    pub hosts: Vec<String>,
    /// `values` filled for it (NODE, or NODE_A and NODE_B).
    pub values: Vec<(String, String)>,
}

/// Runs the jobs of a batch against one cluster.
pub(super) struct Batch<'a> {
    pub ctx: &'a OpContext,
    pub client: ::kube::Client,
    pub namespace: String,
}

/// A job name of at most 63 characters: its base, then `-suffix`.
fn job_name(base: &str, suffix: &str) -> String {
    let keep = 62usize.saturating_sub(suffix.len());
    let base: String = base.chars().take(keep).collect();
    format!("{}-{suffix}", base.trim_end_matches('-'))
}

/// Every pod template of a Job or a Kubeflow job.
pub(in crate::kube) fn pod_templates(job: &mut Value) -> Vec<&mut Value> {
    if job.pointer("/spec/template").is_some() {
        return job.pointer_mut("/spec/template").into_iter().collect();
    }
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return Vec::new();
    };
    spec.iter_mut()
        .filter(|(k, _)| k.ends_with("ReplicaSpecs"))
        .filter_map(|(_, v)| v.as_object_mut())
        .flat_map(|r| r.values_mut())
        .filter_map(|r| r.get_mut("template"))
        .collect()
}

/// The label that marks the pods of one pair's job, for their anti-affinity.
const PAIR_LABEL: &str = "flow.dev/pair";

/// Holds every pod of `job` to `hosts`: a nodeSelector on the hostname for
/// one node; for a pair, a required node affinity to the two and a required
/// anti-affinity between the job's pods on the hostname, so that the two
/// pods land on different nodes (both on one would measure that node alone
/// and pass the other untested).
fn pin(job: &mut Value, hosts: &[String]) {
    use sha2::{Digest, Sha256};
    let pair = hex::encode(&Sha256::digest(hosts.join(",").as_bytes())[..8]);
    for template in pod_templates(job) {
        if let [host] = hosts {
            template["spec"]["nodeSelector"][HOSTNAME] = json!(host);
        } else {
            template["metadata"]["labels"][PAIR_LABEL] = json!(pair);
            let affinity = &mut template["spec"]["affinity"];
            affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": HOSTNAME, "operator": "In", "values": hosts}]}]});
            affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!([{
                "labelSelector": {"matchLabels": {PAIR_LABEL: pair}},
                "topologyKey": HOSTNAME}]);
        }
    }
}

fn annotation<'a>(obj: &'a ::kube::api::DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

impl Batch<'_> {
    /// The job `table`'s manifest makes for `p`, placed and pinned.
    async fn doc(
        &self,
        kinds: &mut Kinds,
        table: &Values,
        p: &Pinned,
    ) -> Result<Doc, ProviderError> {
        let mut filled = table.clone();
        let values = filled
            .entry("values")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| ProviderError::invalid("`values` must be a table"))?;
        for (k, v) in &p.values {
            values.insert(k.clone(), json!(v));
        }
        let docs = Sources::from_inputs(&filled)?
            .render(&self.ctx.workdir)
            .await?;
        let jobs: Vec<&Doc> = docs
            .iter()
            .filter(|d| is_job(d.api_version(), d.kind()))
            .collect();
        let [doc] = jobs.as_slice() else {
            return Err(ProviderError::invalid(format!(
                "kube.node_check runs one Job, PyTorchJob or MPIJob per node or pair; the manifest holds {}",
                docs.len()
            )));
        };
        let mut doc = kinds.place(doc, &self.namespace).await?;
        let name = job_name(doc.name(), &p.suffix);
        pin(&mut doc.object, &p.hosts);
        let meta = &mut doc.object["metadata"];
        meta["name"] = json!(name);
        meta["annotations"][super::super::TOKEN_ANNOTATION] = json!(self.ctx.token);
        meta["annotations"][STEP_ANNOTATION] = json!(self.ctx.step);
        meta["annotations"][NODES_ANNOTATION] = json!(p.hosts.join(","));
        Ok(doc)
    }

    /// Runs one job per entry of `pinned`, all at once, and returns what
    /// each came to, in order. The jobs are deleted once read.
    pub async fn run(&self, table: &Values, pinned: &[Pinned]) -> Result<Vec<Ran>, ProviderError> {
        let mut kinds = Kinds::new(self.client.clone());
        let mut records = Vec::new();
        for p in pinned {
            let started = match self.doc(&mut kinds, table, p).await {
                Ok(doc) => self.start(&mut kinds, &doc).await,
                Err(e) => Err(e),
            };
            match started {
                Ok(record) => records.push(record),
                Err(e) => {
                    // The jobs already started are not left running.
                    self.delete(&mut kinds, &records).await;
                    return Err(e);
                }
            }
        }
        let runs = records.iter().map(|r| self.follow(r));
        let results = tokio::select! {
            r = futures::future::join_all(runs) => r,
            _ = self.ctx.cancel.cancelled() => {
                self.delete(&mut kinds, &records).await;
                return Err(ProviderError::fatal("interrupted: the checks' jobs and their pods were deleted"));
            }
        };
        self.delete(&mut kinds, &records).await;
        results.into_iter().collect()
    }

    /// Creates the job unless this operation already did for the same
    /// nodes; one an earlier run of the step left, or one this operation
    /// made for other nodes (a resumed run that numbers its suspects
    /// otherwise), is deleted first: its verdict is not these nodes'.
    async fn start(&self, kinds: &mut Kinds, doc: &Doc) -> Result<Record, ProviderError> {
        let mut record = Kinds::record_of(doc);
        let nodes = doc.object["metadata"]["annotations"][NODES_ANNOTATION].as_str();
        match kinds.get(&record).await? {
            Some(o)
                if annotation(&o, super::super::TOKEN_ANNOTATION) == Some(&self.ctx.token)
                    && annotation(&o, NODES_ANNOTATION) == nodes =>
            {
                record.uid = o.metadata.uid.unwrap_or_default();
                return Ok(record);
            }
            Some(o) if annotation(&o, STEP_ANNOTATION) == Some(&self.ctx.step) => {
                self.ctx.reporter.log(&format!(
                    "deleting {} left by an earlier run",
                    record.label()
                ));
                record.uid = o.metadata.uid.unwrap_or_default();
                self.delete(kinds, std::slice::from_ref(&record)).await;
                kinds.delete(&record, self.ctx.reporter.as_ref()).await?;
            }
            Some(_) => return Err(crate::ownership::not_own(&record.label())),
            None => {}
        }
        let record = kinds.apply(doc).await?.0;
        self.ctx
            .reporter
            .log(&format!("started {}", record.label()));
        Ok(record)
    }

    /// Follows a job to its end; what its pods printed.
    async fn follow(&self, record: &Record) -> Result<Ran, ProviderError> {
        let mut kinds = Kinds::new(self.client.clone());
        let api = kinds.api_for(record).await?;
        let ns = record.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let reporter: Arc<dyn crate::contract::Reporter> = self.ctx.reporter.clone();
        let mut follower = Follower::new(pods, pod_selector(record), reporter.clone());
        let mut waiter = Waiter::new(KUBE_PACE, reporter.as_ref(), record.label());
        let (state, last) = loop {
            let look = async {
                let obj = api
                    .get_opt(&record.name)
                    .await
                    .map_err(|e| errors::kube(&format!("read {}", record.label()), e))?
                    .ok_or_else(|| {
                        ProviderError::vanished(format!(
                            "{} was deleted while running",
                            record.label()
                        ))
                    })?;
                let pods = follower.look().await?;
                let state = job_state(&serde_json::to_value(&obj).unwrap_or(Value::Null));
                Ok::<_, ProviderError>((state, pods))
            };
            match look.await {
                Ok((JobState::Running(_), _)) => waiter.looked(),
                Ok(done) => break done,
                Err(e) => waiter.tolerate(e)?,
            }
            waiter.pause().await?;
        };
        follower.finish(&last).await;
        Ok(Ran {
            label: record.label(),
            failed: match state {
                JobState::Failed(why) => Some(why),
                _ => None,
            },
            text: follower.text(),
        })
    }

    /// Deletes the jobs and their pods, without waiting.
    async fn delete(&self, kinds: &mut Kinds, records: &[Record]) {
        for r in records {
            if let Ok(api) = kinds.api_for(r).await {
                let _ = api.delete(&r.name, &DeleteParams::background()).await;
            }
            let ns = r.namespace.as_deref().unwrap_or("default");
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let _ = pods
                .delete_collection(
                    &DeleteParams::background(),
                    &ListParams::default().labels(&pod_selector(r)),
                )
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_within_63_characters() {
        assert_eq!(job_name("nvidia-smi", "node-3"), "nvidia-smi-node-3");
        let long = job_name(&"x".repeat(80), "r2-p10");
        assert!(long.len() <= 63 && long.ends_with("-r2-p10"), "{long}");
    }

    #[test]
    fn every_pod_template_is_pinned() {
        let mut job = json!({"spec": {"template": {"spec": {"containers": []}}}});
        pin(&mut job, &["n1".into()]);
        assert_eq!(
            job["spec"]["template"]["spec"]["nodeSelector"][HOSTNAME],
            "n1"
        );
        let mut pt = json!({"spec": {"pytorchReplicaSpecs": {
            "Master": {"template": {"spec": {}}}, "Worker": {"template": {"spec": {}}}}}});
        pin(&mut pt, &["a".into(), "b".into()]);
        for r in ["Master", "Worker"] {
            let terms = &pt["spec"]["pytorchReplicaSpecs"][r]["template"]["spec"]["affinity"]["nodeAffinity"]
                ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
            assert_eq!(terms[0]["matchExpressions"][0]["values"], json!(["a", "b"]));
            // The two pods of the pair never share a node.
            let template = &pt["spec"]["pytorchReplicaSpecs"][r]["template"];
            let pair = template["metadata"]["labels"][PAIR_LABEL].as_str().unwrap();
            let anti = &template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                [0];
            assert_eq!(anti["labelSelector"]["matchLabels"][PAIR_LABEL], pair);
            assert_eq!(anti["topologyKey"], HOSTNAME);
        }
    }
}
