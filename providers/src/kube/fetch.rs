//! Fetching a manifest from a URL (the NVIDIA and EFA device plugins, the
//! training operator are published that way): GET over https (rustls on
//! ring with the system's roots), following up to five redirects, within a
//! size cap and a time limit, and checked against the entry's `sha256` pin
//! when it has one. Plain http only when the entry says `insecure = true`.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};

use crate::contract::ProviderError;

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

/// The largest manifest fetched: 10 MB.
pub const MAX_BYTES: usize = 10 * 1000 * 1000;

/// How long a fetch may take, redirects and body included.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// What the step's entry for a URL says about fetching it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// The SHA-256 (lowercase hex) the body must have.
    pub sha256: Option<String>,
    /// Whether plain http is allowed.
    pub insecure: bool,
}

/// The cap and time limit of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes read.
    pub max_bytes: usize,
    /// The longest a fetch may take.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: MAX_BYTES,
            timeout: TIMEOUT,
        }
    }
}

/// Whether `source` names a URL rather than a local file.
pub fn is_url(source: &str) -> bool {
    source.starts_with("https://") || source.starts_with("http://")
}

/// Why `url` may not be fetched under `rules`, offline: plain http
/// without `insecure`.
pub fn refusal(url: &str, rules: &Rules) -> Option<String> {
    (url.starts_with("http://") && !rules.insecure).then(|| {
        format!(
            "`{url}` is plain http, which anyone on the way can change; use https, or write the entry as {{ url = \"{url}\", insecure = true }}"
        )
    })
}

/// The body of `url` as text, fetched under `rules` within the default
/// [`Limits`].
pub async fn get(url: &str, rules: &Rules) -> Result<String, ProviderError> {
    get_within(url, rules, Limits::default()).await
}

/// [`get`] within `limits`.
pub async fn get_within(url: &str, rules: &Rules, limits: Limits) -> Result<String, ProviderError> {
    if let Some(why) = refusal(url, rules) {
        return Err(ProviderError::bad_input(why));
    }
    let body = match tokio::time::timeout(limits.timeout, fetch(url, rules, limits.max_bytes)).await
    {
        Ok(body) => body,
        Err(_) => Err(ProviderError::retryable(format!(
            "fetching {url} took longer than {} (the limit on a manifest fetch)",
            humantime::format_duration(limits.timeout)
        ))),
    }
    .map_err(|e| {
        e.with_help(
            "check the URL and that this machine can reach it; or vendor the file next to the workflow and name it by path",
        )
    })?;
    if let Some(pin) = &rules.sha256 {
        let got = hex::encode(Sha256::digest(&body));
        if !got.eq_ignore_ascii_case(pin) {
            return Err(ProviderError::bad_input(format!(
                "{url} has sha256 {got}, but its entry pins sha256 {pin}"
            ))
            .with_help(
                "the file changed or is not the one meant: check the URL, and update the pin only if the new file is the one you want",
            ));
        }
    }
    String::from_utf8(body).map_err(|_| ProviderError::fatal(format!("{url} is not UTF-8 text")))
}

/// The body of `url`, following redirects, at most `max_bytes`.
async fn fetch(url: &str, rules: &Rules, max_bytes: usize) -> Result<Vec<u8>, ProviderError> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(std::sync::Arc::new(rustls_ring()))
        .map_err(|e| ProviderError::fatal(format!("no TLS roots to fetch {url}: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let mut current = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        // A redirect may not take an https fetch to plain http.
        if let Some(why) = refusal(&current, rules) {
            return Err(ProviderError::bad_input(format!(
                "{url} redirected to {current}: {why}"
            )));
        }
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
        if !status.is_success() {
            let err = format!("fetching {current} answered HTTP {status}");
            return Err(if status.is_server_error() {
                ProviderError::retryable(err)
            } else {
                ProviderError::fatal(err)
            });
        }
        // Read frame by frame, and stop as soon as the cap is passed.
        let mut body = resp.into_body();
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| ProviderError::retryable(format!("could not read {current}: {e}")))?;
            if let Some(data) = frame.data_ref() {
                if out.len() + data.len() > max_bytes {
                    return Err(ProviderError::bad_input(format!(
                        "{current} is larger than {} (the cap on a fetched manifest); stopped reading",
                        size(max_bytes)
                    )));
                }
                out.extend_from_slice(data);
            }
        }
        return Ok(out);
    }
    Err(ProviderError::fatal(format!(
        "{url}: more than {MAX_REDIRECTS} redirects"
    )))
}

/// `bytes` as `10 MB` (or in bytes, below a megabyte).
fn size(bytes: usize) -> String {
    if bytes >= 1_000_000 && bytes.is_multiple_of(1_000_000) {
        format!("{} MB", bytes / 1_000_000)
    } else {
        format!("{bytes} bytes")
    }
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
mod tests;
