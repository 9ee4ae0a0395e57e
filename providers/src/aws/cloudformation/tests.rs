//! The stack provider's schema and change set names.

use super::*;

#[test]
fn schema_marks_the_name_as_forcing_replacement() {
    let p = CloudFormationStack::new();
    assert_eq!(p.name(), "cloudformation.stack");
    assert!(p.schema().input("stack_name").unwrap().force_new);
    assert!(!p.schema().input("template").unwrap().force_new);
    assert_eq!(
        p.schema().input("template").unwrap().ty,
        InputType::LocalFile
    );
}

#[test]
fn change_set_names_are_valid() {
    let n = change_set_name("0123456789abcdef0123456789abcdef");
    assert!(n.starts_with("flow-") && n.len() <= 128);
    let p = plan::plan_change_set_name();
    assert!(p.starts_with("flow-plan-"));
    assert!(p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
}
