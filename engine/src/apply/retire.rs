//! Create-before-destroy: the old object is put aside (deposed) in the
//! step's record, durably and in the same write as the replacement's
//! intent; the replacement is created; the old object is retired (the
//! provider's `retire`: a node group drained) and deleted; only then does
//! the record forget it. Each stage is durable before it starts, so a
//! resumed apply (or destroy) finishes what a killed one left.

use flow_state::{Deposed, Retiring, Status, StepRecord, now_secs};

use super::error::StepError;
use super::events::Event;
use super::job::new_token;
use super::operation::{Op, RecordedPrior};
use super::sealing::unsealed;
use crate::lang::inputs::Desired;
use crate::plan::replacing;

impl Op<'_> {
    /// Replace the step's object create-before-destroy: depose it, create
    /// the replacement under the next name, then retire and delete it.
    pub(super) async fn replace_creating_first(
        &self,
        rec: &mut StepRecord,
        desired: &Desired,
    ) -> Result<(), StepError> {
        // One object waits to be retired at a time.
        self.finish_deposed(rec, false).await?;
        let suffix = replacing::next_suffix(rec);
        let old = Deposed {
            stage: Retiring::Replacing,
            resource_id: rec.resource_id.take(),
            inputs: std::mem::take(&mut rec.inputs),
            outputs: std::mem::take(&mut rec.outputs),
            private: std::mem::take(&mut rec.private),
            name_suffix: rec.name_suffix.take(),
            delete_token: None,
            deposed_at: now_secs(),
        };
        let old_name = replacing::live_name(self.provider, &old.inputs, old.name_suffix.as_deref());
        let new_name = replacing::live_name(self.provider, &desired.stored, suffix.as_deref());
        rec.deposed = Some(old);
        rec.applied = false;
        rec.name_suffix = suffix;
        self.stage(&format!(
            "create before destroy: creating {} while {} stays",
            shown(new_name.as_deref()),
            shown(old_name.as_deref())
        ));
        // The intent's write carries the deposed object too.
        self.create(rec, desired, new_token()).await?;
        self.finish_deposed(rec, false).await
    }

    /// Retire and delete the object a create-before-destroy replacement
    /// put aside, if the record holds one; `destroying` skips retiring
    /// (everything goes). The record forgets it once it is deleted.
    pub(super) async fn finish_deposed(
        &self,
        rec: &mut StepRecord,
        destroying: bool,
    ) -> Result<(), StepError> {
        let Some(mut old) = rec.deposed.clone() else {
            return Ok(());
        };
        let old_inputs = self.live(
            &unsealed(&old.inputs, self.desired),
            old.name_suffix.as_deref(),
        );
        let old_name = replacing::live_name(self.provider, &old.inputs, old.name_suffix.as_deref());
        let prior = RecordedPrior {
            id: old.resource_id.clone(),
            inputs: old_inputs,
            outputs: old.outputs.clone(),
            private: old.private.clone(),
        };
        // Retired only while the step still wants create-before-destroy:
        // `create_before_destroy = false` deletes the old object as it is
        // (the way out when it cannot be drained).
        let retire = !destroying && replacing::wanted(self.job.decl.as_deref(), self.provider);
        if old.stage != Retiring::Deleting && retire {
            old.stage = Retiring::Draining;
            rec.deposed = Some(old.clone());
            self.ctx.journal().persist(rec).await?;
            self.stage(&format!("retiring {}", shown(old_name.as_deref())));
            let new_inputs = self.live(
                &unsealed(&rec.inputs, self.desired),
                rec.name_suffix.as_deref(),
            );
            let new = RecordedPrior::of(rec, new_inputs);
            let ctx = self.op_context("");
            let (res, attempts) = self
                .with_retries(|| self.provider.retire(&ctx, prior.prior(), new.prior()))
                .await;
            if let Err(e) = res {
                return Err(self.failed(rec, e, attempts).await);
            }
        }
        if old.delete_token.is_none() || old.stage != Retiring::Deleting {
            old.stage = Retiring::Deleting;
            old.delete_token.get_or_insert_with(new_token);
            rec.deposed = Some(old.clone());
            self.ctx.journal().persist(rec).await?;
        }
        let token = old.delete_token.clone().unwrap_or_default();
        self.stage(&format!("deleting {}", shown(old_name.as_deref())));
        let ctx = self.op_context(&token);
        let (res, attempts) = self
            .with_retries(|| self.provider.delete(&ctx, prior.prior()))
            .await;
        if let Err(e) = res {
            return Err(self.failed(rec, e, attempts).await);
        }
        rec.deposed = None;
        if rec.applied && rec.in_flight.is_none() {
            rec.status = Status::Applied;
            rec.last_error = None;
        }
        self.ctx.journal().persist(rec).await?;
        self.stage(&format!("deleted {}", shown(old_name.as_deref())));
        Ok(())
    }

    /// A stage of a replacement, in the log and shown live.
    fn stage(&self, message: &str) {
        self.reporter.note(message);
        self.ctx.sink().emit(Event::Progress {
            step: self.name().to_string(),
            message: message.to_string(),
        });
    }
}

/// A name for messages.
fn shown(name: Option<&str>) -> String {
    match name {
        Some(n) => format!("`{n}`"),
        None => "the object".into(),
    }
}
