//! AWS errors as [`ProviderError`]s: the service's own message and the
//! failing resource, never a debug dump; throttling, 5xx answers, timeouts
//! and broken connections retryable, everything else fatal.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::contract::ProviderError;

/// Error codes that mean "slow down", across the AWS protocols.
const THROTTLING: [&str; 8] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "RequestThrottledException",
    "SlowDown",
];

/// HTTP statuses worth retrying.
const TRANSIENT_STATUS: [u16; 5] = [429, 500, 502, 503, 504];

/// Error codes of transient server faults.
const TRANSIENT_CODES: [&str; 4] = [
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "RequestTimeout",
];

/// The error code of a service error, if it is one.
pub(crate) fn code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(e) => e.err().code(),
        _ => None,
    }
}

/// Whether an error with this code and HTTP status is worth retrying.
pub(crate) fn transient(code: Option<&str>, status: Option<u16>) -> bool {
    code.is_some_and(|c| THROTTLING.contains(&c) || TRANSIENT_CODES.contains(&c))
        || status.is_some_and(|s| TRANSIENT_STATUS.contains(&s))
}

/// `err` from the call that tried `what` (`"create stack \`vpc\`"`), as a
/// provider error: `what: message (Code)`.
pub(crate) fn aws<E>(
    what: &str,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code();
            let message = e
                .message()
                .map(str::to_string)
                .or_else(|| code.map(str::to_string))
                .unwrap_or_else(|| {
                    let mut m = match status {
                        Some(s) => format!("the service answered HTTP {s}"),
                        None => "the service answered with an error".into(),
                    };
                    // An answer the SDK could not read as an error of this
                    // API: its start is the only explanation there is.
                    if let Some(body) = service.raw().body().bytes().and_then(excerpt) {
                        m.push_str(": ");
                        m.push_str(&body);
                    }
                    m
                });
            let text = match code {
                Some(c) if !message.contains(c) => format!("{what}: {message} ({c})"),
                _ => format!("{what}: {message}"),
            };
            if transient(code, status) {
                ProviderError::retryable(text)
            } else {
                ProviderError::fatal(text)
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ProviderError::retryable(format!("{what}: {}", chain(&err)))
        }
        _ => {
            let text = format!("{what}: {}", chain(&err));
            if status.is_some_and(|s| TRANSIENT_STATUS.contains(&s)) {
                ProviderError::retryable(text)
            } else {
                ProviderError::fatal(text)
            }
        }
    }
}

/// The start of a response body, if it is text.
fn excerpt(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?.trim();
    if text.is_empty() {
        return None;
    }
    let mut cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    Some(cut.replace(['\n', '\r'], " "))
}

/// The error and its causes on one line (`dispatch failure: io error: …`).
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_single_lines() {
        assert_eq!(excerpt(b"  "), None);
        assert_eq!(
            excerpt(b"{\"message\": \"x\"}\n").unwrap(),
            "{\"message\": \"x\"}"
        );
        assert!(excerpt(&[b'a'; 400]).unwrap().ends_with('…'));
        assert_eq!(excerpt(&[0xff, 0xfe]), None);
    }

    #[test]
    fn throttling_and_server_faults_are_transient() {
        for c in [
            "Throttling",
            "ThrottlingException",
            "TooManyRequestsException",
            "RequestLimitExceeded",
            "SlowDown",
        ] {
            assert!(transient(Some(c), Some(400)), "{c}");
        }
        for s in [429, 500, 502, 503, 504] {
            assert!(transient(None, Some(s)), "{s}");
        }
        assert!(!transient(Some("ValidationError"), Some(400)));
        assert!(!transient(Some("AccessDenied"), Some(403)));
        assert!(!transient(None, None));
    }
}
