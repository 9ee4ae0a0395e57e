//! Broken uses of the language past plain steps: expressions, `for_each`,
//! `[[moved]]` and modules.

use super::super::{BASE, Case, check};

corpus! {
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
