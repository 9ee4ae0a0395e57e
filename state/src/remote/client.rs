//! The S3 calls the backend makes, with every failure sorted into what the
//! caller must do about it: a failed condition, a missing object, a
//! transient failure worth retrying, or a mistake the user has to fix.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use tokio::runtime::Handle;

use super::location::S3Location;

/// How an S3 call failed.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// `If-Match` / `If-None-Match` did not hold (HTTP 412, or 409 for a
    /// conditional write that raced another).
    Precondition,
    /// The object does not exist.
    NotFound,
    /// S3 could not be reached or answered with a server error: retry.
    Transient(String),
    /// Something the user must fix (no bucket, no permission, wrong region).
    Fatal { message: String, help: String },
}

/// One bucket and key, and the client that reaches them.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    client: Client,
    /// Where the state is.
    pub location: S3Location,
    handle: Handle,
}

/// An object read back: its bytes and ETag.
pub(crate) struct Fetched {
    pub body: Vec<u8>,
    pub etag: String,
}

/// What a conditional write requires of the object it replaces.
#[derive(Debug, Clone)]
pub(crate) enum Expect {
    /// It must not exist (`If-None-Match: *`).
    Absent,
    /// It must be the version with this ETag (`If-Match`).
    Etag(String),
}

/// An object listed under a prefix: its key and ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub key: String,
    pub etag: String,
    /// Its size in bytes.
    pub size: u64,
}

/// One older copy of the state: a version of the object, or a backup object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteBackup {
    /// The version id, or the backup object's key.
    pub id: String,
    /// When it was written (seconds since the Unix epoch).
    pub written_at: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl Remote {
    /// A remote for `location` through `client`; blocking calls run on
    /// `handle` (the runtime the client was built in).
    pub(crate) fn new(client: Client, location: S3Location, handle: Handle) -> Remote {
        Remote {
            client,
            location,
            handle,
        }
    }

    /// Runs `fut` to completion from synchronous code: on the writer or
    /// lease thread directly, on a runtime thread through `block_in_place`.
    pub(crate) fn block_on<F: Future>(&self, fut: F) -> F::Output {
        if Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| self.handle.block_on(fut))
        } else {
            self.handle.block_on(fut)
        }
    }

    /// Checks that the bucket exists and is in the region the client uses.
    /// A bucket whose location cannot be read (no permission for
    /// `GetBucketLocation`) passes: the calls that follow say what is wrong.
    pub(crate) async fn check_bucket(&self) -> Result<(), Failure> {
        let asked = self
            .client
            .config()
            .region()
            .map(|r| r.as_ref().to_string());
        let answer = self
            .client
            .get_bucket_location()
            .bucket(&self.location.bucket)
            .send()
            .await;
        match answer {
            Ok(out) => {
                let actual = out
                    .location_constraint()
                    .map(|c| c.as_str().to_string())
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| "us-east-1".to_string());
                let actual = if actual == "EU" {
                    "eu-west-1".to_string()
                } else {
                    actual
                };
                match asked {
                    Some(asked) if asked != actual => Err(Failure::Fatal {
                        message: format!(
                            "bucket `{}` is in region {actual}, not {asked}",
                            self.location.bucket
                        ),
                        help: format!(
                            "set region = \"{actual}\" under [workflow.state] (the state's region is the bucket's, whatever region the steps use)"
                        ),
                    }),
                    _ => Ok(()),
                }
            }
            Err(err) => match self.classify(err, "read the location of") {
                Failure::Fatal { message, help } if message.contains("does not exist") => {
                    Err(Failure::Fatal { message, help })
                }
                Failure::Transient(t) => Err(Failure::Transient(t)),
                _ => Ok(()),
            },
        }
    }

    /// Whether the bucket keeps object versions.
    pub(crate) async fn versioned(&self) -> Result<bool, Failure> {
        let out = self
            .client
            .get_bucket_versioning()
            .bucket(&self.location.bucket)
            .send()
            .await;
        match out {
            Ok(out) => Ok(out
                .status()
                .is_some_and(|s| *s == aws_sdk_s3::types::BucketVersioningStatus::Enabled)),
            // A 200 whose body the SDK cannot read: moto 5 names its root
            // element `GetBucketVersioningResponse`, not AWS's
            // `VersioningConfiguration`. The status inside is the same.
            Err(SdkError::ServiceError(ctx)) if ctx.raw().status().as_u16() == 200 => {
                Ok(ctx.raw().body().bytes().is_some_and(|b| {
                    String::from_utf8_lossy(b).contains("<Status>Enabled</Status>")
                }))
            }
            Err(e) => Err(self.classify(e, "read the versioning of")),
        }
    }

    /// Reads `key` (a version of it when `version` is given).
    pub(crate) async fn get(&self, key: &str, version: Option<&str>) -> Result<Fetched, Failure> {
        let out = self
            .client
            .get_object()
            .bucket(&self.location.bucket)
            .key(key)
            .set_version_id(version.map(str::to_string))
            .send()
            .await
            .map_err(|e| self.classify(e, "read"))?;
        let etag = out.e_tag().unwrap_or_default().to_string();
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| {
                Failure::Transient(format!(
                    "reading s3://{}/{key} broke off: {e}",
                    self.location.bucket
                ))
            })?
            .into_bytes()
            .to_vec();
        Ok(Fetched { body, etag })
    }

    /// Writes `body` to `key` if `expect` holds; returns the new ETag.
    pub(crate) async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        expect: Option<&Expect>,
    ) -> Result<String, Failure> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.location.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        match expect {
            Some(Expect::Absent) => req = req.if_none_match("*"),
            Some(Expect::Etag(etag)) => req = req.if_match(etag),
            None => {}
        }
        let out = req.send().await.map_err(|e| self.classify(e, "write"))?;
        Ok(out.e_tag().unwrap_or_default().to_string())
    }

    /// Deletes `key` if it still has `etag` (any version when `None`).
    pub(crate) async fn delete(&self, key: &str, etag: Option<&str>) -> Result<(), Failure> {
        self.client
            .delete_object()
            .bucket(&self.location.bucket)
            .key(key)
            .set_if_match(etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| self.classify(e, "delete"))?;
        Ok(())
    }

    /// The keys under `prefix` with their times and sizes.
    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<RemoteBackup>, Failure> {
        let mut found = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.location.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.classify(e, "list"))?;
            for obj in page.contents() {
                found.push(RemoteBackup {
                    id: obj.key().unwrap_or_default().to_string(),
                    written_at: obj.last_modified().map_or(0, |t| t.secs().max(0) as u64),
                    size: obj.size().unwrap_or(0).max(0) as u64,
                });
            }
        }
        Ok(found)
    }

    /// The keys under `prefix` after `start_after`, in key order, with
    /// their ETags.
    pub(crate) async fn list_after(
        &self,
        prefix: &str,
        start_after: &str,
    ) -> Result<Vec<Listed>, Failure> {
        let mut found = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.location.bucket)
            .prefix(prefix)
            .start_after(start_after)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.classify(e, "list"))?;
            for obj in page.contents() {
                found.push(Listed {
                    key: obj.key().unwrap_or_default().to_string(),
                    etag: obj.e_tag().unwrap_or_default().to_string(),
                    size: obj.size().unwrap_or(0).max(0) as u64,
                });
            }
        }
        Ok(found)
    }

    /// The versions of the state object, newest first.
    pub(crate) async fn versions(&self) -> Result<Vec<RemoteBackup>, Failure> {
        let out = self
            .client
            .list_object_versions()
            .bucket(&self.location.bucket)
            .prefix(&self.location.key)
            .send()
            .await
            .map_err(|e| self.classify(e, "list the versions of"))?;
        let mut found: Vec<RemoteBackup> = out
            .versions()
            .iter()
            .filter(|v| v.key() == Some(self.location.key.as_str()))
            .map(|v| RemoteBackup {
                id: v.version_id().unwrap_or_default().to_string(),
                written_at: v.last_modified().map_or(0, |t| t.secs().max(0) as u64),
                size: v.size().unwrap_or(0).max(0) as u64,
            })
            .collect();
        found.sort_by_key(|b| std::cmp::Reverse(b.written_at));
        Ok(found)
    }

    /// Sorts an SDK failure of `what`ing an object of this bucket.
    fn classify<E, R>(&self, err: SdkError<E, R>, what: &str) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + HasStatus,
    {
        let bucket = &self.location.bucket;
        match &err {
            SdkError::ServiceError(ctx) => {
                let status = ctx.raw().status_code();
                let code = ctx.err().code().unwrap_or_default().to_string();
                let message = ctx.err().message().unwrap_or_default().to_string();
                sort_service_error(bucket, &self.location, what, status, &code, &message)
            }
            SdkError::DispatchFailure(_)
            | SdkError::TimeoutError(_)
            | SdkError::ResponseError(_) => {
                Failure::Transient(format!("S3 cannot be reached: {}", chain(&err)))
            }
            _ => Failure::Fatal {
                message: format!(
                    "the request to {what} s3://{bucket} could not be made: {}",
                    chain(&err)
                ),
                help: "check the AWS configuration (region, profile, AWS_ENDPOINT_URL)".to_string(),
            },
        }
    }
}

/// The HTTP status of a raw response.
pub(crate) trait HasStatus {
    /// The status code.
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

/// Sorts an error S3 answered with.
fn sort_service_error(
    bucket: &str,
    location: &S3Location,
    what: &str,
    status: u16,
    code: &str,
    message: &str,
) -> Failure {
    match (status, code) {
        (412, _) | (_, "PreconditionFailed") | (409, "ConditionalRequestConflict") => {
            Failure::Precondition
        }
        (_, "NoSuchBucket") => Failure::Fatal {
            message: format!("bucket `{bucket}` does not exist"),
            help: "create it (with versioning, so every write of the state is kept), or fix `bucket` under [workflow.state]".to_string(),
        },
        (404, _) | (_, "NoSuchKey") | (_, "NoSuchVersion") => Failure::NotFound,
        (403, _) | (_, "AccessDenied") => Failure::Fatal {
            message: format!("no permission to {what} {location} ({code})"),
            help: format!(
                "the AWS credentials in use need s3:GetObject, s3:PutObject, s3:DeleteObject, s3:ListBucket and s3:GetBucketLocation on bucket `{bucket}` (and s3:GetBucketVersioning, s3:ListBucketVersions for backups)"
            ),
        },
        (301, _) | (_, "PermanentRedirect") | (_, "AuthorizationHeaderMalformed") => {
            Failure::Fatal {
                message: format!("bucket `{bucket}` is in another region than the one asked ({code}: {message})"),
                help: "set `region` under [workflow.state] to the bucket's region".to_string(),
            }
        }
        (s, _) if s >= 500 || code == "SlowDown" || code == "RequestTimeout" => {
            Failure::Transient(format!("S3 answered {s} {code}"))
        }
        _ => Failure::Fatal {
            message: format!("S3 refused to {what} {location}: {code} {message} (HTTP {status})"),
            help: "check the bucket, key and permissions under [workflow.state]".to_string(),
        },
    }
}

/// An error and its sources on one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Waits before the `attempt`-th retry: 0.5 s, 1 s, 2 s, then 4 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((500u64 << attempt.min(3)).min(5_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> S3Location {
        S3Location::parse("s3://team/flow.json").unwrap()
    }

    #[test]
    fn conditions_missing_objects_and_server_errors_are_sorted() {
        let sort =
            |status, code: &str| sort_service_error("team", &loc(), "write", status, code, "");
        assert!(matches!(
            sort(412, "PreconditionFailed"),
            Failure::Precondition
        ));
        assert!(matches!(
            sort(409, "ConditionalRequestConflict"),
            Failure::Precondition
        ));
        assert!(matches!(sort(404, "NoSuchKey"), Failure::NotFound));
        assert!(matches!(sort(503, "SlowDown"), Failure::Transient(_)));
        assert!(matches!(sort(500, "InternalError"), Failure::Transient(_)));
    }

    #[test]
    fn user_mistakes_say_what_to_fix() {
        let sort =
            |status, code: &str| sort_service_error("team", &loc(), "write", status, code, "");
        let Failure::Fatal { message, help } = sort(404, "NoSuchBucket") else {
            panic!("fatal")
        };
        assert_eq!(message, "bucket `team` does not exist");
        assert!(help.contains("[workflow.state]"), "{help}");
        let Failure::Fatal { message, help } = sort(403, "AccessDenied") else {
            panic!("fatal")
        };
        assert_eq!(
            message,
            "no permission to write s3://team/flow.json (AccessDenied)"
        );
        assert!(help.contains("s3:PutObject"), "{help}");
        let Failure::Fatal { message, .. } = sort(301, "PermanentRedirect") else {
            panic!("fatal")
        };
        assert!(message.contains("another region"), "{message}");
    }

    #[test]
    fn backoff_grows_then_stays() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(9), Duration::from_secs(4));
    }
}
