//! Saved plans (`flow plan --out FILE`): the plan plus everything needed to
//! check, at apply time, that nothing it was computed from has changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::model::Plan;
use crate::lang::vars::VarValues;

/// What marks a file as a saved plan.
pub const FORMAT: &str = "flow-plan";

/// The plan file layout this flow writes and reads. Version 1 kept the salt
/// of its secrets' digests beside them; version 2 keeps only keyed
/// fingerprints, whose key stays in the user's config folder.
pub const VERSION: u32 = 2;

/// A variable's value as saved: secrets only as a keyed fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SavedVar {
    /// The value.
    Value(Value),
    /// The digest of a sensitive value; it must be given again at apply.
    SensitiveDigest(String),
}

/// A plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPlan {
    /// Always [`FORMAT`].
    pub format: String,
    /// The file layout's version.
    pub version: u32,
    /// The workflow file (absolute).
    pub workflow_path: PathBuf,
    /// SHA-256 of the workflow file's text.
    pub workflow_digest: String,
    /// The state folder (absolute).
    pub state_dir: PathBuf,
    /// The S3 state the plan was made against (`s3://bucket/key`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_url: Option<String>,
    /// Every variable's value.
    pub vars: BTreeMap<String, SavedVar>,
    /// `--target` steps.
    pub targets: Vec<String>,
    /// `--replace` steps.
    pub replace: Vec<String>,
    /// The plan itself.
    pub plan: Plan,
}

/// SHA-256 of text, hex.
pub fn text_digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

impl SavedPlan {
    /// Save vars with secrets only as their keyed fingerprints.
    pub fn vars_for_saving(vars: &VarValues) -> BTreeMap<String, SavedVar> {
        vars.iter()
            .map(|(k, v)| {
                let saved = if v.sensitive {
                    SavedVar::SensitiveDigest(crate::secrets::digest(&v.value))
                } else {
                    SavedVar::Value(v.value.clone())
                };
                (k.clone(), saved)
            })
            .collect()
    }

    /// The sensitive variables the plan does not hold, which must be given
    /// again at apply.
    pub fn to_give_again(&self) -> Vec<&str> {
        self.vars
            .iter()
            .filter(|(_, v)| matches!(v, SavedVar::SensitiveDigest(_)))
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// Write the plan file (mode 0600).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = serde_json::to_string_pretty(self).expect("plan serialises");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")
    }

    /// Read `path` if it is a saved plan; `Ok(None)` if it is something else
    /// (a workflow file, or nothing readable: the workflow loader reports
    /// that); an error if it claims to be a plan but cannot be read as one.
    pub fn read_if_plan(path: &Path) -> Result<Option<SavedPlan>, UnreadablePlan> {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Ok(None);
        };
        if !text.trim_start().starts_with('{') {
            return Ok(None);
        }
        match serde_json::from_str::<SavedPlan>(&text) {
            Ok(p) if p.format == FORMAT && p.version != VERSION => Err(UnreadablePlan {
                path: path.to_path_buf(),
                detail: format!(
                    "it was made by another version of flow (plan file version {}, this flow reads {VERSION}); make the plan again with `flow plan --out`",
                    p.version
                ),
            }),
            Ok(p) if p.format == FORMAT => Ok(Some(p)),
            Ok(_) => Ok(None),
            Err(e) if text.contains(FORMAT) => Err(UnreadablePlan {
                path: path.to_path_buf(),
                detail: e.to_string(),
            }),
            Err(_) => Ok(None),
        }
    }
}

/// A file that claims to be a saved plan but cannot be read as one.
#[derive(Debug, thiserror::Error)]
#[error("{} looks like a saved plan but cannot be read: {detail}", path.display())]
pub struct UnreadablePlan {
    /// The file.
    pub path: std::path::PathBuf,
    /// What the JSON reader said.
    pub detail: String,
}
