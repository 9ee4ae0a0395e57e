//! `[[moved]]` entries carried out on what state recorded: the record of a
//! renamed step, or of a step that gained or changed its `for_each` keys,
//! goes on under its new address instead of being destroyed and created
//! again. Plans show the moves; apply writes them to state first.

use std::collections::BTreeMap;

use flow_state::StepRecord;
use serde::{Deserialize, Serialize};

use crate::diag::{Diag, Diagnostics};
use crate::lang::ast::Moved;

/// One record moved from one address to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedAddress {
    /// The address state recorded it under.
    pub from: String,
    /// The address it now belongs to.
    pub to: String,
}

/// `records` with every `moved` entry whose `from` is recorded carried out:
/// the record renamed, and every other record's `depends_on` following.
/// An entry whose `from` is not recorded was carried out before, or never
/// applied, and is left alone; so is one whose `to` is not an address of
/// the workflow this time (`is_address`: an instance whose key the
/// variables do not make). Moving onto an address that state already holds
/// is refused.
pub fn apply_moves(
    moved: &[Moved],
    mut records: BTreeMap<String, StepRecord>,
    is_address: &dyn Fn(&str) -> bool,
) -> Result<(BTreeMap<String, StepRecord>, Vec<MovedAddress>), Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut done = Vec::new();
    for entry in moved {
        if !records.contains_key(&entry.from) {
            continue;
        }
        let Some(to) = final_address(moved, &entry.from, is_address) else {
            continue;
        };
        let m = MovedAddress {
            from: entry.from.clone(),
            to,
        };
        if records.contains_key(&m.to) {
            diags.push(
                Diag::new(
                    "flow::bad-moved",
                    format!("cannot move `{}` to `{}`: state already has `{}`", m.from, m.to, m.to),
                )
                .help(format!(
                    "destroy one of them first (`flow destroy FILE --target '{}'`), or remove the [[moved]] entry",
                    m.from
                )),
            );
            continue;
        }
        let mut record = records.remove(&m.from).expect("checked above");
        record.name = m.to.clone();
        records.insert(m.to.clone(), record);
        for r in records.values_mut() {
            for d in &mut r.depends_on {
                if *d == m.from {
                    *d = m.to.clone();
                }
            }
        }
        done.push(m);
    }
    if diags.is_empty() {
        Ok((records, done))
    } else {
        Err(diags)
    }
}

/// Where a record at `from` ends up: the `to` of its entry, followed
/// through entries that move that address on (`a` → `b`, `b` → `c`: `c`),
/// in any order, until an address of the workflow; `None` when the chain
/// ends elsewhere (it waits) or loops.
fn final_address(moved: &[Moved], from: &str, is_address: &dyn Fn(&str) -> bool) -> Option<String> {
    let mut at = from;
    for _ in 0..=moved.len() {
        let next = moved.iter().find(|m| m.from == at)?;
        if is_address(&next.to) {
            return Some(next.to.clone());
        }
        at = &next.to;
    }
    None
}

/// The state changes that carry out `moves` on `records` (already moved by
/// [`apply_moves`]): each old address removed, and every record that moved
/// or whose `depends_on` named a moved address written again, in one batch.
pub fn move_mutations(
    moves: &[MovedAddress],
    records: &BTreeMap<String, StepRecord>,
) -> Vec<flow_state::Mutation> {
    let moved_from: Vec<&str> = moves.iter().map(|m| m.from.as_str()).collect();
    let moved_to: Vec<&str> = moves.iter().map(|m| m.to.as_str()).collect();
    let mut out: Vec<flow_state::Mutation> = moved_from
        .iter()
        .map(|f| flow_state::Mutation::Remove(f.to_string()))
        .collect();
    for r in records.values() {
        let touched = moved_to.contains(&r.name.as_str())
            || r.depends_on.iter().any(|d| moved_to.contains(&d.as_str()));
        if touched {
            out.push(flow_state::Mutation::Put(r.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, deps: &[&str]) -> StepRecord {
        let mut r = StepRecord::new(name, "exec", 0);
        r.depends_on = deps.iter().map(|d| d.to_string()).collect();
        r
    }

    fn moved(from: &str, to: &str) -> Moved {
        Moved {
            from: from.into(),
            to: to.into(),
            span: 0..0,
        }
    }

    #[test]
    fn a_move_renames_the_record_and_its_dependents_follow() {
        let records: BTreeMap<_, _> = [record("nccl", &[]), record("report", &["nccl"])]
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        let (after, done) =
            apply_moves(&[moved("nccl", r#"nccl["2"]"#)], records, &|_| true).unwrap();
        assert_eq!(done.len(), 1);
        assert!(after.contains_key(r#"nccl["2"]"#) && !after.contains_key("nccl"));
        assert_eq!(after["report"].depends_on, vec![r#"nccl["2"]"#.to_string()]);
        let muts = move_mutations(&done, &after);
        assert_eq!(muts.len(), 3, "{muts:?}");
        assert_eq!(muts[0], flow_state::Mutation::Remove("nccl".into()));
    }

    #[test]
    fn chained_moves_reach_the_last_address_in_any_order() {
        let records: BTreeMap<_, _> = [record("a", &[]), record("user", &["a"])]
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        let is_address = |to: &str| to == "c" || to == "user";
        for entries in [
            [moved("a", "b"), moved("b", "c")],
            [moved("b", "c"), moved("a", "b")],
        ] {
            let (after, done) = apply_moves(&entries, records.clone(), &is_address).unwrap();
            assert_eq!(
                done,
                [MovedAddress {
                    from: "a".into(),
                    to: "c".into()
                }]
            );
            assert!(after.contains_key("c") && !after.contains_key("a"));
            assert_eq!(after["user"].depends_on, ["c"]);
        }
        // A loop moves nothing.
        let (after, done) =
            apply_moves(&[moved("a", "b"), moved("b", "a")], records, &|_| false).unwrap();
        assert!(done.is_empty() && after.contains_key("a"));
    }

    #[test]
    fn a_move_already_made_is_left_alone_and_a_collision_is_refused() {
        let records: BTreeMap<_, _> = [record("b", &[])]
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        let (after, done) = apply_moves(&[moved("a", "b")], records.clone(), &|_| true).unwrap();
        assert!(done.is_empty());
        assert_eq!(after.len(), 1);
        let only_a: BTreeMap<_, _> = [record("a", &[])]
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        let (after, done) = apply_moves(&[moved("a", "c")], only_a, &|to| to != "c").unwrap();
        assert!(
            done.is_empty() && after.contains_key("a"),
            "a move to an address the workflow lacks waits"
        );
        let both: BTreeMap<_, _> = [record("a", &[]), record("b", &[])]
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        let e = apply_moves(&[moved("a", "b")], both, &|_| true).unwrap_err();
        assert!(e.items[0].message.contains("state already has `b`"));
    }
}
