//! What an `fsx.lustre` step takes: its schema, and the offline checks of
//! its inputs.

use serde_json::Value;

use crate::contract::{InputSpec, InputType, InputValue, Problem, Schema, StepKind};

/// The deployment types FSx for Lustre offers.
const DEPLOYMENT_TYPES: [&str; 4] = ["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"];

/// The inputs of an `fsx.lustre` step.
pub(super) fn schema() -> Schema {
    let strings = || InputType::List(Box::new(InputType::String));
    Schema {
        kind: StepKind::Resource,
        description: "An FSx for Lustre file system",
        inputs: vec![
            InputSpec::required(
                "storage_capacity",
                InputType::Integer,
                "Storage in GiB (1200, 2400, then steps of 2400 or 3600); grows in place, shrinking replaces",
            ),
            InputSpec::required(
                "subnet_ids",
                strings(),
                "The subnet (one) the file system lives in",
            )
            .forces_new(),
            InputSpec::optional(
                "security_group_ids",
                strings(),
                "Security groups of its network interfaces",
            )
            .forces_new(),
            InputSpec::optional(
                "deployment_type",
                InputType::String,
                "SCRATCH_1, SCRATCH_2 (the default), PERSISTENT_1 or PERSISTENT_2",
            )
            .forces_new(),
            InputSpec::optional(
                "per_unit_storage_throughput",
                InputType::Integer,
                "MB/s per TiB, for PERSISTENT deployment types",
            )
            .forces_new(),
            InputSpec::optional(
                "import_path",
                InputType::String,
                "s3://bucket/prefix to load files from",
            )
            .forces_new(),
            InputSpec::optional(
                "export_path",
                InputType::String,
                "s3://bucket/prefix to export files to",
            )
            .forces_new(),
            InputSpec::optional(
                "tags",
                InputType::Map(Box::new(InputType::String)),
                "Tags; change in place",
            ),
        ],
        open_inputs: false,
    }
}

/// What is wrong with the known values of `inputs`: an unknown deployment
/// type, less than 1200 GiB, an import or export path that is not `s3://`.
pub(super) fn problems(inputs: &[(String, InputValue)]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (name, value) in inputs {
        let InputValue::Known(v) = value else {
            continue;
        };
        match (name.as_str(), v) {
            ("deployment_type", Value::String(t)) if !DEPLOYMENT_TYPES.contains(&t.as_str()) => {
                problems.push(
                    Problem::at(
                        name,
                        format!("`{t}` is not an FSx for Lustre deployment type"),
                    )
                    .with_help(format!("use one of {}", DEPLOYMENT_TYPES.join(", "))),
                );
            }
            ("storage_capacity", Value::Number(n)) if n.as_i64().is_some_and(|c| c < 1200) => {
                problems.push(Problem::at(name, "FSx for Lustre needs at least 1200 GiB"));
            }
            ("import_path" | "export_path", Value::String(p)) if !p.starts_with("s3://") => {
                problems.push(Problem::at(name, format!("`{p}` is not an s3:// path")));
            }
            _ => {}
        }
    }
    problems
}
