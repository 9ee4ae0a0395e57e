//! The AWS providers: CloudFormation stacks, FSx for Lustre, Batch jobs,
//! Secrets Manager secrets, S3 buckets and folder syncs, ECR repositories.
//!
//! They share one way to reach AWS (the `config` module: region, profile,
//! credentials and endpoint from the SDK's standard configuration, one HTTP
//! client), one way to turn AWS errors into [`ProviderError`]s (`error`),
//! one way to wait for long operations while reporting progress (`poll`), and
//! one way to find what an interrupted create made (`tags`: the operation
//! token as a tag, or the name).
//!
//! [`ProviderError`]: crate::contract::ProviderError

pub mod access;
mod batch;
mod batch_logs;
mod cloudformation;
pub(crate) mod config;
pub(crate) mod ec2;
mod ecr;
pub(crate) mod efa_rules;
pub(crate) mod error;
mod fsx;
pub(crate) mod hyperpod;
mod image;
pub(crate) mod leftovers;
pub(crate) use crate::inputs;
pub(crate) mod pacing;
pub(crate) mod poll;
pub(crate) mod reservation;
mod s3;
mod secrets;
pub(crate) mod tags;

use std::sync::Arc;

use crate::contract::Provider;

pub use batch::{BatchJob, BatchNodeCheck};
pub use cloudformation::{CloudFormationStack, template_digest};
pub use config::state_s3_client;
pub use ecr::EcrRepository;
pub use fsx::FsxLustre;
pub use hyperpod::HyperPodCluster;
pub use image::Ec2Image;
pub use s3::{S3Bucket, S3Sync, folder_digest};
pub use secrets::SecretsManagerSecret;

/// Every AWS provider kind, for [`Registry::builtin`](crate::Registry::builtin).
pub fn providers() -> Vec<Arc<dyn Provider>> {
    vec![
        Arc::new(CloudFormationStack::new()),
        Arc::new(FsxLustre::new()),
        Arc::new(BatchJob::new()),
        Arc::new(BatchNodeCheck::new()),
        Arc::new(SecretsManagerSecret::new()),
        Arc::new(S3Bucket::new()),
        Arc::new(S3Sync::new()),
        Arc::new(EcrRepository::new()),
        Arc::new(HyperPodCluster::new()),
        Arc::new(Ec2Image::new()),
    ]
}
