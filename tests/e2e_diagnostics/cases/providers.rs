//! Providers and their inputs: unknown providers and inputs, missing and
//! mistyped values, references in inputs, and the checks a provider makes
//! of its inputs (`expect` gates, `pass_env`).

use super::super::{BASE, Case, check};

corpus! {
    // ---- providers and inputs ---------------------------------------------
    unknown_provider: Case {
        file: "24-unknown-provider.toml",
        codes: &["flow::unknown-provider"],
        at: &["2:12"],
        says: &["unknown provider `nul`", "did you mean `null`?"],
        ..BASE
    },
    unknown_input: Case {
        file: "25-unknown-input.toml",
        codes: &["flow::unknown-input"],
        at: &["6:1"],
        says: &["`exec` has no input `destory`", "did you mean `destroy`?"],
        ..BASE
    },
    missing_required_input: Case {
        file: "26-missing-required-input.toml",
        codes: &["flow::missing-input"],
        at: &["4:14"],
        says: &["step `build` is missing the required input `run`"],
        ..BASE
    },
    inputs_not_a_table: Case {
        file: "57-inputs-not-table.toml",
        codes: &["flow::wrong-type"],
        at: &["3:10"],
        says: &["inputs must be a table, found a string"],
        never_says: &["missing the required input"],
        ..BASE
    },
    string_where_table_expected: Case {
        file: "27-string-where-table.toml",
        codes: &["flow::wrong-type"],
        at: &["6:7"],
        says: &["`env` must be a table of strings, found a string"],
        ..BASE
    },
    integer_in_table_of_strings: Case {
        file: "28-int-in-table-of-strings.toml",
        codes: &["flow::wrong-type"],
        at: &["6:30"],
        says: &["`JOBS` in `env` must be a string, found an integer"],
        ..BASE
    },
    bool_where_string_expected: Case {
        file: "29-bool-where-string.toml",
        codes: &["flow::wrong-type"],
        at: &["6:11"],
        says: &["`destroy` must be a string, found a boolean"],
        ..BASE
    },
    list_where_string_expected: Case {
        file: "30-list-where-string.toml",
        codes: &["flow::wrong-type"],
        at: &["5:7"],
        says: &["`run` must be a string, found an array"],
        ..BASE
    },
    table_where_string_expected: Case {
        file: "31-table-where-string.toml",
        codes: &["flow::wrong-type"],
        at: &["6:11"],
        says: &["`workdir` must be a string, found a table"],
        ..BASE
    },
    string_where_integer_expected: Case {
        file: "32-string-where-integer.toml",
        codes: &["flow::wrong-type"],
        at: &["5:12"],
        says: &["`delay_ms` must be an integer, found a string"],
        ..BASE
    },
    variable_of_wrong_type_as_input: Case {
        file: "33-var-of-wrong-type-as-input.toml",
        codes: &["flow::wrong-type"],
        at: &["9:7"],
        says: &["`run` must be a string, found variable `jobs` of type list"],
        ..BASE
    },
    provider_rejects_missing_workdir: Case {
        file: "43-workdir-missing.toml",
        codes: &["flow::invalid-input"],
        at: &["6:11"],
        says: &["step `build`: `workdir` \"no-such-folder\" does not exist"],
        ..BASE
    },
    provider_rejects_negative_delay: Case {
        file: "44-null-negative-delay.toml",
        codes: &["flow::invalid-input"],
        at: &["5:12"],
        says: &["step `wait`: `delay_ms` must be at least 0, not -5"],
        ..BASE
    },
    provider_rejects_env_name: Case {
        file: "60-env-name-with-equals.toml",
        codes: &["flow::invalid-input"],
        at: &["6:9"],
        says: &["\"CC=gcc\" cannot be an environment variable's name"],
        ..BASE
    },

    // ---- references -------------------------------------------------------
    reference_to_env: Case {
        file: "34-ref-env.toml",
        codes: &["flow::bad-reference"],
        at: &["5:18"],
        says: &["`${env.HOME}` is not a reference", "${vars.NAME}"],
        ..BASE
    },
    reference_with_out_instead_of_outputs: Case {
        file: "35-ref-steps-out.toml",
        codes: &["flow::bad-reference"],
        at: &["8:6"],
        says: &["`${steps.a.out.b}` is not a reference", "${steps.STEP.outputs.KEY}"],
        ..BASE
    },
    unterminated_reference: Case {
        file: "36-ref-unterminated.toml",
        codes: &["flow::bad-reference"],
        at: &["8:13"],
        says: &["unterminated `${` in string"],
        ..BASE
    },
    reference_without_var_name: Case {
        file: "37-ref-vars-empty.toml",
        codes: &["flow::bad-reference"],
        at: &["5:13"],
        says: &["`${vars.}` is not a reference"],
        ..BASE
    },

    // ---- checks of a provider's inputs ------------------------------------
    expect_gates_that_cannot_judge: Case {
        file: "130-expect-gates-that-cannot-judge.toml",
        codes: &["flow::invalid-input"],
        at: &["16:20", "16:58", "16:83"],
        problems: 3,
        says: &[
            "`at least 300` is not a gate",
            "`>= 100` judges a number, but sizes is a table of numbers",
            "the numbers of nccl-tests's output: busbw, busbw_peak",
            "`out_of_bound` is neither captured nor read by `parse`",
            "did you mean `out_of_bounds`?",
        ],
        ..BASE
    },
    exec_pass_env_not_a_name: Case {
        file: "131-exec-pass-env-not-a-name.toml",
        codes: &["flow::invalid-input"],
        at: &["11:28", "11:33"],
        problems: 2,
        says: &[
            "\"*\" is not an environment variable's name, or a prefix ending in `*`",
            "\"AWS REGION\" is not an environment variable's name",
            "(`AWS_*`); letters, digits and `_` only",
        ],
        ..BASE
    },
}
