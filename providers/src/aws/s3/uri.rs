//! `s3://bucket/prefix/` locations.

use std::fmt;

/// A bucket and a key prefix (empty, or ending in `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Uri {
    /// The bucket's name.
    pub bucket: String,
    /// The prefix keys start with: empty or ending in `/`.
    pub prefix: String,
}

/// Text that is not an `s3://bucket[/prefix]` location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` {why}")]
pub struct BadS3Uri {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl S3Uri {
    /// Parses `s3://bucket` or `s3://bucket/some/prefix[/]`.
    pub fn parse(text: &str) -> Result<S3Uri, BadS3Uri> {
        let rest = text.strip_prefix("s3://").ok_or_else(|| BadS3Uri {
            text: text.to_string(),
            why: "is not an s3:// location",
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(BadS3Uri {
                text: text.to_string(),
                why: "names no bucket",
            });
        }
        let prefix = prefix.trim_matches('/');
        Ok(S3Uri {
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }

    /// The key of a file at `relative` (with `/` separators) under the prefix.
    pub fn key(&self, relative: &str) -> String {
        format!("{}{relative}", self.prefix)
    }
}

impl fmt::Display for S3Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_buckets_and_prefixes() {
        let u = S3Uri::parse("s3://data/train/v1").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.prefix.as_str()),
            ("data", "train/v1/")
        );
        assert_eq!(u.key("a/b.txt"), "train/v1/a/b.txt");
        assert_eq!(u.to_string(), "s3://data/train/v1/");
        let root = S3Uri::parse("s3://data").unwrap();
        assert_eq!(root.prefix, "");
        assert_eq!(root.to_string(), "s3://data/");
        assert_eq!(S3Uri::parse("s3://data/").unwrap().prefix, "");
        assert!(S3Uri::parse("data/x").is_err());
        assert!(S3Uri::parse("s3:///x").is_err());
    }
}
