//! The environment an `exec` command starts with: not flow's whole
//! environment (which may hold AWS keys and other credentials) but only the
//! variables named in [`DEFAULT_PASS`] and the step's `pass_env`, then the
//! step's `env` and flow's own `FLOW_*` variables on top.

use std::ffi::OsString;

/// What every command gets from flow's environment, unless it is unset
/// there: what a shell and ordinary tools need to behave as in the user's
/// terminal, and nothing that grants access. `LC_*` is every locale
/// variable.
pub const DEFAULT_PASS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "TMPDIR",
];

/// Whether `pattern` (`NAME`, or `PREFIX*` for every name starting with
/// `PREFIX`) takes the variable `name`.
pub(super) fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether `pattern` is a name or prefix `pass_env` accepts: letters,
/// digits and `_`, not starting with a digit, optionally ending in `*`.
pub(super) fn valid_pattern(pattern: &str) -> bool {
    let name = pattern.strip_suffix('*').unwrap_or(pattern);
    let wildcard_only = name.is_empty() && pattern == "*";
    !wildcard_only
        && !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The variables of `from` that [`DEFAULT_PASS`] or `pass` take, in the
/// order `from` lists them.
pub(super) fn inherited(
    from: impl IntoIterator<Item = (OsString, OsString)>,
    pass: &[String],
) -> Vec<(OsString, OsString)> {
    from.into_iter()
        .filter(|(name, _)| {
            name.to_str().is_some_and(|name| {
                DEFAULT_PASS.iter().any(|p| matches(p, name))
                    || pass.iter().any(|p| matches(p, name))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_the_default_list_and_the_named_variables_pass() {
        let from = vars(&[
            ("PATH", "/bin"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("AWS_PROFILE", "training"),
            ("LC_TIME", "C"),
            ("HF_TOKEN", "hf_x"),
            ("AWS_REGION", "us-west-2"),
        ]);
        let names = |pass: &[&str]| -> Vec<String> {
            let pass: Vec<String> = pass.iter().map(|p| p.to_string()).collect();
            inherited(from.clone(), &pass)
                .into_iter()
                .map(|(k, _)| k.into_string().unwrap())
                .collect()
        };
        assert_eq!(names(&[]), ["PATH", "LC_TIME"]);
        assert_eq!(names(&["AWS_PROFILE"]), ["PATH", "AWS_PROFILE", "LC_TIME"]);
        assert_eq!(
            names(&["AWS_*"]),
            [
                "PATH",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_PROFILE",
                "LC_TIME",
                "AWS_REGION"
            ]
        );
    }

    #[test]
    fn patterns_are_names_or_prefixes() {
        for good in ["AWS_PROFILE", "AWS_*", "_X", "a1"] {
            assert!(valid_pattern(good), "{good}");
        }
        for bad in ["*", "", "1X", "A-B", "A*B", "A B", "AWS_**"] {
            assert!(!valid_pattern(bad), "{bad}");
        }
    }
}
