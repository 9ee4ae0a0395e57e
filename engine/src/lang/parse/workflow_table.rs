//! `[workflow]`: the workflow's name, description, region, profile, the
//! folders outside its own that its steps' files may be in (`allow_paths`,
//! see [`flow_providers::Workdir`]) and where its state is kept.

use super::super::ast::{Entry, Node, NodeKind, Workflow};
use super::Parser;

/// The keys `[workflow]` takes.
const KEYS: &[&str] = &[
    "name",
    "description",
    "region",
    "profile",
    "allow_paths",
    "state",
];

impl Parser<'_> {
    /// `[workflow]`: the workflow's own settings.
    pub(super) fn workflow_table(&mut self, entry: &Entry, wf: &mut Workflow) {
        let Some(entries) = self.table(&entry.value, "[workflow]") else {
            return;
        };
        for e in entries {
            let what = format!("workflow.{}", e.key);
            match e.key.as_str() {
                "name" => {
                    if let Some(s) = self.string(&e.value, &what) {
                        wf.name = s;
                    }
                }
                "description" => wf.description = self.string(&e.value, &what),
                "region" => (wf.region, wf.region_node) = self.region(&e.value, &what),
                "profile" => wf.profile = self.string(&e.value, &what),
                "allow_paths" => {
                    let paths = self.allow_paths(&e.value, &what);
                    wf.dir = wf.dir.clone().allowing(paths);
                }
                "state" => {
                    wf.state = super::super::state_table::parse_state_table(
                        self.source,
                        self.diags,
                        &e.value,
                    )
                }
                other => self.unknown_key(e, other, KEYS, "[workflow]"),
            }
        }
    }

    /// `[workflow] allow_paths`: folders outside the workflow's that the
    /// files steps name may be in, each relative to the workflow's folder
    /// or absolute.
    fn allow_paths(&mut self, node: &Node, what: &str) -> Vec<String> {
        let NodeKind::Array(items) = &node.kind else {
            self.wrong_type(node, what, "an array of folders");
            return Vec::new();
        };
        let mut paths = Vec::new();
        for item in items {
            if !matches!(item.kind, NodeKind::Str(_)) {
                self.wrong_type(item, &format!("each item of {what}"), "a folder (a string)");
            } else if let Some(s) = self.string(item, what) {
                paths.push(s);
            }
        }
        paths
    }
}
