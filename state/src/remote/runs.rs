//! An S3 state's runs: each written once as `KEY.runs/ID.json`, beside
//! the state object and its backups, so that a team's runs gather in one
//! place whoever ran them.

use std::collections::HashSet;

use super::client::{Expect, Failure, Remote};
use super::remote_error;
use crate::error::StateError;
use crate::runs::RunMirror;

/// The runs of the state at the remote's location.
pub(super) struct S3Runs {
    pub remote: Remote,
}

impl S3Runs {
    fn key(&self, id: &str) -> String {
        format!("{}{id}.json", self.remote.location.runs_prefix())
    }
}

impl RunMirror for S3Runs {
    fn put(&self, id: &str, body: Vec<u8>) -> Result<(), StateError> {
        let key = self.key(id);
        let remote = &self.remote;
        remote.block_on(async {
            match remote.put(&key, body, Some(&Expect::Absent)).await {
                // Written by an earlier attempt of this same call: the same run.
                Ok(_) | Err(Failure::Precondition) => Ok(()),
                Err(f) => Err(remote_error(&remote.location, f)),
            }
        })
    }

    fn missing(&self, known: &HashSet<String>) -> Result<Vec<Vec<u8>>, StateError> {
        let remote = &self.remote;
        let prefix = remote.location.runs_prefix();
        remote.block_on(async {
            let fail = |f| remote_error(&remote.location, f);
            let mut out = Vec::new();
            for obj in remote.list(&prefix).await.map_err(fail)? {
                let id = obj
                    .id
                    .strip_prefix(&prefix)
                    .and_then(|n| n.strip_suffix(".json"))
                    .unwrap_or(&obj.id);
                if known.contains(id) {
                    continue;
                }
                out.push(remote.get(&obj.id, None).await.map_err(fail)?.body);
            }
            Ok(out)
        })
    }
}
