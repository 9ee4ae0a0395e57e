//! The S3 providers: `s3.bucket` (a bucket) and `s3.sync` (a local folder
//! kept in step with a prefix of a bucket).
//!
//! S3 clients use path-style addressing when the configured endpoint is an
//! IP address or `localhost` (see `config`).

mod bucket;
mod sync;
mod uri;

pub use bucket::S3Bucket;
pub use sync::{S3Sync, folder_digest};
