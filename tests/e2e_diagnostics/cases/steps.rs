//! Steps and dependencies: unknown and cyclic references, step names,
//! `depends_on`, `provider`, timeouts, retries and `prevent_destroy`.

use super::super::{BASE, Case, check};

corpus! {
    // ---- steps and dependencies ------------------------------------------
    unknown_step_in_reference: Case {
        file: "18-unknown-step-in-reference.toml",
        codes: &["flow::unknown-step"],
        at: &["8:8"],
        says: &["unknown step `netwrok`", "did you mean `network`?"],
        ..BASE
    },
    unknown_step_in_depends_on: Case {
        file: "19-unknown-step-in-depends-on.toml",
        codes: &["flow::unknown-step"],
        at: &["6:26"],
        says: &["unknown step `storage`"],
        ..BASE
    },
    self_dependency_via_reference: Case {
        file: "20-self-reference.toml",
        codes: &["flow::self-dependency"],
        at: &["5:11"],
        says: &["step `cluster` depends on itself", "an output of `cluster` itself"],
        ..BASE
    },
    self_dependency_via_depends_on: Case {
        file: "21-self-depends-on.toml",
        codes: &["flow::self-dependency"],
        at: &["3:15"],
        says: &["step `cluster` depends on itself", "a dependency of `cluster` itself"],
        ..BASE
    },
    cycle_of_two_steps: Case {
        file: "22-cycle-two-steps.toml",
        codes: &["flow::cycle"],
        at: &["3:15", "9:6"],
        says: &["dependency cycle: a → b → a", "`a` needs `b`", "`b` needs `a`"],
        ..BASE
    },
    cycle_of_four_steps: Case {
        file: "23-cycle-four-steps.toml",
        codes: &["flow::cycle"],
        at: &["3:15"],
        says: &[
            "dependency cycle: network → validate → train → cluster → network",
            "`network` needs `validate`",
            "`validate` needs `train`",
            "`train` needs `cluster`",
            "`cluster` needs `network`",
        ],
        ..BASE
    },
    bad_step_name: Case {
        file: "38-bad-step-name.toml",
        codes: &["flow::bad-name"],
        at: &["4:8"],
        says: &["`2nd build` is not a valid name"],
        ..BASE
    },
    depends_on_not_an_array: Case {
        file: "50-depends-on-not-array.toml",
        codes: &["flow::wrong-type"],
        at: &["6:14"],
        says: &["depends_on must be an array of step names, found a string"],
        ..BASE
    },
    depends_on_a_table: Case {
        file: "70-depends-on-table.toml",
        codes: &["flow::wrong-type"],
        at: &["6:14"],
        says: &["depends_on must be an array of step names, found a table"],
        ..BASE
    },
    depends_on_item_not_a_string: Case {
        file: "56-depends-on-item-not-string.toml",
        codes: &["flow::wrong-type"],
        at: &["6:26"],
        never_says: &["depends_on must be a string"],
        ..BASE
    },
    missing_provider: Case {
        file: "53-missing-provider.toml",
        codes: &["flow::missing-provider"],
        at: &["1:8"],
        says: &["step `build` has no provider"],
        ..BASE
    },
    provider_not_a_string: Case {
        file: "51-provider-not-string.toml",
        codes: &["flow::wrong-type"],
        at: &["2:12"],
        says: &["provider must be a string, found an array"],
        ..BASE
    },
    empty_provider: Case {
        file: "54-empty-provider.toml",
        at: &["2:12"],
        says: &["provider"],
        ..BASE
    },
    reference_in_provider: Case {
        file: "55-reference-in-provider.toml",
        codes: &["flow::reference-not-allowed"],
        at: &["5:12"],
        says: &["provider cannot contain references"],
        never_says: &["variable defaults are interpolated"],
        ..BASE
    },
    bad_duration_in_timeout: Case {
        file: "39-bad-duration.toml",
        codes: &["flow::bad-duration"],
        at: &["3:11"],
        says: &["`45 minutos` is not a duration"],
        ..BASE
    },
    zero_timeout: Case {
        file: "40-zero-timeout.toml",
        codes: &["flow::bad-duration"],
        at: &["3:11"],
        says: &["a timeout must be longer than zero"],
        ..BASE
    },
    timeout_not_a_string: Case {
        file: "67-timeout-not-string.toml",
        codes: &["flow::wrong-type"],
        at: &["3:11"],
        says: &["timeout must be a string, found an integer"],
        ..BASE
    },
    retries_out_of_range: Case {
        file: "41-retries-out-of-range.toml",
        codes: &["flow::out-of-range"],
        at: &["3:11"],
        says: &["retries must be between 0 and 100"],
        ..BASE
    },
    retries_of_wrong_type: Case {
        file: "42-retries-wrong-type.toml",
        codes: &["flow::wrong-type"],
        at: &["3:11"],
        says: &["retries must be an integer, found a string"],
        ..BASE
    },
    prevent_destroy_not_a_bool: Case {
        file: "61-prevent-destroy-not-bool.toml",
        codes: &["flow::wrong-type"],
        at: &["3:33"],
        says: &["prevent_destroy must be a boolean, found a string"],
        ..BASE
    },
    workflow_not_a_table: Case {
        file: "58-workflow-not-table.toml",
        codes: &["flow::wrong-type"],
        at: &["1:12"],
        says: &["[workflow] must be a table, found a string"],
        ..BASE
    },
}
