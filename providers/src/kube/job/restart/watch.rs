//! When a running `kube.job` attempt is hung: no new log line for
//! `hang_after`, or no new loss for `hang_without_loss` (the shared
//! [`LossWatch`]), counted only while a pod of it runs (pulling an image
//! or waiting for a node is not a hang).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::Spec;
use crate::fleet::loss_watch::LossWatch;

/// Tells a running attempt hung: no new log line for `hang_after`, or no
/// new loss for `hang_without_loss`, counted while a pod of it runs.
pub(in crate::kube::job) struct Watch {
    hang_after: Option<Duration>,
    hang_text: String,
    loss: Option<LossWatch>,
    loss_text: String,
    seen: usize,
    since: Option<Instant>,
}

impl Watch {
    /// The watch of `spec`'s hang rules.
    pub(super) fn new(spec: &Spec) -> Watch {
        Watch {
            hang_after: spec.hang_after,
            hang_text: spec.hang_text.clone(),
            loss: spec.no_loss.map(|(limit, p)| LossWatch::new(limit, p)),
            loss_text: spec
                .no_loss
                .map(|(l, _)| humantime::format_duration(l).to_string())
                .unwrap_or_default(),
            seen: 0,
            since: None,
        }
    }

    /// Why the attempt is hung, when it is, by what its logs hold now.
    pub(in crate::kube::job) fn look(&mut self, text: &str, pods: &[Pod]) -> Option<String> {
        self.look_at(text, pods, Instant::now())
    }

    fn look_at(&mut self, text: &str, pods: &[Pod], now: Instant) -> Option<String> {
        let running = pods
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        if !running {
            // Pending (pulling, scheduling) is not a hang.
            self.since = None;
            return None;
        }
        if self.since.is_none() || text.len() != self.seen {
            self.since = Some(now);
            self.seen = text.len();
        }
        if let (Some(limit), Some(since)) = (self.hang_after, self.since)
            && now.duration_since(since) >= limit
        {
            return Some(format!("no new log line for {}", self.hang_text));
        }
        let w = self.loss.as_mut()?;
        w.look(text, now);
        w.stalled(now).then(|| w.why(&self.loss_text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": "n1"},
            "status": {"phase": phase}}),
        )
        .unwrap()
    }

    #[test]
    fn a_running_attempt_that_logs_nothing_new_is_hung() {
        let spec = Spec::from_values(
            &serde_json::from_value(json!({"restarts": 1, "hang_after": "10s"})).unwrap(),
        )
        .unwrap()
        .unwrap();
        let mut w = Watch::new(&spec);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(w.look_at("", &[pod("Pending")], at(0)), None);
        assert_eq!(
            w.look_at("", &[pod("Pending")], at(30)),
            None,
            "pending is not a hang"
        );
        assert_eq!(w.look_at("", &[pod("Running")], at(31)), None);
        assert_eq!(
            w.look_at("a\n", &[pod("Running")], at(40)),
            None,
            "a new line"
        );
        assert_eq!(
            w.look_at("a\n", &[pod("Running")], at(50)).as_deref(),
            Some("no new log line for 10s")
        );
        assert_eq!(
            super::super::nodes_of(&[pod("Running"), pod("Failed")]),
            ["n1"]
        );
    }
}
