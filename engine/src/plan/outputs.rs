//! The one lookup of earlier steps' outputs while planning: a step's output
//! is known when the step is unchanged by the plan (or not in it) and state
//! recorded it, or when the plan updates it in place and its kind says an
//! update never changes that output; anything else the plan creates,
//! updates or replaces is known only after apply. Compute, refine and cost
//! all resolve inputs through it.

use std::collections::BTreeMap;

use flow_state::StepRecord;

use super::model::{Action, Plan};
use crate::lang::resolve::Lookup;

/// What planning knows of outputs: state's records, and the action planned
/// for each step so far.
pub struct PlannedOutputs<'a> {
    records: &'a BTreeMap<String, StepRecord>,
    planned: rustc_hash::FxHashMap<&'a str, Action>,
    /// The kinds, whose outputs an update keeps are known through it.
    registry: Option<&'a flow_providers::Registry>,
}

impl<'a> PlannedOutputs<'a> {
    /// Outputs as state recorded them, before anything is planned.
    pub fn new(records: &'a BTreeMap<String, StepRecord>) -> Self {
        PlannedOutputs {
            records,
            planned: Default::default(),
            registry: None,
        }
    }

    /// With the kinds' outputs an update keeps
    /// ([`flow_providers::Provider::outputs_kept_on_update`]) known as
    /// recorded through the update.
    pub fn keeping(mut self, registry: &'a flow_providers::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Whether an update of `rec`'s step keeps output `key`.
    fn kept(&self, rec: &StepRecord, key: &str) -> bool {
        self.registry
            .and_then(|r| r.get(&rec.provider))
            .is_some_and(|p| p.outputs_kept_on_update().contains(&key))
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
            Some(Action::Update) => match self.records.get(step) {
                Some(rec) if self.kept(rec, key) => match rec.outputs.get(key) {
                    Some(v) => Lookup::Known(v.clone()),
                    None => Lookup::Unknown,
                },
                _ => Lookup::Unknown,
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
        // A `null` step keeps nothing through an update.
        let registry = flow_providers::Registry::builtin();
        let mut outputs = PlannedOutputs::new(&records).keeping(&registry);
        outputs.planned("vpc", Action::Update);
        assert_eq!(outputs.lookup("vpc", "id"), Lookup::Unknown);
    }

    /// A cluster's update keeps its head node's address: known through
    /// the update (so the jobs that reach it are not planned anew), while
    /// its status is known only after; a replace keeps nothing.
    #[test]
    fn an_update_keeps_what_its_kind_says_it_never_changes() {
        let mut rec = StepRecord::new("cluster", "parallelcluster.cluster", 1);
        rec.outputs
            .insert("head_node_public_ip".into(), json!("54.1.2.3"));
        rec.outputs
            .insert("status".into(), json!("CREATE_COMPLETE"));
        let records = BTreeMap::from([("cluster".to_string(), rec)]);
        let registry = flow_providers::Registry::builtin();
        let mut outputs = PlannedOutputs::new(&records).keeping(&registry);
        outputs.planned("cluster", Action::Update);
        assert_eq!(
            outputs.lookup("cluster", "head_node_public_ip"),
            Lookup::Known(json!("54.1.2.3"))
        );
        assert_eq!(outputs.lookup("cluster", "status"), Lookup::Unknown);
        // Without the kinds (as before), or replaced: nothing is known.
        let mut without = PlannedOutputs::new(&records);
        without.planned("cluster", Action::Update);
        assert_eq!(
            without.lookup("cluster", "head_node_public_ip"),
            Lookup::Unknown
        );
        outputs.planned("cluster", Action::Replace);
        assert_eq!(
            outputs.lookup("cluster", "head_node_public_ip"),
            Lookup::Unknown
        );
    }
}
