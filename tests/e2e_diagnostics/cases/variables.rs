//! Variables: their declarations and defaults, references to unknown ones,
//! and values from the command line (`--var`, `--var-file`).

use super::super::{BASE, Case, NODES_ENV, check};

corpus! {
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
    // Several variables without a value: each at its declaration, and one
    // line that gives them all.
    missing_vars_all_at_once: Case {
        file: "174-missing-vars-all-at-once.toml",
        codes: &["flow::missing-var"],
        at: &["1:7", "4:7"],
        problems: 2,
        says: &[
            "variable `key_name` has no value",
            "variable `capacity_reservation_id` has no value",
            "all of them: --var key_name=VALUE --var capacity_reservation_id=VALUE\n",
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
}
