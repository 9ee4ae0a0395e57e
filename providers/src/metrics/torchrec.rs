//! TorchRec's DLRM example (`torchrec_dlrm/dlrm_main.py`, the TorchRec on
//! EKS runbook's training), whose evaluation prints
//! `AUROC over val set: 0.7983516216278076.` and the same for `test`.

use regex_lite::Regex;

use super::{Kind, OutputSpec, Reading, number};

/// What the reader gives.
pub(super) const OUTPUTS: &[OutputSpec] = &[
    OutputSpec {
        name: "auroc",
        kind: Kind::Number,
        about: "the last AUROC printed, whatever its set",
    },
    OutputSpec {
        name: "auroc_val",
        kind: Kind::Number,
        about: "the last AUROC over the validation set",
    },
    OutputSpec {
        name: "auroc_test",
        kind: Kind::Number,
        about: "the last AUROC over the test set",
    },
];

fn pattern() -> &'static Regex {
    static P: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        Regex::new(r"AUROC over (\w+) set: ([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)").expect("valid")
    })
}

/// Reads every AUROC line; the last of each set counts.
pub(super) fn read(lines: &[&str]) -> Option<Reading> {
    let mut out = Reading::default();
    for line in lines {
        let Some(c) = pattern().captures(line) else {
            continue;
        };
        let Some(v) = c[2].parse::<f64>().ok().and_then(number) else {
            continue;
        };
        out.put(&format!("auroc_{}", &c[1]), v.clone(), line);
        out.put("auroc", v, line);
    }
    out.values.contains_key("auroc").then_some(out)
}

#[cfg(test)]
mod tests {
    use super::super::Program;
    use serde_json::json;

    /// dlrm_main.py run on 2 CPU ranks with random data
    /// (testdata/SOURCES): each AUROC line follows a tqdm bar on its line.
    #[test]
    fn reads_each_sets_auroc() {
        let r = Program::Torchrec
            .read(&super::super::sample("torchrec-dlrm-cpu.txt"))
            .unwrap();
        assert_eq!(r.values["auroc_val"], json!(0.5100550651550293));
        assert_eq!(r.values["auroc_test"], json!(0.5013654828071594));
        assert_eq!(r.values["auroc"], json!(0.5013654828071594));
        assert!(
            r.lines["auroc_val"].ends_with("]AUROC over val set: 0.5100550651550293."),
            "{}",
            r.lines["auroc_val"]
        );
        // The local cloud's emulated output (no final period) reads the same.
        let r = Program::Torchrec
            .read("AUROC over val set: 0.8021\n")
            .unwrap();
        assert_eq!(r.values["auroc"], json!(0.8021));
    }
}
