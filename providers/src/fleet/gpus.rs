//! How many GPUs a node should have and how many its `nvidia-smi` lists:
//! the per-node GPU count check of `kube.node_check`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use regex_lite::Regex;

/// GPUs per instance type: EC2 DescribeInstanceTypes' `GpuInfo.Gpus[].Count`
/// of the GPU types the runbooks use (the types' pages on
/// aws.amazon.com/ec2/instance-types list the same).
const TABLE: &[(&str, u32)] = &[
    ("p3.2xlarge", 1),
    ("p3.8xlarge", 4),
    ("p3.16xlarge", 8),
    ("p3dn.24xlarge", 8),
    ("p4d.24xlarge", 8),
    ("p4de.24xlarge", 8),
    ("p5.4xlarge", 1),
    ("p5.48xlarge", 8),
    ("p5e.48xlarge", 8),
    ("p5en.48xlarge", 8),
    ("p6-b200.48xlarge", 8),
    ("g4dn.xlarge", 1),
    ("g4dn.2xlarge", 1),
    ("g4dn.12xlarge", 4),
    ("g4dn.metal", 8),
    ("g5.xlarge", 1),
    ("g5.2xlarge", 1),
    ("g5.12xlarge", 4),
    ("g5.24xlarge", 4),
    ("g5.48xlarge", 8),
    ("g6.xlarge", 1),
    ("g6.12xlarge", 4),
    ("g6.48xlarge", 8),
    ("g6e.12xlarge", 4),
    ("g6e.48xlarge", 8),
];

/// The GPUs an instance of `instance_type` has, when flow's table knows it.
pub fn of_instance_type(instance_type: &str) -> Option<u32> {
    TABLE
        .iter()
        .find(|(t, _)| *t == instance_type)
        .map(|(_, n)| *n)
}

/// What a node's `nvidia-smi` output says of its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The GPUs it lists.
    pub count: u32,
    /// The line that says so: the last GPU's row, or `No devices were found`.
    pub line: String,
}

/// The GPUs `nvidia-smi` (its table, or `nvidia-smi -L`) lists in `text`;
/// `None` when `text` is not `nvidia-smi` output (a failed driver's
/// message, another program's): the node's count is then unknown.
pub fn listed(text: &str) -> Option<Listed> {
    static ROW: OnceLock<Regex> = OnceLock::new();
    static SHORT: OnceLock<Regex> = OnceLock::new();
    // `|   0  NVIDIA A100-SXM4-40GB   On  |   00000000:10:1C.0 Off |`: a GPU's
    // row of the table, told by its bus id.
    let row = ROW.get_or_init(|| {
        Regex::new(r"^\|\s*(\d+)\s+\S.*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
            .expect("regex")
    });
    // `GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-…)` of `nvidia-smi -L`.
    let short = SHORT.get_or_init(|| Regex::new(r"^GPU (\d+): .*\(UUID: ").expect("regex"));
    let mut seen = BTreeSet::new();
    let mut last = None;
    let mut none = None;
    for line in text.lines().map(str::trim) {
        if let Some(c) = row.captures(line).or_else(|| short.captures(line)) {
            seen.insert(c[1].to_string());
            last = Some(line.to_string());
        } else if line == "No devices were found" {
            none = Some(line.to_string());
        }
    }
    match (last, none) {
        (Some(line), _) => Some(Listed {
            count: seen.len() as u32,
            line,
        }),
        (None, Some(line)) => Some(Listed { count: 0, line }),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emulated() -> String {
        let path = format!(
            "{}/../scripts/local-cloud/outputs/nvidia-smi.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn the_table_rows_are_counted_by_their_bus_ids() {
        let eight = listed(&emulated()).expect("nvidia-smi output");
        assert_eq!(eight.count, 8);
        assert!(
            eight.line.starts_with("|   7  NVIDIA A100"),
            "{}",
            eight.line
        );
        // One GPU's row gone: 7.
        let seven: String = emulated()
            .lines()
            .filter(|l| !l.contains("00000000:A0:1D.0"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(listed(&seven).unwrap().count, 7);
    }

    #[test]
    fn short_listings_and_no_devices_count_too() {
        let l = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n";
        assert_eq!(listed(l).unwrap().count, 2);
        assert_eq!(listed("No devices were found\n").unwrap().count, 0);
    }

    #[test]
    fn other_output_is_not_a_count() {
        assert_eq!(
            listed("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
            None
        );
        assert_eq!(listed(""), None);
    }

    #[test]
    fn instance_types_have_their_gpus() {
        assert_eq!(of_instance_type("p4d.24xlarge"), Some(8));
        assert_eq!(of_instance_type("g5.12xlarge"), Some(4));
        assert_eq!(of_instance_type("c5.2xlarge"), None);
    }
}
