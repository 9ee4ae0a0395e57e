//! The outputs a job step (kube.job, batch.job, slurm.job) will have, as
//! validate knows them before it runs: its kind's own keys, each name of
//! its `capture` (a capture that takes nothing fails the step, so a
//! finished step has every one), and the values `parse`'s program reads
//! (each only when the program printed it).

use serde_json::Value;

use crate::contract::{DeclaredOutputs, InputValue};
use crate::metrics::Program;

/// The value `parse` reads from the output flow's local cloud emulates,
/// whatever the program (`metrics::EMULATED`).
const EMULATED: &str = "emulated";

/// The outputs of a job step of `kind`: `always` and `sometimes` are the
/// keys the kind itself puts in, then each `capture` name, then what
/// `parse` reads. `None` (any key passes) while `capture` or `parse` is not
/// known yet, when either is not what it should be (validate says so on
/// its own), and for `parse = "torchrec"`, whose reader names a value after
/// each set the program prints (`auroc_val`, `auroc_test`, any other).
pub fn job_outputs(
    kind: &str,
    always: &[&str],
    sometimes: &[&str],
    inputs: &[(String, InputValue)],
) -> Option<DeclaredOutputs> {
    let input = |name: &str| inputs.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let captures: Vec<String> = match input("capture") {
        None => Vec::new(),
        Some(InputValue::Known(Value::Object(m))) => m.keys().cloned().collect(),
        Some(_) => return None,
    };
    let program = match input("parse") {
        None => None,
        Some(InputValue::Known(Value::String(name))) => match Program::from_name(name)? {
            Program::Torchrec => return None,
            p => Some(p),
        },
        Some(_) => return None,
    };
    let capture_keys: Vec<&str> = captures.iter().map(String::as_str).collect();
    let mut keys: Vec<&str> = always.to_vec();
    keys.extend(&capture_keys);
    let mut out = DeclaredOutputs::fixed(kind, &keys).with_conditional(sometimes);
    if let Some(p) = program {
        let read: Vec<&str> = p.outputs().iter().map(|o| o.name).collect();
        out = out.with_conditional(&read).with_conditional(&[EMULATED]);
    }
    if !captures.is_empty() || program.is_some() {
        out.source = format!("as every {kind} step does, with what its `capture` and `parse` take");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Matchers;
    use crate::testing::values;
    use serde_json::json;

    fn known(v: Value) -> InputValue {
        InputValue::Known(v)
    }

    #[test]
    fn captures_are_outputs_and_parse_adds_what_its_program_reads() {
        let inputs = vec![
            (
                "capture".to_string(),
                known(json!({"step_time": "t=(\\d+)"})),
            ),
            ("parse".to_string(), known(json!("nccl-tests"))),
        ];
        let d = job_outputs("kube.job", &["name"], &["extra"], &inputs).unwrap();
        assert_eq!(
            d.keys,
            [
                "name",
                "step_time",
                "extra",
                "busbw",
                "busbw_peak",
                "algbw_peak",
                "out_of_bounds",
                "transport",
                "sizes",
                "emulated"
            ]
        );
        assert!(!d.conditional.contains(&"step_time".to_string()));
        assert!(d.conditional.contains(&"busbw".to_string()));
        assert!(d.source.contains("`capture`"), "{}", d.source);
        let bare = job_outputs("kube.job", &["name"], &[], &[]).unwrap();
        assert_eq!(bare.keys, ["name"]);
        assert_eq!(bare.source, "as every kube.job step does");
    }

    #[test]
    fn open_while_capture_or_parse_is_unknown_and_for_torchrec() {
        let with = |k: &str, v: InputValue| vec![(k.to_string(), v)];
        assert_eq!(
            job_outputs("k", &[], &[], &with("capture", InputValue::Unknown)),
            None
        );
        assert_eq!(
            job_outputs("k", &[], &[], &with("parse", InputValue::Unknown)),
            None
        );
        assert_eq!(
            job_outputs("k", &[], &[], &with("parse", known(json!("torchrec")))),
            None
        );
        assert_eq!(
            job_outputs("k", &[], &[], &with("parse", known(json!("nope")))),
            None
        );
    }

    /// What the matchers take from published logs (a capture, the values
    /// nccl-tests and torchrun print) is among the declared keys.
    #[test]
    fn what_the_matchers_take_is_declared() {
        for (program, sample) in [
            ("nccl-tests", "nccl-tests-eks-efa-info.txt"),
            ("torchrun", "fsdp-train.txt"),
        ] {
            let path = format!(
                "{}/src/metrics/testdata/{sample}",
                env!("CARGO_MANIFEST_DIR")
            );
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let inputs = json!({"capture": {"last": "(\\d+)"}, "parse": program});
            let taken = Matchers::from_values(&values(inputs.clone()))
                .unwrap()
                .check(&text)
                .unwrap();
            let listed: Vec<(String, InputValue)> = values(inputs)
                .into_iter()
                .map(|(k, v)| (k, InputValue::Known(v)))
                .collect();
            let d = job_outputs("kube.job", &[], &[], &listed).unwrap();
            assert!(taken.contains_key("last"));
            for k in taken.keys() {
                assert!(
                    d.keys.contains(k),
                    "{program}: {k} not declared: {:?}",
                    d.keys
                );
            }
        }
    }
}
