//! Fetching a manifest from an http(s) URL (the NVIDIA and EFA device
//! plugins, the training operator are published that way): GET, following
//! up to five redirects, over rustls on ring with the system's roots.

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::contract::ProviderError;

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

/// Whether `source` names a URL rather than a local file.
pub fn is_url(source: &str) -> bool {
    source.starts_with("https://") || source.starts_with("http://")
}

/// The body of `url` as text.
pub async fn get(url: &str) -> Result<String, ProviderError> {
    fetch(url).await.map_err(|e| {
        e.with_help(
            "check the URL and that this machine can reach it; or vendor the file next to the workflow and name it by path",
        )
    })
}

/// [`get`], before its errors get their next step.
async fn fetch(url: &str) -> Result<String, ProviderError> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(std::sync::Arc::new(rustls_ring()))
        .map_err(|e| ProviderError::fatal(format!("no TLS roots to fetch {url}: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let mut current = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let uri: http::Uri = current
            .parse()
            .map_err(|e| ProviderError::fatal(format!("`{current}` is not a URL: {e}")))?;
        let resp = client
            .get(uri)
            .await
            .map_err(|e| ProviderError::retryable(format!("could not fetch {current}: {e}")))?;
        let status = resp.status();
        if status.is_redirection() {
            let next = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| {
                    ProviderError::fatal(format!("{current} redirected without a location"))
                })?;
            current = join(&current, next);
            continue;
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ProviderError::retryable(format!("could not read {current}: {e}")))?
            .to_bytes();
        if !status.is_success() {
            let err = format!("fetching {current} answered HTTP {status}");
            return Err(if status.is_server_error() {
                ProviderError::retryable(err)
            } else {
                ProviderError::fatal(err)
            });
        }
        return String::from_utf8(body.to_vec())
            .map_err(|_| ProviderError::fatal(format!("{current} is not UTF-8 text")));
    }
    Err(ProviderError::fatal(format!(
        "{url}: more than {MAX_REDIRECTS} redirects"
    )))
}

/// The ring crypto provider for rustls.
fn rustls_ring() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// `location` made absolute against `base`.
fn join(base: &str, location: &str) -> String {
    if is_url(location) {
        return location.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    if location.starts_with('/') {
        format!("{}{location}", &base[..host_end])
    } else {
        let dir_end = base
            .rfind('/')
            .filter(|i| *i >= host_end)
            .map_or(base.len(), |i| i + 1);
        let mut out = base[..dir_end].to_string();
        if !out.ends_with('/') {
            out.push('/');
        }
        out + location
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_the_base() {
        assert!(is_url("https://x/y.yaml"));
        assert!(!is_url("manifests/a.yaml"));
        assert_eq!(join("https://h/a/b.yaml", "https://o/c"), "https://o/c");
        assert_eq!(join("https://h/a/b.yaml", "/c.yaml"), "https://h/c.yaml");
        assert_eq!(join("https://h/a/b.yaml", "c.yaml"), "https://h/a/c.yaml");
        assert_eq!(join("https://h", "c.yaml"), "https://h/c.yaml");
    }
}
