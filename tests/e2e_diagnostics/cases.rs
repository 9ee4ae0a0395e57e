//! The corpus of broken workflows: one `Case` per file under
//! `tests/fixtures/bad/`, each a `#[test]` (see `main.rs`).

use super::{BASE, Case, NODES_ENV, check};

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

    // ---- variables --------------------------------------------------------
    bad_var_type_name: Case {
        file: "12-bad-var-type.toml",
        codes: &["flow::unknown-type"],
        at: &["2:8"],
        says: &["unknown variable type `int64`", "integer"],
        ..BASE
    },
    default_of_wrong_type: Case {
        file: "13-default-wrong-type.toml",
        codes: &["flow::wrong-type"],
        at: &["3:11"],
        says: &["the default of `size` must be an integer, found a string"],
        ..BASE
    },
    reference_in_default: Case {
        file: "14-default-with-reference.toml",
        codes: &["flow::reference-not-allowed"],
        at: &["5:17"],
        says: &["the default of `bucket` cannot contain `${…}`"],
        ..BASE
    },
    missing_var_value: Case {
        file: "15-missing-var-value.toml",
        codes: &["flow::missing-var"],
        at: &["1:7"],
        says: &[
            "variable `api_token` has no value",
            "--var api_token=VALUE",
            "FLOW_E2E_SURELY_UNSET_TOKEN",
        ],
        ..BASE
    },
    unknown_var_with_close_match: Case {
        file: "16-unknown-var-close-match.toml",
        codes: &["flow::unknown-var"],
        at: &["8:10"],
        says: &["unknown variable `regoin`", "did you mean `region`?"],
        ..BASE
    },
    unknown_var_without_close_match: Case {
        file: "17-unknown-var-no-match.toml",
        codes: &["flow::unknown-var"],
        at: &["8:19"],
        says: &["unknown variable `image_tag`", "declare it with [vars.image_tag]"],
        never_says: &["did you mean"],
        ..BASE
    },
    unknown_var_in_string_with_escape: Case {
        file: "63-unknown-var-after-escape.toml",
        codes: &["flow::unknown-var"],
        // The string has an escape (`\t`); the span still lands on the
        // reference itself.
        at: &["5:22"],
        says: &["unknown variable `missing`"],
        ..BASE
    },
    bad_var_name: Case {
        file: "59-bad-var-name.toml",
        codes: &["flow::bad-name"],
        at: &["1:7"],
        says: &["`node count` is not a valid name"],
        ..BASE
    },
    var_from_env_of_wrong_type_only: Case {
        file: "64-var-env-wrong-type.toml",
        env: &[(NODES_ENV, "lots")],
        codes: &["flow::bad-var-value"],
        at: &["1:7"],
        says: &["environment variable FLOW_E2E_NODES (for `nodes`): `lots` is not an integer"],
        ..BASE
    },

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

    // ---- the command line: --var and --var-file --------------------------
    var_file_missing: Case {
        file: "45-var-file-missing.toml",
        args: &["--var-file", "bad/vars/nope.toml"],
        codes: &["flow::missing-file"],
        says: &["cannot read var file bad/vars/nope.toml", "--var-file"],
        ..BASE
    },
    var_file_with_unknown_var: Case {
        file: "46-var-file-unknown-var.toml",
        args: &["--var-file", "bad/vars/unknown-var.toml"],
        codes: &["flow::unknown-var"],
        at: &["bad/vars/unknown-var.toml:2:1"],
        says: &[
            "bad/vars/unknown-var.toml sets `regoin`, but the workflow declares no such variable",
            "did you mean `region`?",
        ],
        ..BASE
    },
    var_file_with_wrong_type: Case {
        file: "47-var-file-wrong-type.toml",
        args: &["--var-file", "bad/vars/wrong-type.toml"],
        codes: &["flow::wrong-type"],
        at: &["bad/vars/wrong-type.toml:2:9"],
        says: &["`nodes` must be an integer, found a string"],
        ..BASE
    },
    var_file_with_syntax_error: Case {
        file: "66-var-file-syntax-error.toml",
        args: &["--var-file", "bad/vars/syntax-error.toml"],
        codes: &["flow::toml-syntax"],
        at: &["bad/vars/syntax-error.toml:2:20"],
        ..BASE
    },
    var_file_with_reference: Case {
        file: "69-ref-in-var-file.toml",
        args: &["--var-file", "bad/vars/reference.toml"],
        codes: &["flow::reference-not-allowed"],
        at: &["bad/vars/reference.toml:2:8"],
        says: &["var files hold plain values"],
        ..BASE
    },
    var_flag_for_undeclared_var: Case {
        file: "48-var-flag-undeclared.toml",
        args: &["--var", "regoin=us-east-1"],
        codes: &["flow::unknown-var"],
        says: &[
            "--var sets `regoin`, but the workflow declares no such variable",
            "did you mean `region`?",
        ],
        ..BASE
    },
    var_flag_of_wrong_type: Case {
        file: "49-var-flag-wrong-type.toml",
        args: &["--var", "nodes=four"],
        codes: &["flow::bad-var-value"],
        at: &["1:7"],
        says: &["--var nodes: `four` is not an integer", "declared as integer"],
        ..BASE
    },
    var_flag_of_wrong_type_without_default: Case {
        file: "71-var-flag-wrong-type-no-default.toml",
        args: &["--var", "nodes=four"],
        codes: &["flow::bad-var-value"],
        at: &["1:7"],
        says: &["--var nodes: `four` is not an integer"],
        never_says: &["has no value"],
        ..BASE
    },
    var_flag_without_equals: Case {
        file: "65-var-flag-not-name-value.toml",
        args: &["--var", "region"],
        codes: &["flow::bad-var-flag"],
        says: &["`--var region` is not NAME=VALUE", "write --var NAME=VALUE"],
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

    // ---- expressions, for_each and moved (issue 14) -------------------
    expr_unknown_function: Case {
        file: "72-expr-unknown-function.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["unknown function `splti`", "did you mean `split`?"],
        ..BASE
    },
    expr_too_few_arguments: Case {
        file: "73-expr-too-few-args.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["`split` takes 2 arguments, given 1", "split(separator, text)"],
        ..BASE
    },
    expr_too_many_arguments: Case {
        file: "74-expr-too-many-args.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["`upper` takes 1 argument, given 2"],
        ..BASE
    },
    expr_argument_of_wrong_type: Case {
        file: "75-expr-argument-type.toml",
        codes: &["flow::bad-expression"],
        at: &["22:27"],
        says: &["argument 2 of `join` must be a list, found a string"],
        ..BASE
    },
    expr_operand_of_wrong_type: Case {
        file: "76-expr-operand-type.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["`+` takes numbers, found a string", "format()"],
        ..BASE
    },
    expr_condition_not_boolean: Case {
        file: "77-expr-condition-not-bool.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["the condition of `? :` must be a boolean"],
        ..BASE
    },
    expr_missing_parenthesis: Case {
        file: "78-expr-missing-paren.toml",
        codes: &["flow::bad-expression"],
        at: &["22:31"],
        says: &["expected `)` to close the argument list"],
        ..BASE
    },
    expr_missing_colon: Case {
        file: "79-expr-missing-colon.toml",
        codes: &["flow::bad-expression"],
        at: &["22:30"],
        says: &["expected `:` between the two results"],
        ..BASE
    },
    expr_stray_token: Case {
        file: "80-expr-stray-token.toml",
        codes: &["flow::bad-expression"],
        at: &["22:25"],
        says: &["unexpected `vars` after the expression"],
        ..BASE
    },
    expr_bad_character: Case {
        file: "81-expr-bad-character.toml",
        codes: &["flow::bad-expression"],
        at: &["22:22"],
        says: &["`@` cannot appear in an expression"],
        ..BASE
    },
    expr_index_past_the_end: Case {
        file: "82-expr-index-past-end.toml",
        codes: &["flow::bad-expression"],
        at: &["22:25"],
        says: &["index 5 is past the end of the list, which has 2 items"],
        ..BASE
    },
    expr_missing_table_key: Case {
        file: "83-expr-missing-table-key.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["the table has no key `nmae`", "did you mean `name`?"],
        ..BASE
    },
    expr_division_by_zero: Case {
        file: "84-expr-division-by-zero.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["division by zero"],
        ..BASE
    },
    expr_file_missing: Case {
        file: "85-expr-file-missing.toml",
        codes: &["flow::bad-expression"],
        at: &["22:10"],
        says: &["cannot read `scripts/nope.sh`"],
        ..BASE
    },
    expr_templatefile_unknown_name: Case {
        file: "86-expr-templatefile-unknown-name.toml",
        codes: &["flow::bad-expression"],
        at: &["22:10"],
        says: &["templates/nccl.sbatch.tpl:3:16: the template was given no name `nodez`", "did you mean `nodes`?"],
        ..BASE
    },
    expr_base64decode_invalid: Case {
        file: "87-expr-base64decode-invalid.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["not valid base64"],
        ..BASE
    },
    expr_format_missing_value: Case {
        file: "88-expr-format-missing-value.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["`%s` has no value"],
        ..BASE
    },
    expr_wrong_type_for_input: Case {
        file: "89-expr-wrong-type-for-input.toml",
        codes: &["flow::wrong-type"],
        at: &["22:7"],
        says: &["`run` must be a string, found a list"],
        ..BASE
    },
    each_outside_for_each: Case {
        file: "90-expr-each-outside-for-each.toml",
        codes: &["flow::each-outside-for-each"],
        at: &["22:13"],
        says: &["`each.key` is only known inside a step with `for_each`"],
        ..BASE
    },
    for_each_over_a_string: Case {
        file: "91-for-each-string.toml",
        codes: &["flow::bad-for-each"],
        at: &["20:12"],
        says: &["`for_each` must be a list or a table, found a string"],
        ..BASE
    },
    for_each_over_a_number: Case {
        file: "92-for-each-number.toml",
        codes: &["flow::bad-for-each"],
        at: &["20:12"],
        says: &["`for_each` must be a list or a table, found a number"],
        ..BASE
    },
    for_each_duplicate_keys: Case {
        file: "93-for-each-duplicate-keys.toml",
        codes: &["flow::bad-for-each"],
        at: &["20:12"],
        says: &["`for_each` has the key `2` twice"],
        ..BASE
    },
    for_each_list_of_tables: Case {
        file: "94-for-each-table-items.toml",
        codes: &["flow::bad-for-each"],
        at: &["20:12"],
        says: &["item 0 of `for_each` is a table"],
        ..BASE
    },
    for_each_over_its_own_output: Case {
        file: "95-for-each-own-output.toml",
        codes: &["flow::reference-not-allowed"],
        at: &["26:13"],
        says: &["steps.build.for_each cannot use the step's own outputs"],
        ..BASE
    },
    for_each_uses_each: Case {
        file: "96-for-each-uses-each.toml",
        codes: &["flow::each-outside-for-each"],
        at: &["20:13"],
        says: &["`each.value` is only known inside a step with `for_each`"],
        ..BASE
    },
    instance_with_unknown_key: Case {
        file: "97-instance-unknown-key.toml",
        codes: &["flow::unknown-instance"],
        at: &["29:13"],
        says: &["step `nccl` has no instance `nccl[\"3\"]`"],
        ..BASE
    },
    instance_of_a_step_without_for_each: Case {
        file: "98-instance-of-plain-step.toml",
        codes: &["flow::not-for-each"],
        at: &["28:13"],
        says: &["step `a` has no `for_each`"],
        ..BASE
    },
    for_each_step_referenced_without_key: Case {
        file: "99-instance-not-named.toml",
        codes: &["flow::instance-needed"],
        at: &["29:13"],
        says: &["step `nccl` has one instance per key"],
        ..BASE
    },
    moved_points_at_nothing: Case {
        file: "100-moved-to-nothing.toml",
        codes: &["flow::bad-moved"],
        at: &["24:1"],
        says: &["[[moved]] points at nothing", "did you mean `build`?"],
        ..BASE
    },
    moved_from_a_step_that_still_exists: Case {
        file: "101-moved-from-existing-step.toml",
        codes: &["flow::bad-moved"],
        at: &["30:1"],
        says: &["which is still a step of the workflow"],
        ..BASE
    },
    moved_bad_address: Case {
        file: "102-moved-bad-address.toml",
        codes: &["flow::bad-moved"],
        at: &["25:8"],
        says: &["`build[8]` is not a step address"],
        ..BASE
    },
    for_each_over_a_secret: Case {
        file: "103-for-each-secret.toml",
        codes: &["flow::bad-for-each"],
        at: &["8:12"],
        says: &["uses a secret"],
        ..BASE
    },
    each_misspelt_field: Case {
        file: "104-each-misspelt-field.toml",
        codes: &["flow::bad-reference"],
        at: &["22:13"],
        says: &["did you mean `each.key`?"],
        ..BASE
    },
    expression_in_a_default: Case {
        file: "105-var-default-expression.toml",
        codes: &["flow::reference-not-allowed"],
        at: &["2:14"],
        says: &["the default of `name` cannot contain `${…}`"],
        ..BASE
    },
    expr_index_of_a_string: Case {
        file: "106-expr-index-of-string.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["`[…]` reads a list or a table, but this is a string"],
        ..BASE
    },
    expr_negate_a_string: Case {
        file: "107-expr-negate-string.toml",
        codes: &["flow::bad-expression"],
        at: &["22:16"],
        says: &["`-` negates a number, but this is a string"],
        ..BASE
    },
    expr_lookup_missing_key: Case {
        file: "108-expr-missing-argument-value.toml",
        codes: &["flow::bad-expression"],
        at: &["22:15"],
        says: &["the table has no key `missing` (it has: name)"],
        ..BASE
    },

    // ---- modules (issue 14) ----------------------------------------------
    module_missing_input: Case {
        file: "109-module-missing-input.toml",
        codes: &["flow::module-input"],
        at: &["3:10"],
        says: &["module `job` needs the input `name`", "What to call the job"],
        ..BASE
    },
    module_unknown_input: Case {
        file: "110-module-unknown-input.toml",
        codes: &["flow::module-input"],
        at: &["3:27"],
        says: &["module `job` has no input `nodse`", "did you mean `nodes`?"],
        ..BASE
    },
    module_unknown_output: Case {
        file: "111-module-unknown-output.toml",
        codes: &["flow::unknown-output"],
        at: &["8:13"],
        says: &["module `job` has no output `nmae`", "did you mean `name`?"],
        ..BASE
    },
    module_source_missing: Case {
        file: "112-module-source-missing.toml",
        codes: &["flow::module-source"],
        at: &["2:10"],
        says: &["the folder `modules/jbo` does not exist"],
        ..BASE
    },
    module_cycle: Case {
        file: "113-module-cycle.toml",
        codes: &["flow::module-cycle"],
        at: &["bad/modules/loop/main.toml:3:10", "1:10"],
        says: &["module `again` calls itself"],
        ..BASE
    },
    module_reads_what_it_cannot: Case {
        file: "114-module-reads-vars.toml",
        codes: &["flow::module-var", "flow::unknown-input", "flow::unknown-step"],
        at: &["bad/modules/reads-vars/main.toml:9:13", "4:10", "bad/modules/reads-vars/main.toml:9:28", "bad/modules/reads-vars/main.toml:9:43"],
        problems: 3,
        says: &["a module cannot read `vars.region`", "the module declares no input `nmae`", "the module has no step `prepare`", "in module `m`, called here"],
        ..BASE
    },
    module_unknown_call: Case {
        file: "115-module-unknown-call.toml",
        codes: &["flow::unknown-module"],
        at: &["8:13"],
        says: &["there is no module `jbo`", "did you mean `job`?"],
        ..BASE
    },
    module_without_source: Case {
        file: "116-module-no-source.toml",
        codes: &["flow::bad-module"],
        at: &["1:10"],
        says: &["module `job` has no `source`"],
        ..BASE
    },
    module_input_of_the_wrong_type: Case {
        file: "118-module-input-wrong-type.toml",
        codes: &["flow::wrong-type"],
        at: &["3:35"],
        says: &["module `job`'s input `nodes` must be an integer, found a string"],
        ..BASE
    },
    inputs_outside_a_module: Case {
        file: "117-inputs-outside-module.toml",
        codes: &["flow::bad-reference"],
        at: &["4:13"],
        says: &["`inputs.name` is only known inside a module"],
        ..BASE
    },
    module_call_reads_an_unknown_variable: Case {
        file: "119-module-call-unknown-var.toml",
        codes: &["flow::unknown-var"],
        at: &["6:25"],
        says: &["unknown variable `regoin`", "did you mean `region`?"],
        ..BASE
    },
    module_call_misspells_a_function: Case {
        file: "120-module-call-unknown-function.toml",
        codes: &["flow::bad-expression"],
        at: &["6:22"],
        says: &["unknown function `uper`", "did you mean `upper`?"],
        ..BASE
    },
    module_call_reads_an_unknown_step: Case {
        file: "121-module-call-unknown-step.toml",
        codes: &["flow::unknown-step"],
        at: &["8:20"],
        says: &["unknown step `prepar`", "did you mean `prepare`?"],
        ..BASE
    },
    module_output_misspells_a_function: Case {
        file: "122-module-output-unknown-function.toml",
        codes: &["flow::bad-expression"],
        at: &["bad/modules/bad-output/outputs.toml:2:12", "1:10"],
        says: &["unknown function `lenght`", "did you mean `length`?", "in module `sweep`, called here"],
        ..BASE
    },
    cycle_through_a_module: Case {
        file: "123-cycle-through-module.toml",
        codes: &["flow::cycle", "flow::see-also"],
        at: &["4:15", "bad/modules/echo/main.toml:7:15"],
        says: &["dependency cycle: a → echo.inner → a", "`echo.inner` needs `a`"],
        ..BASE
    },
    module_call_names_an_instance_that_is_not_made: Case {
        file: "124-module-call-unknown-instance.toml",
        codes: &["flow::unknown-instance"],
        at: &["12:25"],
        says: &["step `nccl` has no instance `nccl[\"16\"]`", "its keys are: 2, 4, 8"],
        ..BASE
    },
    every_instance_of_a_plain_step: Case {
        file: "125-splat-of-plain-step.toml",
        codes: &["flow::not-for-each"],
        at: &["9:8"],
        says: &["step `vpc` has no `for_each`, so it has no instance `vpc[*]`", "write steps.vpc.outputs.KEY"],
        ..BASE
    },
}
