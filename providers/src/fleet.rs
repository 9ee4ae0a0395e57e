//! Finding the bad nodes of a GPU fleet from tests that each need two
//! nodes (an NCCL all_reduce across a pair): which nodes to test together
//! in each round, and what the results say about each node.
//!
//! The search is sans-IO: [`pairwise::Search`] hands out the pairs of a
//! round, the caller runs them (all pairs of a round at once, each on its
//! two nodes) and records what each measured, until the search has a
//! [`Finding`]. Round 1 tests N/2 disjoint pairs; a pair that measures
//! below the rule ([`Rule`]: the instance type's floor, or a fraction of
//! the fleet's median) makes both its nodes suspects, and round 2 pairs
//! each suspect with a node of a good pair, so each bad result is one
//! node's. One bad node among N is named in 2 rounds (3 when the good
//! nodes are fewer than the suspects); no healthy node left to compare
//! with, or more bad nodes than the rule allows, stops the search and says
//! so instead of naming half the fleet.
//!
//! Around the search, what every node check kind (`kube.node_check`,
//! `slurm.node_check`) shares: the inputs ([`spec`]), a check's verdict
//! ([`check`]), the verdicts as outputs, log and run history ([`report`]),
//! and the step's rounds and end ([`step`]). And what the job kinds that
//! survive a node share: their restart inputs ([`restarts`]), the loss
//! watch of `hang_without_loss` ([`loss_watch`]), and the nodes a failed
//! attempt's log points at ([`suspects`]).

pub mod check;
pub mod dcgm;
pub mod efa_devices;
pub mod gpus;
pub(crate) mod id_text;
pub mod loss_watch;
pub mod pairwise;
pub mod report;
pub mod restarts;
pub mod spec;
pub mod step;
pub mod suspects;
pub mod verdict;

pub use pairwise::Search;
pub use verdict::{Evidence, Finding, Measured, Rule, Verdict};
