//! Where an S3 state lives: bucket, key and region.

use std::fmt;

/// The S3 object that holds a state, and the region its bucket is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket.
    pub bucket: String,
    /// The state object's key; the lock is `KEY.lock` and backups of an
    /// unversioned bucket go under `KEY.backups/`.
    pub key: String,
    /// The bucket's region (the SDK's chain decides when absent).
    pub region: Option<String>,
    /// The AWS profile to use (the SDK's chain decides when absent).
    pub profile: Option<String>,
}

impl S3Location {
    /// Reads `s3://bucket/key` (the `--state` flag).
    pub fn parse(url: &str) -> Result<S3Location, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("`{url}` is not an S3 URL: write it as s3://BUCKET/KEY"))?;
        let (bucket, key) = rest
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty() && !k.ends_with('/'))
            .ok_or_else(|| {
                format!(
                    "`{url}` names no object: write it as s3://BUCKET/KEY (KEY not ending in /)"
                )
            })?;
        Ok(S3Location {
            bucket: bucket.to_string(),
            key: key.to_string(),
            region: None,
            profile: None,
        })
    }

    /// The key of the lock object.
    pub fn lock_key(&self) -> String {
        format!("{}.lock", self.key)
    }

    /// The prefix backups go under when the bucket keeps no versions.
    pub fn backups_prefix(&self) -> String {
        format!("{}.backups/", self.key)
    }

    /// Where the state's runs are kept: `KEY.runs/`.
    pub fn runs_prefix(&self) -> String {
        format!("{}.runs/", self.key)
    }
}

impl fmt::Display for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_key() {
        let loc = S3Location::parse("s3://team-state/flow/eks-p4d.json").unwrap();
        assert_eq!(loc.bucket, "team-state");
        assert_eq!(loc.key, "flow/eks-p4d.json");
        assert_eq!(loc.to_string(), "s3://team-state/flow/eks-p4d.json");
        assert_eq!(loc.lock_key(), "flow/eks-p4d.json.lock");
    }

    #[test]
    fn refuses_what_names_no_object() {
        for bad in [
            "team-state/x",
            "s3://team-state",
            "s3://team-state/",
            "s3:///x",
            "s3://b/dir/",
        ] {
            assert!(S3Location::parse(bad).is_err(), "{bad}");
        }
    }
}
