//! The file system provider's diff, checks and outputs.

use super::*;
use crate::testing::values;
use aws_sdk_fsx::types::FileSystem;
use serde_json::json;

fn base() -> Values {
    values(json!({"storage_capacity": 2400, "subnet_ids": ["subnet-1"], "tags": {"a": "1"}}))
}

#[test]
fn capacity_grows_in_place_and_shrinking_replaces() {
    let p = FsxLustre::new();
    let mut bigger = base();
    bigger.insert("storage_capacity".into(), json!(4800));
    assert_eq!(
        p.diff(&base(), &bigger),
        Change::Update(vec!["storage_capacity".into()])
    );
    let mut smaller = base();
    smaller.insert("storage_capacity".into(), json!(1200));
    assert_eq!(
        p.diff(&base(), &smaller),
        Change::Replace(vec!["storage_capacity".into()])
    );
    let mut retagged = base();
    retagged.insert("tags".into(), json!({"a": "2"}));
    assert_eq!(
        p.diff(&base(), &retagged),
        Change::Update(vec!["tags".into()])
    );
    let mut moved = base();
    moved.insert("subnet_ids".into(), json!(["subnet-2"]));
    assert_eq!(
        p.diff(&base(), &moved),
        Change::Replace(vec!["subnet_ids".into()])
    );
}

#[test]
fn validate_checks_type_capacity_and_paths() {
    let ctx = ValidateContext {
        workdir: ".".into(),
    };
    let inputs = vec![
        (
            "deployment_type".to_string(),
            InputValue::Known(json!("SCRATCH_9")),
        ),
        (
            "storage_capacity".to_string(),
            InputValue::Known(json!(100)),
        ),
        (
            "import_path".to_string(),
            InputValue::Known(json!("bucket/x")),
        ),
        ("export_path".to_string(), InputValue::Unknown),
    ];
    let problems = FsxLustre::new().validate(&inputs, &ctx);
    let paths: Vec<_> = problems.iter().map(|p| p.path[0].as_str()).collect();
    assert_eq!(
        paths,
        ["deployment_type", "storage_capacity", "import_path"]
    );
}

#[test]
fn outputs_default_missing_values_to_empty() {
    let fs = FileSystem::builder()
        .file_system_id("fs-1")
        .dns_name("fs-1.fsx")
        .build();
    let a = applied(&fs);
    assert_eq!(a.id.as_deref(), Some("fs-1"));
    assert_eq!(a.outputs["mount_name"], "");
    assert_eq!(lifecycle(&fs), "AVAILABLE");
}
