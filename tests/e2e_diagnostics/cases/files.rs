//! Workflow files flow cannot read as a workflow: TOML syntax, duplicates,
//! unknown keys, and several problems in one file.

use super::super::{BASE, Case, check};

corpus! {
    // ---- TOML syntax ------------------------------------------------------
    toml_missing_equals: Case {
        file: "01-missing-equals.toml",
        codes: &["flow::toml-syntax"],
        at: &["5:10"],
        says: &["expected `=`"],
        ..BASE
    },
    toml_unclosed_string: Case {
        file: "02-unclosed-string.toml",
        codes: &["flow::toml-syntax"],
        at: &["2:17"],
        says: &["invalid basic string"],
        ..BASE
    },
    toml_bad_table_header: Case {
        file: "03-bad-table-header.toml",
        codes: &["flow::toml-syntax"],
        at: &["1:13"],
        says: &["unclosed table, expected `]`"],
        ..BASE
    },
    toml_bare_word_value: Case {
        file: "04-bare-word-value.toml",
        codes: &["flow::toml-syntax"],
        at: &["2:12"],
        never_says: &["float", "`nan`"],
        ..BASE
    },
    toml_unclosed_inline_table: Case {
        file: "68-unclosed-inline-table.toml",
        codes: &["flow::toml-syntax"],
        at: &["3:17"],
        says: &["unclosed inline table, expected `}`"],
        ..BASE
    },
    toml_integer_out_of_range: Case {
        file: "62-integer-out-of-range.toml",
        codes: &["flow::toml-syntax"],
        at: &["5:12"],
        says: &["integer out of range", "does not fit in 64 bits"],
        ..BASE
    },

    // ---- duplicates -------------------------------------------------------
    duplicate_step: Case {
        file: "05-duplicate-step.toml",
        codes: &["flow::duplicate-name"],
        at: &["7:8", "1:1"],
        says: &["`steps.build` is defined twice", "first defined here"],
        never_says: &["`provider` is defined twice"],
        ..BASE
    },
    duplicate_key: Case {
        file: "06-duplicate-key.toml",
        codes: &["flow::duplicate-name"],
        at: &["3:1"],
        says: &["`provider` is set twice in the same table", "first set here"],
        ..BASE
    },

    // ---- unknown keys -----------------------------------------------------
    unknown_top_level_key: Case {
        file: "07-unknown-top-level-key.toml",
        codes: &["flow::unknown-key"],
        at: &["4:2"],
        says: &["unknown key `step` in the top level", "did you mean `steps`?"],
        ..BASE
    },
    unknown_workflow_key: Case {
        file: "08-unknown-workflow-key.toml",
        codes: &["flow::unknown-key"],
        at: &["3:1"],
        says: &["unknown key `regoin` in [workflow]", "did you mean `region`?"],
        ..BASE
    },
    unknown_var_key: Case {
        file: "09-unknown-var-key.toml",
        codes: &["flow::unknown-key"],
        at: &["3:1"],
        says: &["unknown key `defualt` in [vars.size]", "did you mean `default`?"],
        never_says: &["has no value"],
        ..BASE
    },
    unknown_step_key: Case {
        file: "10-unknown-step-key.toml",
        codes: &["flow::unknown-key"],
        at: &["3:1"],
        says: &["unknown key `depends` in [steps.build]", "did you mean `depends_on`?"],
        ..BASE
    },
    unknown_lifecycle_key: Case {
        file: "11-unknown-lifecycle-key.toml",
        codes: &["flow::unknown-key"],
        at: &["5:1"],
        says: &["unknown key `prevent_delete` in [steps.build.lifecycle]", "prevent_destroy"],
        ..BASE
    },

    // ---- several problems at once ----------------------------------------
    several_problems_in_one_run: Case {
        file: "52-several-problems.toml",
        codes: &[
            "flow::unknown-key",
            "flow::wrong-type",
            "flow::bad-duration",
            "flow::unknown-provider",
            "flow::unknown-step",
            "flow::unknown-var",
        ],
        at: &["3:1", "7:11", "15:11", "10:12", "14:15", "18:13"],
        problems: 6,
        says: &[
            "unknown key `colour` in [workflow]",
            "the default of `size` must be an integer, found a string",
            "`soon` is not a duration",
            "unknown provider `nul`",
            "unknown step `netwrk`",
            "unknown variable `sise`",
        ],
        ..BASE
    },
}
