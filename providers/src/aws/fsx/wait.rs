//! Waiting for a file system: until it is available (or gone), and until a
//! delete has finished, reporting its lifecycle on the way.

use aws_sdk_fsx::Client;
use aws_sdk_fsx::types::FileSystem;
use tokio::time::Instant;

use super::file_system::{describe, lifecycle};
use crate::aws::pacing;
use crate::aws::poll::{Pace, Waiter};
use crate::contract::{OpContext, ProviderError};

/// Waits until file system `id` is `AVAILABLE` (or gone, with `gone_ok`),
/// reporting lifecycle changes; `sent`: when the create that started it went
/// out, if this call sent it.
pub(super) async fn settle(
    ctx: &OpContext,
    client: &Client,
    id: &str,
    gone_ok: bool,
    sent: Option<Instant>,
) -> Result<Option<FileSystem>, ProviderError> {
    // A create (gone not expected) takes minutes; other changes, unknown.
    let pace = if gone_ok {
        Pace::LONG
    } else {
        Pace::expecting(pacing::expected::FSX_LUSTRE)
    }
    .since(sent);
    let mut waiter = Waiter::new(
        pace.within(ctx.timeout),
        ctx.reporter.as_ref(),
        format!("file system `{id}`"),
    );
    loop {
        match describe(client, id).await {
            Ok(None) if gone_ok => return Ok(None),
            Ok(None) => {
                return Err(ProviderError::vanished(format!(
                    "file system `{id}` disappeared"
                )));
            }
            Ok(Some(fs)) => {
                waiter.looked();
                let state = lifecycle(&fs).to_string();
                let updating = fs.administrative_actions().iter().any(|a| {
                    a.status()
                        .is_some_and(|s| matches!(s.as_str(), "PENDING" | "IN_PROGRESS"))
                });
                match state.as_str() {
                    "AVAILABLE" if !updating => return Ok(Some(fs)),
                    "FAILED" | "MISCONFIGURED" | "MISCONFIGURED_UNAVAILABLE" => {
                        let why = fs
                            .failure_details()
                            .and_then(|f| f.message())
                            .unwrap_or("no reason given");
                        return Err(ProviderError::fatal(format!(
                            "file system `{id}` is {state}: {why}"
                        )).with_help("FSx gave up on the file system: read the reason above (capacity in the subnet's zone, the security group, the S3 import path), fix it, then `flow apply --replace STEP`"));
                    }
                    "DELETING" if !gone_ok => {
                        return Err(ProviderError::fatal(format!(
                            "file system `{id}` is being deleted"
                        )).with_help("something is deleting the file system; wait until it is gone, then `flow apply` creates it again"));
                    }
                    _ => waiter.report([format!(
                        "file system `{id}` is {state}{}",
                        if updating { " (updating)" } else { "" }
                    )]),
                }
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}

/// Waits until file system `id`, whose delete has been asked for, is gone;
/// fails if FSx reports the delete failed.
pub(super) async fn deleted(
    ctx: &OpContext,
    client: &Client,
    id: &str,
) -> Result<(), ProviderError> {
    let mut waiter = Waiter::new(
        Pace::expecting(pacing::expected::FSX_LUSTRE_DELETE).within(ctx.timeout),
        ctx.reporter.as_ref(),
        format!("file system `{id}` to be deleted"),
    );
    loop {
        match describe(client, id).await {
            Ok(None) => return Ok(()),
            Ok(Some(fs)) => {
                waiter.looked();
                if lifecycle(&fs) == "FAILED" {
                    let why = fs
                        .failure_details()
                        .and_then(|f| f.message())
                        .unwrap_or("no reason given");
                    return Err(ProviderError::fatal(format!(
                        "deleting file system `{id}` failed: {why}"
                    )).with_help("read the reason above; a file system still mounted or with a data repository task running cannot be deleted yet: stop those, then `flow destroy` again"));
                }
                waiter.report([format!("file system `{id}` is {}", lifecycle(&fs))]);
            }
            Err(e) => waiter.tolerate(e)?,
        }
        waiter.pause().await?;
    }
}
