//! Broken workflow files: TOML syntax, duplicates, unknown keys, variables,
//! steps and dependencies, providers and inputs, references, the command
//! line, several problems at once.

use super::super::{BASE, Case, NODES_ENV, check};

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
    substitute_placeholder_left: Case {
        file: "126-substitute-placeholder-left.toml",
        codes: &["flow::invalid-input"],
        at: &["10:9", "11:33"],
        problems: 3,
        says: &[
            "templates/nccl-tests.yaml:14:22: the placeholder `<account>` has no value",
            "templates/nccl-tests.yaml:14:40: the placeholder `<region>` has no value",
            "add it to the step's `substitute`: \"<account>\" = \"…\"",
            "`GPU_PER_NOD` matches nothing in `templates/nccl-tests.yaml`",
        ],
        never_says: &["$PATH"],
        ..BASE
    },
    kustomize_outside_the_subset: Case {
        file: "127-kustomize-outside-the-subset.toml",
        codes: &["flow::invalid-input"],
        at: &["11:10"],
        problems: 1,
        says: &[
            "templates/kustomize-outside/kustomization.yaml:2:5:",
            "is a remote resource",
            "vendor it: copy the folder at a pinned commit",
        ],
        ..BASE
    },
    required_placeholder_left: Case {
        file: "128-required-placeholder-left.toml",
        codes: &["flow::invalid-input"],
        at: &["11:9"],
        problems: 1,
        says: &[
            "templates/fsdp-job.yaml-template:19:35: the placeholder `$GPU_PER_NODE`",
            "add it to the step's `substitute`: GPU_PER_NODE = \"…\"",
        ],
        never_says: &["`$PATH", "`$MAX_NODES`", "`${IMAGE_URI}`"],
        ..BASE
    },
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
    eksctl_vpc_id_without_subnets: Case {
        file: "129-eksctl-vpc-id-without-subnets.toml",
        codes: &["flow::invalid-input"],
        at: &["10:17"],
        problems: 1,
        says: &[
            "templates/eksctl-vpc-id-only.yaml:7:3: the eksctl config sets `vpc.id`",
            "lists no subnets",
            "eksctl would not make a VPC then",
            "or set `subnet_ids` on the step",
        ],
        ..BASE
    },

    efa_batch_two_zones: Case {
        file: "160-efa-batch-two-zones.toml",
        codes: &["flow::invalid-input"],
        at: &["11:12"],
        problems: 1,
        says: &[
            "templates/batch-efa-two-zones.yaml:58:9: EFA compute environment",
            "spans 2 Availability Zones",
            "`SubnetA` in the region's zone #0",
            "`SubnetB`",
            "EFA traffic does not cross zones",
            "list subnets of one zone only, e.g. Subnets: [!Ref SubnetA]",
        ],
        ..BASE
    },
    efa_security_group_no_self_egress: Case {
        file: "161-efa-security-group-no-self-egress.toml",
        codes: &["flow::invalid-input"],
        at: &["10:12"],
        problems: 1,
        says: &[
            "templates/batch-efa-no-self-egress.yaml:20:3: security group `EfaGroup`",
            "allow all traffic out to itself",
            "Type: AWS::EC2::SecurityGroupEgress",
            "DestinationSecurityGroupId: !Ref EfaGroup",
        ],
        never_says: &["in from itself"],
        ..BASE
    },
    efa_on_a_type_without_efa: Case {
        file: "162-efa-on-a-type-without-efa.toml",
        codes: &["flow::invalid-input"],
        at: &["12:12", "17:17", "24:19"],
        problems: 3,
        says: &[
            "templates/batch-efa-no-efa-type.yaml:57:25: instance type",
            "templates/eksctl-efa-no-efa-type.yaml:11:5: node group",
            "step `gpu`: instance type `g5.2xlarge` has no EFA",
            "g5.48xlarge (1)",
        ],
        ..BASE
    },
    efa_eksctl_two_zones: Case {
        file: "163-efa-eksctl-two-zones.toml",
        codes: &["flow::invalid-input"],
        at: &["9:17"],
        problems: 1,
        says: &[
            "templates/eksctl-efa-two-zones.yaml:11:5: node group",
            "2 Availability Zones (us-east-1a, us-east-1b)",
            "availabilityZones: [us-east-1a]",
        ],
        ..BASE
    },

    keep_backups_too_few: Case {
        file: "140-keep-backups-too-few.toml",
        codes: &["flow::bad-state-setting"],
        at: &["7:16"],
        says: &[
            "workflow.state.keep_backups must be at least 3, found 2",
            "the newest 3 backups are always kept; write keep_backups = 3 or more",
        ],
        ..BASE
    },
    keep_backups_not_a_number: Case {
        file: "141-keep-backups-not-a-number.toml",
        codes: &["flow::bad-state-setting"],
        at: &["6:16"],
        says: &[
            "workflow.state.keep_backups must be a whole number, found",
            "write it like keep_backups = 20",
        ],
        ..BASE
    },
    keep_backups_for_too_short: Case {
        file: "142-keep-backups-for-too-short.toml",
        codes: &["flow::bad-state-setting"],
        at: &["6:20"],
        says: &[
            "workflow.state.keep_backups_for must be at least 1h",
            "write it like \"30d\" or \"12h\"",
        ],
        ..BASE
    },
    keep_backups_for_not_a_duration: Case {
        file: "143-keep-backups-for-not-a-duration.toml",
        codes: &["flow::bad-state-setting"],
        at: &["6:20"],
        says: &["workflow.state.keep_backups_for is not a duration"],
        ..BASE
    },
    create_before_destroy_not_a_bool: Case {
        file: "170-create-before-destroy-not-bool.toml",
        codes: &["flow::wrong-type"],
        at: &["3:39"],
        says: &["create_before_destroy must be a boolean, found a string"],
        ..BASE
    },
    create_before_destroy_unsupported: Case {
        file: "171-create-before-destroy-unsupported.toml",
        codes: &["flow::create-before-destroy"],
        at: &["5:25"],
        says: &[
            "step `build` asks for create_before_destroy, but `null` cannot make a replacement",
            "remove `create_before_destroy` from [steps.build.lifecycle]",
        ],
        ..BASE
    },
    drain_timeout_not_a_duration: Case {
        file: "172-drain-timeout-not-a-duration.toml",
        codes: &["flow::bad-duration"],
        at: &["10:17"],
        says: &["`until done` is not a duration", "write a duration such as"],
        ..BASE
    },
}
