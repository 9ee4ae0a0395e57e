//! The object a create-before-destroy replacement put aside: kept in the
//! step's record from before its replacement is created until it is
//! deleted, so a kill at any point loses neither object.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How far retiring a deposed object got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retiring {
    /// Its replacement is being created (see the record's `in_flight`).
    Replacing,
    /// Its replacement is ready; it is being drained (a node group's nodes
    /// cordoned and their pods evicted).
    Draining,
    /// It is being deleted, under [`Deposed::delete_token`].
    Deleting,
}

impl std::fmt::Display for Retiring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Retiring::Replacing => "replacing",
            Retiring::Draining => "draining",
            Retiring::Deleting => "deleting",
        })
    }
}

/// An object replaced create-before-destroy and not deleted yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deposed {
    /// How far retiring it got.
    pub stage: Retiring,
    /// Its id.
    pub resource_id: Option<String>,
    /// The inputs it was applied with (sealed as the record's are), without
    /// its name suffix.
    pub inputs: Map<String, Value>,
    /// Its outputs.
    pub outputs: Map<String, Value>,
    /// Provider-private data.
    #[serde(default)]
    pub private: Value,
    /// The suffix its name carries, if it was itself a replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    /// The token of its delete, once that started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_token: Option<String>,
    /// When it was put aside (seconds since the Unix epoch).
    pub deposed_at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_without_the_new_fields_still_reads() {
        // A record as builds before create-before-destroy wrote it.
        let old = r#"{"name":"ng","provider":"eks.nodegroup","status":"applied","applied":true,
            "resource_id":"arn:1","inputs":{"name":"gpu"},"outputs":{},"depends_on":[],
            "in_flight":null,"attempts":1,"last_error":null,"created_at":1,"updated_at":2}"#;
        let rec: crate::StepRecord = serde_json::from_str(old).unwrap();
        assert_eq!(rec.deposed, None);
        assert_eq!(rec.name_suffix, None);
        // And a record without them writes neither.
        let text = serde_json::to_string(&rec).unwrap();
        assert!(
            !text.contains("deposed") && !text.contains("name_suffix"),
            "{text}"
        );
    }

    #[test]
    fn a_deposed_object_round_trips() {
        let mut rec = crate::StepRecord::new("ng", "eks.nodegroup", 1);
        rec.name_suffix = Some("a1b2".into());
        rec.deposed = Some(Deposed {
            stage: Retiring::Draining,
            resource_id: Some("arn:old".into()),
            inputs: Map::new(),
            outputs: Map::new(),
            private: Value::Null,
            name_suffix: None,
            delete_token: None,
            deposed_at: 5,
        });
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains(r#""stage":"draining""#), "{text}");
        let back: crate::StepRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rec);
    }
}
