//! The log's names, content and chain checks: every way a chain can be
//! broken is named, none is merged.

use super::*;
use crate::commit::Change;

fn loc() -> S3Location {
    S3Location::parse("s3://team/a/state.json").unwrap()
}

const RECORD: &str = r#"{"name":"vpc","provider":"null","status":"applied","applied":true,"resource_id":null,"inputs":{},"outputs":{},"depends_on":[],"in_flight":null,"attempts":1,"last_error":null,"created_at":1,"updated_at":1}"#;

/// A listed delta `seq` with ETag `"e<seq>"`, made on `after`.
fn delta(seq: u64, named: u64, after: &str) -> (Listed, Delta) {
    (
        Listed {
            key: delta_key(&loc(), named),
            etag: format!("\"e{named}\""),
            size: 10,
        },
        Delta {
            seq,
            serial: seq + 100,
            after: after.to_string(),
            changes: Vec::new(),
        },
    )
}

fn base() -> Base {
    Base {
        seq: 4,
        etags: vec!["\"snap\"".to_string(), "\"e4\"".to_string()],
    }
}

fn check(deltas: &[(Listed, Delta)]) -> Result<(), ChainError> {
    check_chain(&prefix(&loc()), &base(), deltas)
}

#[test]
fn deltas_are_named_in_order_and_round_trip() {
    assert_eq!(
        delta_key(&loc(), 7),
        "a/state.json.log/00000000000000000007.json"
    );
    assert_eq!(seq_of(&prefix(&loc()), &delta_key(&loc(), 7)), Some(7));
    assert_eq!(seq_of(&prefix(&loc()), "a/state.json.log/7.json"), None);
    assert!(delta_key(&loc(), 9) < delta_key(&loc(), 10));
    let body = encode(
        5,
        42,
        "\"snap\"",
        &[
            Change {
                key: "vpc".into(),
                value: Some(RECORD.as_bytes().to_vec()),
            },
            Change {
                key: "old".into(),
                value: None,
            },
        ],
    );
    let got = decode(&body).unwrap();
    assert_eq!(
        (got.seq, got.serial, got.after.as_str()),
        (5, 42, "\"snap\"")
    );
    assert_eq!(got.changes[0].0, "vpc");
    let back: serde_json::Value =
        serde_json::from_slice(got.changes[0].1.as_ref().unwrap()).unwrap();
    assert_eq!(
        back,
        serde_json::from_str::<serde_json::Value>(RECORD).unwrap()
    );
    assert_eq!(got.changes[1], ("old".to_string(), None));
    assert!(decode(b"{\"format\":\"flow-state-backup\"}").is_err());
}

#[test]
fn a_chain_after_the_snapshot_or_the_delta_it_reaches_is_whole() {
    assert_eq!(check(&[]), Ok(()));
    let chain = [
        delta(5, 5, "\"snap\""),
        delta(6, 6, "\"e5\""),
        delta(7, 7, "\"e6\""),
    ];
    assert_eq!(check(&chain), Ok(()));
    // After a compaction, the first delta names the delta it reaches.
    assert_eq!(check(&[delta(5, 5, "\"e4\"")]), Ok(()));
}

#[test]
fn a_missing_delta_is_named() {
    let chain = [delta(5, 5, "\"snap\""), delta(7, 7, "\"e6\"")];
    assert_eq!(
        check(&chain),
        Err(ChainError::Missing {
            seq: 6,
            next: "the next one there is 7".into()
        })
    );
    assert!(matches!(
        check(&[delta(6, 6, "\"snap\"")]),
        Err(ChainError::Missing { seq: 5, .. })
    ));
}

#[test]
fn a_delta_holding_another_place_is_out_of_order() {
    let chain = [delta(5, 5, "\"snap\""), delta(7, 6, "\"e5\"")];
    assert_eq!(
        check(&chain),
        Err(ChainError::OutOfOrder {
            key: delta_key(&loc(), 6),
            holds: 7
        })
    );
}

#[test]
fn two_deltas_made_on_one_version_are_duplicated_and_a_stranger_is_forked() {
    let chain = [
        delta(5, 5, "\"snap\""),
        delta(6, 6, "\"e5\""),
        delta(7, 7, "\"e5\""),
    ];
    assert_eq!(
        check(&chain),
        Err(ChainError::Duplicated {
            key: delta_key(&loc(), 7),
            same_as: delta_key(&loc(), 6)
        })
    );
    let chain = [delta(5, 5, "\"snap\""), delta(6, 6, "\"other\"")];
    assert_eq!(
        check(&chain),
        Err(ChainError::Forked {
            key: delta_key(&loc(), 6),
            after: "\"other\"".into()
        })
    );
    assert!(matches!(
        check(&[delta(5, 5, "\"old snapshot\"")]),
        Err(ChainError::Forked { .. })
    ));
}

#[test]
fn a_broken_chain_is_refused_with_the_restore_command() {
    let err = ChainError::Missing {
        seq: 6,
        next: "the next one there is 7".into(),
    }
    .into_error(&loc(), "wf.toml");
    let StateError::Remote { message, help } = err else {
        panic!("remote error")
    };
    assert_eq!(
        message,
        "state s3://team/a/state.json is damaged: delta 6 of the state's log is missing (the next one there is 7); flow merges nothing and leaves every object as it is"
    );
    assert!(
        help.unwrap().contains("flow state restore wf.toml BACKUP"),
        "help names the restore"
    );
    let foreign = ChainError::Foreign {
        key: "a/state.json.log/notes.txt".into(),
    };
    assert_eq!(
        check(&[(
            Listed {
                key: "a/state.json.log/notes.txt".into(),
                etag: String::new(),
                size: 0
            },
            delta(5, 5, "\"snap\"").1
        )]),
        Err(foreign)
    );
}
