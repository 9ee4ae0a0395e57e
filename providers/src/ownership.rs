//! One ownership check for every provider: an object found under the name a
//! step wants, but not carrying the step's operation token, is someone
//! else's. Every provider refuses it with the same words and the same next
//! step, so the user reads one message whatever the kind.

use crate::contract::ProviderError;

/// Whether the object found under the step's name is the step's own: its
/// recorded operation token (`found`, from a tag or label) is the one this
/// operation carries.
pub fn is_own(found: Option<&str>, token: &str) -> bool {
    found == Some(token)
}

/// Refuse `found` unless it carries `token`: `what` names the object as the
/// user knows it (`` stack `vpc` ``, `` node group `gpu` in cluster `c` ``).
pub fn ensure_own(what: &str, found: Option<&str>, token: &str) -> Result<(), ProviderError> {
    if is_own(found, token) {
        Ok(())
    } else {
        Err(not_own(what))
    }
}

/// The error for an object that exists under the step's name and was not
/// created by this step.
pub fn not_own(what: &str) -> ProviderError {
    ProviderError::conflict(format!(
        "{what} already exists and was not created by this step"
    ))
    .with_help(
        "choose another name in the workflow, or delete the existing object if nothing uses it; \
         to adopt it as the step's instead, `flow import FILE STEP ID` (or `import = \"ID\"` on the step)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ErrorKind;

    #[test]
    fn only_the_same_token_is_own() {
        assert!(ensure_own("stack `vpc`", Some("t1"), "t1").is_ok());
        let err = ensure_own("stack `vpc`", Some("t2"), "t1").unwrap_err();
        assert_eq!(err.kind, ErrorKind::Conflict);
        assert_eq!(
            err.message,
            "stack `vpc` already exists and was not created by this step"
        );
        assert!(err.help.is_some());
        assert!(ensure_own("stack `vpc`", None, "t1").is_err());
    }
}
