//! The one lookup of earlier steps' outputs while planning: a step's output
//! is known when the step is unchanged by the plan (or not in it) and state
//! recorded it; anything the plan creates, updates or replaces is known only
//! after apply. Compute, refine and cost all resolve inputs through it.

use std::collections::BTreeMap;

use flow_state::StepRecord;

use super::model::{Action, Plan};
use crate::lang::resolve::Lookup;

/// What planning knows of outputs: state's records, and the action planned
/// for each step so far.
pub struct PlannedOutputs<'a> {
    records: &'a BTreeMap<String, StepRecord>,
    planned: rustc_hash::FxHashMap<&'a str, Action>,
}

impl<'a> PlannedOutputs<'a> {
    /// Outputs as state recorded them, before anything is planned.
    pub fn new(records: &'a BTreeMap<String, StepRecord>) -> Self {
        PlannedOutputs {
            records,
            planned: Default::default(),
        }
    }

    /// Outputs once `plan` is complete.
    pub fn of_plan(records: &'a BTreeMap<String, StepRecord>, plan: &'a Plan) -> Self {
        let mut outputs = Self::new(records);
        for c in &plan.changes {
            outputs.planned.insert(&c.step, c.action);
        }
        outputs
    }

    /// Note the action planned for `step`.
    pub fn planned(&mut self, step: &'a str, action: Action) {
        self.planned.insert(step, action);
    }

    /// Output `key` of step `step`.
    pub fn lookup(&self, step: &str, key: &str) -> Lookup {
        match self.planned.get(step) {
            Some(Action::NoOp) | None => match self.records.get(step) {
                Some(rec) => match rec.outputs.get(key) {
                    Some(v) => Lookup::Known(v.clone()),
                    None => Lookup::Missing(rec.outputs.keys().cloned().collect()),
                },
                None => Lookup::Unknown,
            },
            Some(_) => Lookup::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_unchanged_steps_give_recorded_outputs() {
        let mut rec = StepRecord::new("vpc", "null", 1);
        rec.outputs.insert("id".into(), json!("vpc-1"));
        let records = BTreeMap::from([("vpc".to_string(), rec)]);
        let mut outputs = PlannedOutputs::new(&records);
        assert_eq!(outputs.lookup("vpc", "id"), Lookup::Known(json!("vpc-1")));
        assert!(matches!(outputs.lookup("vpc", "nope"), Lookup::Missing(k) if k == ["id"]));
        assert_eq!(outputs.lookup("other", "id"), Lookup::Unknown);
        outputs.planned("vpc", Action::NoOp);
        assert_eq!(outputs.lookup("vpc", "id"), Lookup::Known(json!("vpc-1")));
        outputs.planned("vpc", Action::Replace);
        assert_eq!(outputs.lookup("vpc", "id"), Lookup::Unknown);
    }
}
