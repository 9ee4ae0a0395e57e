//! One node's check judged from what its job printed: a failed job or
//! output flow cannot read leaves the node `unknown`; a wrong GPU or EFA
//! device count, a failed `dcgmi diag` test or a failed `expect` gate makes
//! it `bad`; the same rules on every platform.

use serde_json::{Value, json};

use super::report::{Ran, first_line, verdict};
use super::spec::{Gpus, Rules};
use super::{dcgm, efa_devices, gpus};
use crate::capture::{LogsMiss, Matchers};
use crate::efa::types::{Lookup, lookup};

/// What one node's check is held to, for its instance type: each count
/// (or why flow cannot tell it), and whether its `dcgmi diag` table is
/// judged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wanted {
    /// The GPUs `nvidia-smi` must list, and what says so.
    pub gpus: Option<Result<(u32, String), String>>,
    /// The EFA devices `fi_info` must list, and what says so.
    pub efa: Option<Result<(u32, String), String>>,
    /// Whether a `dcgmi diag` table is judged.
    pub dcgm: bool,
}

impl Wanted {
    /// What `rules` ask of a node of `instance_type` (or what says it has
    /// none, as [`wanted`] takes it).
    pub fn of(rules: &Rules, instance_type: Result<&str, &str>) -> Wanted {
        Wanted {
            gpus: rules.gpus.map(|g| wanted(g, instance_type)),
            efa: rules.efa.map(|e| efa_wanted(e, instance_type)),
            dcgm: rules.dcgm,
        }
    }
}

/// The EFA devices a node must list: `check.efa`, or its instance type's
/// interfaces (providers/data/efa-instance-types.csv).
pub fn efa_wanted(count: Gpus, instance_type: Result<&str, &str>) -> Result<(u32, String), String> {
    match (count, instance_type) {
        (Gpus::Count(n), _) => Ok((n, "check.efa".to_string())),
        (Gpus::InstanceType, Ok(t)) => match lookup(t) {
            Lookup::Efa(n) => Ok((n, format!("the EFA interfaces of a {t}"))),
            Lookup::NoEfa => Err(format!(
                "a {t} has no EFA, and check.efa asks for its EFA devices"
            )),
            Lookup::Unknown => Err(format!(
                "flow does not know the EFA interfaces of its instance type ({t})"
            )),
        },
        (Gpus::InstanceType, Err(none)) => Err(format!(
            "flow does not know the EFA interfaces of its instance type ({none})"
        )),
    }
}

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
/// [`Wanted::of`] said, `matchers` the check's
/// `success_pattern`/`capture`/`parse`/`expect`. The first rule the output
/// breaks names the node bad; output a rule cannot read leaves it unknown.
pub fn judge(r: &Ran, want: &Wanted, matchers: &Matchers) -> Value {
    if let Some(why) = &r.failed {
        return verdict(
            "unknown",
            "check",
            format!("its check job {} failed: {why}", r.label),
            json!({"line": first_line(&r.text)}),
        );
    }
    if let Some(v) = gpu_count(r, want.gpus.clone())
        .or_else(|| efa_count(r, want.efa.clone()))
        .or_else(|| want.dcgm.then(|| dcgm_tests(r)).flatten())
    {
        return v;
    }
    let dcgm_skipped = want.dcgm && r.text.contains(dcgm::SKIPPED);
    match matchers.check(&r.text) {
        Ok(values) => verdict(
            "healthy",
            "check",
            "its check passed".into(),
            match dcgm_skipped {
                true => json!({"values": values, "dcgm": "skipped: dcgmi is not on the node"}),
                false => json!({"values": values}),
            },
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

/// The GPU count rule: a verdict when it decides one.
fn gpu_count(r: &Ran, want: Option<Result<(u32, String), String>>) -> Option<Value> {
    let (want, against) = match want? {
        Ok(w) => w,
        Err(why) => return Some(verdict("unknown", "check", why, json!({}))),
    };
    match gpus::listed(&r.text) {
        None => Some(verdict(
            "unknown",
            "check",
            "its check's output lists no GPUs: it is not nvidia-smi's".into(),
            json!({"line": first_line(&r.text)}),
        )),
        Some(l) if l.count != want => Some(verdict(
            "bad",
            "check",
            format!("nvidia-smi lists {} GPUs, {against} is {want}", l.count),
            json!({"short": format!("gpus-{}-of-{want}", l.count), "value": l.count, "threshold": want, "against": against, "line": l.line}),
        )),
        Some(_) => None,
    }
}

/// The EFA device count rule: a verdict when it decides one.
fn efa_count(r: &Ran, want: Option<Result<(u32, String), String>>) -> Option<Value> {
    let (want, against) = match want? {
        Ok(w) => w,
        Err(why) => return Some(verdict("unknown", "check", why, json!({}))),
    };
    match efa_devices::listed(&r.text) {
        None => Some(verdict(
            "unknown",
            "check",
            "its check's output holds no `fi_info -p efa` answer: the EFA devices are not known"
                .into(),
            json!({"line": first_line(&r.text)}),
        )),
        Some(l) if l.count != want => Some(verdict(
            "bad",
            "check",
            format!("fi_info lists {} EFA devices, {against} is {want}", l.count),
            json!({"short": format!("efa-{}-of-{want}", l.count), "value": l.count, "threshold": want, "against": against, "line": l.line}),
        )),
        Some(_) => None,
    }
}

/// The `dcgmi diag` rule: a verdict when it decides one (a failed test, or
/// no table and no word that dcgmi is missing).
fn dcgm_tests(r: &Ran) -> Option<Value> {
    let Some(tests) = dcgm::read(&r.text) else {
        if r.text.contains(dcgm::SKIPPED) {
            return None;
        }
        return Some(verdict(
            "unknown",
            "check",
            "its check's output holds no `dcgmi diag` table".into(),
            json!({"line": first_line(&r.text)}),
        ));
    };
    let failed = tests.iter().find(|t| t.failed())?;
    let detail = match failed.detail.is_empty() {
        true => String::new(),
        false => format!(": {}", failed.detail),
    };
    Some(verdict(
        "bad",
        "check",
        format!("dcgmi diag: {} {}{detail}", failed.name, failed.result),
        json!({"short": format!("dcgm-{}", failed.name.to_lowercase().replace([' ', '/'], "-")), "line": failed.line}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMI: &str = include_str!("../../../scripts/local-cloud/outputs/nvidia-smi.txt");

    const DCGM: &str = include_str!("testdata/dcgmi-diag-r2-p4de.txt");
    const FI_INFO: &str = include_str!("testdata/fi_info-efa-p4d.txt");

    fn ran(text: &str) -> Ran {
        Ran {
            label: "job 7".into(),
            failed: None,
            text: text.into(),
        }
    }

    fn gpus_only(gpus: Result<(u32, String), String>) -> Wanted {
        Wanted {
            gpus: Some(gpus),
            ..Wanted::default()
        }
    }

    /// The node-health check's output: nvidia-smi, fi_info, dcgmi.
    fn health(smi: &str, fi_info: &str, dcgm: &str) -> String {
        format!("{smi}\n{fi_info}\n{dcgm}")
    }

    fn all_rules() -> Rules {
        Rules {
            gpus: Some(Gpus::InstanceType),
            efa: Some(Gpus::InstanceType),
            dcgm: true,
        }
    }

    #[test]
    fn every_rule_holds_on_a_healthy_p4d_and_each_names_its_fault() {
        let want = Wanted::of(&all_rules(), Ok("p4d.24xlarge"));
        assert_eq!(
            want.efa,
            Some(Ok((4, "the EFA interfaces of a p4d.24xlarge".into())))
        );
        let ok = judge(
            &ran(&health(SMI, FI_INFO, DCGM)),
            &want,
            &Matchers::default(),
        );
        assert_eq!(ok["status"], "healthy", "{ok}");
        // One EFA device missing.
        let three: String = FI_INFO.lines().take(18).map(|l| format!("{l}\n")).collect();
        let bad = judge(
            &ran(&health(SMI, &three, DCGM)),
            &want,
            &Matchers::default(),
        );
        assert_eq!(bad["status"], "bad");
        assert_eq!(
            bad["reason"],
            "fi_info lists 3 EFA devices, the EFA interfaces of a p4d.24xlarge is 4"
        );
        assert_eq!(
            (bad["short"].clone(), bad["line"].clone()),
            (json!("efa-3-of-4"), json!("domain: efa_2-rdm"))
        );
        // A DCGM test that fails.
        let failed = DCGM.replace(
            "| GPU Memory                | Pass - All                                     |",
            "| GPU Memory                | Fail - GPU: 5                                  |\n\
             | Error                     | GPU 5 had uncorrectable memory errors and row  |\n\
             |                           |  remapping failed                              |",
        );
        let bad = judge(
            &ran(&health(SMI, FI_INFO, &failed)),
            &want,
            &Matchers::default(),
        );
        assert_eq!(
            bad["reason"],
            "dcgmi diag: GPU Memory Fail - GPU: 5: GPU 5 had uncorrectable memory errors and row remapping failed"
        );
        assert_eq!(bad["short"], "dcgm-gpu-memory");
        // dcgmi not on the node: skipped and said so; no table and no word: unknown.
        let skipped = judge(
            &ran(&health(
                SMI,
                FI_INFO,
                "flow: dcgmi not found on gpu-1: DCGM diagnostics skipped",
            )),
            &want,
            &Matchers::default(),
        );
        assert_eq!(skipped["status"], "healthy");
        assert_eq!(skipped["dcgm"], "skipped: dcgmi is not on the node");
        let unknown = judge(&ran(&health(SMI, FI_INFO, "")), &want, &Matchers::default());
        assert_eq!(unknown["status"], "unknown");
        assert_eq!(
            unknown["reason"],
            "its check's output holds no `dcgmi diag` table"
        );
    }

    #[test]
    fn a_single_node_all_reduce_after_the_other_programs_is_read_and_gated() {
        let nccl = include_str!("../metrics/testdata/nccl-tests-batch-efa.txt");
        let text = format!("{}\n{nccl}", health(SMI, FI_INFO, DCGM));
        let want = Wanted::of(&all_rules(), Ok("p4d.24xlarge"));
        let gate = |floor: &str| {
            let values: crate::contract::Values = serde_json::from_value(
                json!({"parse": "nccl-tests", "expect": {"busbw": format!(">= {floor}")}}),
            )
            .unwrap();
            Matchers::from_values(&values).unwrap()
        };
        let ok = judge(&ran(&text), &want, &gate("1"));
        assert_eq!(ok["status"], "healthy", "{ok}");
        assert!(ok["values"]["busbw"].as_f64().unwrap() > 1.0, "{ok}");
        let slow = judge(&ran(&text), &want, &gate("100000"));
        assert_eq!(slow["status"], "bad", "{slow}");
        assert_eq!(slow["short"], "check-failed");
    }

    /// `parse = "nvidia-smi"` on a node's `-q`: a real H100 is healthy, the
    /// published A100 with a row remap pending is bad, and a gate on a
    /// value the GPU prints as `N/A` leaves the node unknown.
    #[test]
    fn a_node_s_nvidia_smi_q_is_gated_and_an_absent_value_is_unknown() {
        let h100 = include_str!("../metrics/testdata/h100-2026-11-27/nvidia-smi-q.txt");
        let a100 = include_str!("../metrics/testdata/nvidia-smi-q-a100-remap-pending.txt");
        let gate = |name: &str| {
            let values: crate::contract::Values =
                serde_json::from_value(json!({"parse": "nvidia-smi", "expect": {name: "== 0"}}))
                    .unwrap();
            Matchers::from_values(&values).unwrap()
        };
        let want = Wanted::default();
        let ok = judge(&ran(h100), &want, &gate("remapped_rows_pending"));
        assert_eq!(ok["status"], "healthy", "{ok}");
        assert_eq!(ok["values"]["max_temperature_c"], 33, "{ok}");
        let bad = judge(&ran(a100), &want, &gate("remapped_rows_pending"));
        assert_eq!(bad["status"], "bad", "{bad}");
        assert_eq!(
            bad["line"],
            "GPU 00000000:10:1C.0: Pending                           : Yes"
        );
        let na = judge(&ran(h100), &want, &gate("retired_pages_pending"));
        assert_eq!(na["status"], "unknown", "{na}");
        assert!(na["reason"].as_str().unwrap().contains("`N/A`"), "{na}");
    }

    #[test]
    fn an_efa_count_flow_cannot_tell_is_unknown() {
        let rules = Rules {
            efa: Some(Gpus::InstanceType),
            ..Rules::default()
        };
        let g5 = judge(
            &ran(FI_INFO),
            &Wanted::of(&rules, Ok("g5.xlarge")),
            &Matchers::default(),
        );
        assert_eq!(g5["status"], "unknown");
        assert_eq!(
            g5["reason"],
            "a g5.xlarge has no EFA, and check.efa asks for its EFA devices"
        );
        let odd = judge(
            &ran(FI_INFO),
            &Wanted::of(&rules, Ok("zz9.huge")),
            &Matchers::default(),
        );
        assert_eq!(
            odd["reason"],
            "flow does not know the EFA interfaces of its instance type (zz9.huge)"
        );
        let no_fi = judge(
            &ran(SMI),
            &Wanted::of(&rules, Ok("p4d.24xlarge")),
            &Matchers::default(),
        );
        assert_eq!(no_fi["status"], "unknown");
        let none = judge(
            &ran("fi_getinfo: -61 (No data available)\n"),
            &Wanted::of(&rules, Ok("p5.48xlarge")),
            &Matchers::default(),
        );
        assert_eq!(
            none["reason"],
            "fi_info lists 0 EFA devices, the EFA interfaces of a p5.48xlarge is 32"
        );
    }

    #[test]
    fn the_gpu_count_is_held_to_the_instance_type_or_the_number() {
        let p4d = wanted(Gpus::InstanceType, Ok("p4d.24xlarge"));
        assert_eq!(p4d, Ok((8, "the GPUs of a p4d.24xlarge".into())));
        let healthy = judge(&ran(SMI), &gpus_only(p4d.clone()), &Matchers::default());
        assert_eq!(healthy["status"], "healthy");
        let seven: String = SMI
            .lines()
            .filter(|l| !l.contains("00000000:A0:1D.0"))
            .map(|l| format!("{l}\n"))
            .collect();
        let bad = judge(&ran(&seven), &gpus_only(p4d), &Matchers::default());
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
            &gpus_only(wanted(Gpus::Count(4), Err(""))),
            &Matchers::default(),
        );
        assert_eq!(four["reason"], "nvidia-smi lists 8 GPUs, check.gpus is 4");
    }

    #[test]
    fn what_cannot_be_read_is_unknown_never_healthy() {
        let none = wanted(Gpus::InstanceType, Err("no feature names an instance type"));
        let v = judge(&ran(SMI), &gpus_only(none), &Matchers::default());
        assert_eq!(v["status"], "unknown");
        assert_eq!(
            v["reason"],
            "flow does not know the GPUs of its instance type (no feature names an instance type)"
        );
        let p4d = wanted(Gpus::InstanceType, Ok("p4d.24xlarge"));
        let v = judge(
            &ran("NVIDIA-SMI has failed\n"),
            &gpus_only(p4d),
            &Matchers::default(),
        );
        assert_eq!(v["status"], "unknown");
        assert_eq!(v["line"], "NVIDIA-SMI has failed");
        let mut failed = ran(SMI);
        failed.failed = Some("ended FAILED, exit code 1:0".into());
        let v = judge(&failed, &Wanted::default(), &Matchers::default());
        assert_eq!(
            v["reason"],
            "its check job job 7 failed: ended FAILED, exit code 1:0"
        );
    }
}
