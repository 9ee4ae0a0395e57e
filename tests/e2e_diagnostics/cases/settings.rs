//! Settings of state and lifecycle: `keep_backups`, `keep_backups_for`,
//! `create_before_destroy` and `drain_timeout`.

use super::super::{BASE, Case, check};

corpus! {
    // ---- state backups and lifecycle ---------------------------------------
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
