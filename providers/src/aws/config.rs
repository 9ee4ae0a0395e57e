//! How the AWS providers reach AWS: one SDK configuration per (region,
//! profile), loaded once through the SDK's standard chain, over one HTTP
//! client (hyper 1 + rustls on ring).
//!
//! Region: the step's or workflow's (`OpContext::region`), else the SDK's
//! default chain (`AWS_REGION`, the profile). Profile: the workflow's
//! (`OpContext::profile`), else `AWS_PROFILE` / `default`. Credentials: only
//! the SDK's default chain. Endpoint: the SDK's standard configuration
//! (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`, `endpoint_url` in the
//! profile); nothing here is specific to a test server.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_http_client::tls::{
    Provider as TlsProvider, TlsContext, TrustStore, rustls_provider::CryptoMode,
};
use aws_types::sdk_config::SharedHttpClient;
use aws_types::service_config::ServiceConfigKey;

use crate::contract::{OpContext, ProviderError};

/// The HTTP client every SDK client shares: the system's trusted roots,
/// and the certificates of `AWS_CA_BUNDLE` when it names a PEM file (the
/// variable the AWS CLI and boto3 read for a private CA, e.g. a proxy's:
/// "Environment variables to configure the AWS CLI"). A bundle that cannot
/// be read is said once on stderr and left out.
fn http_client() -> SharedHttpClient {
    static CLIENT: OnceLock<SharedHttpClient> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let builder = aws_smithy_http_client::Builder::new()
                .tls_provider(TlsProvider::Rustls(CryptoMode::Ring));
            match ca_bundle() {
                Some(pem) => builder
                    .tls_context(
                        TlsContext::builder()
                            .with_trust_store(TrustStore::default().with_pem_certificate(pem))
                            .build()
                            .expect("a TLS context of a trust store builds"),
                    )
                    .build_https(),
                None => builder.build_https(),
            }
        })
        .clone()
}

/// The PEM text of `AWS_CA_BUNDLE`'s file, when set and readable.
fn ca_bundle() -> Option<Vec<u8>> {
    let path = std::env::var_os("AWS_CA_BUNDLE").filter(|p| !p.is_empty())?;
    match std::fs::read(&path) {
        Ok(pem) => Some(pem),
        Err(e) => {
            eprintln!(
                "warning: AWS_CA_BUNDLE {}: {e}; using the system's trusted roots only",
                std::path::Path::new(&path).display()
            );
            None
        }
    }
}

/// How long one attempt of one call may take before the SDK gives up on it
/// and retries (an answer lost on the way must not hang the step):
/// `FLOW_AWS_ATTEMPT_TIMEOUT` (a duration such as `30s`), else 5 minutes,
/// enough for a large S3 upload part.
fn attempt_timeout() -> Duration {
    std::env::var("FLOW_AWS_ATTEMPT_TIMEOUT")
        .ok()
        .and_then(|t| humantime::parse_duration(&t).ok())
        .unwrap_or(Duration::from_secs(300))
}

/// The SDK's timeouts: connecting, and each attempt of a call.
fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(10))
        .operation_attempt_timeout(attempt_timeout())
        .build()
}

/// Which SDK configuration: region and profile as the step gives them.
type Key = (Option<String>, Option<String>);

/// SDK configurations loaded so far, by region and profile.
fn cache() -> &'static Mutex<HashMap<Key, SdkConfig>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, SdkConfig>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The SDK configuration for `ctx`'s region and profile, loaded once per
/// process. Fails when no region is set anywhere: a configuration the
/// command cannot run without, as missing credentials are, so it is an
/// [`ErrorKind::Auth`](crate::contract::ErrorKind::Auth) error (never
/// retried; refresh stops on it with one line before anything runs).
pub(crate) async fn sdk_config(ctx: &OpContext) -> Result<SdkConfig, ProviderError> {
    sdk_config_for(ctx.region.clone(), ctx.profile.clone())
        .await
        .map_err(ProviderError::auth)
}

/// [`sdk_config`] for a region and profile, not a step: what
/// [`super::access::check`] loads.
pub(crate) async fn sdk_config_for_access(
    region: Option<String>,
    profile: Option<String>,
) -> Result<SdkConfig, ProviderError> {
    sdk_config_for(region, profile)
        .await
        .map_err(ProviderError::auth)
}

/// An S3 client configured exactly as the providers' (region, profile,
/// credentials, `AWS_ENDPOINT_URL`, timeouts, one HTTP client): what the S3
/// state backend writes with. Fails when no region is set anywhere.
pub async fn state_s3_client(
    region: Option<String>,
    profile: Option<String>,
) -> Result<aws_sdk_s3::Client, String> {
    sdk_config_for(region, profile)
        .await
        .map(|config| s3_client(&config))
}

/// The SDK configuration for `region` and `profile`, loaded once per process.
async fn sdk_config_for(
    region: Option<String>,
    profile: Option<String>,
) -> Result<SdkConfig, String> {
    let key: Key = (region, profile);
    let cached = cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let config = match cached {
        Some(config) => config,
        None => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest())
                .http_client(http_client())
                .timeout_config(timeouts());
            if let Some(region) = &key.0 {
                loader = loader.region(Region::new(region.clone()));
            }
            if let Some(profile) = &key.1 {
                loader = loader.profile_name(profile);
            }
            let config = loader.load().await;
            cache()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, config.clone());
            config
        }
    };
    if config.region().is_none() {
        return Err(
            "no AWS region: set `region` under [workflow] or on the step, or AWS_REGION, or a region in the AWS profile"
                .to_string(),
        );
    }
    Ok(config)
}

/// The region `config` names (checked present by [`sdk_config`]).
pub(crate) fn region(config: &SdkConfig) -> String {
    config
        .region()
        .map(|r| r.as_ref().to_string())
        .unwrap_or_default()
}

/// The AWS partition of `region`, for building ARNs.
pub(crate) fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("us-iso-") {
        "aws-iso"
    } else if region.starts_with("us-isob-") {
        "aws-iso-b"
    } else {
        "aws"
    }
}

/// The endpoint S3 requests go to, when one is configured: the S3-specific
/// setting (`AWS_ENDPOINT_URL_S3`, `endpoint_url` under the profile's `s3`
/// services section) before the general one, as the SDK resolves it.
fn s3_endpoint(config: &SdkConfig) -> Option<String> {
    let specific = config.service_config().and_then(|conf| {
        let key = ServiceConfigKey::builder()
            .service_id("S3")
            .env("AWS_ENDPOINT_URL")
            .profile("endpoint_url")
            .build()
            .ok()?;
        conf.load_config(key)
    });
    specific.or_else(|| config.endpoint_url().map(str::to_string))
}

/// Whether virtual-host addressing (`bucket.host`) cannot work for an S3
/// endpoint: its host is an IP address or `localhost`.
pub(crate) fn needs_path_style(endpoint: &str) -> bool {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        return v6.contains(']');
    } else {
        authority.split(':').next().unwrap_or(authority)
    };
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host.parse::<std::net::Ipv4Addr>().is_ok()
}

/// An S3 client for `config`, with path-style addressing when the endpoint
/// cannot take bucket names as host names.
pub(crate) fn s3_client(config: &SdkConfig) -> aws_sdk_s3::Client {
    let mut builder = aws_sdk_s3::config::Builder::from(config);
    if s3_endpoint(config).is_some_and(|e| needs_path_style(&e)) {
        builder = builder.force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_style_for_ip_and_localhost_endpoints_only() {
        for e in [
            "http://127.0.0.1:5000",
            "http://127.0.0.1:5000/",
            "https://10.1.2.3",
            "http://localhost:4566",
            "http://LOCALHOST",
            "http://s3.localhost:9000/x",
            "http://[::1]:9000",
            "http://user@127.0.0.1:80",
        ] {
            assert!(needs_path_style(e), "{e}");
        }
        for e in [
            "https://s3.us-east-1.amazonaws.com",
            "https://minio.example.com:9000",
            "http://localhostname.example",
        ] {
            assert!(!needs_path_style(e), "{e}");
        }
    }

    #[test]
    fn partitions_follow_the_region() {
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
    }
}
