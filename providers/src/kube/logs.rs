//! Following a job's pods: their phases as live events, their logs into the
//! step log (and, at most four lines a second, live on the terminal), and
//! the reason of the pod that failed.
//!
//! Logs come from the `pods/log` subresource, followed from the moment a
//! container starts. When the API server cannot give them or gives none
//! (the node is gone or unreachable, the pod was never bound to a node, the
//! log was rotated away), the container's termination message is used
//! instead: with
//! `terminationMessagePolicy: FallbackToLogsOnError` the kubelet fills it
//! with the tail of the log, so a failure still shows its last lines.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::kube::api::{Api, ListParams, LogParams};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::errors;
use crate::contract::{ProviderError, Reporter};

/// Least time between two log lines shown live.
const LIVE_EVERY: Duration = Duration::from_millis(250);

/// One container of one pod.
type Key = (String, String);

/// What the log streams share.
#[derive(Default)]
struct Shared {
    /// Every log line (without prefixes), for `success_pattern` and `capture`.
    text: String,
    /// Containers whose log gave at least one line.
    seen: HashSet<Key>,
    /// Containers whose log stream ended (or could not open).
    ended: HashSet<Key>,
    /// When a line was last shown live.
    last_live: Option<Instant>,
}

/// Follows the pods that `selector` picks in `api`'s namespace.
pub struct Follower {
    api: Api<Pod>,
    selector: String,
    reporter: Arc<dyn Reporter>,
    shared: Arc<Mutex<Shared>>,
    started: HashSet<Key>,
    fallback_done: HashSet<Key>,
    phases: HashMap<String, String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Follower {
    /// A follower of the pods matching `selector`.
    pub fn new(api: Api<Pod>, selector: String, reporter: Arc<dyn Reporter>) -> Self {
        Follower {
            api,
            selector,
            reporter,
            shared: Arc::default(),
            started: HashSet::new(),
            fallback_done: HashSet::new(),
            phases: HashMap::new(),
            tasks: Vec::new(),
        }
    }

    /// Looks at the pods once: reports phase changes, starts log streams of
    /// containers that started, uses termination messages where no log
    /// stream could open. Returns the pods.
    pub async fn look(&mut self) -> Result<Vec<Pod>, ProviderError> {
        let pods = self
            .api
            .list(&ListParams::default().labels(&self.selector))
            .await
            .map_err(|e| errors::kube(&format!("list pods {}", self.selector), e))?
            .items;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let phase = phase_line(pod);
            if self.phases.get(&name) != Some(&phase) {
                self.reporter.event(&format!("pod {name}: {phase}"));
                self.reporter.log(&format!("pod {name}: {phase}"));
                self.phases.insert(name.clone(), phase);
            }
            let statuses = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default();
            let several = statuses.len() > 1;
            for cs in &statuses {
                let key = (name.clone(), cs.name.clone());
                let state = cs.state.as_ref();
                let started = state.is_some_and(|s| s.running.is_some() || s.terminated.is_some());
                if started && self.started.insert(key.clone()) {
                    self.spawn(key.clone(), several);
                }
                let silent = {
                    let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                    shared.ended.contains(&key) && !shared.seen.contains(&key)
                };
                if silent && !self.fallback_done.contains(&key) && termination_message(cs).is_some()
                {
                    self.fallback(&key, cs, several);
                }
            }
        }
        Ok(pods)
    }

    /// Waits (a little) for the log streams to end, then fills in the
    /// termination messages of containers whose logs never came.
    pub async fn finish(&mut self, pods: &[Pod]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        for task in self.tasks.drain(..) {
            let _ = tokio::time::timeout_at(deadline, task).await;
        }
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let statuses = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default();
            let several = statuses.len() > 1;
            for cs in &statuses {
                let key = (name.clone(), cs.name.clone());
                let seen = self
                    .shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .seen
                    .contains(&key);
                if !seen && !self.fallback_done.contains(&key) {
                    self.fallback(&key, cs, several);
                }
            }
        }
    }

    /// Every log line so far.
    pub fn text(&self) -> String {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .text
            .clone()
    }

    /// Stops following (the streams of a cancelled job).
    pub fn abort(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    fn fallback(&mut self, key: &Key, cs: &ContainerStatus, several: bool) {
        self.fallback_done.insert(key.clone());
        let Some(message) = termination_message(cs) else {
            return;
        };
        let prefix = prefix(key, several);
        self.reporter.log(&format!(
            "{prefix} (logs unavailable; the container's termination message follows)"
        ));
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        for line in message.lines() {
            emit(&mut shared, self.reporter.as_ref(), &prefix, line);
        }
    }

    fn spawn(&mut self, key: Key, several: bool) {
        let api = self.api.clone();
        let shared = self.shared.clone();
        let reporter = self.reporter.clone();
        self.tasks.push(tokio::spawn(async move {
            let params = LogParams {
                follow: true,
                container: Some(key.1.clone()),
                ..LogParams::default()
            };
            let prefix = prefix(&key, several);
            match api.log_stream(&key.0, &params).await {
                Ok(stream) => {
                    let mut lines = stream.lines();
                    while let Some(Ok(line)) = lines.next().await {
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        s.seen.insert(key.clone());
                        emit(&mut s, reporter.as_ref(), &prefix, &line);
                    }
                }
                Err(e) => {
                    reporter.log(&format!(
                        "{prefix} logs unavailable: {}",
                        errors::kube("read logs", e).message
                    ));
                }
            }
            shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .ended
                .insert(key);
        }));
    }
}

/// Records a log line, logs it, and shows it live unless one was just shown.
fn emit(shared: &mut Shared, reporter: &dyn Reporter, prefix: &str, line: &str) {
    shared.text.push_str(line);
    shared.text.push('\n');
    let shown = format!("{prefix} {line}");
    reporter.log(&shown);
    if shared.last_live.is_none_or(|t| t.elapsed() >= LIVE_EVERY) {
        reporter.event(&shown);
        shared.last_live = Some(Instant::now());
    }
}

fn prefix(key: &Key, several: bool) -> String {
    if several {
        format!("[{}/{}]", key.0, key.1)
    } else {
        format!("[{}]", key.0)
    }
}

fn termination_message(cs: &ContainerStatus) -> Option<&str> {
    cs.state
        .as_ref()?
        .terminated
        .as_ref()?
        .message
        .as_deref()
        .filter(|m| !m.is_empty())
}

/// `Running`, `Succeeded`, `Pending (ImagePullBackOff)`…
fn phase_line(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let phase = status
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
    match waiting {
        Some(w) => format!("{phase} ({w})"),
        None => phase,
    }
}

/// Why the job's pods failed: the first pod with a container that exited
/// non-zero, is stuck waiting (image pull, crash loop), or a pod that
/// failed as a whole (evicted).
pub fn failure_reason(pods: &[Pod]) -> Option<String> {
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(status) = pod.status.as_ref() else {
            continue;
        };
        for cs in status.container_statuses.iter().flatten() {
            let Some(state) = cs.state.as_ref() else {
                continue;
            };
            if let Some(t) = &state.terminated
                && t.exit_code != 0
            {
                let mut s = format!(
                    "pod {name}: container {} exited with code {}",
                    cs.name, t.exit_code
                );
                if let Some(r) = &t.reason {
                    s.push_str(&format!(" ({r})"));
                }
                if let Some(m) = t.message.as_deref().filter(|m| !m.trim().is_empty()) {
                    let tail: Vec<&str> = m.trim_end().lines().rev().take(5).collect();
                    s.push_str(": ");
                    s.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
                }
                return Some(s);
            }
            if let Some(w) = &state.waiting
                && let Some(r) = &w.reason
                && matches!(
                    r.as_str(),
                    "ImagePullBackOff"
                        | "ErrImagePull"
                        | "CrashLoopBackOff"
                        | "CreateContainerConfigError"
                        | "InvalidImageName"
                )
            {
                return Some(format!(
                    "pod {name}: container {} is waiting: {r}{}",
                    cs.name,
                    w.message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ));
            }
        }
        if status.phase.as_deref() == Some("Failed") {
            return Some(format!(
                "pod {name} failed: {}{}",
                status.reason.as_deref().unwrap_or("Failed"),
                status
                    .message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_failing_pod_explains_the_failure() {
        let ok = pod(
            json!({"metadata": {"name": "w0"}, "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "pytorch", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0}}}]}}),
        );
        let bad = pod(
            json!({"metadata": {"name": "w1"}, "status": {"phase": "Failed", "containerStatuses": [
            {"name": "pytorch", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "a\nb\nRuntimeError: NCCL error\n"}}}]}}),
        );
        assert_eq!(failure_reason(std::slice::from_ref(&ok)), None);
        let why = failure_reason(&[ok, bad]).unwrap();
        assert_eq!(
            why,
            "pod w1: container pytorch exited with code 1 (Error): a | b | RuntimeError: NCCL error"
        );
        let pulling = pod(
            json!({"metadata": {"name": "w2"}, "status": {"phase": "Pending", "containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}}),
        );
        assert_eq!(
            failure_reason(std::slice::from_ref(&pulling)).unwrap(),
            "pod w2: container c is waiting: ImagePullBackOff: not found"
        );
        assert_eq!(phase_line(&pulling), "Pending (ImagePullBackOff)");
        let evicted = pod(
            json!({"metadata": {"name": "w3"}, "status": {"phase": "Failed", "reason": "Evicted", "message": "low memory"}}),
        );
        assert_eq!(
            failure_reason(&[evicted]).unwrap(),
            "pod w3 failed: Evicted: low memory"
        );
    }
}
