//! When an applied object is ready, by kind:
//!
//! | kind | ready when |
//! |---|---|
//! | CustomResourceDefinition | condition `Established` is True |
//! | Deployment | observed its generation, `Available` True, all replicas updated and available |
//! | DaemonSet | observed its generation, every desired pod scheduled, updated and ready |
//! | Job | condition `Complete` True (`Failed` True fails) |
//! | StatefulSet | observed its generation, all replicas ready and updated |
//! | PersistentVolumeClaim | phase `Bound` |
//! | anything with a `wait_for` | the condition (`condition=Succeeded`, `condition=Ready=False`) or JSONPath equality (`jsonpath={.status.phase}=Running`) holds |
//!
//! Anything else is ready once applied. A custom resource waited for with
//! a condition fails when its `Failed` condition turns True.

use serde_json::Value;

use super::jsonpath;

/// What a look at an object found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Ready.
    Ready,
    /// Not yet; why.
    Pending(String),
    /// It will not become ready; why.
    Failed(String),
}

/// A `wait_for` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitFor {
    /// `condition=TYPE[=STATUS]` (STATUS default `True`).
    Condition {
        /// The condition type.
        kind: String,
        /// The status wanted.
        status: String,
    },
    /// `jsonpath={PATH}=VALUE`.
    JsonPath {
        /// The path.
        path: String,
        /// The value wanted.
        value: String,
    },
}

impl WaitFor {
    /// Parses `condition=Succeeded` or `jsonpath={.status.phase}=Running`.
    // A `String` error on purpose: the text is one problem, shown as it is
    // at the step input's span; no caller tells its cases apart.
    pub fn parse(text: &str) -> Result<WaitFor, String> {
        if let Some(c) = text.strip_prefix("condition=") {
            let (kind, status) = c.split_once('=').unwrap_or((c, "True"));
            if kind.is_empty() {
                return Err("`condition=` needs a condition type, e.g. condition=Succeeded".into());
            }
            return Ok(WaitFor::Condition {
                kind: kind.to_string(),
                status: status.to_string(),
            });
        }
        if let Some(j) = text.strip_prefix("jsonpath=") {
            let split = if j.starts_with('{') {
                j.find('}').map(|i| i + 1)
            } else {
                j.find('=')
            };
            let (path, value) = match split {
                Some(i) if j[i..].starts_with('=') => (&j[..i], &j[i + 1..]),
                _ => {
                    return Err(format!(
                        "`{text}`: write jsonpath={{.status.phase}}=Running"
                    ));
                }
            };
            jsonpath::get(&Value::Null, path)?;
            return Ok(WaitFor::JsonPath {
                path: path.to_string(),
                value: value.trim_matches(|c| c == '"' || c == '\'').to_string(),
            });
        }
        Err(format!(
            "`{text}`: write condition=TYPE or jsonpath={{PATH}}=VALUE"
        ))
    }

    fn check(&self, obj: &Value) -> Readiness {
        match self {
            WaitFor::Condition { kind, status } => {
                if kind != "Failed"
                    && let Some(c) = condition(obj, "Failed")
                    && c.status == "True"
                {
                    return Readiness::Failed(c.describe());
                }
                match condition(obj, kind) {
                    Some(c) if c.status == *status => Readiness::Ready,
                    Some(c) => Readiness::Pending(format!("{kind} is {}", c.status)),
                    None => Readiness::Pending(format!("no {kind} condition yet")),
                }
            }
            WaitFor::JsonPath { path, value } => match jsonpath::get(obj, path) {
                Ok(Some(v)) if jsonpath::text(v) == *value => Readiness::Ready,
                Ok(Some(v)) => Readiness::Pending(format!("{path} is {}", jsonpath::text(v))),
                Ok(None) => Readiness::Pending(format!("{path} is not set yet")),
                Err(e) => Readiness::Failed(e),
            },
        }
    }
}

/// One entry of `status.conditions`.
struct Condition {
    kind: String,
    status: String,
    reason: String,
    message: String,
}

impl Condition {
    fn describe(&self) -> String {
        let mut s = format!("{} ({})", self.kind, self.reason);
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&self.message);
        }
        s
    }
}

fn condition(obj: &Value, kind: &str) -> Option<Condition> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        .map(|c| {
            let s = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            Condition {
                kind: s("type"),
                status: s("status"),
                reason: s("reason"),
                message: s("message"),
            }
        })
}

fn int(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// Whether the controller has seen the latest spec.
fn observed(obj: &Value) -> bool {
    int(obj, "/status/observedGeneration") >= int(obj, "/metadata/generation")
}

/// Whether flow knows how to wait for `kind` without a `wait_for`.
pub fn built_in(kind: &str) -> bool {
    matches!(
        kind,
        "CustomResourceDefinition"
            | "Deployment"
            | "DaemonSet"
            | "Job"
            | "StatefulSet"
            | "PersistentVolumeClaim"
    )
}

/// Whether `obj` of `kind` is ready, with `wait_for` when given.
pub fn check(kind: &str, obj: &Value, wait_for: Option<&WaitFor>) -> Readiness {
    if let Some(w) = wait_for {
        return w.check(obj);
    }
    match kind {
        "CustomResourceDefinition" => match condition(obj, "Established") {
            Some(c) if c.status == "True" => Readiness::Ready,
            _ => Readiness::Pending("not established yet".into()),
        },
        "Deployment" => {
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            if let Some(c) = condition(obj, "Progressing")
                && c.reason == "ProgressDeadlineExceeded"
            {
                return Readiness::Failed(c.describe());
            }
            let available = condition(obj, "Available").is_some_and(|c| c.status == "True");
            let updated = int(obj, "/status/updatedReplicas");
            let ready = int(obj, "/status/availableReplicas");
            if observed(obj) && available && updated >= want && ready >= want {
                Readiness::Ready
            } else {
                Readiness::Pending(format!("{ready}/{want} replicas available"))
            }
        }
        "DaemonSet" => {
            let desired = int(obj, "/status/desiredNumberScheduled");
            let scheduled = int(obj, "/status/currentNumberScheduled");
            let ready = int(obj, "/status/numberReady");
            let updated = int(obj, "/status/updatedNumberScheduled");
            if observed(obj)
                && obj.pointer("/status/observedGeneration").is_some()
                && scheduled >= desired
                && ready >= desired
                && updated >= desired
            {
                Readiness::Ready
            } else {
                Readiness::Pending(format!("{ready}/{desired} pods ready"))
            }
        }
        "Job" => {
            if let Some(c) = condition(obj, "Failed")
                && c.status == "True"
            {
                return Readiness::Failed(c.describe());
            }
            match condition(obj, "Complete") {
                Some(c) if c.status == "True" => Readiness::Ready,
                _ => Readiness::Pending(format!("{} succeeded", int(obj, "/status/succeeded"))),
            }
        }
        "StatefulSet" => {
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let ready = int(obj, "/status/readyReplicas");
            let updated = int(obj, "/status/updatedReplicas");
            if observed(obj) && ready >= want && updated >= want {
                Readiness::Ready
            } else {
                Readiness::Pending(format!("{ready}/{want} replicas ready"))
            }
        }
        "PersistentVolumeClaim" => match obj.pointer("/status/phase").and_then(Value::as_str) {
            Some("Bound") => Readiness::Ready,
            Some("Lost") => Readiness::Failed("the claim lost its volume".into()),
            other => Readiness::Pending(format!("phase {}", other.unwrap_or("Pending"))),
        },
        _ => Readiness::Ready,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_have_their_own_readiness() {
        let crd = json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}});
        assert_eq!(
            check("CustomResourceDefinition", &crd, None),
            Readiness::Ready
        );
        assert!(matches!(
            check("CustomResourceDefinition", &json!({}), None),
            Readiness::Pending(_)
        ));
        let dep = |avail: &str, n: i64| {
            json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "updatedReplicas": n, "availableReplicas": n,
            "conditions": [{"type": "Available", "status": avail}]}})
        };
        assert_eq!(check("Deployment", &dep("True", 2), None), Readiness::Ready);
        assert_eq!(
            check("Deployment", &dep("True", 1), None),
            Readiness::Pending("1/2 replicas available".into())
        );
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3, "numberReady": 3, "updatedNumberScheduled": 3}});
        assert_eq!(check("DaemonSet", &ds, None), Readiness::Ready);
        let failed = json!({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}});
        assert_eq!(
            check("Job", &failed, None),
            Readiness::Failed(
                "Failed (BackoffLimitExceeded): Job has reached the specified backoff limit".into()
            )
        );
        assert_eq!(
            check(
                "PersistentVolumeClaim",
                &json!({"status": {"phase": "Bound"}}),
                None
            ),
            Readiness::Ready
        );
        assert_eq!(check("ConfigMap", &json!({}), None), Readiness::Ready);
    }

    #[test]
    fn wait_for_conditions_and_jsonpaths() {
        let w = WaitFor::parse("condition=Succeeded").unwrap();
        let ok = json!({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}});
        assert_eq!(check("PyTorchJob", &ok, Some(&w)), Readiness::Ready);
        let bad = json!({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "worker-1 exited"}]}});
        assert!(
            matches!(check("PyTorchJob", &bad, Some(&w)), Readiness::Failed(m) if m.contains("worker-1 exited"))
        );
        let j = WaitFor::parse("jsonpath={.status.phase}=Running").unwrap();
        assert_eq!(
            j,
            WaitFor::JsonPath {
                path: "{.status.phase}".into(),
                value: "Running".into()
            }
        );
        assert_eq!(
            check("X", &json!({"status": {"phase": "Running"}}), Some(&j)),
            Readiness::Ready
        );
        assert!(WaitFor::parse("ready").is_err());
        assert!(WaitFor::parse("jsonpath={.a}").is_err());
        assert_eq!(
            WaitFor::parse("condition=Ready=False").unwrap(),
            WaitFor::Condition {
                kind: "Ready".into(),
                status: "False".into()
            }
        );
    }
}
