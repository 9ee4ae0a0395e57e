//! Inputs that could escape (issue 17): files outside the workflow's
//! folder and `allow_paths`, links that lead out of an s3.sync source,
//! manifest URLs over plain http or with a malformed pin, and values that
//! cannot enter YAML as a scalar where their placeholder is.

use super::super::{BASE, Case, check};

corpus! {
    // ---- files outside the workflow's folder (issue 17) --------------------
    template_outside_the_folder: Case {
        file: "150-template-outside-the-folder.toml",
        codes: &["flow::path-outside"],
        at: &["11:12"],
        says: &["`/etc/hostname` is outside the workflow's folder;", "`allow_paths = [\"/etc\"]`"],
        ..BASE
    },
    manifest_climbs_out: Case {
        file: "151-manifest-climbs-out.toml",
        codes: &["flow::invalid-input"],
        at: &["10:10"],
        says: &["`templates/../../shared/config.yaml` is outside", "`allow_paths = [\"templates/../../shared\"]`", "shared/config.yaml)"],
        ..BASE
    },
    manifest_link_out: Case {
        file: "152-manifest-link-out.toml",
        codes: &["flow::invalid-input"],
        at: &["11:10"],
        says: &["`templates/link-out.yaml` is outside", "`allow_paths = [\"/etc\"]`", "/etc/hostname)"],
        ..BASE
    },
    sync_link_out: Case {
        file: "153-sync-link-out.toml",
        codes: &["flow::invalid-input"],
        at: &["12:19"],
        says: &["`hostname` is a symbolic link to /etc/hostname,", "remove the link"],
        ..BASE
    },
    file_function_outside: Case {
        file: "154-file-function-outside.toml",
        codes: &["flow::bad-expression"],
        at: &["9:10"],
        says: &["`file`: `/etc/hostname` is outside", "allow_paths"],
        ..BASE
    },
    allow_paths_not_a_list: Case {
        file: "155-allow-paths-not-a-list.toml",
        codes: &["flow::wrong-type"],
        at: &["4:15"],
        says: &["workflow.allow_paths must be an array of folders, found a string"],
        ..BASE
    },

    // ---- manifest URLs (issue 17) -----------------------------------------
    manifest_url_plain_http: Case {
        file: "156-manifest-url-plain-http.toml",
        codes: &["flow::invalid-input"],
        at: &["10:10"],
        says: &["is plain http,", "use https, or write the entry as", "insecure = true }"],
        ..BASE
    },
    manifest_pin_malformed: Case {
        file: "157-manifest-pin-malformed.toml",
        codes: &["flow::invalid-input"],
        at: &["11:68", "12:56"],
        problems: 2,
        says: &[
            "`sha256` must be the file's SHA-256 as 64 hex digits",
            "unknown key `insecur` in an item of `files`",
            "did you mean `insecure`?",
        ],
        ..BASE
    },

    // ---- values pasted into YAML (issue 17) -------------------------------
    value_line_break_in_folded_block: Case {
        file: "158-value-line-break-in-folded-block.toml",
        codes: &["flow::invalid-input", "flow::bad-expression"],
        at: &["15:10", "29:16"],
        problems: 2,
        says: &[
            "templates/folded-note.yaml:7: the value of `${AUTHOR}` has a line break,",
            "the value of `${vars.authors}` has a line break,",
            "use a literal block (`|`) there",
        ],
        ..BASE
    },
    substitute_line_break_in_comment: Case {
        file: "159-substitute-line-break-in-comment.toml",
        codes: &["flow::invalid-input"],
        at: &["10:10"],
        says: &["templates/commented-job.yaml:1: the value of `PLACEHOLDER_TEAM` has a line", "remove the break"],
        ..BASE
    },
}
