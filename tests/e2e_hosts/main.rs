//! End-to-end: instances that are hosts (issue 39, part 1). Under
//! `scripts/local-hosts` (tests/support/hosts.rs), a sealed network
//! namespace holds the host manager, moto and `flow`; each instance moto
//! runs is a host at its private address, with its hostname, and an sshd
//! that lets the key pair's key in (scripts/local-cloud/cloud_hosts.py).
//!
//! One test binary, a module per subject: `sealed` (no route but the
//! bridge, a host is a network namespace of its own), `instances` (a
//! CloudFormation stack's instance, SSH to it, destroy ends it; RunInstances
//! and TerminateInstances; an address two instances cannot share; a root
//! volume of its own, kept over stop and start), `image` (`ec2.image` on a
//! builder host), `image_content` (what an image holds on the instances
//! launched from it), `image_cluster` (an image as a ParallelCluster
//! queue's CustomAmi), `slurm` (a cluster across hosts).

#[path = "../support/mod.rs"]
mod support;

#[path = "../support/hosts.rs"]
mod hosts;

// The local cloud over HTTPS that pcluster needs (e2e_pcluster's).
#[path = "../e2e_pcluster/https.rs"]
mod https;
mod image;
mod image_cluster;
mod image_content;
mod instances;
mod sealed;
mod slurm;
