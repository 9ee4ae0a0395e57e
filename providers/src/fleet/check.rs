//! One node's check judged from what its job printed: a failed job or
//! output flow cannot read leaves the node `unknown`; a wrong GPU count or
//! a failed `expect` gate makes it `bad`; the same rules on every platform.

use serde_json::{Value, json};

use super::gpus;
use super::report::{Ran, first_line, verdict};
use super::spec::Gpus;
use crate::capture::{LogsMiss, Matchers};

/// The GPUs a node must list: `check.gpus`, or its instance type's count;
/// `Err` with the reason when flow cannot tell (an instance type it does
/// not know, a node that names none). `instance_type` is the node's, or
/// what says it has none (`no node.kubernetes.io/instance-type label`).
pub fn wanted(count: Gpus, instance_type: Result<&str, &str>) -> Result<(u32, String), String> {
    match (count, instance_type) {
        (Gpus::Count(n), _) => Ok((n, "check.gpus".to_string())),
        (Gpus::InstanceType, Ok(t)) => gpus::of_instance_type(t)
            .map(|n| (n, format!("the GPUs of a {t}")))
            .ok_or_else(|| format!("flow does not know the GPUs of its instance type ({t})")),
        (Gpus::InstanceType, Err(none)) => Err(format!(
            "flow does not know the GPUs of its instance type ({none})"
        )),
    }
}

/// The verdict on one node's check job `r`: `want` is what
/// [`wanted`] said (or `None` without `check.gpus`), `matchers` the
/// check's `success_pattern`/`capture`/`parse`/`expect`.
pub fn judge(r: &Ran, want: Option<Result<(u32, String), String>>, matchers: &Matchers) -> Value {
    if let Some(why) = &r.failed {
        return verdict(
            "unknown",
            "check",
            format!("its check job {} failed: {why}", r.label),
            json!({"line": first_line(&r.text)}),
        );
    }
    match want {
        Some(Err(why)) => return verdict("unknown", "check", why, json!({})),
        Some(Ok((want, against))) => match gpus::listed(&r.text) {
            None => {
                return verdict(
                    "unknown",
                    "check",
                    "its check's output lists no GPUs: it is not nvidia-smi's".into(),
                    json!({"line": first_line(&r.text)}),
                );
            }
            Some(l) if l.count != want => {
                return verdict(
                    "bad",
                    "check",
                    format!("nvidia-smi lists {} GPUs, {against} is {want}", l.count),
                    json!({"short": format!("gpus-{}-of-{want}", l.count), "value": l.count, "threshold": want, "against": against, "line": l.line}),
                );
            }
            Some(_) => {}
        },
        None => {}
    }
    match matchers.check(&r.text) {
        Ok(values) => verdict(
            "healthy",
            "check",
            "its check passed".into(),
            json!({"values": values}),
        ),
        Err(LogsMiss::GateFailed { why, line }) => verdict(
            "bad",
            "check",
            why,
            json!({"short": "check-failed", "line": line}),
        ),
        Err(miss) => verdict(
            "unknown",
            "check",
            miss.to_string(),
            json!({"line": first_line(&r.text)}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMI: &str = include_str!("../../../scripts/local-cloud/outputs/nvidia-smi.txt");

    fn ran(text: &str) -> Ran {
        Ran {
            label: "job 7".into(),
            failed: None,
            text: text.into(),
        }
    }

    #[test]
    fn the_gpu_count_is_held_to_the_instance_type_or_the_number() {
        let p4d = wanted(Gpus::InstanceType, Ok("p4d.24xlarge"));
        assert_eq!(p4d, Ok((8, "the GPUs of a p4d.24xlarge".into())));
        let healthy = judge(&ran(SMI), Some(p4d.clone()), &Matchers::default());
        assert_eq!(healthy["status"], "healthy");
        let seven: String = SMI
            .lines()
            .filter(|l| !l.contains("00000000:A0:1D.0"))
            .map(|l| format!("{l}\n"))
            .collect();
        let bad = judge(&ran(&seven), Some(p4d), &Matchers::default());
        assert_eq!(bad["status"], "bad");
        assert_eq!(
            bad["reason"],
            "nvidia-smi lists 7 GPUs, the GPUs of a p4d.24xlarge is 8"
        );
        assert_eq!(
            (bad["value"].clone(), bad["threshold"].clone()),
            (json!(7), json!(8))
        );
        assert!(
            bad["line"]
                .as_str()
                .unwrap()
                .starts_with("|   6  NVIDIA A100")
        );
        let four = judge(
            &ran(SMI),
            Some(wanted(Gpus::Count(4), Err(""))),
            &Matchers::default(),
        );
        assert_eq!(four["reason"], "nvidia-smi lists 8 GPUs, check.gpus is 4");
    }

    #[test]
    fn what_cannot_be_read_is_unknown_never_healthy() {
        let none = wanted(Gpus::InstanceType, Err("no feature names an instance type"));
        let v = judge(&ran(SMI), Some(none), &Matchers::default());
        assert_eq!(v["status"], "unknown");
        assert_eq!(
            v["reason"],
            "flow does not know the GPUs of its instance type (no feature names an instance type)"
        );
        let p4d = wanted(Gpus::InstanceType, Ok("p4d.24xlarge"));
        let v = judge(
            &ran("NVIDIA-SMI has failed\n"),
            Some(p4d),
            &Matchers::default(),
        );
        assert_eq!(v["status"], "unknown");
        assert_eq!(v["line"], "NVIDIA-SMI has failed");
        let mut failed = ran(SMI);
        failed.failed = Some("ended FAILED, exit code 1:0".into());
        let v = judge(&failed, None, &Matchers::default());
        assert_eq!(
            v["reason"],
            "its check job job 7 failed: ended FAILED, exit code 1:0"
        );
    }
}
