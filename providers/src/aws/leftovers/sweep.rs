//! The sweep run before a cluster's VPC goes: wait a bounded time for what
//! controllers made to go, delete what may be deleted when asked to, and
//! refuse with a listing otherwise.

use std::time::Duration;

use tokio::time::Instant;

use super::Leftover;
use super::scan::Clients;
use crate::aws::config;
use crate::aws::inputs::{bool_or, opt_str};
use crate::contract::{InputSpec, InputType, OpContext, ProviderError, Values};

/// How long a sweep waits by default for leftovers to go.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(120);

/// How often a sweep looks again while it waits.
const LOOK_EVERY: Duration = Duration::from_secs(3);

/// Whose leftovers a sweep looks at and may delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The cluster step's sweep: only what is tagged for this cluster (other
    /// clusters may share the VPC).
    Cluster(String),
    /// The VPC step's sweep, just before the VPC goes: everything in it,
    /// listed, never deleted (each cluster step deletes its own).
    Vpc,
}

/// One sweep of one VPC.
pub(crate) struct Sweep<'a> {
    /// The step's context: reporter, region, and `clean_leftovers`.
    pub ctx: &'a OpContext,
    /// The VPC.
    pub vpc: String,
    /// Whose leftovers.
    pub scope: Scope,
    /// How long to wait for them to go.
    pub wait: Duration,
    /// Delete those it may (`--clean-leftovers` or the step's
    /// `cleanup_leftovers`).
    pub clean: bool,
}

impl Sweep<'_> {
    /// Returns once nothing is left; deletes what it may first when asked
    /// to; fails with the listing when something remains after the wait.
    pub(crate) async fn run(&self) -> Result<(), ProviderError> {
        let sdk = config::sdk_config(self.ctx).await?;
        let clients = Clients {
            ec2: aws_sdk_ec2::Client::new(&sdk),
            elb: aws_sdk_elasticloadbalancingv2::Client::new(&sdk),
            classic: aws_sdk_elasticloadbalancing::Client::new(&sdk),
        };
        let deadline = Instant::now() + self.wait;
        let mut waiting_said = false;
        loop {
            let found = match clients.scan(&self.vpc).await {
                Ok(found) => found,
                // Throttled or a server fault: look again, within the wait.
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    self.ctx.reporter.log(&format!(
                        "looking for leftovers in {}: {} (will look again)",
                        self.vpc, e.message
                    ));
                    tokio::time::sleep(LOOK_EVERY).await;
                    continue;
                }
                // Not allowed to look (no elasticloadbalancing:Describe*,
                // say): the destroy goes on as it did before the sweep.
                Err(e) => {
                    self.ctx.reporter.event(&format!(
                        "could not look for what controllers left in {}: {}; going on without that check",
                        self.vpc, e.message
                    ));
                    return Ok(());
                }
            };
            let left = self.in_scope(found);
            if left.is_empty() {
                return Ok(());
            }
            let (deletable, kept) = self.judge(left);
            if !waiting_said {
                waiting_said = true;
                self.ctx.reporter.event(&format!(
                    "{} object(s) that controllers made are left in {}; {}waiting up to {} for them to go",
                    deletable.len() + kept.len(),
                    self.vpc,
                    if self.clean && !deletable.is_empty() { "deleting them, " } else { "" },
                    humantime::format_duration(self.wait),
                ));
                for leftover in deletable.iter().chain(kept.iter().map(|(l, _)| l)) {
                    self.ctx.reporter.log(&format!("  {}", leftover.line()));
                }
            }
            if self.clean && !deletable.is_empty() {
                let busy = clients
                    .clean(self.ctx.reporter.as_ref(), &self.vpc, &deletable)
                    .await?;
                for (leftover, why) in busy {
                    self.ctx.reporter.log(&format!(
                        "{} {} is still in use ({why}); looking again",
                        leftover.kind.label(),
                        leftover.id
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(self.refusal(&deletable, &kept));
            }
            let pause = LOOK_EVERY.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(pause).await;
        }
    }

    /// The leftovers this sweep is about.
    fn in_scope(&self, found: Vec<Leftover>) -> Vec<Leftover> {
        match &self.scope {
            Scope::Cluster(name) => found
                .into_iter()
                .filter(|l| l.cluster() == Some(name.as_str()))
                .collect(),
            Scope::Vpc => found,
        }
    }

    /// Splits `left` into what this sweep may delete and what it must leave,
    /// with why.
    fn judge(&self, left: Vec<Leftover>) -> (Vec<Leftover>, Vec<(Leftover, String)>) {
        match &self.scope {
            Scope::Cluster(_) => (left, Vec::new()),
            Scope::Vpc => (
                Vec::new(),
                left.into_iter()
                    .map(|l| {
                        let why = match l.cluster() {
                            Some(c) => format!(
                                "tagged for cluster `{c}`: its cluster step's destroy deletes it with --clean-leftovers"
                            ),
                            None => "tagged for no cluster: flow deletes only what a tag ties to the cluster it destroys".to_string(),
                        };
                        (l, why)
                    })
                    .collect(),
            ),
        }
    }

    /// The error listing what is left, each with its command.
    fn refusal(&self, deletable: &[Leftover], kept: &[(Leftover, String)]) -> ProviderError {
        let count = deletable.len() + kept.len();
        let mut message = format!(
            "{count} object(s) that controllers made are still in {} after {}; the VPC cannot be deleted while they exist:",
            self.vpc,
            humantime::format_duration(self.wait)
        );
        for leftover in deletable {
            message.push_str(&format!("\n  - {}", leftover.line()));
        }
        for (leftover, why) in kept {
            message.push_str(&format!("\n  - {} [{why}]", leftover.line()));
        }
        let cluster = match &self.scope {
            Scope::Cluster(name) => Some(name),
            Scope::Vpc => None,
        };
        let help = match cluster {
            Some(name) if self.clean => format!(
                "flow asked AWS to delete those tagged for cluster `{name}`; they were still going when the wait ended: \
                 run the destroy again (a longer `leftovers_wait` on step `{}` waits longer)",
                self.ctx.step
            ),
            Some(name) => format!(
                "`flow destroy --clean-leftovers` deletes those tagged for cluster `{name}` (or set \
                 `cleanup_leftovers = true` on step `{}` and apply), or delete them with the commands above; \
                 then run the destroy again",
                self.ctx.step
            ),
            None => "delete them with the commands above (each cluster step's destroy deletes those of its \
                     cluster with --clean-leftovers), then run the destroy again"
                .to_string(),
        };
        ProviderError::fatal(message).with_help(help)
    }
}

/// The inputs of a step that sweeps its VPC before it goes: how long it
/// waits, and (for a cluster, which can tell its own) whether it deletes.
pub(crate) fn input_specs(scope_is_cluster: bool) -> Vec<InputSpec> {
    let mut specs = vec![InputSpec::optional(
        "leftovers_wait",
        InputType::Duration,
        "On destroy, how long to wait for what controllers made in the VPC to go before listing (or deleting) it (default 2m)",
    )];
    if scope_is_cluster {
        specs.push(InputSpec::optional(
            "cleanup_leftovers",
            InputType::Bool,
            "On destroy, delete the load balancers, target groups, security groups and interfaces that controllers made for this cluster and left in its VPC (as `flow destroy --clean-leftovers` does)",
        ));
    }
    specs
}

impl<'a> Sweep<'a> {
    /// The sweep of `vpc` by the step `ctx` runs, as its recorded `inputs`
    /// and the command line ask.
    pub(crate) fn of(
        ctx: &'a OpContext,
        inputs: &Values,
        vpc: &str,
        scope: Scope,
    ) -> Result<Self, ProviderError> {
        let wait = match opt_str(inputs, "leftovers_wait")? {
            Some(text) => humantime::parse_duration(&text).map_err(|e| {
                ProviderError::bad_input(format!("`leftovers_wait` = \"{text}\": {e}"))
            })?,
            None => DEFAULT_WAIT,
        };
        Ok(Sweep {
            ctx,
            vpc: vpc.to_string(),
            wait,
            clean: matches!(scope, Scope::Cluster(_))
                && (ctx.clean_leftovers || bool_or(inputs, "cleanup_leftovers", false)?),
            scope,
        })
    }
}
