//! Kubernetes API errors as [`ProviderError`]s: the server's message with
//! what was being done; throttling, server faults and broken connections
//! retryable, everything else fatal.

use crate::contract::ProviderError;

/// `err` from the call that tried `what` (`"apply Deployment default/web"`).
pub fn kube(what: &str, err: ::kube::Error) -> ProviderError {
    match &err {
        ::kube::Error::Api(status) => {
            let text = if status.message.is_empty() {
                format!("{what}: HTTP {} {}", status.code, status.reason)
            } else {
                format!("{what}: {}", status.message)
            };
            if matches!(status.code, 429 | 500 | 502 | 503 | 504)
                || status.reason == "ServerTimeout"
            {
                ProviderError::retryable(text)
            } else {
                ProviderError::fatal(text)
            }
        }
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) | ::kube::Error::ReadEvents(_) => {
            ProviderError::retryable(format!("{what}: {}", chain(&err)))
        }
        _ => ProviderError::fatal(format!("{what}: {}", chain(&err))),
    }
}

/// The HTTP status of an API error, if `err` is one.
pub fn status(err: &::kube::Error) -> Option<u16> {
    match err {
        ::kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The error and its causes on one line.
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

    fn api(code: u16, reason: &str, message: &str) -> ::kube::Error {
        let mut s = ::kube::core::Status::failure(message, reason);
        s.code = code;
        ::kube::Error::Api(Box::new(s))
    }

    #[test]
    fn server_faults_retry_client_errors_do_not() {
        let e = kube(
            "apply Deployment default/web",
            api(422, "Invalid", "spec.replicas: Invalid value"),
        );
        assert!(!e.is_retryable());
        assert_eq!(
            e.message,
            "apply Deployment default/web: spec.replicas: Invalid value"
        );
        assert!(kube("x", api(503, "ServiceUnavailable", "")).is_retryable());
        assert!(kube("x", api(429, "TooManyRequests", "slow down")).is_retryable());
        assert_eq!(status(&api(404, "NotFound", "")), Some(404));
    }
}
