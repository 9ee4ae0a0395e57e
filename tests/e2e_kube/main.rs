//! End-to-end: the `flow` binary's Kubernetes and EKS providers against a
//! real kube-apiserver (tests/support/kube/) and the moto server.
//!
//! A machine that cannot build the API server fails these tests, naming
//! what is missing; CI builds it with `scripts/kube-apiserver`.
//!
//! One test binary, a module per subject: `manifests` (kube.manifest:
//! apply, prune, drift, readiness, offline checks), `urls` (manifests fetched
//! from a loopback server: redirects, `insecure`, the `sha256` pin),
//! `injection` (values that would add keys applied as one string), `jobs` (kube.job
//! and training operators' jobs), `eks` (clusters from eksctl files, the
//! EKS connection), `eks_auth` (EKS authentication as on AWS: DescribeCluster's
//! endpoint and CA, the token verified as aws-iam-authenticator does, four
//! refused tokens), `eks_efa` (the EFA rules EC2 answers for a node group),
//! `nodegroup_replace` (a node group replaced create-before-destroy, drained under a PodDisruptionBudget), `eks_vpc` (the VPC made for an eksctl file without one), `fleet` (kube.node_check: every node of a group of 8 checked alone and in NCCL pairs, planted faults named and cordoned), `fleet_replace` (policy replace: a bad node of a flow-made node group terminated through its Auto Scaling group and its replacement checked; kill -9 midway), `upstream` (the runbook's
//! published files, unmodified), `report` (`flow report` opened in a real
//! browser).

#[path = "../support/mod.rs"]
mod support;

mod eks;
mod eks_auth;
mod eks_efa;
mod eks_vpc;
mod fleet;
mod fleet_replace;
mod injection;
mod jobs;
mod leftovers;
mod manifests;
mod nodegroup_replace;
mod operator;
mod report;
mod reservations;
mod restarts;
mod restarts_kill;
mod restarts_loss;
mod restarts_replace;
mod restarts_replace_kill;
mod upstream;
mod urls;

use support::Project;

/// Copies tests/fixtures/kube/NAME into the project.
pub(crate) fn fixture(p: &Project, name: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/kube")
        .join(name);
    p.write(name, &std::fs::read_to_string(&path).expect("fixture"));
}

/// The first `<tag>` value of an EC2 answer.
pub(crate) fn first(xml: &str, tag: &str) -> String {
    support::moto::between_all(xml, &format!("<{tag}>"), &format!("</{tag}>"))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
}

/// An EC2 call of the Query API to moto, returning its XML answer.
pub(crate) fn ec2(moto: &support::moto::Moto, params: &str) -> String {
    moto.query_call("ec2", &format!("{params}&Version=2016-11-15"))
}

/// A step's log.
pub(crate) fn log(p: &Project, step: &str) -> String {
    p.read(&format!(".flow/wf/logs/{step}.log"))
}
