//! [`super::super::KubeJob`]'s read of a job with restarts, after a kill
//! -9: the attempts the step's id records taken up where they stand.

use serde_json::json;

use super::record::decode;
use super::{Spec, attempt_doc, drive};
use crate::contract::{Applied, ProviderError, ReadOutcome};
use crate::kube::job::Run;
use crate::kube::objects::Kinds;

/// The read of a job with restarts (after a kill -9): the
/// attempt in flight followed on, or, for destroy, the last attempt's job
/// as it stands; an id whose every attempt ended failed reads as failed.
pub(in crate::kube::job) async fn read(
    run: &Run<'_>,
    spec: &Spec,
    id: Option<&str>,
) -> Result<ReadOutcome, ProviderError> {
    let Some(id) = id else {
        // No attempt was recorded: the first is created by the next apply,
        // or followed when it was (it carries the operation's token).
        return match drive(run, spec, None).await {
            Ok(applied) => Ok(ReadOutcome::Present(applied)),
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => Ok(ReadOutcome::Failed {
                id: None,
                reason: e.message,
            }),
        };
    };
    let recorded = decode(id);
    if run.ctx.destroying {
        let mut kinds = Kinds::new(run.conn.client().await?);
        let base = run.doc(&mut kinds).await?;
        let n = recorded.len().max(1) as u32;
        let doc = attempt_doc(&base, n, "", spec, None);
        let mut record = Kinds::record_of(&doc);
        return Ok(match kinds.get(&record).await? {
            Some(o) => {
                record.uid = o.metadata.uid.clone().unwrap_or_default();
                ReadOutcome::Present(Applied {
                    id: Some(id.to_string()),
                    outputs: Default::default(),
                    private: json!({ "job": record }),
                })
            }
            None => ReadOutcome::Missing,
        });
    }
    let spent =
        recorded.len() > spec.restarts as usize && recorded.iter().all(|r| r.line.is_some());
    if spent {
        return Ok(ReadOutcome::Failed {
            id: Some(id.to_string()),
            reason: format!(
                "every attempt failed: {}",
                recorded
                    .iter()
                    .filter_map(|r| r.line.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    match drive(run, spec, Some(id)).await {
        Ok(applied) => Ok(ReadOutcome::Present(applied)),
        Err(e) if e.is_retryable() => Err(e),
        Err(e) => Ok(ReadOutcome::Failed {
            id: Some(id.to_string()),
            reason: e.message,
        }),
    }
}
